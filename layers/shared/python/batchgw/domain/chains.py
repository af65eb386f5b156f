"""The work queue's messages: chains of a batch's requests, and lone requests.

A batch of N requests is run by W chains (W ≤ its models' concurrency): chain ``c`` owns
indexes c, c+W, c+2W, ... A ``ChainMessage`` says where its chain resumes, so the queue holds
about W messages per batch, whatever N is (invariant 4). A chain whose model has room it does
not use splits (``split``) into k parts of k times its stride, up to ``MAX_SPLIT_FACTOR``
times the batch's first stride. A ``RequestMessage`` carries one request on its own (a retry
its chain could not keep, or one the reconciler found abandoned).

Why chains split, and how: docs/design/scheduling.md, "From the code: domain/chains.py".
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import Any

# The bounds of a split (``scheduling.tuning`` passes them; the figures behind them are in
# docs/design/scheduling.md). At least this many indexes left for each part:
SPLIT_MIN_PART = 2
# The most parts a chain splits into at once:
MAX_SPLIT_WAYS = 4
# A chain's stride grows by splits to at most this many times the batch's first one:
MAX_SPLIT_FACTOR = 64


@dataclass(frozen=True, slots=True)
class ChainMessage:
    """Chain ``chain`` of a batch resumes at ``next_index``, stepping by ``stride``.

    ``generation`` is the batch's chain generation when the message was first sent: the
    reconciler, finding a batch stuck, starts a new generation of chains, and messages of
    an older one are dropped when they arrive (so recovered chains never pile up).

    ``full`` counts the times in a row the chain found its model full: each one makes it
    wait longer before it asks again (``run.chain``), and a slot granted starts it over.

    ``slot`` names the slot a split took for the new chain it sent (``scheduling.room``): the
    chain takes it over when it starts. Only a split's message carries one.
    """

    batch_id: str
    chain: int
    next_index: int
    stride: int
    generation: int = 0
    full: int = 0
    slot: str = ""

    def resume_at(self, index: int, *, full: int = 0) -> ChainMessage:
        return replace(self, next_index=index, full=full, slot="")

    def remaining(self, total: int) -> int:
        """The indexes of ``total`` this chain has left, its next one included."""
        return max(0, -(-(total - self.next_index) // self.stride))

    def ways(
        self,
        total: int,
        chains: int,
        most: int = MAX_SPLIT_WAYS,
        *,
        min_part: int = SPLIT_MIN_PART,
        max_factor: int = MAX_SPLIT_FACTOR,
    ) -> int:
        """The most parts (up to ``most``) this chain may split into now: each keeps at
        least ``min_part`` of what it has left, and the stride stays at most ``max_factor``
        times the batch's first (``chains``: its first chain count). 1 when it does not
        split."""
        left, widest = self.remaining(total), max_factor * chains
        fit = [k for k in range(2, most + 1) if left >= min_part * k and k * self.stride <= widest]
        return max([1, *fit])

    def split(
        self,
        total: int,
        chains: int,
        ways: int = 2,
        *,
        min_part: int = SPLIT_MIN_PART,
        max_factor: int = MAX_SPLIT_FACTOR,
    ) -> tuple[ChainMessage, ...] | None:
        """This chain in ``ways`` parts, when it may (``ways``): the chain itself, resuming at
        its next index with ``ways`` times its stride, then a new chain for each index between
        (its next index + stride, + 2 strides, ..., each on at the new stride). None when it
        does not split so."""
        if ways < 2 or self.ways(total, chains, ways, min_part=min_part, max_factor=max_factor) < ways:
            return None
        wider = replace(self, stride=ways * self.stride, full=0, slot="")
        return wider, *(replace(wider, next_index=self.next_index + k * self.stride) for k in range(1, ways))

    def encode(self) -> str:
        body: dict[str, Any] = {"b": self.batch_id, "c": self.chain, "i": self.next_index, "w": self.stride}
        if self.generation:
            body["g"] = self.generation
        if self.full:
            body["f"] = self.full
        if self.slot:
            body["t"] = self.slot
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
        slot=str(body.get("t", "")),
    )


def _encode(body: dict[str, Any]) -> str:
    return json.dumps(body, separators=(",", ":"))
