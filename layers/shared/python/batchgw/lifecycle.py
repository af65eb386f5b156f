"""The workflow's steps: prepare a batch, park until it is done, finalize it.

Each step is idempotent, since Step Functions retries a failed task: a retried prepare
rewrites the same items, and finalizing a final batch changes nothing.
"""

from __future__ import annotations

import json
import logging
import math
from decimal import Decimal
from typing import Any

from batchgw import codec
from batchgw.blobs import body_key, input_key
from batchgw.deps import Deps
from batchgw.records import (
    CANCELLED,
    CANCELLING,
    COMPLETED,
    FAILED,
    FINAL_STATUSES,
    IN_PROGRESS,
    ITEM_QUEUED,
    VALIDATING,
    shard_totals,
)
from batchgw.work import ChainMessage
from batchgw.worker import INLINE_BODY_LIMIT

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
    if meta["status"] == VALIDATING:
        total = _write_items(deps, batch_id)
        shards = min(deps.settings.batch_counter_shards, total)
        deps.jobs.put_shards(batch_id, shard_totals(total, shards))
        chains = _chain_count(deps, meta, total)
        now = deps.clock()
        updated = deps.jobs.update(
            batch_id,
            {"status": IN_PROGRESS, "in_progress_at": int(now), "shards": shards, "chains": chains},
            from_statuses=[VALIDATING],
        )
        if updated is None:  # cancelled (or deleted) while we wrote
            meta = deps.jobs.get_meta(batch_id) or {"status": CANCELLED}
            return (
                {"next": "finalize", "wait_seconds": 0}
                if meta["status"] != CANCELLING
                else {"next": "cancel", "wait_seconds": 0}
            )
        meta = updated
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
    """Keep the waiting task's token; wake it at once if the batch is already done."""
    meta = deps.jobs.update(batch_id, {"task_token": token})
    if meta is None or int(meta.get("shards_done", 0)) >= int(meta.get("shards", 1)):
        deps.workflow.wake(token, {"next": "finalize", "wait_seconds": 0})
    return {}


_FINAL_FOR = {IN_PROGRESS: COMPLETED, CANCELLING: CANCELLED, VALIDATING: FAILED}


def finalize(deps: Deps, batch_id: str) -> dict[str, Any]:
    """Give the batch its final status, once."""
    meta = deps.jobs.get_meta(batch_id)
    if meta is None:
        return {"status": "deleted"}
    status = str(meta["status"])
    if status in FINAL_STATUSES:
        return {"status": status}
    final = _FINAL_FOR.get(status, COMPLETED)
    now = deps.clock()
    retention = float(meta.get("retention_seconds", deps.settings.retention_seconds))
    updated = deps.jobs.update(
        batch_id,
        {
            "status": final,
            f"{final}_at": int(now),
            "results_expires_at": int(now + retention),
            "ended_at": Decimal(str(round(now, 3))),
        },
        from_statuses=[status],
        remove=["task_token"],
    )
    if updated is None:
        return finalize(deps, batch_id)
    logger.info("batch ended", extra={"batch_id": batch_id, "status": final})
    return {"status": final}
