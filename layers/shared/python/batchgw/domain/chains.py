"""The work queue's messages: chains of a batch's requests, and lone requests.

A batch of N requests is run by W chains (W ≤ its models' concurrency): chain ``c`` owns
indexes c, c+W, c+2W, ... A ``ChainMessage`` says where its chain resumes; the worker
runs the chain in order and, when it must stop, sends the message for where it stopped.
So the queue holds about W messages per batch, whatever N is (invariant 4).

A ``RequestMessage`` carries one request on its own: a retry that its chain could not
keep (the chain stopped before the retry came due), or one the reconciler found
abandoned.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import Any


@dataclass(frozen=True, slots=True)
class ChainMessage:
    """Chain ``chain`` of a batch resumes at ``next_index``, stepping by ``stride``.

    ``generation`` is the batch's chain generation when the message was first sent: the
    reconciler, finding a batch stuck, starts a new generation of chains, and messages of
    an older one are dropped when they arrive (so recovered chains never pile up).

    ``full`` counts the times in a row the chain found its model full: each one makes it
    wait longer before it asks again (``run.chain``), and a slot granted starts it over.
    """

    batch_id: str
    chain: int
    next_index: int
    stride: int
    generation: int = 0
    full: int = 0

    def resume_at(self, index: int, *, full: int = 0) -> ChainMessage:
        return replace(self, next_index=index, full=full)

    def encode(self) -> str:
        body: dict[str, Any] = {"b": self.batch_id, "c": self.chain, "i": self.next_index, "w": self.stride}
        if self.generation:
            body["g"] = self.generation
        if self.full:
            body["f"] = self.full
        return _encode(body)


@dataclass(frozen=True, slots=True)
class RequestMessage:
    batch_id: str
    index: int

    def encode(self) -> str:
        return _encode({"b": self.batch_id, "i": self.index, "s": 1})


WorkMessage = ChainMessage | RequestMessage


def decode(text: str) -> WorkMessage:
    body = json.loads(text)
    if body.get("s"):
        return RequestMessage(batch_id=str(body["b"]), index=int(body["i"]))
    return ChainMessage(
        batch_id=str(body["b"]),
        chain=int(body["c"]),
        next_index=int(body["i"]),
        stride=int(body["w"]),
        generation=int(body.get("g", 0)),
        full=int(body.get("f", 0)),
    )


def _encode(body: dict[str, Any]) -> str:
    return json.dumps(body, separators=(",", ":"))
