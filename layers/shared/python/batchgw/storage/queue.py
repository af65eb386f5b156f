"""SQS: the work queue that carries chain and lone-request messages to the worker, and the
webhook queue (FIFO, one group per user) that carries batch events to the webhook function."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from botocore.exceptions import ClientError

from batchgw.domain.chains import WorkMessage
from batchgw.domain.errors import StorageError
from batchgw.domain.webhooks import EventMessage

MAX_DELAY_SECONDS = 900  # SQS's longest DelaySeconds
MAX_VISIBILITY_SECONDS = 43200  # and its longest visibility timeout
SEND_BATCH_LIMIT = 10


def _visibility(seconds: float) -> int:
    """Whole seconds of visibility, within what SQS takes."""
    return max(0, min(MAX_VISIBILITY_SECONDS, math.ceil(seconds)))


class _Queue:
    def __init__(self, client: Any, queue_url: str) -> None:
        self._sqs = client
        self._url = queue_url

    def hold(self, receipt: str, seconds: float) -> None:
        """Keep a received message invisible for ``seconds`` more (at most SQS's 12 hours):
        a worker's lease, an event's backoff (its user's later events wait behind it)."""
        visibility = _visibility(seconds)
        try:
            self._sqs.change_message_visibility(
                QueueUrl=self._url, ReceiptHandle=receipt, VisibilityTimeout=visibility
            )
        except ClientError as exc:
            raise StorageError("could not keep a message invisible") from exc

    def hold_many(self, receipts: Sequence[str], seconds: float) -> list[str]:
        """``hold`` for many messages, ten to a call; returns the receipts no longer valid
        (the message was deleted, or received again after its visibility ran out). Any
        other refusal is left for the next try."""
        visibility = _visibility(seconds)
        lost: list[str] = []
        for start in range(0, len(receipts), SEND_BATCH_LIMIT):
            chunk = receipts[start : start + SEND_BATCH_LIMIT]
            entries = [
                {"Id": str(i), "ReceiptHandle": receipt, "VisibilityTimeout": visibility}
                for i, receipt in enumerate(chunk)
            ]
            try:
                resp = self._sqs.change_message_visibility_batch(QueueUrl=self._url, Entries=entries)
            except ClientError as exc:
                raise StorageError(f"could not keep {len(chunk)} messages invisible") from exc
            for failed in resp.get("Failed", []):
                if failed.get("Code") in _RECEIPT_GONE:
                    lost.append(chunk[int(failed["Id"])])
        return lost


# A batch entry's codes when the message is not this receipt's to hold any more.
_RECEIPT_GONE = frozenset(
    {
        "ReceiptHandleIsInvalid",
        "MessageNotInflight",
        "AWS.SimpleQueueService.MessageNotInflight",
        "InvalidParameterValue",  # held for SQS's 12 hours already: it cannot be held longer
    }
)


class WorkQueue(_Queue):
    def send(self, message: WorkMessage, delay_seconds: int = 0) -> None:
        """Send ``message``, visible after ``delay_seconds`` (at most SQS's 15 minutes: a
        longer wait is re-delayed by whoever receives it early)."""
        delay = max(0, min(MAX_DELAY_SECONDS, delay_seconds))
        try:
            self._sqs.send_message(QueueUrl=self._url, MessageBody=message.encode(), DelaySeconds=delay)
        except ClientError as exc:
            raise StorageError(f"could not send {message}") from exc

    def send_many(self, messages: Sequence[WorkMessage]) -> None:
        for start in range(0, len(messages), SEND_BATCH_LIMIT):
            chunk = messages[start : start + SEND_BATCH_LIMIT]
            entries = [{"Id": str(i), "MessageBody": m.encode()} for i, m in enumerate(chunk)]
            try:
                resp = self._sqs.send_message_batch(QueueUrl=self._url, Entries=entries)
            except ClientError as exc:
                raise StorageError(f"could not send {len(chunk)} messages") from exc
            for failed in resp.get("Failed", []):
                self.send(chunk[int(failed["Id"])])


class EventQueue(_Queue):
    def send(self, event: EventMessage) -> None:
        """Queue ``event`` behind its user's earlier ones; the same event sent twice within
        five minutes is kept once (FIFO deduplication by its id)."""
        try:
            self._sqs.send_message(
                QueueUrl=self._url,
                MessageBody=event.encode(),
                MessageGroupId=event.user_id,
                MessageDeduplicationId=event.event_id,
            )
        except ClientError as exc:
            raise StorageError(f"could not queue event {event.event_id}") from exc
