"""The provider step: a batch run on its provider's batch service, moved on by one step of
its workflow each time (``Next.PROVIDER``), until it routes to cancel, expire or finalize
like a batch the gateway ran.

Each step plans the batch's parts once (``domain.provider.Planner``), then moves every part
on: submits a planned part, finds again a part whose submit answer was lost, polls a
submitted one (cancelling it at the provider when the batch stops), and collects one that
ended: each of its lines ends one of our requests, at the batch price fixed when the batch
was created, in the same write that records it (``run.attempt``). A step that dies anywhere
is run again by the workflow: a part's every change is a conditional write on the part as
read, a request already ended is skipped, and a submit whose answer was lost is looked up
by its mark before it is sent again (OpenAI; Anthropic keeps no mark, see ``_recover``).

Neither our ids nor the user's custom_ids reach the provider (``domain.provider.line_id``),
and the provider's ids stay in the part: every message from it is scrubbed of them.

A provider-run batch keeps a gateway-run batch's promises: each step checks its key and
owner again as a chain does before each request (``domain.spend.owner_standing``), so a key
revoked or an owner suspended or deleted fails it (what the provider has is cancelled there,
nothing more is submitted) and a role below BATCH_MIN_ROLE pauses it (nothing more is
submitted); a route an administrator forbade takes nothing more; with BATCH_ENABLED off the
step sends nothing to any provider and moves nothing on (``_idle``); a provider batch the
provider no longer knows ends the part (``_lost``); and while a provider batch may run at
the provider, the batch carries a run mark (``LIVE_MARK``), so a delete waits for its cancel
as it waits for a gateway-run batch's running requests, and the purge deletes what is left
there (``provider_purge``).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import uuid
from collections.abc import Iterator
from typing import Any

import httpx

from batchgw.config.catalog import Price, price_of
from batchgw.deps import Deps
from batchgw.domain.batch import BatchRecord, Tally
from batchgw.domain.decisions import End, Verdict, not_run
from batchgw.domain.modes import Mode, ModeReason
from batchgw.domain.outcome import Outcome
from batchgw.domain.provider import (
    ORPHAN_SKEW_SECONDS,
    PROVIDER_WINDOW_SECONDS,
    SUBMIT_RETRY_SECONDS,
    LineResult,
    Part,
    PartStatus,
    Planner,
    line_id,
    scrub_ids,
)
from batchgw.domain.request import RequestRecord, clean_message
from batchgw.domain.spend import Judgement, Standing, most_cost, over_budget_message, owner_standing
from batchgw.domain.states import BatchStatus, RequestStatus
from batchgw.observability import logger, metrics
from batchgw.provider.services import BatchService, Gone, Polled, Refused, Submitted
from batchgw.run import attempt, lifecycle
from batchgw.run.owner import account_of, key_of
from batchgw.storage.requests import ClaimKind
from batchgw.storage.spend import Payer, reserve_provider, room_for_provider
from batchgw.storage.workflow import Next, step
from batchgw.upstream.client import classify

# Lines recorded at once while a part is collected, the part saying how far it got after each.
COLLECT_CHUNK = 10
_STATUS_CODES = {"queue_full": "provider_batch_queue_full", "rate_limited": "provider_rate_limited"}
# The batch's run mark while a provider batch of it may run at the provider (``_note_live``).
LIVE_MARK = "provider"


def provider_step(deps: Deps, batch_id: str) -> dict[str, Any]:
    """Move the provider-run batch on; where its workflow goes next."""
    batch = deps.batches.get_record(batch_id)
    if batch is None or batch.status.is_final or batch.status is BatchStatus.FINALIZING:
        return step(Next.FINALIZE)
    if not batch.on_provider:
        return lifecycle.park_step(deps, batch)  # it runs on the gateway's chains now
    if not deps.settings.batch_enabled:
        return _idle(deps, batch)
    batch, held = _check_owner(deps, batch)
    parts = deps.provider_parts.parts(batch_id)
    if not parts and _stopping(batch, deps.clock()):
        return _finish(deps, batch_id)  # stopped before anything was planned: nothing was sent
    if not parts:
        planned = _plan(deps, batch)
        if isinstance(planned, dict):
            deps.batches.fail_for_owner(batch_id, planned)
            return step(Next.CANCEL)  # its requests end batch_failed; nothing was sent
        deps.provider_parts.plan(batch_id, planned)
        parts = deps.provider_parts.parts(batch_id)
    waits: list[int] = []
    for part in parts:
        orphans_in = part.orphans_due_in(deps.clock(), _orphan_grace(deps))
        if orphans_in == 0:
            part = _cancel_orphans(deps, batch, part)
        elif orphans_in is not None:
            waits.append(int(orphans_in) + 1)
        if part.ended:
            if part.left_at_provider:
                _discard(deps, batch, part)
            continue
        moved = _move(deps, batch, part, held)
        if isinstance(moved, dict):
            _note_live(deps, batch_id, 0)
            return moved  # the batch runs on the gateway after all
        if moved is not None:
            waits.append(moved)
    if waits:
        closes_in = _window_closes_in(batch, deps.clock())
        if closes_in is not None:
            waits.append(closes_in)  # its stop cancels the provider batches then
        wait = max(0, min(waits))
        _note_live(deps, batch_id, wait)
        return step(Next.PROVIDER, wait)
    if _planned_reruns(deps, batch, len(parts)):
        return step(Next.PROVIDER)
    return _finish(deps, batch_id)


def _idle(deps: Deps, batch: BatchRecord) -> dict[str, Any]:
    """BATCH_ENABLED is off: send nothing to any provider and move nothing on (no part is
    submitted, polled, cancelled or collected; no cancel, window's end or owner's failure is
    acted on: each needs the provider, or would end requests the provider may have run and
    billed), as a disabled worker stops claiming and sweeping; look again when a gateway
    chain would (what the provider already has runs on there, within its own window). The
    batch's run mark is kept while a provider batch of it may run (a delete still waits)."""
    settings = deps.settings
    wait = max(1, math.ceil(max(settings.runtime_refresh_seconds, settings.batch_slot_wait_seconds)))
    _note_live(deps, batch.id, wait)
    logger.info("provider step idle: batch inference is disabled", extra={"batch_id": batch.id})
    return step(Next.PROVIDER, wait)


def _check_owner(deps: Deps, batch: BatchRecord) -> tuple[BatchRecord, Standing | None]:
    """Check the batch's key and owner again, as a chain does before each request (the
    account read as ``run.owner`` reads it, judged by ``domain.spend.owner_standing``): a key
    revoked or expired, or an owner suspended or deleted, fails the batch
    (``owner_unauthorized``: it stops, so this step cancels what the provider has and submits
    nothing more); a role below BATCH_MIN_ROLE pauses it, as it pauses a gateway-run batch
    (nothing more is submitted; what the provider has runs on and is collected) until it is
    raised. The batch after, and the pause that holds its planned parts (None: none). A batch
    that stops already (cancel, window, failure) is not checked."""
    if _stopping(batch, deps.clock()):
        return batch, None
    user, keys = asyncio.run(account_of(deps, batch.owner))
    settings = deps.settings
    standing = owner_standing(
        user,
        key_of(batch, keys),
        now=deps.clock(),
        min_role=settings.batch_min_role,
        recheck_seconds=settings.batch_quota_recheck_seconds,
    )
    if standing is None:
        if batch.paused is not None:
            batch = deps.batches.resume(batch.id) or batch
            logger.info("batch resumed", extra={"batch_id": batch.id})
        return batch, None
    if standing.judgement is Judgement.UNAUTHORIZED:
        message = standing.message or "The batch's key or owner may no longer run it."
        failed = deps.batches.fail_for_owner(batch.id, {"code": "owner_unauthorized", "message": message})
        if failed is not None:
            logger.warning("batch failing for its owner", extra={"batch_id": batch.id, "reason": message})
        return failed or deps.batches.get_record(batch.id) or batch, None
    assert standing.reason is not None
    if batch.paused is None or batch.paused.get("reason") != standing.reason.value:
        paused = {"reason": standing.reason.value, "until": standing.until, "check_at": standing.check_at}
        batch = deps.batches.pause(batch.id, paused) or batch
        logger.info("batch paused", extra={"batch_id": batch.id, **paused})
    return batch, standing


def _note_live(deps: Deps, batch_id: str, wait: float) -> None:
    """Mark the batch as running (``BatchStore.mark_run``) while a provider batch of it may
    run at the provider, until one step's longest run after the next is due (a workflow
    that died stops renewing it); drop the mark once none may. A delete of the batch, or of
    its owner, waits for the mark as for a gateway-run batch's running requests: the batch
    is cancelled first, its provider batches with it."""
    if any(part.live for part in deps.provider_parts.parts(batch_id)):
        until = deps.clock() + wait + deps.settings.batch_worker_timeout_seconds
        deps.batches.mark_run(batch_id, LIVE_MARK, until=until)
    else:
        deps.batches.unmark_run(batch_id, LIVE_MARK)


def provider_park(deps: Deps, batch_id: str, token: str) -> dict[str, Any]:
    """Keep the token of the workflow's wait for the batch's next poll; or wake it at once
    when the batch began to stop (cancel, its owner's failure) and a part it runs has not
    been looked at since: the provider hears of a cancel now, not at the next poll. A cancel
    that comes during the wait wakes it itself (``api.batches.cancel_batch``)."""

    def due(batch: BatchRecord | None) -> Next | None:
        if batch is None:
            return Next.FINALIZE
        if not deps.settings.batch_enabled:
            return None  # the step would do nothing: it looks again when its wait ends
        parts = deps.provider_parts.parts(batch_id) if batch.stopping else []
        return Next.PROVIDER if any(not p.ended and not p.stop_seen for p in parts) else None

    return lifecycle.keep_token(deps, batch_id, token, due)


def _window_closes_in(batch: BatchRecord, now: float) -> int | None:
    if batch.expires_at is None or batch.expiring or batch.window_closed(now):
        return None
    return max(1, math.ceil(batch.expires_at - now))


def _plan(deps: Deps, batch: BatchRecord) -> list[Part] | dict[str, Any]:
    """The batch's parts, in one pass over its requests; or, when they could cost more at
    the batch price than its owner's quotas and budget leave, the error the batch fails with
    before any of it is sent (``budget_exceeded``: a file batch's requests are known only
    now; an inline one's create checked them already)."""
    planner = Planner(_routes(deps, batch), max_lines=deps.settings.batch_provider_max_lines)
    payer, now = Payer(batch.owner, batch.key_id), deps.clock()
    stores = (deps.accounts, deps.spend, deps.user_slots, deps.batches)
    # what is left counts the provider batches accepted besides this one (created together)
    room = room_for_provider(*stores, payer, now, besides=batch.id).room
    most = 0
    for request in deps.requests.all(batch.id):
        planner.add(request.index, request.model, len(request.request_packed or b"") or 1024)
        if room is not None and most <= room:
            most += _most_cost_of(deps, batch, request)
    if room is not None:
        # held until its lines are charged or it ends, so the next one's plan counts it
        _, short = reserve_provider(*stores, payer, batch.id, most, now) if most <= room else (False, room)
        if short is not None:
            return {"code": "budget_exceeded", "message": over_budget_message(most, short)}
    return planner.done(batch.total)


def _most_cost_of(deps: Deps, batch: BatchRecord, request: RequestRecord) -> int:
    price = price_of(batch.batch_prices, request.model)
    spec = deps.catalog.models.get(request.model)
    if price is None or spec is None:
        return 0  # run at no price of ours: nothing to reserve
    body = deps.blobs.load_body(request.request_packed, request.request_ref)
    return most_cost([(price.cost_nano, body, spec.max_output_tokens)], batch.endpoint)


def _planned_reruns(deps: Deps, batch: BatchRecord, first: int) -> bool:
    """Once every part ended: parts for the requests that failed and run again
    (``omg_retries``: they wait, due at once), unless the batch stops; whether any."""
    fresh = deps.batches.get_record(batch.id)
    if fresh is None or _stopping(fresh, deps.clock()):
        return False
    waiting = [r for r in deps.requests.unfinished(batch.id) if r.status is RequestStatus.RETRY_WAIT]
    if not waiting:
        return False
    planner = Planner(
        _routes(deps, batch), max_lines=deps.settings.batch_provider_max_lines, first=first, rerun=True
    )
    for request in sorted(waiting, key=lambda r: r.index):
        planner.add(request.index, request.model, 1024)
    deps.provider_parts.add(batch.id, planner.done(batch.total))
    logger.info(
        "provider batch runs failed requests again", extra={"batch_id": batch.id, "requests": len(waiting)}
    )
    return True


def _routes(deps: Deps, batch: BatchRecord) -> dict[str, tuple[str, str]]:
    routes: dict[str, tuple[str, str]] = {}
    for model in batch.models:
        spec = deps.catalog.models[model]
        # An allowed route, else the forbidden one: its parts take nothing (``_forbidden``).
        route = spec.provider_batch_route(
            batch.endpoint, deps.live.forbidden_routes(model)
        ) or spec.provider_batch_route(batch.endpoint)
        if route is None:
            raise ValueError(f"{batch.id}: model {model!r} has no provider batch route any more")
        routes[model] = (route.id, route.protocol)
    return routes


def _service(deps: Deps, batch: BatchRecord, part: Part) -> BatchService:
    service = _service_of(deps, part, batch.anthropic_version)
    if service is None:
        raise ValueError(f"{batch.id}: route {part.route!r} of {part.model!r} is no longer configured")
    return service


def _service_of(deps: Deps, part: Part, anthropic_version: str | None) -> BatchService | None:
    """The batch service of ``part``'s route (None: its model or route left the config)."""
    spec = deps.catalog.models.get(part.model)
    route = None if spec is None else next((r for r in spec.routes if r.id == part.route), None)
    if route is None:
        return None
    return BatchService(
        route,
        secret_ttl=deps.settings.batch_upstream_secret_ttl_seconds,
        anthropic_version=anthropic_version,
    )


def _stopping(batch: BatchRecord, now: float) -> bool:
    return batch.stopping or batch.window_closed(now)


def _move(deps: Deps, batch: BatchRecord, part: Part, held: Standing | None) -> int | dict[str, Any] | None:
    """Move ``part`` on: seconds until it is looked at again, the route of a batch that runs
    on the gateway after all, or None when it ended. A planned part is held (not submitted)
    while its owner's account pauses the batch (``held``)."""
    now = deps.clock()
    if part.status is PartStatus.PLANNED:
        if _stopping(batch, now):
            _save(deps, batch, part.replace(status=PartStatus.SKIPPED))  # the stop's sweep ends its requests
            return None
        if part.route in deps.live.forbidden_routes(part.model):
            return _forbidden(deps, batch, part)
        if held is not None:
            return max(1, math.ceil((held.check_at or now) - now))
        if part.retry_at is not None and part.retry_at > now:
            return int(part.retry_at - now) + 1
        return _submit(deps, batch, part)
    try:
        if part.status is PartStatus.SUBMITTING:
            return _recover(deps, batch, part)
        return _poll(deps, batch, part)
    except Gone:
        return _lost(deps, batch, part)
    except httpx.HTTPError as exc:
        # The provider could not be reached, or answered an error: looked at again later
        # (the window's end stops it in the end), never failing the batch for a blip.
        logger.warning(
            "provider batch service unreachable",
            extra={"batch_id": batch.id, "part": part.n, "error": type(exc).__name__},
        )
        if _stopping(batch, now) and not part.stop_seen:
            _save(deps, batch, part.replace(stop_seen=True))  # the stop is tried again at the next poll
        return part.next_poll_seconds(deps.settings.batch_provider_poll_max_seconds)


def _submit(deps: Deps, batch: BatchRecord, part: Part) -> int | dict[str, Any] | None:
    ref = uuid.uuid4().hex
    marked = _save(
        deps,
        batch,
        part.replace(status=PartStatus.SUBMITTING, ref=ref, error=None, submit_sent_at=deps.clock()),
    )
    if marked is None:
        return 0  # another step moved it: look again
    service = _service(deps, batch, marked)
    try:
        submitted = service.submit(list(_lines(deps, batch, marked)), endpoint=batch.endpoint, ref=ref)
    except Refused as refused:
        return _refused(deps, batch, marked, refused)
    except httpx.HTTPError:
        # Sent, perhaps: the next step looks for it by its mark before sending it again.
        logger.warning("provider batch submit unanswered", extra={"batch_id": batch.id, "part": part.n})
        return 1
    metrics.count("ProviderBatchesSubmitted", model=part.model)
    logger.info(
        "provider batch submitted",
        extra={"batch_id": batch.id, "part": part.n, "lines": part.lines, "model": part.model},
    )
    return _submitted(deps, batch, marked, submitted)


def _submitted(deps: Deps, batch: BatchRecord, part: Part, submitted: Submitted) -> int:
    """Record the provider batch ``part`` is (its first poll a second later): first as
    ours (``ProviderParts.own``: what a part's step that died before it recorded the batch
    finds it again by, where the provider keeps no mark), then in the part."""
    # As long as the batch could be looked for: its provider's window, then our retention.
    keep_until = deps.clock() + PROVIDER_WINDOW_SECONDS + deps.settings.retention_seconds
    deps.provider_parts.own(submitted.batch_id, batch.id, part, keep_until=keep_until)
    _save(
        deps,
        batch,
        part.replace(
            status=PartStatus.SUBMITTED,
            provider_batch_id=submitted.batch_id,
            provider_file_id=submitted.file_id,
            submitted_at=deps.clock(),
            polls=0,
        ),
    )
    return 1


def _lines(deps: Deps, batch: BatchRecord, part: Part) -> Iterator[tuple[str, dict[str, Any]]]:
    """The part's requests as the provider takes them: its own id for each, and the body
    with the provider's name of the model."""
    spec = deps.catalog.models[part.model]
    route = next(r for r in spec.routes if r.id == part.route)
    upstream = spec.upstream_model_on(route)
    for request in _requests(deps, batch, part):
        body = deps.blobs.load_body(request.request_packed, request.request_ref)
        yield line_id(request.index), {**body, "model": upstream}


def _requests(deps: Deps, batch: BatchRecord, part: Part) -> Iterator[RequestRecord]:
    after = part.start - 1
    while after < part.end - 1:
        page, more = deps.requests.page(batch.id, after_index=after, limit=500)
        for request in page:
            if request.index >= part.end:
                return
            if part.rerun and request.status not in (RequestStatus.RETRY_WAIT, RequestStatus.RUNNING):
                continue  # not one of those it runs again
            if request.model == part.model:
                yield request
        if not more or not page:
            return
        after = page[-1].index


def _refused(deps: Deps, batch: BatchRecord, part: Part, refused: Refused) -> int | dict[str, Any] | None:
    """A submit the provider refused: tried again later (queue full, rate limited), or,
    for an ``auto`` batch the provider took nothing of, run on the gateway instead; a
    submit it rejects fails the part's requests."""
    message = clean_message(scrub_ids(refused.message, (part.provider_batch_id, part.provider_file_id)))
    logger.warning(
        "provider refused a batch",
        extra={"batch_id": batch.id, "part": part.n, "code": refused.code, "reason": message},
    )
    if refused.later:
        others = [p for p in deps.provider_parts.parts(batch.id) if p.n != part.n]
        untouched = all(p.status in (PartStatus.PLANNED, PartStatus.SKIPPED) for p in others)
        if batch.mode_requested == Mode.AUTO.value and untouched:
            for other in [part, *others]:
                if not other.ended:
                    _save(deps, batch, other.replace(status=PartStatus.SKIPPED))
            return lifecycle.run_on_gateway(deps, batch.id, reason=ModeReason.SUBMIT_FAILED.value)
        wait = refused.retry_after or SUBMIT_RETRY_SECONDS
        error = {"code": _STATUS_CODES[refused.code], "message": message}
        _save(deps, batch, part.replace(status=PartStatus.PLANNED, retry_at=deps.clock() + wait, error=error))
        return int(wait)
    error = {"code": "provider_rejected", "message": f"the provider's batch service refused it: {message}"}
    _end_left(deps, batch, part, End(RequestStatus.FAILED, Tally(failed=1), error={**error, "status": None}))
    _save(deps, batch, part.replace(status=PartStatus.COLLECTED, error=error))
    return None


def _run_here(deps: Deps, batch: BatchRecord, part: Part, reason: ModeReason) -> dict[str, Any] | None:
    """Run on the gateway what is left of an ``auto`` batch whose ``part`` cannot go on at
    the provider, when none of its other parts runs there now (none could be run twice): its
    parts not submitted are skipped, and its chains run every request not ended yet. None:
    it is not an ``auto`` batch, or another part runs at the provider."""
    if batch.mode_requested != Mode.AUTO.value:
        return None
    others = [p for p in deps.provider_parts.parts(batch.id) if p.n != part.n]
    if any(p.live for p in others):
        return None
    for other in [part, *others]:
        if not other.ended:
            _save(deps, batch, other.replace(status=PartStatus.SKIPPED))
    return lifecycle.run_on_gateway(deps, batch.id, reason=reason.value)


def _forbidden(deps: Deps, batch: BatchRecord, part: Part) -> dict[str, Any] | None:
    """A planned part whose route an administrator forbade batch work on since the batch was
    created: nothing of it is sent there. An ``auto`` batch runs here instead (``_run_here``);
    else the part's requests fail ``batch_route_unavailable``, as a gateway-run batch's queued
    request of a model that lost its last batch route fails when its turn comes."""
    logger.warning(
        "provider batch route forbidden",
        extra={"batch_id": batch.id, "part": part.n, "model": part.model, "route": part.route},
    )
    here = _run_here(deps, batch, part, ModeReason.ROUTE_FORBIDDEN)
    if here is not None:
        return here
    message = (
        f"An administrator forbade batch work on route '{part.route}' of '{part.model}' before this "
        "request was sent to its provider's batch service; it was not run."
    )
    error = {"code": "batch_route_unavailable", "message": message}
    _end_left(deps, batch, part, End(RequestStatus.FAILED, Tally(failed=1), error={**error, "status": None}))
    _save(deps, batch, part.replace(status=PartStatus.COLLECTED, error=error))
    return None


def _lost(deps: Deps, batch: BatchRecord, part: Part) -> int | dict[str, Any] | None:
    """The provider no longer knows the part's batch (404 on it or on its results): lost on
    its side, or forgotten (the local stack's simulator restarted). Nothing more will come
    of it: it is told to cancel all the same (should it come back, it stops there), the part
    ends (``lost``, tried for its files at each step like a collected one), and its requests
    not recorded end now: as the batch's stop ends them (a cancel reaches ``cancelled``), run
    on the gateway for an ``auto`` batch (``_run_here``), or else failed
    ``provider_batch_lost``."""
    part = deps.provider_parts.part(batch.id, part.n) or part  # a collect that died saved it since
    assert part.provider_batch_id is not None
    metrics.count("ProviderBatchesLost", model=part.model)
    logger.warning(
        "provider batch lost",
        extra={"batch_id": batch.id, "part": part.n, "provider_batch_id": part.provider_batch_id},
    )
    with contextlib.suppress(httpx.HTTPError):
        _service(deps, batch, part).cancel(part.provider_batch_id)
    message = (
        "The provider's batch service no longer knows the batch this request was sent in (it lost "
        "it), so its answer cannot be read; it was not recorded as run."
    )
    error = {"code": "provider_batch_lost", "message": message}
    lost = _save(deps, batch, part.replace(status=PartStatus.LOST, error=error))
    if lost is None:
        return 0  # another step moved it: look again
    _discard(deps, batch, lost)  # what may be left of it there (an input file)
    fresh = deps.batches.get_record(batch.id) or batch
    if _stopping(fresh, deps.clock()):
        return None  # its Cancel or Expire step ends what is left, as for any stop
    here = _run_here(deps, fresh, lost, ModeReason.PROVIDER_LOST)
    if here is not None:
        return here
    _end_left(deps, fresh, lost, End(RequestStatus.FAILED, Tally(failed=1), error={**error, "status": None}))
    return None


def provider_purge(deps: Deps, batch_id: str) -> dict[str, Any]:
    """The batch's purge (``lifecycle.purge``), once what its parts left at the provider is
    deleted there as far as the provider can be reached now: a provider batch that may still
    run there (a delete after its workflow failed, which no longer marks it running) is
    cancelled, and the files or message batch of one that ended are deleted. What cannot be
    deleted now is counted (``ProviderCleanupFailed``) and logged with the provider's ids, for
    the operator: the gateway's own records are purged all the same."""
    batch = deps.batches.get_record(batch_id)
    version = None if batch is None else batch.anthropic_version
    for part in deps.provider_parts.parts(batch_id):
        if part.provider_batch_id is None or part.cleaned or part.status is PartStatus.SKIPPED:
            continue
        service = _service_of(deps, part, version)
        try:
            if service is None:
                raise httpx.HTTPError("its route is no longer configured")
            if part.live:
                service.cancel(part.provider_batch_id)
            service.discard(part.provider_batch_id, part.provider_file_id)
        except httpx.HTTPError as exc:
            metrics.count("ProviderCleanupFailed", model=part.model)
            logger.error(
                "provider batch left at the provider by a purge",
                extra={
                    "batch_id": batch_id,
                    "part": part.n,
                    "provider_batch_id": part.provider_batch_id,
                    "provider_file_id": part.provider_file_id,
                    "error": str(exc),
                },
            )
    return lifecycle.purge(deps, batch_id)


def _recover(deps: Deps, batch: BatchRecord, part: Part) -> int | None:
    """A part whose submit was sent and whose answer was lost (with the step that sent it,
    or on the way): the provider batch it made, found by its mark (OpenAI's metadata), or
    by the note that it is ours (``ProviderParts.own``) among those made since; else a new
    submit. Where the provider keeps no mark (Anthropic), a batch the lost submit made may
    run unclaimed: the part notes when, and cancels it once no step can still claim it
    (``_cancel_orphans``)."""
    service = _service(deps, batch, part)
    if service.finds_by_mark:
        found = service.find(part.ref) if part.ref else None
    else:
        found = _found_by_note(deps, service, part)
    if found is not None:
        return _submitted(deps, batch, part, found)
    again = part.replace(status=PartStatus.PLANNED, ref=None)
    if not service.finds_by_mark:
        again = again.suspecting(part.submit_sent_at or deps.clock(), deps.clock())
    _save(deps, batch, again)
    return 0


def _found_by_note(deps: Deps, service: BatchService, part: Part) -> Submitted | None:
    if not part.ref:
        return None
    since = (part.submit_sent_at or deps.clock()) - ORPHAN_SKEW_SECONDS
    for listed in service.made_since(since):
        owner = deps.provider_parts.owner(listed.batch_id)
        if owner is not None and owner.get("ref") == part.ref:
            return Submitted(listed.batch_id)
    return None


def _orphan_grace(deps: Deps) -> float:
    """How long after a lost submit a step could still record the batch it made: one step's
    longest run (the lifecycle function's timeout)."""
    return deps.settings.batch_worker_timeout_seconds


def _cancel_orphans(deps: Deps, batch: BatchRecord, part: Part) -> Part:
    """Cancel the provider batches a lost submit of ``part`` may have made: of those created
    in its suspect window with as many lines as the part, any no part notes as its own
    (every step that got an answer noted it, within one step's run). The route's key must be
    this deployment's alone: a batch someone else made with it then would look lost too."""
    assert part.suspect_from is not None and part.suspect_to is not None
    service = _service(deps, batch, part)
    try:
        made = service.made_since(part.suspect_from)
    except httpx.HTTPError:
        logger.warning("provider batch list unreachable", extra={"batch_id": batch.id, "part": part.n})
        return part
    for listed in made:
        if listed.ended or listed.lines != part.lines or listed.created_at > part.suspect_to:
            continue
        if deps.provider_parts.owner(listed.batch_id) is not None:
            continue
        try:
            service.cancel(listed.batch_id)
        except httpx.HTTPError:
            logger.warning("lost provider batch not cancelled", extra={"batch_id": batch.id, "part": part.n})
            return part  # looked for again at the next step
        metrics.count("ProviderOrphansCancelled", model=part.model)
        logger.warning(
            "lost provider batch cancelled",
            extra={"batch_id": batch.id, "part": part.n, "provider_batch_id": listed.batch_id},
        )
    return _save(deps, batch, part.replace(suspect_from=None, suspect_to=None)) or part


def _poll(deps: Deps, batch: BatchRecord, part: Part) -> int | None:
    assert part.provider_batch_id is not None
    service = _service(deps, batch, part)
    polled = service.poll(part.provider_batch_id)
    stopping = _stopping(batch, deps.clock())
    if not polled.ended:
        cancelled = stopping and polled.status not in ("cancelling", "canceling")
        if cancelled:
            service.cancel(part.provider_batch_id)  # what it finished stays: collected when it ends
        # After its cancel it is polled again from 1 s on: a provider often ends it soon.
        waited = part.replace(polls=0) if cancelled else part
        saved = _save(
            deps,
            batch,
            part.replace(
                polls=waited.polls + 1, provider_status=polled.status, stop_seen=part.stop_seen or stopping
            ),
        )
        return waited.next_poll_seconds(deps.settings.batch_provider_poll_max_seconds) if saved else 0
    until = deps.clock() + deps.settings.batch_worker_timeout_seconds / 2
    part, done = asyncio.run(_collect(deps, batch, part, service, polled, until))
    if not done:
        return 0  # on from the lines it recorded, in the next step (this one may not outlive it)
    collected = _save(deps, batch, part.replace(status=PartStatus.COLLECTED, provider_status=polled.status))
    logger.info(
        "provider batch collected",
        extra={"batch_id": batch.id, "part": part.n, "provider_status": polled.status},
    )
    if collected is not None:
        _discard(deps, batch, collected)
    return None


async def _collect(
    deps: Deps, batch: BatchRecord, part: Part, service: BatchService, polled: Polled, until: float
) -> tuple[Part, bool]:
    """End the part's requests with its lines as they are read, a chunk at a time, the part
    saying after each how many lines are recorded (``Part.collected``: a step that dies, or
    that stops at ``until``, goes on from there, calling nothing for the lines before); then
    a request with no line ends as the provider left it (failed with it, expired by it, or
    as the batch's stop ends it). The part after, and whether all of it was collected."""
    assert part.provider_batch_id is not None
    ids = (part.provider_batch_id, part.provider_file_id, polled.output_file_id, polled.error_file_id)
    price = price_of(batch.batch_prices, part.model)
    seen: set[int] = set()
    chunk: list[LineResult] = []
    number = 0

    async def record() -> Part:
        await asyncio.gather(*(_record(deps, batch, part, one, ids, price) for one in chunk))
        chunk.clear()
        return _save(deps, batch, part.replace(collected=number)) or part

    for line in service.results(part.provider_batch_id, polled):
        if not part.start <= line.index < part.end or line.unrun is not None:
            continue
        number += 1
        seen.add(line.index)
        if number <= part.collected:
            continue  # recorded by an earlier step
        chunk.append(line)
        if len(chunk) == COLLECT_CHUNK:
            part = await record()
            if deps.clock() >= until:
                return part, False
    if chunk:
        part = await record()
    end = _left_end(deps, batch, polled, ids)
    if isinstance(end, Verdict):
        # The batch stops: its Cancel or Expire step ends what is left in one sweep (as it
        # ends a gateway-run batch's unstarted requests), not one request at a time here.
        return part, True
    for request in _requests(deps, batch, part):
        if request.index not in seen and not request.status.is_terminal:
            await _end_one(deps, batch, request, end)
    return part, True


def _discard(deps: Deps, batch: BatchRecord, part: Part) -> None:
    """Delete what the collected part's provider batch left at the provider (its files,
    or the message batch with its results): our records hold every line now, and the
    provider need not keep the batch's requests and answers for its own retention. Tried at
    each step until it is done; a provider that cannot be reached by the batch's last step
    leaves them (``ProviderCleanupFailed``; the purge asks once more, ``provider_purge``)."""
    assert part.provider_batch_id is not None
    try:
        _service(deps, batch, part).discard(part.provider_batch_id, part.provider_file_id)
    except httpx.HTTPError as exc:
        metrics.count("ProviderCleanupFailed", model=part.model)
        logger.warning(
            "provider batch not deleted",
            extra={"batch_id": batch.id, "part": part.n, "error": type(exc).__name__},
        )
        return
    _save(deps, batch, part.replace(cleaned=True))


async def _record(
    deps: Deps,
    batch: BatchRecord,
    part: Part,
    line: LineResult,
    ids: tuple[str | None, ...],
    price: Price | None,
) -> None:
    held = await _claim(deps, batch, line.index)
    if held is None or held.model != part.model:
        return
    outcome = classify(batch.endpoint, line.status, line.content, {}, route=part.route)
    if outcome.kind != "success":
        # Not tried again here: a line the provider failed fails, or runs again in the next
        # provider batch (``omg_retries``).
        outcome = _scrubbed(outcome.replace(kind="failed"), ids)
    await attempt.settle(
        deps,
        batch,
        held,
        outcome.replace(request_id=None if outcome.request_id in ids else outcome.request_id),
        started=part.submitted_at or deps.clock(),
        batch_price=price,
    )


def _scrubbed(outcome: Outcome, ids: tuple[str | None, ...]) -> Outcome:
    if outcome.error is None:
        return outcome
    message = scrub_ids(str(outcome.error.get("message", "")), ids)
    return outcome.replace(error={**outcome.error, "message": message})


def _left_end(deps: Deps, batch: BatchRecord, polled: Polled, ids: tuple[str | None, ...]) -> End | Verdict:
    """How a request the provider batch left without an answer ends: with the provider's
    failure of the whole batch, as the batch's stop ends it (a verdict), or expired by the
    provider."""
    if polled.status == "failed":
        message = scrub_ids(str((polled.error or {}).get("message") or "no reason given"), ids)
        error = {
            "code": "provider_batch_failed",
            "message": clean_message(f"the provider's batch service failed the batch: {message}"),
            "status": None,
        }
        return End(RequestStatus.FAILED, Tally(failed=1), error=error)
    fresh = deps.batches.get_record(batch.id) or batch
    if fresh.status is BatchStatus.CANCELLING:
        return Verdict.CANCELLED
    if fresh.owner_failed:
        return Verdict.OWNER_FAILED
    if fresh.window_closed(deps.clock()) or fresh.expiring:
        return Verdict.EXPIRED
    error = {
        "code": "provider_expired",
        "message": "the provider's batch service did not run the request before its own window closed",
        "status": None,
    }
    return End(RequestStatus.EXPIRED, Tally(failed=1, expired=1), error=error)


def _end_left(deps: Deps, batch: BatchRecord, part: Part, end: End) -> None:
    async def end_all() -> None:
        for request in _requests(deps, batch, part):
            if not request.status.is_terminal:
                await _end_one(deps, batch, request, end)

    asyncio.run(end_all())


async def _end_one(deps: Deps, batch: BatchRecord, request: RequestRecord, end: End | Verdict) -> None:
    held = await _claim(deps, batch, request.index)
    if held is None:
        return
    decision = not_run(end, held, deps.settings) if isinstance(end, Verdict) else end
    await attempt.end(deps, batch, held, decision)


async def _claim(deps: Deps, batch: BatchRecord, index: int) -> RequestRecord | None:
    """The request, held by this batch's provider step (a step that died after claiming it
    holds it still: the same owner claims it again); None when it has ended."""
    claim = await asyncio.to_thread(
        deps.requests.claim,
        batch.id,
        index,
        f"provider:{batch.id}",
        deps.clock(),
        deps.settings.batch_lease_seconds,
    )
    if claim.kind is ClaimKind.CLAIMED:
        return claim.request
    if claim.kind in (ClaimKind.ENDED, ClaimKind.MISSING):
        return None
    raise RuntimeError(f"{batch.id}/{index} is held elsewhere ({claim.kind}): the step is tried again")


def _finish(deps: Deps, batch_id: str) -> dict[str, Any]:
    """Every part ended: the batch routes as a gateway-run one whose chains are done."""
    _note_live(deps, batch_id, 0)
    batch = deps.batches.get_record(batch_id)
    if batch is None:
        return step(Next.FINALIZE)
    if batch.status is BatchStatus.CANCELLING or batch.owner_failed:
        if batch.cancel_swept:  # swept before the parts ended: the Cancel step will not again
            lifecycle.sweep_stopped(deps, batch)
        return step(Next.CANCEL)
    if batch.window_closed(deps.clock()) and not batch.expiring:
        return step(Next.EXPIRE)
    if batch.expiring:
        lifecycle.sweep_stopped(deps, batch)
    return step(Next.FINALIZE)


def _save(deps: Deps, batch: BatchRecord, part: Part) -> Part | None:
    saved = deps.provider_parts.save(batch.id, part)
    if saved is None:
        logger.warning("provider part changed meanwhile", extra={"batch_id": batch.id, "part": part.n})
    return saved
