"""The states of a batch and of its requests, and what each reads as to a client."""

from __future__ import annotations

from enum import StrEnum


class BatchStatus(StrEnum):
    """A batch's status, as the spec names them."""

    VALIDATING = "validating"
    IN_PROGRESS = "in_progress"
    FINALIZING = "finalizing"
    COMPLETED = "completed"
    FAILED = "failed"
    EXPIRED = "expired"
    CANCELLING = "cancelling"
    CANCELLED = "cancelled"

    @property
    def is_final(self) -> bool:
        return self in FINAL_STATUSES


FINAL_STATUSES = frozenset(
    {BatchStatus.COMPLETED, BatchStatus.FAILED, BatchStatus.EXPIRED, BatchStatus.CANCELLED}
)
UNFINISHED_STATUSES = frozenset(set(BatchStatus) - FINAL_STATUSES)


class RequestStatus(StrEnum):
    """A request's state within its batch. Terminal ones are counted once, in a shard."""

    QUEUED = "queued"
    RUNNING = "running"
    RETRY_WAIT = "retry_wait"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    EXPIRED = "expired"

    @property
    def is_terminal(self) -> bool:
        return self in TERMINAL_REQUEST_STATUSES

    @property
    def result_status(self) -> str:
        """What a request's result reads as on the results page."""
        return _RESULT_STATUS[self]


TERMINAL_REQUEST_STATUSES = frozenset(
    {RequestStatus.SUCCEEDED, RequestStatus.FAILED, RequestStatus.CANCELLED, RequestStatus.EXPIRED}
)
UNSTARTED_REQUEST_STATUSES = (RequestStatus.QUEUED, RequestStatus.RETRY_WAIT)

_RESULT_STATUS = {
    RequestStatus.QUEUED: "queued",
    RequestStatus.RETRY_WAIT: "queued",
    RequestStatus.RUNNING: "in_progress",
    RequestStatus.SUCCEEDED: "completed",
    RequestStatus.FAILED: "failed",
    RequestStatus.CANCELLED: "cancelled",
    RequestStatus.EXPIRED: "expired",
}
