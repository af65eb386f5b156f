"""The request log: one entry per upstream call a batch request made (an attempt), as the
operator reads it (``GET /admin/batch/jobs/{batch_id}/attempts``)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from batchgw.domain.outcome import Outcome

# An entry's place in its batch's log: when it ended (ms) then the request's index, so the
# log reads in time order and a time range is one key range.
_INDEX_SPAN = 10**6  # more than a batch's requests; keys stay below 2**63


def log_key(ended_ms: int, index: int) -> int:
    return ended_ms * _INDEX_SPAN + index % _INDEX_SPAN


def key_bound(ms: int) -> int:
    """The first key of ``ms``: a time range [start, end) is [key_bound(start), key_bound(end))."""
    return ms * _INDEX_SPAN


@dataclass(frozen=True)
class AttemptEntry:
    batch_id: str
    index: int
    custom_id: str
    model: str
    attempt: int  # the request's attempt number (a model_queued wait counts none)
    outcome: str  # success, failed, retry or queued
    ended_at: float
    latency_ms: int
    worker: str | None = None
    route: str | None = None
    refused_routes: tuple[str, ...] = ()
    status_code: int | None = None
    error_code: str | None = None
    input_tokens: int = 0
    output_tokens: int = 0
    cost_nano: int | None = None  # None: unknown (the answer was lost)
    user_id: str | None = None  # whose request it was

    @classmethod
    def of_call(
        cls,
        outcome: Outcome,
        *,
        batch_id: str,
        index: int,
        custom_id: str,
        model: str,
        attempt: int,
        ended_at: float,
        latency_ms: int,
        cost_nano: int | None,
        user_id: str,
        worker: str | None = None,
    ) -> AttemptEntry:
        """The entry of one upstream call that came back as ``outcome`` (``cost_nano``: what
        it cost, None when unknown)."""
        return cls(
            batch_id=batch_id,
            index=index,
            custom_id=custom_id,
            model=model,
            attempt=attempt,
            outcome=outcome.kind,
            ended_at=ended_at,
            latency_ms=latency_ms,
            worker=worker,
            route=outcome.route,
            refused_routes=outcome.refused_routes,
            status_code=outcome.status_code,
            error_code=None if outcome.error is None else outcome.error.get("code"),
            input_tokens=outcome.input_tokens,
            output_tokens=outcome.output_tokens,
            cost_nano=cost_nano,
            user_id=user_id,
        )

    @property
    def key(self) -> int:
        return log_key(int(self.ended_at * 1000), self.index)

    def fields(self) -> dict[str, Any]:
        values = asdict(self)
        values["refused_routes"] = list(self.refused_routes)
        return values

    @classmethod
    def from_fields(cls, item: dict[str, Any]) -> AttemptEntry:
        def num(name: str) -> int | None:
            value = item.get(name)
            return None if value is None else int(value)

        return cls(
            batch_id=str(item["batch_id"]),
            index=int(item["index"]),
            custom_id=str(item["custom_id"]),
            model=str(item["model"]),
            attempt=int(item["attempt"]),
            outcome=str(item["outcome"]),
            ended_at=float(item["ended_at"]),
            latency_ms=int(item["latency_ms"]),
            worker=item.get("worker"),
            route=item.get("route"),
            refused_routes=tuple(item.get("refused_routes") or ()),
            status_code=num("status_code"),
            error_code=item.get("error_code"),
            input_tokens=int(item.get("input_tokens", 0)),
            output_tokens=int(item.get("output_tokens", 0)),
            cost_nano=num("cost_nano"),
            user_id=item.get("user_id"),
        )
