"""The workflow's steps: prepare a batch, park until it is done, finalize it.

Each step is idempotent, since Step Functions retries a failed task: a retried prepare
rewrites the same items, and finalizing a final batch changes nothing.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
from collections.abc import Iterator
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from batchgw import codec
from batchgw.blobs import body_key, input_file_key, input_key
from batchgw.deps import Deps
from batchgw.files import store_file
from batchgw.records import (
    CANCELLED,
    CANCELLING,
    COMPLETED,
    EXPIRED,
    FAILED,
    FINAL_STATUSES,
    FINALIZING,
    IN_PROGRESS,
    ITEM_CANCELLED,
    ITEM_EXPIRED,
    ITEM_FAILED,
    ITEM_QUEUED,
    ITEM_RETRY,
    UNFINISHED_STATUSES,
    VALIDATING,
    shard_totals,
)
from batchgw.results import split_results
from batchgw.validation.file import iter_planned, report_object, validate_file
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
        if meta.get("input_method") == "file":
            checked = _validate_input_file(deps, meta)
            if checked is None:
                return {"next": "finalize", "wait_seconds": 0}
            meta = checked
        total = _write_items(deps, batch_id, _requests_of(deps, meta))
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


def _requests_of(deps: Deps, meta: dict[str, Any]) -> Iterator[tuple[str, str, Any]]:
    """The batch's requests as (custom_id, canonical model, body), streamed from S3."""
    batch_id = str(meta["pk"])
    if meta.get("input_method") == "file":
        for planned in iter_planned(
            deps.blobs.iter_lines(input_file_key(batch_id), max_line_bytes=_max_line(deps)),
            endpoint=str(meta["endpoint"]),
            catalog=deps.catalog,
            role=str(meta.get("owner_role", "internal")),
            anthropic_version=meta.get("anthropic_version"),
            settings=deps.settings,
        ):
            yield planned.custom_id, planned.model, planned.body
        return
    for line in deps.blobs.iter_lines_gz(input_key(batch_id)):
        request = json.loads(line)
        yield request["custom_id"], request["model"], request["body"]


def _max_line(deps: Deps) -> int:
    return deps.settings.batch_max_line_kb * 1024


def _validate_input_file(deps: Deps, meta: dict[str, Any]) -> dict[str, Any] | None:
    """Check a file batch's input, streaming; fail the batch (nothing run) on any problem.

    Returns the meta with the file's request count and models, or None when it failed.
    """
    batch_id = str(meta["pk"])
    report = validate_file(
        deps.blobs.iter_lines(input_file_key(batch_id), max_line_bytes=_max_line(deps)),
        endpoint=str(meta["endpoint"]),
        settings=deps.settings,
        catalog=deps.catalog,
        role=str(meta.get("owner_role", "internal")),
        anthropic_version=meta.get("anthropic_version"),
    )
    errors: list[dict[str, Any]] = list(report.errors)
    if report.ok:
        others = _unfinished_requests(deps, str(meta["owner"]), batch_id)
        limit = deps.settings.batch_max_queued_requests_per_user
        if others + report.total > limit:
            errors = [
                {
                    "code": "queued_request_limit",
                    "line": None,
                    "param": None,
                    "message": f"The file's {report.total} requests would take your unfinished requests "
                    f"to {others + report.total}, over the limit of {limit}.",
                }
            ]
    if errors:
        now = deps.clock()
        deps.jobs.update(
            batch_id,
            {
                "status": FAILED,
                "failed_at": int(now),
                "errors": report_object(errors),
                **_retention_fields(deps, meta, now),
            },
            from_statuses=[VALIDATING, CANCELLING],
        )
        logger.info("batch input refused", extra={"batch_id": batch_id, "problems": len(errors)})
        return None
    return deps.jobs.update(
        batch_id,
        {"total": report.total, "models": sorted(report.models)},
        from_statuses=[VALIDATING, CANCELLING],
    )


def _unfinished_requests(deps: Deps, owner: str, except_batch: str) -> int:
    metas, _ = deps.jobs.list_for_owner(
        owner,
        limit=1000,
        before_key=None,
        created_after=None,
        created_before=None,
        statuses=sorted(UNFINISHED_STATUSES),
        index="by_owner",
    )
    return sum(int(m.get("total", 0)) for m in metas if m["pk"] != except_batch)


def _write_items(deps: Deps, batch_id: str, requests: Iterator[tuple[str, str, Any]]) -> int:
    pending: list[dict[str, Any]] = []
    total = 0
    for idx, (custom_id, model, body) in enumerate(requests):
        item: dict[str, Any] = {
            "pk": batch_id,
            "idx": idx,
            "custom_id": custom_id,
            "model": model,
            "status": ITEM_QUEUED,
        }
        packed = codec.pack(body)
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


def _retention_fields(deps: Deps, meta: dict[str, Any], now: float) -> dict[str, Any]:
    retention = float(meta.get("retention_seconds", deps.settings.retention_seconds))
    # DynamoDB's TTL removes the batch's record even if its purge never ran.
    return {"results_expires_at": int(now + retention), "ttl": int(now + retention + 86400)}


def finalize(deps: Deps, batch_id: str) -> dict[str, Any]:
    """Give the batch its final status, once; a file batch is ``finalizing`` while its
    result files are written. Says when the batch is to be purged."""
    meta = deps.jobs.get_meta(batch_id)
    if meta is None:
        return {"status": "deleted", "purge_at": _iso(deps.clock())}
    status = str(meta["status"])
    if status in FINAL_STATUSES:
        return {"status": status, "purge_at": _iso(float(meta.get("results_expires_at", deps.clock())))}
    now = deps.clock()
    if status == FINALIZING:
        final = str(meta["final_status"])
    elif meta.get("expiring"):
        final = EXPIRED
    else:
        final = {IN_PROGRESS: COMPLETED, CANCELLING: CANCELLED, VALIDATING: FAILED}.get(status, COMPLETED)
    extra: dict[str, Any] = {}
    if meta.get("input_method") == "file":
        if status != FINALIZING:
            entered = deps.jobs.update(
                batch_id,
                {
                    "status": FINALIZING,
                    "finalizing_at": int(now),
                    "final_status": final,
                    **_retention_fields(deps, meta, now),
                },
                from_statuses=[status],
            )
            if entered is None:
                return finalize(deps, batch_id)
            meta = entered
        extra = write_result_files(deps, meta)
    else:
        extra = _retention_fields(deps, meta, now)
    updated = deps.jobs.update(
        batch_id,
        {"status": final, f"{final}_at": int(now), "ended_at": Decimal(str(round(now, 3))), **extra},
        from_statuses=[FINALIZING if meta.get("input_method") == "file" else status],
        remove=["task_token"],
    )
    if updated is None:
        return finalize(deps, batch_id)
    logger.info("batch ended", extra={"batch_id": batch_id, "status": final})
    return {"status": final, "purge_at": _iso(float(updated["results_expires_at"]))}


def result_file_id(batch_id: str, kind: str) -> str:
    """Result files have ids fixed by their batch, so a retried finalize writes the same files."""
    return "file-" + hashlib.sha256(f"{batch_id}/{kind}".encode()).hexdigest()[:32]


def write_result_files(deps: Deps, meta: dict[str, Any]) -> dict[str, Any]:
    """Write the output file (successes) and error file (everything else); each id is null
    when its file would be empty. A file already written (or deleted) is not written again."""
    batch_id = str(meta["pk"])
    output, errors = split_results(deps, batch_id)
    ids: dict[str, Any] = {}
    for field_name, kind, spooled in (
        ("output_file_id", "output", output),
        ("error_file_id", "error", errors),
    ):
        if spooled.size == 0:
            ids[field_name] = None
            continue
        file_id = result_file_id(batch_id, kind)
        store_file(
            deps,
            str(meta["owner"]),
            f"{batch_id}_{kind}.jsonl",
            spooled.rewind(),
            purpose="batch_output",
            file_id=file_id,
            expires_at=int(meta["results_expires_at"]),
            size=spooled.size,
            digest=spooled.digest.hexdigest(),
        )
        ids[field_name] = file_id
    return ids


def _iso(epoch_seconds: float) -> str:
    return datetime.fromtimestamp(epoch_seconds, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def purge(deps: Deps, batch_id: str) -> dict[str, Any]:
    """Delete the batch, its requests and every object it stored (retention, or DELETE)."""
    deps.items.delete_all(batch_id)
    deps.jobs.delete_all(batch_id)
    deps.blobs.delete_batch(batch_id)
    logger.info("batch purged", extra={"batch_id": batch_id})
    return {}
