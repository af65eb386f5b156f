"""The end of a batch: its final status, given once (``finalize``; ``fail`` when a workflow
step failed for good) with its retention, the event announcing it to its owner's webhook,
and its Idempotency-Key, kept until a day after.

Each step is idempotent, since Step Functions retries a failed task: finalizing a final
batch changes nothing, and a failed batch's ``fail`` called again goes on from where the
last one got.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from batchgw.deps import Deps
from batchgw.domain import background
from batchgw.domain.batch import BatchRecord, Tally, is_response, shard_totals
from batchgw.domain.decisions import not_run_error
from batchgw.domain.states import UNFINISHED_STATUSES, BatchStatus, RequestStatus
from batchgw.domain.webhooks import EventMessage
from batchgw.observability import logger, metrics
from batchgw.run import charges
from batchgw.run.result_files import write_results
from batchgw.run.stopped import end_abandoned, lease_ran_out, sweep
from batchgw.storage.dynamo import timestamp
from batchgw.storage.idempotency import KEY_KEPT_SECONDS
from batchgw.storage.webhooks import Delivery


def retention_fields(deps: Deps, batch: BatchRecord, now: float) -> dict[str, Any]:
    retention = (
        deps.settings.retention_seconds if batch.retention_seconds is None else batch.retention_seconds
    )
    # DynamoDB's TTL removes the batch's record even if its purge never ran.
    return {"results_expires_at": int(now + retention), "ttl": int(now + retention + 86400)}


_FINAL_FROM = {
    BatchStatus.IN_PROGRESS: BatchStatus.COMPLETED,
    BatchStatus.CANCELLING: BatchStatus.CANCELLED,
    BatchStatus.VALIDATING: BatchStatus.FAILED,
}


def finalize(deps: Deps, batch_id: str, deadline: float | None = None) -> dict[str, Any]:
    """Give the batch its final status, once. It is ``finalizing`` while its result objects
    are written (``output.jsonl``; a file batch's output and error files). Says when the
    batch is to be purged, or, when ``deadline`` came first, that it is still finalizing
    (the workflow calls again; the writing goes on where it stopped)."""
    batch = deps.batches.get_record(batch_id)
    if batch is None:
        return {"status": "deleted", "purge_at": _iso(deps.clock())}
    if batch.status.is_final:
        announce(deps, batch)
        purge_at = deps.clock() if batch.results_expires_at is None else batch.results_expires_at
        return {"status": batch.status.value, "purge_at": _iso(purge_at)}
    now = deps.clock()
    if batch.status is BatchStatus.FINALIZING and batch.final_status is not None:
        final = batch.final_status
    elif batch.status is BatchStatus.CANCELLING:
        final = BatchStatus.CANCELLED  # a cancel stands even after the window has closed
    elif batch.owner_failed:
        final = BatchStatus.FAILED  # its key or owner may no longer run it (``error`` says)
    elif batch.expiring:
        final = BatchStatus.EXPIRED
    else:
        final = _FINAL_FROM.get(batch.status, BatchStatus.COMPLETED)
    if batch.status is not BatchStatus.FINALIZING:
        entered = deps.batches.start_finalizing(
            batch_id,
            final_status=final,
            at=int(now),
            from_status=batch.status,
            **retention_fields(deps, batch, now),
        )
        if entered is None:
            return finalize(deps, batch_id, deadline)
        batch = entered
    files = write_results(deps, batch, deadline)
    if files is None:
        return {"status": BatchStatus.FINALIZING.value, "purge_at": None}
    charges.roll_up_batch(deps, batch_id)  # what its shards kept of its charges (run.charges)
    ended = deps.batches.end(
        batch_id,
        {
            "status": final,
            f"{final.value}_at": int(now),
            "ended_at": timestamp(now),
            "event_pending": True,
            **files,
        },
        from_statuses=[BatchStatus.FINALIZING],
        remove=["task_token", "finalize_cursor"],
    )
    if ended is None:
        return finalize(deps, batch_id, deadline)
    metrics.count("BatchesEnded", status=final.value)
    _keep_idempotency_key(deps, ended, now)
    announce(deps, ended)
    logger.info("batch ended", extra={"batch_id": batch_id, "status": final.value})
    assert ended.results_expires_at is not None
    return {"status": final.value, "purge_at": _iso(ended.results_expires_at)}


def cause_of(error: Any) -> str | None:
    """What a failed step's error (the workflow's ``{"Error", "Cause"}``) says, briefly."""
    if not isinstance(error, dict):
        return None
    name, cause = str(error.get("Error") or "error"), error.get("Cause")
    try:
        detail = json.loads(cause).get("errorMessage") if isinstance(cause, str) else None
    except (ValueError, AttributeError):
        detail = cause
    return f"{name}: {str(detail)[:300]}" if detail else name


# A failed batch's ``error`` when a workflow step failed for good (never the exception's
# text, which the log keeps with the batch id).
INTERNAL_FAILURE = {
    "code": "internal_error",
    "message": "The gateway could not run this batch to its end because of an internal failure "
    "(recorded in its logs). Retry the batch; if it fails again, contact the operator with this "
    "batch's id.",
}


class StillRunning(Exception):
    """A failed batch's requests are still running, or a prepare may still write them: the
    workflow calls the step again."""


def fail(deps: Deps, batch_id: str, cause: str | None = None) -> dict[str, Any]:
    """A workflow step failed for good: the batch fails visibly (``error`` says where), its
    unstarted requests end ``batch_failed`` (those prepare never wrote too), and its
    retention is set. Says when the batch is to be purged.

    As when its owner fails it, the batch first stops (``owner_failed``: no request starts),
    then its requests are settled, and only then does it take its final status, so a batch
    that reads ``failed`` has every request ended and counted. Requests still running finish
    and are counted: while one does, this raises ``StillRunning`` and the workflow calls the
    step again; one whose worker is gone (its lease ran out) ends here, failed with the
    batch. A prepare that may still write its requests is waited for the same way, before
    anything is counted. The step may die anywhere and be called again: each part is
    idempotent (a conditional stop, shards created once, a sweep, a count noted once, a
    conditional end, a key kept, an event marked pending).
    """
    batch = deps.batches.get_record(batch_id)
    if batch is None:
        return {"status": "deleted", "purge_at": _iso(deps.clock())}
    if batch.status.is_final:
        if batch.status is BatchStatus.FAILED and batch.ended_at is not None:
            _keep_idempotency_key(deps, batch, batch.ended_at)  # a retried step that died after its end
        return finalize(deps, batch_id)
    if not batch.owner_failed:
        error = None
        if batch.error is None:
            # What failed (an exception's name and text, a checksum) is for the operator's
            # log; the user reads a stable code and what to do.
            logger.error("batch failing: a step failed", extra={"batch_id": batch_id, "cause": cause})
            error = dict(INTERNAL_FAILURE)
        stopped = deps.batches.start_failing(batch_id, error)
        if stopped is None:
            return fail(deps, batch_id, cause)  # it ended or changed meanwhile: look again
        batch = stopped
    if batch.prepare_held(deps.clock()):
        # A prepare may still write (an invocation the workflow lost track of): wait until
        # it has given up its lease, or the lease has run out.
        raise StillRunning(f"a prepare of failed batch {batch_id} may still write its requests")
    if not batch.prepared and batch.total:
        # Failed before prepare recorded anything: none of its requests counts as written
        # (any a dying prepare stored stay past the frontier), all fail with it. The shards
        # are created once, whoever else tries: then look again.
        shards = min(deps.settings.batch_counter_shards, batch.total)
        totals = shard_totals(batch.total, shards)
        deps.batches.put_first_shards(batch_id, totals, {"written": 0}, from_statuses=UNFINISHED_STATUSES)
        return fail(deps, batch_id, cause)
    if batch.prepared:
        sweep(deps, batch, RequestStatus.FAILED, not_run_error("batch_failed"), Tally(failed=1))
        # It failed while prepare wrote its requests: those never written fail with it.
        deps.batches.count_unwritten(batch, Tally(failed=1))
        _end_or_wait_for_running(deps, batch)
    now = deps.clock()
    failed = deps.batches.end(
        batch_id,
        {
            "status": BatchStatus.FAILED,
            "failed_at": int(now),
            "ended_at": timestamp(now),
            "event_pending": True,
            **retention_fields(deps, batch, now),
        },
        from_statuses=UNFINISHED_STATUSES,
        remove=["task_token"],
    )
    if failed is None:
        return fail(deps, batch_id, cause)
    logger.error("batch failed", extra={"batch_id": batch_id, "cause": cause})
    _keep_idempotency_key(deps, failed, now)
    announce(deps, failed)
    assert failed.results_expires_at is not None
    return {"status": BatchStatus.FAILED.value, "purge_at": _iso(failed.results_expires_at)}


def _end_or_wait_for_running(deps: Deps, batch: BatchRecord) -> None:
    """End the failed batch's running requests whose workers are gone; raise
    ``StillRunning`` while any other runs (its worker ends it, counted)."""
    now = deps.clock()
    live = 0
    for request in deps.requests.unfinished(batch.id):
        if request.status is not RequestStatus.RUNNING:
            continue
        if lease_ran_out(request, now) and end_abandoned(deps, batch, request, now):
            continue
        live += 1  # its worker ends it (or a worker claimed it back meanwhile)
    if live:
        raise StillRunning(f"{live} requests of failed batch {batch.id} are still running")


def announce(deps: Deps, batch: BatchRecord) -> None:
    """Queue the event of the batch's end for its owner's webhook, if it has one that is
    enabled, once: the event is marked pending with the final status and cleared here, and a
    step retried between the two sends the same event again (FIFO deduplication, and the
    delivery record, keep it once).

    Its delivery record is written first, due now, so the saved state names every queued
    event, tried or not: a local stack that restarts without its queue queues it again
    (``local.resume``). A record already there (a retried step) is left as it is."""
    if not batch.event_pending or not batch.status.is_final:
        return
    hook = deps.webhooks.get(batch.owner)
    if hook is not None and hook.enabled:
        ended_at = batch.ended_at if batch.ended_at is not None else deps.clock()
        event = EventMessage.of_batch(
            batch.id, batch.owner, batch.status.value, int(ended_at * 1000), _response_event(deps, batch)
        )
        now = deps.clock()
        queued = Delivery(event.event_id, event.type, event.batch_id, event.created_at, next_attempt_at=now)
        deps.webhooks.record(event.user_id, event.created_at, queued, now=now, only_new=True)
        deps.events.send(event)
    deps.batches.clear_event_pending(batch.id)


def _response_event(deps: Deps, batch: BatchRecord) -> str | None:
    """A background response's event (``domain.background``), from its one request's end;
    None for a batch."""
    if not is_response(batch.id):
        return None
    return background.event_type(background.status_of(batch, deps.requests.get(batch.id, 0)))


def _keep_idempotency_key(deps: Deps, batch: BatchRecord, ended_at: float) -> None:
    """The Idempotency-Key a batch was created with is remembered until a day after it ends."""
    if batch.idempotency_key is not None:
        deps.idempotency.batch_ended(
            batch.owner, batch.idempotency_key, batch.id, ttl=int(ended_at + KEY_KEPT_SECONDS)
        )


def _iso(epoch_seconds: float) -> str:
    return datetime.fromtimestamp(epoch_seconds, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
