"""Polling a submitted part (cancelling it at the provider when its batch stops) and
collecting one that ended: each of its lines ends one of our requests, at the batch price
fixed when the batch was created, in the same write that records it (``run.attempt``), the
part saying how far it got; a request the provider left without a line ends as the provider
left it. The provider's ids never reach what a request records (``domain.provider.scrub_ids``).
"""

from __future__ import annotations

import asyncio

from batchgw.config.catalog import Price, price_of
from batchgw.deps import Deps
from batchgw.domain.batch import BatchRecord, Tally
from batchgw.domain.decisions import End, Verdict, not_run
from batchgw.domain.outcome import Outcome
from batchgw.domain.provider import LineResult, Part, PartStatus, scrub_ids
from batchgw.domain.request import RequestRecord, clean_message
from batchgw.domain.states import BatchStatus, RequestStatus
from batchgw.observability import logger
from batchgw.provider.cleanup import discard
from batchgw.provider.parts import is_stopping, requests_of, save_part, service_for
from batchgw.provider.services import BatchService, Polled
from batchgw.run import attempt
from batchgw.storage.requests import ClaimKind
from batchgw.upstream.client import classify

# Lines recorded at once while a part is collected, the part saying how far it got after each.
COLLECT_CHUNK = 10


def poll(deps: Deps, batch: BatchRecord, part: Part) -> int | None:
    assert part.provider_batch_id is not None
    service = service_for(deps, batch, part)
    polled = service.poll(part.provider_batch_id)
    stopping = is_stopping(batch, deps.clock())
    if not polled.ended:
        cancelled = stopping and polled.status not in ("cancelling", "canceling")
        if cancelled:
            service.cancel(part.provider_batch_id)  # what it finished stays: collected when it ends
        # After its cancel it is polled again from 1 s on: a provider often ends it soon.
        waited = part.replace(polls=0) if cancelled else part
        saved = save_part(
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
    collected = save_part(
        deps, batch, part.replace(status=PartStatus.COLLECTED, provider_status=polled.status)
    )
    logger.info(
        "provider batch collected",
        extra={"batch_id": batch.id, "part": part.n, "provider_status": polled.status},
    )
    if collected is not None:
        discard(deps, batch, collected)
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
        return save_part(deps, batch, part.replace(collected=number)) or part

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
    for request in requests_of(deps, batch, part):
        if request.index not in seen and not request.status.is_terminal:
            await _end_one(deps, batch, request, end)
    return part, True


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
    # Answered by the route's batch service: logged as that route's call, as a call here is.
    outcome = classify(batch.endpoint, line.status, line.content, {}, route=part.route).replace(
        route=part.route
    )
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


def end_left(deps: Deps, batch: BatchRecord, part: Part, end: End) -> None:
    async def end_all() -> None:
        for request in requests_of(deps, batch, part):
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
