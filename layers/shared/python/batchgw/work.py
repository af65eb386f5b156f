"""The work queue's messages: chains of requests for the worker.

A batch of N requests is run by W chains (W ≤ the model's concurrency): chain ``c`` owns
positions c, c+W, c+2W, ... A chain message says where its chain resumes; the worker runs
the chain in order and, when its time is up, sends the message for where it stopped. So
the queue holds about W messages per batch, whatever N is (invariant 4).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ChainMessage:
    batch_id: str
    chain: int
    next_idx: int
    stride: int
    single: bool = False  # a lone request (a scheduled retry), not a chain

    def encode(self) -> str:
        body: dict[str, Any] = {"b": self.batch_id, "c": self.chain, "i": self.next_idx, "w": self.stride}
        if self.single:
            body["s"] = 1
        return json.dumps(body, separators=(",", ":"))

    @classmethod
    def decode(cls, text: str) -> ChainMessage:
        body = json.loads(text)
        return cls(
            batch_id=str(body["b"]),
            chain=int(body["c"]),
            next_idx=int(body["i"]),
            stride=int(body["w"]),
            single=bool(body.get("s")),
        )


class WorkQueue:
    def __init__(self, client: Any, queue_url: str) -> None:
        self._sqs = client
        self._url = queue_url

    def send(self, message: ChainMessage, delay_seconds: int = 0) -> None:
        self._sqs.send_message(
            QueueUrl=self._url, MessageBody=message.encode(), DelaySeconds=max(0, min(900, delay_seconds))
        )

    def hold(self, receipt: str, seconds: int) -> None:
        """Keep a received message invisible for ``seconds`` more."""
        self._sqs.change_message_visibility(
            QueueUrl=self._url, ReceiptHandle=receipt, VisibilityTimeout=max(0, min(43200, seconds))
        )

    def send_many(self, messages: Sequence[ChainMessage]) -> None:
        for start in range(0, len(messages), 10):
            chunk = messages[start : start + 10]
            entries = [{"Id": str(i), "MessageBody": m.encode()} for i, m in enumerate(chunk)]
            resp = self._sqs.send_message_batch(QueueUrl=self._url, Entries=entries)
            for failed in resp.get("Failed", []):
                self.send(chunk[int(failed["Id"])])
