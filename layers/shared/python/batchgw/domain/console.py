"""What the console shows of a batch, decided once, here (pure: no AWS, no clock).

The Batches page groups statuses into four, for both the badge and the filter (the spec's
"Batches in the console"); the status of ``/v1/batches`` is unchanged:

- **Processing**: validating, in_progress, finalizing or cancelling (a paused batch too,
  with its reason); a note says which stage;
- **Completed**: completed, and every request succeeded;
- **With issues**: failed, expired, or completed with a request that did not succeed;
- **Cancelled**: cancelled, whatever its requests did before the cancel.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from batchgw.domain.batch import INTERNAL_FAILURES, retries_whole_input
from batchgw.domain.spend import PauseReason
from batchgw.domain.states import BatchStatus

PROCESSING, COMPLETED, WITH_ISSUES, CANCELLED = "processing", "completed", "with_issues", "cancelled"
GROUPS = (PROCESSING, COMPLETED, WITH_ISSUES, CANCELLED)
RUNNING = frozenset(
    {BatchStatus.VALIDATING, BatchStatus.IN_PROGRESS, BatchStatus.FINALIZING, BatchStatus.CANCELLING}
)
FINISHED = frozenset({BatchStatus.COMPLETED, BatchStatus.FAILED, BatchStatus.EXPIRED, BatchStatus.CANCELLED})
_STATUSES = {
    PROCESSING: tuple(sorted(s.value for s in RUNNING)),
    COMPLETED: (BatchStatus.COMPLETED.value,),
    WITH_ISSUES: tuple(
        sorted((BatchStatus.COMPLETED.value, BatchStatus.FAILED.value, BatchStatus.EXPIRED.value))
    ),
    CANCELLED: (BatchStatus.CANCELLED.value,),
}
_TARGETS = {
    "/v1/chat/completions": "Chat Completions",
    "/v1/embeddings": "Embeddings",
    "/v1/responses": "Responses",
    "/v1/messages": "Messages",
}
_NOTES = {
    BatchStatus.VALIDATING: "Checking the input file before any request runs.",
    BatchStatus.IN_PROGRESS: "Running its requests.",
    BatchStatus.FINALIZING: "Every request has ended: writing the results.",
    BatchStatus.CANCELLING: "Cancelling: requests already running still finish; no new one starts.",
}
_PAUSES = {
    PauseReason.DAILY_QUOTA: "your daily cost quota is used up (it renews at 00:00 UTC)",
    PauseReason.MONTHLY_QUOTA: "your monthly cost quota is used up",
    PauseReason.KEY_BUDGET: "its API key's budget is spent",
    PauseReason.ROLE: "your role may no longer run batches",
}


def group(status: BatchStatus, *, total: int, completed: int) -> str:
    """The group a batch is shown in."""
    if status in RUNNING:
        return PROCESSING
    if status is BatchStatus.CANCELLED:
        return CANCELLED
    if status is BatchStatus.COMPLETED and completed >= total:
        return COMPLETED
    return WITH_ISSUES


def statuses_of(name: str) -> tuple[str, ...]:
    """The statuses a group's batches may have (Completed and With issues both take
    ``completed``: the counts tell them apart)."""
    return _STATUSES[name]


def note(status: BatchStatus, *, paused: Mapping[str, Any] | None) -> str | None:
    """The short note beside a processing batch: its stage, or why it is paused."""
    if paused is not None and status is BatchStatus.IN_PROGRESS:
        reason = str(paused.get("reason") or "")
        why = _PAUSES.get(PauseReason(reason)) if reason in set(PauseReason) else None
        return f"Paused: {why or 'held back'}. It resumes on its own once that changes."
    return _NOTES.get(status)


def target(endpoint: str) -> str:
    """The target's name as the page shows it."""
    return _TARGETS.get(endpoint, endpoint)


def results_ready(status: BatchStatus) -> bool:
    """Results can be downloaded once the batch has finished, whatever group it is in."""
    return status in FINISHED


def has_results(status: BatchStatus, *, finalized: bool) -> bool:
    """Whether the batch has results to download: it finished through finalizing, which
    writes them. A batch whose input was refused, or that a failure stopped, never got there
    (its requests, if any ran, are read on the results page)."""
    return status in FINISHED and finalized


def may_retry(
    status: BatchStatus,
    *,
    prepared: bool,
    succeeded: int,
    total: int,
    error: Mapping[str, Any] | None = None,
    refused: bool = False,
) -> bool:
    """Whether ``POST /v1/batches/{id}/retry`` takes the batch: it has finished with requests
    that did not succeed, and they were stored, or it failed inside the gateway before they
    were, its input still good (``retries_whole_input``: the retry runs all of it, however
    few requests the batch had counted). A failed batch whose input was refused (``refused``:
    it has a validation report) has nothing the retry could run again."""
    if status not in FINISHED:
        return False
    if retries_whole_input(status, prepared=prepared, error=error, refused=refused):
        return True
    if succeeded >= total:
        return False
    return prepared or status is not BatchStatus.FAILED


# The batch-level error codes a user acts on alike: something failed inside the gateway
# (``batch_failed`` is how a batch failed before ``internal_error`` was its code). Their
# stored message is never shown: an older one may hold an exception's text.
_INTERNAL = INTERNAL_FAILURES
_REFUSED_INPUT = "invalid_batch_input"
_RETRY_OR_ASK = "Retry the batch; if it fails again, contact the operator with this batch's ID."
_SUBMIT_OR_ASK = (
    "Submit its input again as a new batch; if it fails again, contact the operator with this batch's ID."
)


@dataclass(frozen=True, slots=True)
class Issue:
    """What went wrong with a finished batch, in words a user acts on: what happened
    (``title``), the detail (``message``; None when the page lists it), and what to do
    (``next``)."""

    title: str
    message: str | None
    next: str


def issue(
    status: BatchStatus,
    *,
    error: Mapping[str, Any] | None,
    failed: int,
    expired: int,
    total: int,
    retryable: bool,
) -> Issue | None:
    """What the page says of a finished batch that did not run every request to success:
    its error's own message where that is the user's words, the gateway's words where the
    failure was the gateway's. None for a batch still running, cancelled or all succeeded."""
    if status is BatchStatus.FAILED:
        return _failure(error or {}, retryable=retryable)
    if status is BatchStatus.EXPIRED:
        return Issue(
            "Its window closed before every request started.",
            f"{expired:,} of {total:,} requests expired without running; those that finished keep "
            "their results.",
            "Retry the batch to run the requests that did not succeed, in a new window."
            if retryable
            else "Submit the requests that did not run again as a new batch.",
        )
    if status is BatchStatus.COMPLETED and failed + expired:
        return Issue(
            f"{failed + expired:,} of {total:,} requests did not succeed.",
            "Each one's error is in the batch's results (and its error file).",
            "Retry the batch to run them again, or export them to fix them first."
            if retryable
            else "Fix the failed requests and submit them again as a new batch.",
        )
    return None


def _failure(error: Mapping[str, Any], *, retryable: bool) -> Issue:
    code = str(error.get("code") or "")
    stored = error.get("message") if isinstance(error.get("message"), str) else None
    if code == _REFUSED_INPUT:
        return Issue(
            "Its input file was refused: nothing ran and nothing was billed.",
            None,  # the page lists its problems by line
            "Fix these lines in your file, then upload it again as a new batch.",
        )
    if code in _INTERNAL or not stored:
        return Issue(
            "It stopped: the gateway failed while running it.",
            "The gateway could not run this batch to its end because of an internal failure, "
            "recorded in its logs. Requests that finished keep their results.",
            _RETRY_OR_ASK if retryable else _SUBMIT_OR_ASK,
        )
    if code == "owner_unauthorized":
        return Issue(
            "It stopped: the API key or account that created it may no longer run batches.",
            stored,
            "Requests that finished keep their results. Retry the batch to run the others under "
            "your current API key."
            if retryable
            else "Submit it again with a valid API key.",
        )
    if code == "queued_request_limit":
        return Issue(
            "It was refused: you had too many unfinished requests; nothing ran.",
            stored,
            "Wait for some of your unfinished batches to end, or cancel some, then submit the file again.",
        )
    if code in ("batch_route_unavailable", "batch_not_supported"):
        return Issue(
            "It was refused: its model takes no batch work now; nothing ran.",
            stored,
            "Choose another model and submit the file again, or ask the operator to allow this "
            "model's batch route.",
        )
    return Issue("It failed.", stored, _RETRY_OR_ASK if retryable else _SUBMIT_OR_ASK)


def may_cancel(status: BatchStatus) -> bool:
    return status in (BatchStatus.VALIDATING, BatchStatus.IN_PROGRESS)


def matches(query: str, batch_id: str, name: str | None) -> bool:
    """Whether a search finds a batch: a part of its id, or of its name (any case)."""
    wanted = query.casefold()
    return wanted in batch_id.casefold() or (name is not None and wanted in name.casefold())
