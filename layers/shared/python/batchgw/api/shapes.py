"""The objects a client sees, made from stored records (one explicit conversion each)."""

from __future__ import annotations

from typing import Any

from batchgw.domain import money
from batchgw.domain.batch import TIMESTAMPS, BatchRecord, CountedBatch
from batchgw.domain.files import FileRecord
from batchgw.domain.states import BatchStatus


def batch_object(batch: CountedBatch, now: float | None = None) -> dict[str, Any]:
    """The batch object, with every field the spec lists (and, given ``now``, a running
    batch's estimated finish)."""
    record, counts = batch.record, batch.counts
    timestamps = {name: getattr(record, name) for name in TIMESTAMPS}
    return {
        "id": record.id,
        "object": "batch",
        "endpoint": record.endpoint,
        "errors": record.errors,
        "input_file_id": record.input_file_id,
        "completion_window": record.completion_window,
        "status": record.status.value,
        "output_file_id": record.output_file_id,
        "error_file_id": record.error_file_id,
        **{name: timestamps[name] for name in TIMESTAMPS if name != "results_expires_at"},
        "request_counts": {
            "total": record.total,
            "completed": counts.completed,
            "failed": counts.failed,
            # Beyond the spec's: how many of the failed expired, and how many were cancelled.
            "expired": counts.expired,
            "cancelled": counts.cancelled,
        },
        "metadata": record.metadata,
        "usage": {
            "input_tokens": counts.input_tokens,
            "input_tokens_details": {"cached_tokens": counts.cached_tokens},
            "output_tokens": counts.output_tokens,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": counts.input_tokens + counts.output_tokens,
            "cost": money.usd_float(counts.cost_nano),  # as Merge Gateway's guide names it
        },
        "anthropic_version": record.anthropic_version,
        "cost_usd": money.usd_float(counts.cost_nano),
        "cost_unknown_attempts": counts.cost_unknown_attempts,
        "results_expires_at": timestamps["results_expires_at"],
        "error": record.error,
        "paused": _paused(batch.record),
        "eta": _eta(batch, now),
        "parent_batch_id": record.parent_batch_id,
        "retry_batch_ids": list(record.retry_batch_ids),
        # Where it runs (gateway or provider; null until a file batch's input was read),
        # as asked (execution_mode_requested), and why.
        "execution_mode": record.execution_mode,
        "execution_mode_requested": record.mode_requested,
        "execution_mode_reason": record.mode_reason,
        # Its scheduling, as asked and changeable while it runs (PATCH): higher first, and
        # when it is wanted done by (null: by expires_at at the latest).
        "priority": record.priority,
        "complete_by": record.complete_by,
        "estimated_completion_at": estimated_completion(batch, now),
    }


def estimated_completion(batch: CountedBatch, now: float | None) -> int | None:
    """When a batch not ended should end: at its own pace once requests ended, before that as
    the last estimate made for it said, at its create or at a ``PATCH`` of its ``complete_by``
    (None: ended, or no estimate)."""
    record = batch.record
    if record.status not in (BatchStatus.VALIDATING, BatchStatus.IN_PROGRESS) or record.stopping:
        return None
    eta = None if now is None else batch.eta(now)
    return record.promised_at if eta is None else eta.finishes_at


def _eta(batch: CountedBatch, now: float | None) -> dict[str, Any] | None:
    """When a running batch should finish at its pace so far, and a warning when its window
    closes first (its unstarted requests would then expire)."""
    eta = None if now is None else batch.eta(now)
    if eta is None:
        return None
    return {
        "estimated_completion_at": eta.finishes_at,
        "requests_per_minute": round(eta.per_minute, 2),
        "window_closes_first": eta.window_closes_first,
        "warning": "At its pace so far, the batch's window closes before its requests are done: the "
        "requests not started by expires_at will expire."
        if eta.window_closes_first
        else None,
    }


def _paused(record: BatchRecord) -> dict[str, Any] | None:
    """Why the owner's account holds a running batch back, and until when (None: it does not)."""
    if record.paused is None or record.status is not BatchStatus.IN_PROGRESS or record.stopping:
        return None
    until = record.paused.get("until")
    return {"reason": record.paused.get("reason"), "until": None if until is None else int(until)}


def file_object(record: FileRecord) -> dict[str, Any]:
    return {
        "id": record.id,
        "object": "file",
        "bytes": record.bytes,
        "created_at": record.created_at,
        "expires_at": record.expires_at,
        "filename": record.filename,
        "purpose": record.purpose,
        "status": "processed",
        "status_details": None,
    }


def upload_object(record: dict[str, Any], file: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "id": record["upload_id"],
        "object": "upload",
        "bytes": int(record["bytes"]),
        "created_at": int(record["created_at"]),
        "expires_at": int(record["expires_at"]),
        "filename": record["filename"],
        "purpose": record["purpose"],
        "status": record["status"],
        "file": file,
    }
