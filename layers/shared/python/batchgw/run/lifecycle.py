"""The workflow's steps that run a batch: prepare it (validate a file batch's input, write
its requests, start its chains), park until it is done, expire or cancel what has not
started, purge it. Its end (finalize, fail) is ``run.ending``'s; ending the requests of a
stopped batch that will never run, ``run.stopped``'s.

Each step is idempotent, since Step Functions retries a failed task: a retried prepare
goes on writing from where the one before got, once that one no longer writes. A step that
routes the workflow answers ``step(Next...)`` (``storage.workflow``).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from batchgw import inputs
from batchgw.config.catalog import execution_of, not_on_provider
from batchgw.deps import Deps
from batchgw.domain import codec
from batchgw.domain.batch import BatchRecord, Tally, shard_totals
from batchgw.domain.chains import ChainMessage
from batchgw.domain.decisions import not_run_error
from batchgw.domain.errors import DeadlineInfeasible
from batchgw.domain.files import RESULT_KINDS, file_key, result_file_id
from batchgw.domain.modes import Mode
from batchgw.domain.request import INLINE_BODY_LIMIT, RequestRecord
from batchgw.domain.states import BatchStatus, RequestStatus
from batchgw.domain.usage import OverLimit, UsageLimits
from batchgw.inputs import input_lines
from batchgw.observability import logger
from batchgw.run import charges, completion
from batchgw.run.ending import retention_fields
from batchgw.run.prepare_lease import PrepareLease
from batchgw.run.stopped import sweep
from batchgw.storage.blobs import body_key
from batchgw.storage.dynamo import timestamp
from batchgw.storage.idempotency import KEY_KEPT_SECONDS
from batchgw.storage.workflow import Next, step
from batchgw.validation import media
from batchgw.validation.file import FileReport, report_object, validate_file

# Requests written per flush while preparing (bounded memory whatever the batch's size).
WRITE_CHUNK = 500
# The first flush: the batch's chains start once it is written, so it is kept small.
FIRST_WRITE = 100
_UNPREPARED = (BatchStatus.VALIDATING, BatchStatus.CANCELLING)


def prepare(deps: Deps, batch_id: str) -> dict[str, Any]:
    """Validate a file batch's input, write its counter shards and first requests, start its
    chains, then write the rest of its requests.

    The first requests start while the rest are written: the record's ``written`` says how
    far the writes have gone, after each chunk, and a chain that reaches a request not yet
    written waits for it. Only the holder of the batch's prepare lease writes
    (``run.prepare_lease``): a retried prepare waits while another invocation holds it, then
    goes on from ``written``. What lies past it was never claimed, so writing it again
    changes nothing that ran. Nothing else the workflow does runs meanwhile (it is this
    step), so cancel, expiry and finalize find every request written.
    """
    batch = deps.batches.get_record(batch_id)
    if batch is None:
        return step(Next.FINALIZE)
    if _writes_due(batch):
        validating = batch.input_method == "file" and not batch.prepared
        if validating and _validate_input_file(deps, batch) is None:
            return step(Next.FINALIZE)
        lease = PrepareLease.take(deps, batch_id)  # the record as it is now, validated
        if lease is None:
            return step(Next.FINALIZE)
        with lease.writing():
            written = _write_requests(deps, lease.batch)
    else:
        written = _start(deps, batch)
    if written is None:
        return step(Next.FINALIZE)
    batch = written
    if batch.on_provider:
        return step(Next.PROVIDER)  # its provider's batch service runs it, cancelled or not
    if batch.status is BatchStatus.CANCELLING:
        return step(Next.CANCEL)
    if batch.status is not BatchStatus.IN_PROGRESS:
        return step(Next.FINALIZE)
    return park_step(deps, batch)


def _writes_due(batch: BatchRecord) -> bool:
    """Whether some of the batch's requests (or its counter shards) are still to be written."""
    if not batch.prepared:
        return batch.status in _UNPREPARED
    return not batch.all_written and not batch.status.is_final


def _write_requests(deps: Deps, batch: BatchRecord) -> BatchRecord | None:
    """Write what is left of the batch's requests, starting its chains once the first are
    written (its counter shards and first chunk come first, if nothing is written yet): the
    record after, or None when the batch was deleted, or ended, meanwhile."""
    chunks: Iterator[int] | None = None
    if batch.status in _UNPREPARED and not batch.prepared:
        chunks = _write_chunks(deps, batch, start=0)
        written = next(chunks, 0)
        shards = min(deps.settings.batch_counter_shards, batch.total)
        deps.batches.put_shards(batch.id, shard_totals(batch.total, shards))
        prepared = deps.batches.note_prepared(
            batch.id,
            shards=shards,
            chains=_chain_count(deps, batch, batch.total),
            written=written,
            from_statuses=_UNPREPARED,
        )
        if prepared is None:
            return None
        batch = prepared
    started = _start(deps, batch)
    if started is None or not started.prepared or (chunks is None and started.all_written):
        return started
    if chunks is None:  # a retried prepare: on from where the last one got
        chunks = _write_chunks(deps, started, start=started.written_count)
    return _write_rest(deps, started, chunks)


def _start(deps: Deps, batch: BatchRecord) -> BatchRecord | None:
    """Move a prepared batch from validating to in progress, and send its chains (a retried
    prepare sends them again: a duplicate of a chain claims each request like any other,
    so none runs twice). They are of the batch's current generation: a workflow started
    again for a batch the reconciler had already mended (the local stack restored from a
    snapshot) must not send chains that workers drop as superseded. The record after, or
    None when the batch was deleted."""
    if batch.status is BatchStatus.VALIDATING:
        started = deps.batches.start(batch.id, at=int(deps.clock()))
        current = started or deps.batches.get_record(batch.id)
        if current is None:
            return None
        batch = current
    if batch.status is BatchStatus.IN_PROGRESS and not batch.on_provider:
        chains = batch.chains or 1
        deps.queue.send_many([ChainMessage(batch.id, c, c, chains, batch.generation) for c in range(chains)])
        logger.info("batch started", extra={"batch_id": batch.id, "total": batch.total, "chains": chains})
    return batch


def run_on_gateway(deps: Deps, batch_id: str, *, reason: str) -> dict[str, Any]:
    """Run on the gateway's chains a batch that was to run on its provider's batch service
    (an ``auto`` batch the provider refused before it took any of it): its chains start,
    and the workflow parks as for any batch. When it no longer runs in provider mode, or no
    longer runs at all, the provider step routes it again (``Next.PROVIDER``)."""
    batch = deps.batches.run_on_gateway(batch_id, reason=reason)
    if batch is None:
        return step(Next.PROVIDER)
    logger.info("batch runs on the gateway after all", extra={"batch_id": batch_id, "reason": reason})
    started = _start(deps, batch)
    return step(Next.FINALIZE) if started is None else park_step(deps, started)


def park_step(deps: Deps, batch: BatchRecord, *, leases_end: float | None = None) -> dict[str, Any]:
    """Park until woken, or until the next reconcile: at the latest when the window closes,
    and, for a stopping batch, a second after ``leases_end`` (``running_leases_end``).

    No worker takes over the request of a stopped batch whose worker died: only the
    reconciler ends it, once its lease has run out. Looking again then, not a whole
    reconcile period later, is what ends a cancelled batch about a lease after its worker
    died; a live worker has ended its request by then, or renewed the lease (then the
    batch is looked at again when that one runs out).
    """
    wait = deps.settings.batch_reconcile_seconds
    now = deps.clock()
    if batch.expires_at is not None and not batch.expiring:
        wait = min(wait, batch.expires_at - now)
    if batch.stopping and leases_end is not None:
        wait = min(wait, leases_end - now + 1)
    return step(Next.PARK, max(1, math.ceil(wait)))


def running_leases_end(requests: Iterable[RequestRecord]) -> float | None:
    """When the last lease of those of ``requests`` that run runs out (None: none runs)."""
    ends = [r.lease_until or 0.0 for r in requests if r.status is RequestStatus.RUNNING]
    return max(ends, default=None)


def _chain_count(deps: Deps, batch: BatchRecord, total: int) -> int:
    caps = [deps.live.unpaused_cap(model) for model in batch.models if model in deps.catalog.models]
    return max(1, min(total, max(caps, default=1)))


def _validate_input_file(deps: Deps, batch: BatchRecord) -> BatchRecord | None:
    """Check a file batch's input, streaming; fail the batch (nothing run) on any problem.

    Returns the batch with the file's request count and models, or None when it failed.
    """
    report = validate_file(
        input_lines(deps, batch),
        endpoint=batch.endpoint,
        settings=deps.settings,
        catalog=deps.catalog,
        role=batch.owner_role,
        anthropic_version=batch.anthropic_version,
    )
    errors: list[dict[str, Any]] = list(report.errors)
    models = sorted(report.models)
    choice, prices = execution_of(
        deps.catalog,
        Mode(batch.mode_requested),
        endpoint=batch.endpoint,
        models=models,
        window=batch.completion_window,
        forbidden=deps.live.forbidden_routes,
    )
    on_gateway = choice is not None and choice.mode is Mode.GATEWAY
    unroutable = [model for model in models if on_gateway and not deps.live.batch_routes(model)]
    refused_media = None if not report.ok or choice is None or on_gateway else _provider_media(deps, batch)
    promised = _promise(deps, batch, report.total, models) if report.ok and on_gateway else None
    if refused_media is not None:
        errors = [refused_media]
    elif report.ok and choice is None:
        errors = [
            {
                "code": "batch_not_supported",
                "line": None,
                "param": "execution_mode",
                "message": "The batch cannot run in execution_mode 'provider': "
                + not_on_provider(
                    deps.catalog,
                    endpoint=batch.endpoint,
                    models=models,
                    window=batch.completion_window,
                    forbidden=deps.live.forbidden_routes,
                )
                + ".",
            }
        ]
    elif report.ok and unroutable:
        errors = [
            {
                "code": "batch_route_unavailable",
                "line": None,
                "param": "model",
                "message": f"Model '{model}' has no route that batch work may use.",
            }
            for model in unroutable
        ]
    elif report.ok and (late := _too_late(batch, promised)) is not None:
        errors = [late]
    elif report.ok:
        # Counted now, in the write that records them (a retried prepare finds them counted).
        settings = deps.settings
        counted = deps.batches.charge_requests(
            batch,
            total=report.total,
            models=models,
            mode={
                "execution_mode": None if choice is None else choice.mode.value,
                "mode_reason": None if choice is None else choice.reason.value,
                "batch_prices": prices,
                "promised_at": promised,
            },
            limits=UsageLimits(
                settings.batch_max_active_per_user, settings.batch_max_queued_requests_per_user
            ),
            from_statuses=_UNPREPARED,
        )
        if not isinstance(counted, OverLimit):
            return counted
        errors = [
            {
                "code": "queued_request_limit",
                "line": None,
                "param": None,
                "message": f"The file's {report.total} requests would take your unfinished requests "
                f"to {counted.count}, over the limit of {settings.batch_max_queued_requests_per_user}.",
            }
        ]
    if errors:
        now = deps.clock()
        whole_batch = errors[0]["code"] in (
            "queued_request_limit",
            "batch_route_unavailable",
            "batch_not_supported",
            "deadline_infeasible",
            media.CODE,
        )
        error = {  # as OMG's guide shows it (spec 001): with its type, and the file as its param
            "type": "invalid_request_error",
            "code": errors[0]["code"] if whole_batch else "invalid_batch_input",
            "param": "input_file_id",
            "message": errors[0]["message"] if whole_batch else _problems_message(report),
        }
        if errors[0]["code"] == "deadline_infeasible":  # as a create's 422 names it
            error.update(param="complete_by", earliest_completion_at=promised)
        deps.batches.end(
            batch.id,
            {
                "status": BatchStatus.FAILED,
                "failed_at": int(now),
                "ended_at": timestamp(now),
                "event_pending": True,
                "errors": report_object(errors),
                "error": error,
                **retention_fields(deps, batch, now),
            },
            from_statuses=_UNPREPARED,
        )
        logger.info("batch input refused", extra={"batch_id": batch.id, "problems": len(errors)})
    return None


def _promise(deps: Deps, batch: BatchRecord, total: int, models: list[str]) -> int | None:
    """When a file batch would end, as a create estimates an inline one (``scheduling.forecast``):
    its requests counted on each of its models, in its place in creation order."""
    from batchgw.scheduling.forecast import Stores, reading, stored_end

    stores = Stores(deps.slots, deps.batches, deps.reqlog, deps.shares, deps.accounts)
    read = reading(stores, by_tenant=deps.settings.batch_tenant_shares, now=deps.clock(), tuning=deps.tuning)
    requests = {model: total for model in models}
    weight = read.weight(batch.owner)
    return stored_end(
        read, batch, requests, priority=batch.priority, complete_by=batch.complete_by, weight=weight
    )


def _too_late(batch: BatchRecord, earliest: int | None) -> dict[str, Any] | None:
    """The problem of a file batch whose ``complete_by`` comes before its estimate
    (``earliest``), now that its requests are known (an inline batch's create refuses it: 422
    ``deadline_infeasible``); it fails before anything is counted or run."""
    if batch.complete_by is None or earliest is None or earliest <= batch.complete_by:
        return None
    refused = DeadlineInfeasible(complete_by=batch.complete_by, earliest=earliest, outcome="Nothing was run.")
    return {"code": refused.code, "line": None, "param": "complete_by", "message": refused.message}


def _provider_media(deps: Deps, batch: BatchRecord) -> dict[str, Any] | None:
    """The first line of a file batch bound for a provider's batch service whose media that
    service cannot fetch (``validation.media``), as a validation problem; None: none has."""
    for number, line in enumerate(input_lines(deps, batch), start=1):
        if not line.strip():
            continue
        refused = media.unsupported_media(json.loads(line).get("body"))
        if refused is not None:
            param = f"body.{refused[0]}"
            return {
                "code": media.CODE,
                "line": number,
                "param": param,
                "message": f"line {number}: {media.message(param, refused[1])}",
            }
    return None


def _problems_message(report: FileReport) -> str:
    """The failed batch's ``error.message``: how many problems, and how many ``errors`` lists."""
    count = f"{report.problem_count:,}{'' if report.complete else '+'}"
    noun = "problem" if report.problem_count == 1 and report.complete else "problems"
    if report.unlisted:
        shown = len(report.errors)
        listed = f"the first {shown:,} are listed in 'errors' and {report.unlisted:,} more are not"
    else:
        listed = "listed in 'errors'"
    return f"The input file has {count} {noun}, {listed}; nothing was run."


def _write_chunks(deps: Deps, batch: BatchRecord, *, start: int) -> Iterator[int]:
    """Store the batch's requests from index ``start`` on, a chunk at a time (a body too
    large for its record goes to S3), yielding after each how many are written from index 0.
    The first chunk is small when it is the batch's first, so that its chains start soon."""
    pending: list[RequestRecord] = []
    chunk = FIRST_WRITE if start == 0 else WRITE_CHUNK
    index = -1
    for index, (custom_id, model, body) in enumerate(inputs.requests_of(deps, batch)):
        if index >= batch.total:
            raise ValueError(f"{batch.id}: its input has more than the {batch.total} requests counted")
        if index < start:
            continue
        packed = codec.pack(body)
        stored: bytes | str = packed
        if len(packed) > INLINE_BODY_LIMIT:
            stored = body_key(batch.id, index, "req")
            deps.blobs.put(stored, packed)
        pending.append(RequestRecord.new(batch.id, index, custom_id, model, stored))
        if len(pending) >= chunk:
            deps.requests.put_new(pending)
            pending, chunk = [], WRITE_CHUNK
            yield index + 1
    if pending:
        deps.requests.put_new(pending)
        yield index + 1
    if index + 1 < batch.total:
        raise ValueError(f"{batch.id}: its input has {index + 1} of the {batch.total} requests counted")


def _write_rest(deps: Deps, batch: BatchRecord, chunks: Iterator[int]) -> BatchRecord | None:
    """Write the rest of the batch's requests, moving its ``written`` frontier on after each
    chunk; the record after the last, or None if the batch was deleted meanwhile."""
    for written in chunks:
        moved = deps.batches.move_written(batch.id, written)
        if moved is None:
            return None
        batch = moved
    return batch


def park(deps: Deps, batch_id: str, token: str) -> dict[str, Any]:
    """Keep the waiting task's token, or wake it at once if there is already work to do:
    the batch is done, deleted, or cancelled with its unstarted requests not yet settled."""

    def due(batch: BatchRecord | None) -> Next | None:
        if batch is None or batch.all_shards_done:
            return Next.FINALIZE
        if (batch.status is BatchStatus.CANCELLING or batch.owner_failed) and not batch.cancel_swept:
            return Next.CANCEL
        return None

    return keep_token(deps, batch_id, token, due)


def keep_token(
    deps: Deps, batch_id: str, token: str, due: Callable[[BatchRecord | None], Next | None]
) -> dict[str, Any]:
    """Keep a waiting task's token on the batch's record (whoever has work for the workflow
    wakes it with it); then, if ``due`` of the record as kept says where the workflow goes
    now, wake it there at once (work that came before the token was kept)."""
    batch = deps.batches.set_token(batch_id, token)
    next_state = due(batch)
    if next_state is not None:
        deps.workflow.wake(token, next_state)
        if batch is not None:
            deps.batches.clear_token(batch_id, token)
    return {}


def expire(deps: Deps, batch_id: str) -> dict[str, Any]:
    """The window closed: unstarted requests end as batch_expired; running ones finish."""
    expiring = deps.batches.start_expiring(batch_id)
    if expiring is None:
        return step(Next.FINALIZE)
    logger.info("batch window closed", extra={"batch_id": batch_id})
    return _end_unstarted(
        deps,
        batch_id,
        RequestStatus.EXPIRED,
        not_run_error("batch_expired"),
        Tally(failed=1, expired=1),
        failed_retries=True,
    )


def cancel(deps: Deps, batch_id: str) -> dict[str, Any]:
    """The batch was cancelled, or its key or owner may no longer run it: unstarted
    requests end as cancelled (or failed, ``batch_failed``); running ones finish."""
    batch = deps.batches.get_record(batch_id)
    failing = batch is not None and batch.owner_failed and batch.status is BatchStatus.IN_PROGRESS
    if failing and deps.batches.mark_swept(batch_id, status=BatchStatus.IN_PROGRESS):
        return _end_unstarted(
            deps, batch_id, RequestStatus.FAILED, not_run_error("batch_failed"), Tally(failed=1)
        )
    if deps.batches.mark_swept(batch_id, status=BatchStatus.CANCELLING) is None:
        return step(Next.FINALIZE)
    return _end_unstarted(
        deps, batch_id, RequestStatus.CANCELLED, not_run_error("batch_cancelled"), Tally(cancelled=1)
    )


def _end_unstarted(
    deps: Deps,
    batch_id: str,
    status: RequestStatus,
    error: dict[str, Any],
    tally: Tally,
    *,
    failed_retries: bool = False,
) -> dict[str, Any]:
    """End every unstarted request of the batch, count the shards that emptied, and route:
    finalize when nothing is left, else park (running requests finish; the last wakes us)."""
    batch = deps.batches.get_record(batch_id)
    if batch is None:
        return step(Next.FINALIZE)
    sweep(deps, batch, status, error, tally, failed_retries=failed_retries)
    completion.settle(deps, batch_id)
    batch = deps.batches.get_record(batch_id)
    if batch is None or batch.all_shards_done:
        return step(Next.FINALIZE)
    # Only running requests are left (their ends wake the workflow); if their worker is
    # gone, the reconciler ends them once their leases have run out.
    return park_step(deps, batch, leases_end=running_leases_end(deps.requests.unfinished(batch_id)))


def sweep_stopped(deps: Deps, batch: BatchRecord) -> None:
    """Sweep a stopping batch's unstarted requests again, as its expiry or cancel did."""
    if batch.expiring:
        sweep(
            deps,
            batch,
            RequestStatus.EXPIRED,
            not_run_error("batch_expired"),
            Tally(failed=1, expired=1),
            failed_retries=True,
        )
    elif batch.status is BatchStatus.CANCELLING:
        sweep(deps, batch, RequestStatus.CANCELLED, not_run_error("batch_cancelled"), Tally(cancelled=1))
    elif batch.owner_failed:
        sweep(deps, batch, RequestStatus.FAILED, not_run_error("batch_failed"), Tally(failed=1))


def purge(deps: Deps, batch_id: str) -> dict[str, Any]:
    """Delete the batch, its requests, its result files and every object it stored (at the
    end of its retention, or on DELETE). Its Idempotency-Key answers 410 for a day."""
    batch = deps.batches.get_record(batch_id)
    if batch is not None and batch.idempotency_key is not None:
        deps.idempotency.batch_deleted(
            batch.owner, batch.idempotency_key, batch_id, ttl=int(deps.clock() + KEY_KEPT_SECONDS)
        )
    for kind in RESULT_KINDS:
        # A DELETE tombstoned the batch's result files as it removed the record (they read
        # as not found from then on); a purge at the end of retention tombstones them now,
        # before their bytes go, so a download meanwhile finds no file rather than no bytes.
        file_id = result_file_id(batch_id, kind)
        record = deps.files.get(file_id)
        if record is not None:
            if not record.deleted:
                deps.files.mark_deleted(file_id, ttl=int(deps.clock()) + 30 * 86400)
            deps.blobs.delete(file_key(file_id))
    deps.requests.delete_all(batch_id)
    charges.roll_up_batch(deps, batch_id)  # none of them ends now: what its shards kept is final
    deps.batches.delete_all(batch_id, now=deps.clock())
    deps.blobs.delete_batch(batch_id)
    logger.info("batch purged", extra={"batch_id": batch_id})
    return {}
