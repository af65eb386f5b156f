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
from typing import Any

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


def may_cancel(status: BatchStatus) -> bool:
    return status in (BatchStatus.VALIDATING, BatchStatus.IN_PROGRESS)


def matches(query: str, batch_id: str, name: str | None) -> bool:
    """Whether a search finds a batch: a part of its id, or of its name (any case)."""
    wanted = query.casefold()
    return wanted in batch_id.casefold() or (name is not None and wanted in name.casefold())
