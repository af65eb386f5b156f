"""One attempt of one claimed request: call its upstream, decide, store the decision.

The decision is pure (``domain.decisions.decide``); the steps here only carry it out: a
retry is scheduled on the request, an end is recorded and counted in one transaction,
and every request's end is logged once, with its batch, index, model, outcome, attempts
and duration.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any

from batchgw.config.catalog import Price
from batchgw.deps import Deps
from batchgw.domain.adaptive import signal_of
from batchgw.domain.attempts import AttemptEntry
from batchgw.domain.batch import BatchRecord, Tally, work_source
from batchgw.domain.decisions import (
    MAX_LOST_ATTEMPTS,
    End,
    Retry,
    Verdict,
    decide,
    not_run,
    stopped_retry,
    too_often_lost,
    unknown_model,
    verdict,
)
from batchgw.domain.outcome import Outcome
from batchgw.domain.request import INLINE_BODY_LIMIT, RequestEnd, RequestRecord
from batchgw.domain.spend import Deferred
from batchgw.domain.states import RequestStatus
from batchgw.observability import logger, metrics
from batchgw.run import charges, completion
from batchgw.run.aio import io
from batchgw.run.owner import priced
from batchgw.storage.blobs import body_key
from batchgw.storage.requests import Recorded, Released, RunGuard, Scheduled
from batchgw.storage.spend import Payer
from batchgw.storage.spend import shard_of as spend_shard
from batchgw.upstream import client as upstream
from batchgw.upstream import routing


class After(StrEnum):
    """What the chain does after a request's attempt was stored."""

    NEXT = "next"  # go on
    STOP = "stop"  # this worker lost the request: the chain stops
    PAUSE = "pause"  # the model is paused: the chain resumes after the pause


@dataclass(frozen=True, slots=True)
class Settled:
    after: After
    retry_at: float | None = None  # the request waits for another try, due then
    runs: bool = False  # the batch still runs its requests, as checked in the write (RunGuard)


async def read_verdict(deps: Deps, batch_id: str) -> Verdict:
    """What the batch allows its next request, read now (strongly consistent)."""
    return verdict(await io(deps.batches.get_record, batch_id), deps.clock())


async def call(
    deps: Deps,
    batch: BatchRecord,
    held: RequestRecord,
    body: Any = None,
    *,
    stop: asyncio.Event | None = None,
) -> Outcome:
    """Send the request to its model's upstream (its ``body``, when not already read, read
    from its record or from S3), within the call's deadline and the answer's byte cap.
    ``stop``: set when the call must be abandoned (``upstream.call``).

    Whatever goes wrong here becomes the request's outcome, never an exception that would
    bring the message back to call (and bill) the upstream again.
    """
    try:
        if body is None and held.request_ref is None:
            body = deps.blobs.load_body(held.request_packed, None)
        elif body is None:
            body = await io(deps.blobs.load_body, None, held.request_ref)
        spec = deps.catalog.models[held.model]
        now = deps.clock()
        routes = routing.plan(deps, spec, now)
        if not routes.allowed:
            return routing.unavailable(spec)
        if not routes.routes:
            return routing.waiting(spec, routes.retry_at, now)
        outcome = await upstream.run_request(
            spec,
            routes.routes,
            batch.endpoint,
            body,
            timeout=deps.settings.batch_upstream_timeout_seconds,
            anthropic_version=batch.anthropic_version,
            max_bytes=deps.settings.max_result_bytes,
            secret_ttl=deps.settings.batch_upstream_secret_ttl_seconds,
            stop=stop,
        )
        routing.note(deps, spec, outcome, deps.clock())
        return outcome
    except Exception:
        logger.exception("request call failed", extra={"batch_id": batch.id, "index": held.index})
        return Outcome(
            "failed",
            status_code=502,
            usage_known=False,
            error={
                "code": "upstream_error",
                "status": 502,
                # The exception stays in the log above (with the batch id): never in a result.
                "message": "The gateway failed while running this request (an internal failure, "
                "recorded in its logs). Retry the batch to run it again.",
            },
        )


async def settle(
    deps: Deps,
    batch: BatchRecord,
    held: RequestRecord,
    outcome: Outcome,
    *,
    started: float,
    guard: RunGuard | None = None,
    reserved: int = 0,
    defer: bool = False,
    batch_price: Price | None = None,
) -> Settled:
    """Decide what becomes of a request that ran, and store it (an end with ``guard``'s
    check that the batch still runs: ``Settled.runs``). ``reserved`` is what the request
    could cost at most: an attempt whose cost is unknown is charged that, apart. ``defer``:
    no quota or budget limits the owner, so the attempt's charge waits in its shard
    (``run.charges``).

    ``batch_price``: the request ran on its provider's batch service, at that price. Its
    answer says nothing of the model's health or load here; a request to run again
    (``omg_retries``) is due at once, for the provider step's next submit.
    """
    now = deps.clock()
    on_provider = batch_price is not None
    if not on_provider:
        await _judge_model(deps, batch, held, outcome, now)
    if outcome.route is not None and not on_provider:  # what an upstream's answer says of its load
        error_code = None if outcome.error is None else outcome.error.get("code")
        signal = signal_of(outcome.kind, outcome.status_code, error_code)
        latency_ms = max(0.0, (now - started) * 1000)
        to_do = deps.backpressure.note(
            held.model, signal, latency_ms, f"{held.batch_id}/{held.index}", retry=held.attempts > 1
        )
        if to_do is not None:
            await io(deps.backpressure.act, held.model, to_do)
    decision = decide(
        outcome,
        held,
        deps.settings,
        now=now,
        expires_at=batch.expires_at,
        price=batch_price if on_provider else deps.catalog.models[held.model].price,
        stored_bytes=deps.stored.known(batch.id),
        reruns=batch.reruns,
    )
    if on_provider and isinstance(decision, Retry):
        # Run again (``omg_retries``) in the provider batch the provider step submits next.
        decision = replace(decision, next_at=now, pause_model_until=None)
    log = _log_entry(deps, batch, held, outcome, decision, started=started, now=now)
    _measure(batch, held, outcome, decision, started=started, now=now, called=not on_provider)
    if isinstance(decision, Retry):
        return await _schedule_retry(deps, batch, held, decision, log=log, reserved=reserved, defer=defer)
    if decision.results_full:
        await io(deps.batches.mark_results_full, batch.id)
    return await end(
        deps,
        batch,
        held,
        decision,
        outcome=outcome,
        started=started,
        log=log,
        guard=guard,
        reserved=reserved,
        defer=defer,
    )


def _measure(
    batch: BatchRecord,
    held: RequestRecord,
    outcome: Outcome,
    decision: End | Retry,
    *,
    started: float,
    now: float,
    called: bool,
) -> None:
    """The metrics of one attempt: started (when a call was made here, not on a provider's
    batch service), its latency, the first attempt's wait since the batch was created, and
    a retry. Each is written twice: per model (what the alarms and the dashboard's model
    graphs read), and per source across models (``batch``, ``background`` or ``flex``:
    ``domain.batch.work_source``), so deferred single requests show beside batch requests."""
    for dimensions in ({"model": held.model}, {"source": work_source(batch.id)}):
        if outcome.route is not None and called:
            metrics.count("RequestsStarted", **dimensions)
            metrics.value("UpstreamLatency", max(0.0, (now - started) * 1000), **dimensions)
            if held.attempts == 1:
                metrics.value("QueueWait", max(0.0, started - batch.created_at), **dimensions)
        if isinstance(decision, Retry):
            metrics.count("RequestsRetried", **dimensions)


def _log_entry(
    deps: Deps,
    batch: BatchRecord,
    held: RequestRecord,
    outcome: Outcome,
    decision: End | Retry,
    *,
    started: float,
    now: float,
) -> AttemptEntry | None:
    """The request log's entry of the attempt that produced ``outcome`` (None when no call
    was made: no route could take it)."""
    if outcome.route is None:
        return None
    cost = (decision.charge if isinstance(decision, Retry) else decision.tally).cost_nano  # this attempt's
    entry = AttemptEntry.of_call(
        outcome,
        batch_id=held.batch_id,
        index=held.index,
        custom_id=held.custom_id,
        model=held.model,
        attempt=held.attempts,
        ended_at=now,
        latency_ms=max(0, round((now - started) * 1000)),
        cost_nano=cost if outcome.usage_known else None,
        user_id=batch.owner,
        worker=held.lease_owner,
    )
    return entry


def _log_writes(deps: Deps, entry: AttemptEntry | None) -> list[dict[str, Any]]:
    """The write that logs ``entry`` in its batch's log (and so in the log across batches,
    its index: ``storage.reqlog``), for the transaction that records its attempt (so it is
    logged exactly when its outcome is)."""
    if entry is None:
        return []
    ttl = int(entry.ended_at + deps.settings.batch_attempt_log_retention_days * 86400)
    return [deps.reqlog.batch_entry_action(entry, ttl=ttl)]


def flush_noted(deps: Deps, *, all_of_them: bool = True) -> None:
    """Write what this process noted of the attempts it recorded: the request counts
    (``storage.reqlog``) and the charges it kept (``run.charges``; unless ``all_of_them``,
    not those of shards another process rolled up lately). What cannot be written now waits
    for the next flush, and the work goes on."""
    if deps.reqlog.waiting:
        try:
            deps.reqlog.flush(deps.clock())
        except Exception:
            logger.warning("request counts not written yet", exc_info=True)
    if charges.waiting():
        try:
            charges.roll_up_kept(deps, all_of_them=all_of_them)
        except Exception:
            logger.warning("kept charges not rolled up yet", exc_info=True)


async def _count(deps: Deps, entry: AttemptEntry | None) -> None:
    """Note a recorded attempt in the request volume counts, written with the process's next
    flush (apart from its transaction: see ``storage.reqlog``)."""
    if entry is not None:
        deps.reqlog.note("batch", entry)


async def _judge_model(
    deps: Deps, batch: BatchRecord, held: RequestRecord, outcome: Outcome, now: float
) -> None:
    """Count the outcome towards the model's health, pausing it after failures in a row.

    A model is judged by requests trying for the first time: a request that failed
    before and fails again says more about itself than about the model.
    """
    if outcome.kind == "retry" and held.attempts <= 1:
        settings = deps.settings
        pause_after = settings.batch_model_pause_after_failures
        if deps.health.failure(held.model, f"{batch.id}/{held.index}", pause_after=pause_after):
            until = now + settings.batch_model_pause_seconds
            deps.health.note_pause(held.model, until)
            await io(deps.slots.pause, held.model, until)
    elif outcome.kind == "success":
        deps.health.success(held.model)


async def _schedule_retry(
    deps: Deps,
    batch: BatchRecord,
    held: RequestRecord,
    retry: Retry,
    *,
    log: AttemptEntry | None = None,
    reserved: int = 0,
    defer: bool = False,
) -> Settled:
    deferred, spend_updates = _charging(deps, batch, held, retry.charge, reserved, defer)
    try:
        scheduled = await io(
            deps.requests.schedule_retry,
            held,
            next_at=retry.next_at,
            error=retry.error,
            attempt_cost_nano=retry.attempt_cost_nano,
            uses_attempt=retry.uses_attempt,
            shard=batch.shard_of(held.index),
            charge=retry.charge,
            charges=[*spend_updates, *_log_writes(deps, log)],
            deferred=deferred,
        )
    finally:
        _kept(batch, held, deferred)
    if scheduled is Scheduled.LOST:
        return Settled(After.STOP)
    if scheduled is Scheduled.STOPPED:
        # Cancelled or past the window meanwhile: the request ends now, since the step
        # that settles the batch's unstarted requests may already have run.
        reason = await read_verdict(deps, batch.id)
        if reason is Verdict.GONE:
            return Settled(After.STOP)
        decision = stopped_retry(reason, retry, held)
        return await end(deps, batch, held, decision, called=True, log=log, reserved=reserved, defer=defer)
    await _count(deps, log)
    if retry.pause_model_until is None:
        return Settled(After.NEXT, retry_at=retry.next_at)
    deps.health.note_pause(held.model, retry.pause_model_until)
    await io(deps.slots.pause, held.model, retry.pause_model_until)
    return Settled(After.PAUSE, retry_at=retry.next_at)


async def end(
    deps: Deps,
    batch: BatchRecord,
    held: RequestRecord,
    decision: End,
    *,
    outcome: Outcome | None = None,
    started: float | None = None,
    called: bool = False,
    log: AttemptEntry | None = None,
    guard: RunGuard | None = None,
    reserved: int = 0,
    defer: bool = False,
) -> Settled:
    """Record a request's end and count it; the chain stops if the lease was lost.

    ``outcome``: the answer of the call it ran (what it cost, what it answered);
    ``called``: it was called even without one (a retry that found its batch stopped);
    ``log``: the request log's entry of that call, written in the same transaction;
    ``guard``: check in the same write that the batch still runs (``Settled.runs``).
    """
    now = deps.clock()
    if outcome is None and not reserved and decision.tally.cost_unknown:
        # Attempts lost with their workers, ended without another call: each counts at the
        # most it could have cost, as an attempt of unknown cost does.
        reserved = (await io(priced, deps, batch.endpoint, held))[1]
    ending = RequestEnd(status=decision.status, ended_at=now, error=decision.error)
    if outcome is not None:
        ending = await _ran(deps, batch, held, decision, outcome, now)
    elif called:
        ending = RequestEnd(
            status=decision.status, ended_at=now, error=decision.error, cost_nano=decision.cost_nano
        )
    shard = batch.shard_of(held.index)
    deferred, spend_updates = _charging(deps, batch, held, decision.tally, reserved, defer)
    try:
        recorded = await io(
            deps.requests.record_end,
            held,
            shard=shard,
            end=ending,
            tally=decision.tally,
            called=called or outcome is not None,
            charges=[*spend_updates, *_log_writes(deps, log)],
            guard=guard,
            deferred=deferred,
        )
    finally:
        _kept(batch, held, deferred)
    if recorded is Recorded.LEASE_LOST:
        logger.warning("lease lost before recording", extra={"batch_id": batch.id, "index": held.index})
        return Settled(After.STOP)
    await _count(deps, log)
    metrics.ended(decision.status.value, model=held.model)
    # A success is counted by the metrics and logged in the request log: its line here (half
    # a KB a request, CloudWatch's ingestion priced per GB) is for debugging only.
    log_ended = logger.debug if decision.status is RequestStatus.SUCCEEDED else logger.info
    log_ended(
        "request ended",
        extra={
            "batch_id": batch.id,
            "index": held.index,
            "model": held.model,
            "outcome": decision.status.value,
            "error_code": None if decision.error is None else decision.error.get("code"),
            "attempts": held.attempts,
            "duration_ms": None if started is None else round((now - started) * 1000),
        },
    )
    if recorded is Recorded.SHARD_FINISHED:
        await io(completion.shard_finished, deps, batch.id, shard)
    return Settled(After.NEXT, runs=recorded is Recorded.RUNS)


def _kept(batch: BatchRecord, held: RequestRecord, deferred: Deferred | None) -> None:
    """Note the shard where the attempt's write kept its charge (``run.charges``) once the
    write was made, whatever it answered: a roll-up that read the shard before the write
    would otherwise take it off this process's list, leaving the charge to the finalize."""
    if deferred:
        charges.note(batch, batch.shard_of(held.index))


def _charging(
    deps: Deps, batch: BatchRecord, held: RequestRecord, tally: Tally, reserved: int, defer: bool
) -> tuple[Deferred | None, list[dict[str, Any]]]:
    """How the transaction that records the attempt charges what ``tally`` counts of its
    cost to the batch's owner and key: an attempt of unknown cost at ``reserved``, the most
    it could have cost (it counts against quotas and budgets, not in the batch's known
    cost). With ``defer``, kept in the request's shard until this process rolls it up
    (``run.charges``); else the updates that charge the owner's spend in the transaction."""
    payer = Payer(batch.owner, batch.key_id)
    unknown = reserved * tally.cost_unknown
    if defer:
        return Deferred(batch.owner, batch.key_id, tally.cost_nano, unknown), []
    return None, deps.spend.charge_actions(
        payer,
        tally.cost_nano,
        now=deps.clock(),
        shard=spend_shard(batch.id, held.index),
        unknown_nano=unknown,
    )


async def _ran(
    deps: Deps, batch: BatchRecord, held: RequestRecord, decision: End, outcome: Outcome, now: float
) -> RequestEnd:
    """The end of a request that ran: its cost, and a success's answer (in S3 when large)."""
    if decision.status is not RequestStatus.SUCCEEDED or decision.response is None:
        return RequestEnd(
            status=decision.status, ended_at=now, error=decision.error, cost_nano=decision.cost_nano
        )
    packed = decision.response
    deps.stored.add(batch.id, len(packed))
    ref = None
    # The request and its response share one DynamoDB item (400 KB at most): a response
    # that would take them past the inline budget goes to S3, before the end is written,
    # under the lease's epoch: a worker whose lease was taken over stores its own answer
    # beside the one the request ended with, never over it.
    if len(packed) + len(held.request_packed or b"") > INLINE_BODY_LIMIT:
        ref = body_key(batch.id, held.index, f"res.{held.epoch}")
        await io(deps.blobs.put, ref, packed)
    return RequestEnd(
        status=decision.status,
        ended_at=now,
        cost_nano=decision.cost_nano,
        status_code=outcome.status_code,
        upstream_request_id=outcome.request_id,
        usage={"input_tokens": outcome.input_tokens, "output_tokens": outcome.output_tokens},
        response_packed=None if ref else packed,
        response_ref=ref,
    )


async def end_unrun(deps: Deps, batch: BatchRecord, held: RequestRecord, reason: Verdict) -> Settled:
    """End a claimed request that may not run (cancelled, expired, results full)."""
    if reason is Verdict.GONE:
        return Settled(After.STOP)  # the batch was deleted: its requests are being purged
    return await end(deps, batch, held, not_run(reason, held, deps.settings))


async def release(deps: Deps, batch: BatchRecord, held: RequestRecord) -> None:
    """Put a claimed request back in the queue; if the batch no longer runs, end it now
    (cancelled or expired), since the step that settles unstarted requests may be past."""
    if await io(deps.requests.release, held) is Released.STOPPED:
        await end_unrun(deps, batch, held, await read_verdict(deps, batch.id))


async def ended_poison(deps: Deps, batch: BatchRecord, held: RequestRecord) -> bool:
    """End, without running, a request that cannot run: its workers were lost too many
    times, or its model left the configuration. True when it was ended."""
    if held.lost > MAX_LOST_ATTEMPTS:
        decision = too_often_lost(held)
    elif held.model not in deps.catalog.models:
        decision = unknown_model(held)
    else:
        return False
    logger.warning(
        "request not run",
        extra={"batch_id": batch.id, "index": held.index, "code": (decision.error or {}).get("code")},
    )
    await end(deps, batch, held, decision)
    return True
