"""SQS: the work queues that carry chain and lone-request messages to the worker (flex
requests' on a queue of their own, ``resources.FLEX_QUEUE``), and the webhook queue (FIFO,
one group per user) that carries batch events to the webhook function."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from botocore.exceptions import ClientError

from batchgw.domain.batch import is_flex
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
    """The work queue, and the flex queue beside it: a flex request's messages go on the
    flex queue (when there is one), every other on the work queue. A received message is
    held through the queue it came from (``source``: its record's ``eventSourceARN``)."""

    def __init__(self, client: Any, queue_url: str, flex_url: str = "") -> None:
        super().__init__(client, queue_url)
        self._flex = _Queue(client, flex_url) if flex_url else None

    def _for(self, message: WorkMessage) -> str:
        return self._flex._url if self._flex is not None and is_flex(message.batch_id) else self._url

    def _from(self, source: str | None) -> _Queue:
        """The queue whose name ends the ARN ``source`` (the work queue when none does)."""
        flex = self._flex
        if flex is not None and source and source.rpartition(":")[2] == flex._url.rpartition("/")[2]:
            return flex
        return self

    def hold_many(self, receipts: Sequence[str], seconds: float, source: str | None = None) -> list[str]:
        """``_Queue.hold_many`` on the queue the messages came from (``source``)."""
        return _Queue.hold_many(self._from(source), receipts, seconds)

    def send(self, message: WorkMessage, delay_seconds: int = 0) -> None:
        """Send ``message``, visible after ``delay_seconds`` (at most SQS's 15 minutes: a
        longer wait is re-delayed by whoever receives it early)."""
        delay = max(0, min(MAX_DELAY_SECONDS, delay_seconds))
        try:
            self._sqs.send_message(
                QueueUrl=self._for(message), MessageBody=message.encode(), DelaySeconds=delay
            )
        except ClientError as exc:
            raise StorageError(f"could not send {message}") from exc

    def send_many(self, messages: Sequence[WorkMessage]) -> None:
        by_queue: dict[str, list[WorkMessage]] = {}
        for message in messages:
            by_queue.setdefault(self._for(message), []).append(message)
        for url, queued in by_queue.items():
            for start in range(0, len(queued), SEND_BATCH_LIMIT):
                chunk = queued[start : start + SEND_BATCH_LIMIT]
                entries = [{"Id": str(i), "MessageBody": m.encode()} for i, m in enumerate(chunk)]
                try:
                    resp = self._sqs.send_message_batch(QueueUrl=url, Entries=entries)
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
