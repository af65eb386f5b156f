"""The workflow's steps: prepare a batch, park until it is done, finalize it.

Each step is idempotent, since Step Functions retries a failed task: a retried prepare
rewrites the same items, and finalizing a final batch changes nothing.
"""

from __future__ import annotations

import json
import logging
import math
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from batchgw import codec
from batchgw.blobs import body_key, input_key
from batchgw.deps import Deps
from batchgw.records import (
    CANCELLED,
    CANCELLING,
    COMPLETED,
    EXPIRED,
    FAILED,
    FINAL_STATUSES,
    IN_PROGRESS,
    ITEM_CANCELLED,
    ITEM_EXPIRED,
    ITEM_FAILED,
    ITEM_QUEUED,
    ITEM_RETRY,
    VALIDATING,
    shard_totals,
)
from batchgw.work import ChainMessage
from batchgw.worker import INLINE_BODY_LIMIT, settle_shards

logger = logging.getLogger("batchgw.lifecycle")

# Items written per flush while preparing (bounded memory whatever the batch's size).
WRITE_CHUNK = 500


def _park_step(meta: dict[str, Any], now: float) -> dict[str, Any]:
    expires_at = meta.get("expires_at")
    if expires_at is None:
        return {"next": "park", "wait_seconds": 0}
    return {"next": "park_until_deadline", "wait_seconds": max(1, math.ceil(float(expires_at) - now))}


def prepare(deps: Deps, batch_id: str) -> dict[str, Any]:
    """Write the batch's items and counter shards, then start its chains."""
    meta = deps.jobs.get_meta(batch_id)
    if meta is None:
        return {"next": "finalize", "wait_seconds": 0}
    if meta["status"] in (VALIDATING, CANCELLING) and "shards" not in meta:
        total = _write_items(deps, batch_id)
        shards = min(deps.settings.batch_counter_shards, total)
        deps.jobs.put_shards(batch_id, shard_totals(total, shards))
        chains = _chain_count(deps, meta, total)
        meta = deps.jobs.update(
            batch_id, {"shards": shards, "chains": chains}, from_statuses=[VALIDATING, CANCELLING]
        )
        if meta is None:
            return {"next": "finalize", "wait_seconds": 0}
    if meta["status"] == VALIDATING:
        started = deps.jobs.update(
            batch_id, {"status": IN_PROGRESS, "in_progress_at": int(deps.clock())}, from_statuses=[VALIDATING]
        )
        meta = started or deps.jobs.get_meta(batch_id) or {"status": CANCELLED}
    if meta["status"] == CANCELLING:
        return {"next": "cancel", "wait_seconds": 0}
    if meta["status"] != IN_PROGRESS:
        return {"next": "finalize", "wait_seconds": 0}
    chains = int(meta["chains"])
    deps.queue.send_many([ChainMessage(batch_id, c, c, chains) for c in range(chains)])
    logger.info("batch started", extra={"batch_id": batch_id, "total": meta["total"], "chains": chains})
    return _park_step(meta, deps.clock())


def _chain_count(deps: Deps, meta: dict[str, Any], total: int) -> int:
    caps = [
        deps.catalog.concurrency(deps.catalog.models[model], deps.settings.batch_model_concurrency)
        for model in meta.get("models", [])
        if model in deps.catalog.models
    ]
    return max(1, min(total, max(caps, default=1)))


def _write_items(deps: Deps, batch_id: str) -> int:
    pending: list[dict[str, Any]] = []
    total = 0
    for idx, line in enumerate(deps.blobs.iter_lines_gz(input_key(batch_id))):
        request = json.loads(line)
        item: dict[str, Any] = {
            "pk": batch_id,
            "idx": idx,
            "custom_id": request["custom_id"],
            "model": request["model"],
            "status": ITEM_QUEUED,
        }
        packed = codec.pack(request["body"])
        if len(packed) > INLINE_BODY_LIMIT:
            key = body_key(batch_id, idx, "req")
            deps.blobs.put(key, packed)
            item["req_ref"] = key
        else:
            item["req"] = packed
        pending.append(item)
        total = idx + 1
        if len(pending) >= WRITE_CHUNK:
            deps.items.put_many(pending)
            pending = []
    if pending:
        deps.items.put_many(pending)
    return total


def park(deps: Deps, batch_id: str, token: str) -> dict[str, Any]:
    """Keep the waiting task's token, or wake it at once if there is already work to do:
    the batch is done, deleted, or cancelled with its unstarted requests not yet settled."""
    meta = deps.jobs.update(batch_id, {"task_token": token})
    step = None
    if meta is None or _all_done(meta):
        step = "finalize"
    elif meta["status"] == CANCELLING and not meta.get("cancel_swept"):
        step = "cancel"
    if step is not None:
        deps.workflow.wake(token, {"next": step, "wait_seconds": 0})
        if meta is not None:
            deps.jobs.clear_token(batch_id, token)
    return {}


def _all_done(meta: dict[str, Any]) -> bool:
    return int(meta.get("shards_done", 0)) >= int(meta.get("shards", 1))


def _end_unstarted(
    deps: Deps,
    batch_id: str,
    fields: dict[str, Any],
    counters: dict[str, int],
    *,
    failed_retries: bool = False,
) -> dict[str, Any]:
    """End every unstarted request of the batch, then count the shards that emptied.

    With ``failed_retries``, a request that has run before and waits for its next try
    fails with the last error it got instead: it is not a request that never ran.
    """
    meta = deps.jobs.get_meta(batch_id)
    if meta is None:
        return {"next": "finalize", "wait_seconds": 0}
    shards = int(meta.get("shards", 1))
    ended = {"ended_at": Decimal(str(round(deps.clock(), 3)))}
    if failed_retries:
        deps.items.sweep(
            batch_id,
            from_states=[ITEM_QUEUED, ITEM_RETRY],
            fields={"status": ITEM_FAILED, **ended},
            counters={"failed": 1},
            shards=shards,
            attempted=True,
        )
    deps.items.sweep(
        batch_id,
        from_states=[ITEM_QUEUED, ITEM_RETRY],
        fields={**fields, **ended},
        counters=counters,
        shards=shards,
        attempted=False if failed_retries else None,
    )
    settle_shards(deps, batch_id)
    meta = deps.jobs.get_meta(batch_id)
    if meta is None or _all_done(meta):
        return {"next": "finalize", "wait_seconds": 0}
    return {"next": "park", "wait_seconds": 0}  # running requests finish, the last one wakes us


def expire(deps: Deps, batch_id: str) -> dict[str, Any]:
    """The window closed: unstarted requests end as batch_expired; running ones finish."""
    meta = deps.jobs.update(batch_id, {"expiring": True}, from_statuses=[IN_PROGRESS, CANCELLING])
    if meta is None:
        return {"next": "finalize", "wait_seconds": 0}
    logger.info("batch window closed", extra={"batch_id": batch_id})
    error = {
        "code": "batch_expired",
        "message": "Not run before the completion window closed.",
        "status": None,
    }
    return _end_unstarted(
        deps, batch_id, {"status": ITEM_EXPIRED, "error": error}, {"failed": 1}, failed_retries=True
    )


def cancel(deps: Deps, batch_id: str) -> dict[str, Any]:
    """The batch was cancelled: unstarted requests end as cancelled; running ones finish."""
    meta = deps.jobs.update(batch_id, {"cancel_swept": True}, from_statuses=[CANCELLING])
    if meta is None:
        return {"next": "finalize", "wait_seconds": 0}
    error = {"code": "batch_cancelled", "message": "Not run: the batch was cancelled.", "status": None}
    return _end_unstarted(deps, batch_id, {"status": ITEM_CANCELLED, "error": error}, {"cancelled": 1})


def finalize(deps: Deps, batch_id: str) -> dict[str, Any]:
    """Give the batch its final status, once; says when its results are to be purged."""
    meta = deps.jobs.get_meta(batch_id)
    if meta is None:
        return {"status": "deleted", "purge_at": _iso(deps.clock())}
    status = str(meta["status"])
    if status in FINAL_STATUSES:
        return {"status": status, "purge_at": _iso(float(meta.get("results_expires_at", deps.clock())))}
    if meta.get("expiring"):
        final = EXPIRED
    else:
        final = {IN_PROGRESS: COMPLETED, CANCELLING: CANCELLED, VALIDATING: FAILED}.get(status, COMPLETED)
    now = deps.clock()
    retention = float(meta.get("retention_seconds", deps.settings.retention_seconds))
    updated = deps.jobs.update(
        batch_id,
        {
            "status": final,
            f"{final}_at": int(now),
            "results_expires_at": int(now + retention),
            "ended_at": Decimal(str(round(now, 3))),
            # DynamoDB's TTL removes the batch's record even if its purge never ran.
            "ttl": int(now + retention + 86400),
        },
        from_statuses=[status],
        remove=["task_token"],
    )
    if updated is None:
        return finalize(deps, batch_id)
    logger.info("batch ended", extra={"batch_id": batch_id, "status": final})
    return {"status": final, "purge_at": _iso(now + retention)}


def _iso(epoch_seconds: float) -> str:
    return datetime.fromtimestamp(epoch_seconds, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def purge(deps: Deps, batch_id: str) -> dict[str, Any]:
    """Delete the batch, its requests and every object it stored (retention, or DELETE)."""
    deps.items.delete_all(batch_id)
    deps.jobs.delete_all(batch_id)
    deps.blobs.delete_batch(batch_id)
    logger.info("batch purged", extra={"batch_id": batch_id})
    return {}
