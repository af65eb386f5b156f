"""What an attempt's outcome means for its request: try again when, end how, cost what.

Pure rules (no AWS, no clock of their own), so each one is tested directly. ``decide``
is the whole decision after a request ran; ``not_run`` ends one that may not run.

- 408, 425, 429 and 5xx other than 504 are retried with exponential backoff (base
  doubling to the cap, jitter added on top), honouring a longer ``Retry-After``, while the
  window is open; a try that would start after the window closes fails the request with
  the last error it got. Without a window a request is tried at most 2,000 times.
- 503 ``model_queued`` uses no attempt: the request waits for the deployment's
  ``Retry-After`` (default 120 s; a negative or non-finite one is the default; capped at
  168 h) and the model takes no new batch requests for that long, at most the pause cap.
  A wait that would end after the window closes fails the request with that error.
- Any other 4xx, a 504 or the call's own timeout ends the request at once; a timeout's
  cost is unknown (the upstream may have run it).
- A success larger than one request may store fails ``result_too_large``; one that no
  longer fits the batch's result storage fails too, and marks the batch full.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any, Protocol

from batchgw.domain import codec
from batchgw.domain.batch import BatchRecord, Tally
from batchgw.domain.outcome import Outcome
from batchgw.domain.request import RequestRecord
from batchgw.domain.states import BatchStatus, RequestStatus

MAX_TRIES_WITHOUT_WINDOW = 2000
MAX_QUEUED_WAIT_SECONDS = 168 * 3600
# A request whose worker was lost this many times is not tried again (its workers keep
# dying: it is more likely the request than the workers).
MAX_LOST_ATTEMPTS = 3
# A retry waits its nominal delay plus up to this share of it more, at random: it spreads a
# burst of requests that failed together, so their retries do not all arrive together again.
RETRY_JITTER = 0.2


class DecisionSettings(Protocol):
    """The settings the decision reads (``config.Settings`` has them all)."""

    batch_retry_base_seconds: float
    batch_retry_max_seconds: float
    batch_model_queued_default_seconds: float
    batch_model_queued_pause_max_seconds: float
    batch_max_results_mb_per_batch: float

    @property
    def max_result_bytes(self) -> int: ...

    @property
    def max_results_bytes_per_batch(self) -> int | None: ...


class PriceList(Protocol):
    """A model's prices (``config.catalog.Price``)."""

    def cost_nano(self, input_tokens: int, output_tokens: int) -> int: ...


@dataclass(frozen=True, slots=True)
class Retry:
    """Try again at ``next_at``; ``uses_attempt`` is False for model_queued waits."""

    next_at: float
    error: dict[str, Any]
    uses_attempt: bool = True
    pause_model_until: float | None = None
    attempt_cost_nano: int = 0
    charge: Tally = field(default_factory=Tally)  # what this attempt adds to the batch's counters now


@dataclass(frozen=True, slots=True)
class End:
    """The request's final state, and what it adds to the batch's counters.

    ``response`` is the packed response to store (a success); ``results_full`` says the
    batch's stored responses reached their limit (every request still to run fails too).
    """

    status: RequestStatus
    tally: Tally
    error: dict[str, Any] | None = None
    cost_nano: int = 0
    response: bytes | None = None
    results_full: bool = False


Decision = Retry | End


class Verdict(StrEnum):
    """What a batch allows its next request, read right before the request would start."""

    RUN = "run"
    GONE = "gone"  # deleted: its requests are being purged
    CANCELLED = "cancelled"
    EXPIRED = "expired"  # its window closed, or it no longer runs for another reason
    RESULTS_FULL = "results_full"  # its stored responses reached their limit
    OWNER_FAILED = "owner_failed"  # its key or owner may no longer run it
    SUPERSEDED = "superseded"  # a newer generation of its chains runs it (this chain stops)


def verdict(batch: BatchRecord | None, now: float) -> Verdict:
    """Whether a request of ``batch`` (as just read, strongly consistent) may start now."""
    if batch is None:
        return Verdict.GONE
    if batch.status is BatchStatus.CANCELLING:
        return Verdict.CANCELLED
    if batch.owner_failed:
        return Verdict.OWNER_FAILED
    if batch.status is not BatchStatus.IN_PROGRESS or batch.expiring or batch.window_closed(now):
        return Verdict.EXPIRED
    return Verdict.RESULTS_FULL if batch.results_full else Verdict.RUN


def backoff_seconds(attempt: int, settings: DecisionSettings, rng: random.Random | None = None) -> float:
    """Delay before try ``attempt + 1``: the nominal delay, base * 2^(attempt-1) capped at
    BATCH_RETRY_MAX_SECONDS, plus a jitter of up to ``RETRY_JITTER`` of it; never below the
    nominal delay."""
    rng = rng or random.Random()
    exponent = min(max(attempt - 1, 0), 60)
    nominal = min(settings.batch_retry_max_seconds, settings.batch_retry_base_seconds * (2**exponent))
    return nominal + rng.random() * RETRY_JITTER * nominal


def queued_wait_seconds(retry_after: float | None, settings: DecisionSettings) -> float:
    if retry_after is None or not math.isfinite(retry_after) or retry_after < 0:
        return settings.batch_model_queued_default_seconds
    return min(retry_after, MAX_QUEUED_WAIT_SECONDS)


def decide(
    outcome: Outcome,
    request: RequestRecord,
    settings: DecisionSettings,
    *,
    now: float,
    expires_at: float | None,
    price: PriceList | None,
    stored_bytes: int = 0,
    rng: random.Random | None = None,
    reruns: int = 0,
) -> Decision:
    """What becomes of ``request`` after an attempt that came back as ``outcome``.

    ``request.attempts`` counts the tries made so far, this one included;
    ``stored_bytes`` is what the batch's responses are known to take already; ``reruns``:
    a request that fails for good runs again while it has had at most that many tries.
    """
    cost = 0  # nano-dollars
    if price is not None and outcome.usage_known:
        cost = price.cost_nano(outcome.input_tokens, outcome.output_tokens)
    charge = Tally(
        input_tokens=outcome.input_tokens,
        output_tokens=outcome.output_tokens,
        cached_tokens=outcome.cached_tokens,
        cost_nano=cost,
        cost_unknown=request.lost,
    )
    rerun = outcome.kind == "failed" and request.attempts <= reruns
    if outcome.kind in ("retry", "queued") or rerun:
        retry = _retry(outcome, request.attempts, settings, now=now, expires_at=expires_at, rng=rng)
        if retry is None:  # no more tries: it ends with this error, this attempt charged now
            return _failed(_error_of(outcome), _unknown_if(charge, outcome), cost)
        # Each attempt is charged as it is recorded: a retried one's tokens and known cost
        # now, or one of unknown cost when its answer was lost.
        attempt = Tally(
            input_tokens=outcome.input_tokens,
            output_tokens=outcome.output_tokens,
            cached_tokens=outcome.cached_tokens,
            cost_nano=cost,
            cost_unknown=0 if outcome.usage_known else 1,
        )
        return replace(retry, attempt_cost_nano=cost, charge=attempt)
    if outcome.kind == "success":
        return _succeeded(outcome, charge, cost, settings, stored_bytes)
    # A permanent failure: the model refused it, or it timed out (its cost then unknown).
    if not outcome.usage_known:
        charge = _with(charge, cost_unknown=request.lost + 1)
    return _failed(_error_of(outcome), charge, cost)


def _retry(
    outcome: Outcome,
    attempts: int,
    settings: DecisionSettings,
    *,
    now: float,
    expires_at: float | None,
    rng: random.Random | None,
) -> Retry | None:
    """When to try a request that may pass again; None when it may not (tries or window)."""
    error = _error_of(outcome)
    if outcome.kind == "queued":
        wait = queued_wait_seconds(outcome.retry_after, settings)
        if expires_at is not None and now + wait >= expires_at:
            return None  # the wait would outlast the window: fail with this error
        pause = min(wait, settings.batch_model_queued_pause_max_seconds)
        return Retry(next_at=now + wait, error=error, uses_attempt=False, pause_model_until=now + pause)
    if expires_at is None and attempts >= MAX_TRIES_WITHOUT_WINDOW:
        return None
    delay = backoff_seconds(attempts, settings, rng)
    if outcome.retry_after is not None and outcome.retry_after > delay:
        delay = min(outcome.retry_after, MAX_QUEUED_WAIT_SECONDS)
    next_at = now + delay
    if expires_at is not None and next_at >= expires_at:
        return None  # a try that would start after the window: fail with the last error
    return Retry(next_at=next_at, error=error)


def _succeeded(
    outcome: Outcome, charge: Tally, cost: int, settings: DecisionSettings, stored_bytes: int
) -> End:
    if outcome.body_bytes > settings.max_result_bytes:
        error = {
            "code": "result_too_large",
            "status": None,
            "message": f"the response ({outcome.body_bytes} bytes) is larger than one request may "
            f"store ({settings.max_result_bytes} bytes)",
        }
        return _failed(error, charge, cost)
    packed = codec.pack(outcome.body)
    limit = settings.max_results_bytes_per_batch
    if limit is not None and stored_bytes + len(packed) > limit:
        # The batch's responses have reached their storage limit: this one and every
        # request still to run fail without being stored (or run).
        return replace(_failed(results_full_error(settings), charge, cost), results_full=True)
    return End(
        RequestStatus.SUCCEEDED,
        _with(charge, completed=1, stored_bytes=len(packed)),
        cost_nano=cost,
        response=packed,
    )


def _failed(error: dict[str, Any], charge: Tally, cost: int) -> End:
    return End(RequestStatus.FAILED, _with(charge, failed=1), error=error, cost_nano=cost)


def _unknown_if(charge: Tally, outcome: Outcome) -> Tally:
    """The charge, with this attempt of unknown cost when its answer was lost."""
    return charge if outcome.usage_known else _with(charge, cost_unknown=charge.cost_unknown + 1)


def _with(tally: Tally, **changes: int) -> Tally:
    return replace(tally, **changes)


def _error_of(outcome: Outcome) -> dict[str, Any]:
    return outcome.error or {"code": "upstream_error", "message": "upstream failed", "status": None}


def not_run(reason: Verdict, request: RequestRecord, settings: DecisionSettings) -> End:
    """The end of a claimed request that may not run (its lost attempts still count).

    Any reason but a cancel or full result storage ends it as expired: past the window,
    or stopped for a reason read too late to tell; a request that ran before (a retry
    claimed as the window closed) fails with the last error it got instead, as the window's
    sweep ends it.
    """
    lost = Tally(cost_unknown=request.lost)
    if reason is Verdict.CANCELLED:
        return End(RequestStatus.CANCELLED, _with(lost, cancelled=1), error=not_run_error("batch_cancelled"))
    if reason is Verdict.RESULTS_FULL:
        return End(RequestStatus.FAILED, _with(lost, failed=1), error=results_full_error(settings))
    if reason is Verdict.OWNER_FAILED:
        return End(RequestStatus.FAILED, _with(lost, failed=1), error=not_run_error("batch_failed"))
    if request.error is not None:
        return End(RequestStatus.FAILED, _with(lost, failed=1), error=request.error)
    return End(RequestStatus.EXPIRED, _with(lost, failed=1, expired=1), error=not_run_error("batch_expired"))


def stopped_retry(reason: Verdict, retry: Retry, request: RequestRecord) -> End:
    """The end of a request that ran, failed in a way that may pass, and found its batch
    stopped before its retry could be scheduled: cancelled, or past its window (then it
    fails with the error it got). Its attempt's known cost is counted."""
    charge = _with(retry.charge, cost_unknown=retry.charge.cost_unknown + request.lost)
    if reason is Verdict.CANCELLED:
        error = not_run_error("batch_cancelled")
        return End(
            RequestStatus.CANCELLED, _with(charge, cancelled=1), error, cost_nano=retry.attempt_cost_nano
        )
    return End(RequestStatus.FAILED, _with(charge, failed=1), retry.error, cost_nano=retry.attempt_cost_nano)


def abandoned(batch: BatchRecord, request: RequestRecord) -> End:
    """The end of a request whose worker was lost while its batch was stopping (the
    reconciler ends it): the lost attempt's cost is unknown. Cancelled with the batch, or
    past the window: failed with its last error if it had one, else expired."""
    charge = Tally(cost_unknown=request.lost + 1)
    if batch.status is BatchStatus.CANCELLING:
        return End(RequestStatus.CANCELLED, _with(charge, cancelled=1), not_run_error("batch_cancelled"))
    if request.error is not None:
        return End(RequestStatus.FAILED, _with(charge, failed=1), request.error)
    if batch.owner_failed:
        return End(RequestStatus.FAILED, _with(charge, failed=1), not_run_error("batch_failed"))
    return End(RequestStatus.EXPIRED, _with(charge, failed=1, expired=1), not_run_error("batch_expired"))


def too_often_lost(request: RequestRecord) -> End:
    """The end of a request whose workers were lost ``MAX_LOST_ATTEMPTS`` times."""
    error = {
        "code": "worker_lost",
        "status": None,
        "message": f"The request's worker was lost {request.lost} times while running it; "
        "it was not tried again.",
    }
    return End(RequestStatus.FAILED, Tally(failed=1, cost_unknown=request.lost), error)


def unknown_model(request: RequestRecord) -> End:
    """The end of a request whose model left the gateway's configuration before it ran."""
    error = {
        "code": "model_not_found",
        "status": None,
        "message": f"Model '{request.model}' is no longer served by this gateway.",
    }
    return End(RequestStatus.FAILED, Tally(failed=1, cost_unknown=request.lost), error)


_NOT_RUN_MESSAGES = {
    "batch_cancelled": "Not run: the batch was cancelled.",
    "batch_expired": "Not run before the completion window closed.",
    "batch_failed": "Not run: the batch failed.",
}


def not_run_error(code: str) -> dict[str, Any]:
    """The error of a request that never ran (``batch_cancelled``, ``batch_expired``...)."""
    return {"code": code, "message": _NOT_RUN_MESSAGES[code], "status": None}


def results_full_error(settings: DecisionSettings) -> dict[str, Any]:
    return {
        "code": "result_too_large",
        "status": None,
        "message": f"the batch's stored responses reached their limit "
        f"({settings.batch_max_results_mb_per_batch:g} MiB)",
    }
