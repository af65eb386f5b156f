"""The reconciler: every unfinished batch, looked at again every BATCH_RECONCILE_SECONDS.

Nothing in a batch's run relies on one message, one wake-up or one invocation arriving.
While the workflow is parked it times out every reconcile period into this step, which

- expires the batch once its window has closed, and cancels it if a cancel's wake-up
  was lost;
- when the batch is stopping (cancelled, or past its window), ends what the sweeps
  could not reach: requests put back or scheduled after the sweep, and requests whose
  worker was lost (their lease ran out), each counted once;
- when the batch has stalled — no request ended for longer than any request takes or
  waits for a slot (one lease, one upstream timeout and two slot waits) — re-sends its
  lost work: a lone message for each request whose lease ran out or whose retry is
  overdue, and a new generation of chains from each chain's first queued request (the
  older generation's messages are dropped when they arrive, so recovered chains never
  pile up; and no chain that is running a request is superseded, since a running
  request ends, or its lease runs out, within the stall);
- corrects a counter shard that counts more unfinished requests than there are (only if
  nothing was counted in it meanwhile), then counts every emptied shard;
- finalizes the batch when every request has ended, else parks it again (a stopping
  batch only until the leases of its running requests run out: if their worker died,
  nobody but this step ends them).

A batch without a window is reconciled the same way, and its record's TTL backstop is
moved on each time.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from batchgw.deps import Deps
from batchgw.domain.batch import BatchRecord, CountedBatch, backstop_ttl
from batchgw.domain.chains import ChainMessage, RequestMessage, WorkMessage
from batchgw.domain.request import RequestRecord
from batchgw.domain.states import BatchStatus, RequestStatus
from batchgw.observability import logger, metrics
from batchgw.run import completion
from batchgw.run.lifecycle import park_step, running_leases_end, sweep_stopped
from batchgw.run.stopped import end_abandoned, lease_ran_out
from batchgw.storage.workflow import Next, step


def reconcile(deps: Deps, batch_id: str) -> dict[str, Any]:
    """Look at an unfinished batch again, mend what failed, and route the workflow."""
    batch = deps.batches.get(batch_id)
    if batch is None:
        return step(Next.FINALIZE)
    record = batch.record
    now = deps.clock()
    if record.status.is_final or record.status in (BatchStatus.VALIDATING, BatchStatus.FINALIZING):
        return step(Next.FINALIZE)
    if record.on_provider:
        return step(Next.PROVIDER)  # no chain runs it: its provider step looks after it
    if record.window_closed(now) and not record.expiring:
        return step(Next.EXPIRE)
    if (record.status is BatchStatus.CANCELLING or record.owner_failed) and not record.cancel_swept:
        return step(Next.CANCEL)
    progressed = record.reconciled_left is None or batch.counts.left < record.reconciled_left
    progress_at = now if progressed or record.progress_at is None else record.progress_at
    # A batch its owner's quota, budget or role holds back makes no progress by design:
    # it is looked at again when its pause is due to be checked.
    stalled = now - progress_at >= stall_seconds(deps) and not record.paused_at(now)
    leases_end = None
    if batch.counts.left > 0 and (record.stopping or stalled):
        leases_end = _mend(deps, batch, now)
        if stalled:
            progress_at = now  # the work sent again gets a whole stall to show progress
    if batch.counts.left > 0 and not record.stopping:
        _watch_capacity(deps, record, now)
    completion.settle(deps, batch_id)
    after = deps.batches.get(batch_id)
    if after is None or after.record.all_shards_done or after.record.status.is_final:
        return step(Next.FINALIZE)
    ttl = None
    if after.record.expires_at is None:
        ttl = backstop_ttl(
            now=now,
            expires_at=None,
            retention=deps.settings.retention_seconds,
            reconcile=deps.settings.batch_reconcile_seconds,
        )
    # Only while it runs: a reconcile left behind (one the workflow lost track of) must not
    # move the TTL of a batch that has ended since, below the retention its end set.
    changed = deps.batches.note_reconciled(
        batch_id, left=after.counts.left, progress_at=round(progress_at, 3), ttl=ttl
    )
    if changed is None:
        return step(Next.FINALIZE)
    return park_step(deps, changed, leases_end=leases_end)


def _watch_capacity(deps: Deps, batch: BatchRecord, now: float) -> None:
    """The spec's "batch model waiting for capacity": a model this batch has requests queued
    for that has served no batch request for BATCH_QUEUED_ALERT_HOURS (counted from when it
    last did, or from the batch's creation). Reported as the ModelWaitingForCapacity metric
    (1 while it waits that long, 0 once it serves again), which an alarm watches."""
    hours = deps.settings.batch_queued_alert_hours
    if hours <= 0:
        return
    for model in batch.models:
        served_at = deps.slots.read(model).served_at
        since = max(served_at or 0.0, float(batch.created_at))
        waiting = now - since >= hours * 3600
        metrics.value("ModelWaitingForCapacity", 1 if waiting else 0, model=model)
        metrics.value("ModelWaitingForCapacity", 1 if waiting else 0)  # one series across models
        if waiting:
            logger.warning(
                "batch model waiting for capacity",
                extra={"model": model, "batch_id": batch.id, "hours": round((now - since) / 3600, 1)},
            )


def stall_seconds(deps: Deps) -> float:
    """How long a batch may go without a request ending before its work is sent again:
    longer than a request runs (its lease runs out at the latest) plus two slot waits."""
    settings = deps.settings
    return (
        settings.batch_lease_seconds
        + settings.batch_upstream_timeout_seconds
        + 2 * settings.batch_slot_wait_seconds
    )


def _mend(deps: Deps, batch: CountedBatch, now: float) -> float | None:
    """Mend what failed; for a stopping batch, say when the leases of its requests that
    still run (with live leases) run out (``lifecycle.running_leases_end``)."""
    record = batch.record
    unfinished = deps.requests.unfinished(record.id)
    leases_end = None
    if record.stopping:
        sweep_stopped(deps, record)
        abandoned = {r.index for r in unfinished if lease_ran_out(r, now)}
        ended = sum(end_abandoned(deps, record, r, now) for r in unfinished if r.index in abandoned)
        if ended:
            logger.warning("abandoned requests ended", extra={"batch_id": record.id, "requests": ended})
        leases_end = running_leases_end(r for r in unfinished if r.index not in abandoned)
    else:
        _resend_lost_work(deps, record, unfinished, now)
    _correct_counters(deps, batch, unfinished)
    return leases_end


def _resend_lost_work(deps: Deps, batch: BatchRecord, unfinished: list[RequestRecord], now: float) -> None:
    """A batch that made no progress: send again whatever no live worker may be holding."""
    overdue = now - deps.settings.batch_lease_seconds
    lone: list[WorkMessage] = []
    first_queued: dict[int, int] = {}
    chains = batch.chains or 1
    for request in unfinished:
        if lease_ran_out(request, now) or (
            request.status is RequestStatus.RETRY_WAIT and (request.next_at or 0) <= overdue
        ):
            lone.append(RequestMessage(batch.id, request.index))
        elif request.status is RequestStatus.QUEUED:
            chain = request.index % chains
            first_queued[chain] = min(first_queued.get(chain, request.index), request.index)
    messages = list(lone)
    if first_queued:
        generation = batch.generation + 1
        if deps.batches.set_generation(batch.id, generation):
            messages += [
                ChainMessage(batch.id, chain, index, chains, generation)
                for chain, index in sorted(first_queued.items())
            ]
    if messages:
        deps.queue.send_many(messages)
        logger.warning(
            "lost work sent again",
            extra={"batch_id": batch.id, "requests": len(lone), "chains": len(first_queued)},
        )


def _correct_counters(deps: Deps, batch: CountedBatch, unfinished: list[RequestRecord]) -> None:
    """A shard that counts more requests left than there are unfinished ones (a request
    that went missing) is set to what there is, if nothing was counted in it meanwhile."""
    record = batch.record
    per_shard = Counter(record.shard_of(r.index) for r in unfinished)
    for shard in deps.batches.shards(record.id):
        actual = per_shard.get(shard.shard, 0)
        if shard.left > actual and deps.batches.correct_left(
            record.id, shard.shard, observed=shard.left, actual=actual
        ):
            logger.error(
                "counter shard corrected",
                extra={"batch_id": record.id, "shard": shard.shard, "counted": shard.left, "left": actual},
            )
