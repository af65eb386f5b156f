"""One request of a batch as stored: its body, its lease, its attempts and its result.

A request is claimed by one worker at a time: the claim sets ``lease_owner`` and a
``lease_until``, and raises ``epoch``; a worker writes the request only while both still
match (see ``storage.requests``). Bodies are kept deflated in the record, or in S3 when
they would make the record too large (``request_ref`` / ``response_ref``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from batchgw.domain import codec
from batchgw.domain.scrub import MAX_MESSAGE_CHARS, scrub
from batchgw.domain.states import RequestStatus

# Bodies above this many packed bytes go to S3 instead of the DynamoDB item (400 KB cap).
INLINE_BODY_LIMIT = 300 * 1024

_ID_PREFIX = "batch_req_"

# A stored error message is at most this long, and never carries a credential.
MAX_ERROR_MESSAGE_CHARS = MAX_MESSAGE_CHARS


def clean_message(text: str, secrets: Iterable[str] = ()) -> str:
    """An error message fit to store and show: credentials (``secrets``, and anything shaped
    like one: ``domain.scrub``) replaced, cut to MAX_ERROR_MESSAGE_CHARS."""
    return scrub(text, secrets, limit=MAX_ERROR_MESSAGE_CHARS)


def request_id(batch_id: str, index: int) -> str:
    """The public id of request ``index`` of a batch (a result line's ``id``)."""
    return f"{_ID_PREFIX}{batch_id.removeprefix('batch_')}_{index}"


def request_index(batch_id: str, public_id: str) -> int | None:
    """The index ``public_id`` names within ``batch_id``, or None if it is not one of its."""
    prefix = f"{_ID_PREFIX}{batch_id.removeprefix('batch_')}_"
    if not public_id.startswith(prefix):
        return None
    return codec.decimal(public_id[len(prefix) :])


@dataclass(frozen=True, slots=True)
class RequestRecord:
    """A request as stored. ``index`` is its position in the batch (0-based)."""

    batch_id: str
    index: int
    custom_id: str
    model: str  # the canonical model it runs on, fixed at create
    status: RequestStatus = RequestStatus.QUEUED
    attempts: int = 0  # tries started, a model_queued wait excluded
    epoch: int = 0  # rises on every claim: a stale worker's writes are refused
    lease_owner: str | None = None
    lease_until: float | None = None
    next_at: float | None = None  # when a request in retry_wait is due
    lost: int = 0  # attempts whose worker died mid-call (cost unknown)
    calls: int = 0  # upstream calls whose outcome was recorded
    error: dict[str, Any] | None = None
    request_packed: bytes | None = None
    request_ref: str | None = None
    response_packed: bytes | None = None
    response_ref: str | None = None
    status_code: int | None = None
    upstream_request_id: str | None = None
    ended_by: str | None = None
    attempt_cost_nano: int = 0  # the known cost of the last attempt, while it waits for a retry

    @classmethod
    def new(cls, batch_id: str, index: int, custom_id: str, model: str, body: bytes | str) -> RequestRecord:
        """A queued request, with its packed body inline (bytes) or its S3 key (str)."""
        if isinstance(body, bytes):
            return cls(batch_id, index, custom_id, model, request_packed=body)
        return cls(batch_id, index, custom_id, model, request_ref=body)

    @classmethod
    def from_item(cls, item: dict[str, Any]) -> RequestRecord:
        def opt_float(name: str) -> float | None:
            value = item.get(name)
            return None if value is None else float(value)

        status_code = item.get("status_code")
        error = item.get("error")
        return cls(
            batch_id=str(item["pk"]),
            index=int(item["idx"]),
            custom_id=str(item["custom_id"]),
            model=str(item["model"]),
            status=RequestStatus(item["status"]),
            attempts=int(item.get("attempts", 0)),
            epoch=int(item.get("epoch", 0)),
            lease_owner=item.get("lease_owner"),
            lease_until=opt_float("lease_until"),
            next_at=opt_float("next_at"),
            lost=int(item.get("lost", 0)),
            calls=int(item.get("calls", 0)),
            error=None if error is None else codec.plain(error),
            request_packed=item.get("req"),
            request_ref=item.get("req_ref"),
            response_packed=item.get("res"),
            response_ref=item.get("res_ref"),
            status_code=None if status_code is None else int(status_code),
            upstream_request_id=item.get("request_id"),
            ended_by=item.get("ended_by"),
            attempt_cost_nano=int(item.get("attempt_cost_nano", 0)),
        )

    def to_item(self) -> dict[str, Any]:
        """The stored item of a new request (None values left out)."""
        item = {
            "pk": self.batch_id,
            "idx": self.index,
            "custom_id": self.custom_id,
            "model": self.model,
            "status": self.status.value,
            "req": self.request_packed,
            "req_ref": self.request_ref,
        }
        return {k: v for k, v in item.items() if v is not None}


@dataclass(frozen=True, slots=True)
class RequestEnd:
    """What is written when a request ends (None values are not written: an end without
    ``error`` keeps the last error the request got)."""

    status: RequestStatus
    ended_at: float
    error: dict[str, Any] | None = None
    cost_nano: int | None = None
    status_code: int | None = None
    upstream_request_id: str | None = None
    usage: dict[str, int] | None = None
    response_packed: bytes | None = None
    response_ref: str | None = None
    ended_by: str | None = None  # the worker that ended it (to recognise its own write)

    def stored_fields(self) -> dict[str, Any]:
        """The attributes to set, by stored name (the clock reading kept to the millisecond)."""
        fields = {
            "status": self.status.value,
            "ended_at": round(self.ended_at, 3),
            "error": self.error,
            "cost_nano": self.cost_nano,
            "status_code": self.status_code,
            "request_id": self.upstream_request_id,
            "usage": self.usage,
            "res": self.response_packed,
            "res_ref": self.response_ref,
            "ended_by": self.ended_by,
        }
        return {k: v for k, v in fields.items() if v is not None}
