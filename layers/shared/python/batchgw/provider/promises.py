"""What a provider-run batch keeps of a gateway-run batch's promises: each step checks its
key and owner again as a chain does before each request (``domain.spend.owner_standing``),
so a key revoked or an owner suspended or deleted fails it (what the provider has is
cancelled there, nothing more is submitted) and a role below BATCH_MIN_ROLE pauses it
(nothing more is submitted); a route an administrator forbade takes nothing more
(``forbidden``); with BATCH_ENABLED off the step sends nothing to any provider and moves
nothing on (``idle``); a provider batch the provider no longer knows ends the part
(``lost``); and while a provider batch may run at the provider, the batch carries a run mark
(``LIVE_MARK``, ``note_live``), so a delete waits for its cancel as it waits for a
gateway-run batch's running requests.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
from typing import Any

import httpx

from batchgw.deps import Deps
from batchgw.domain.batch import BatchRecord, Tally
from batchgw.domain.decisions import End
from batchgw.domain.modes import Mode, ModeReason
from batchgw.domain.provider import Part, PartStatus
from batchgw.domain.spend import Judgement, Standing, owner_standing
from batchgw.domain.states import RequestStatus
from batchgw.observability import logger, metrics
from batchgw.provider.cleanup import discard
from batchgw.provider.collecting import end_left
from batchgw.provider.parts import is_stopping, save_part, service_for
from batchgw.run import lifecycle
from batchgw.run.owner import account_of, key_of
from batchgw.storage.workflow import Next, step

# The batch's run mark while a provider batch of it may run at the provider (``note_live``).
LIVE_MARK = "provider"


def check_owner(deps: Deps, batch: BatchRecord) -> tuple[BatchRecord, Standing | None]:
    """Check the batch's key and owner again, as a chain does before each request (the
    account read as ``run.owner`` reads it, judged by ``domain.spend.owner_standing``): a key
    revoked or expired, or an owner suspended or deleted, fails the batch
    (``owner_unauthorized``: it stops, so this step cancels what the provider has and submits
    nothing more); a role below BATCH_MIN_ROLE pauses it, as it pauses a gateway-run batch
    (nothing more is submitted; what the provider has runs on and is collected) until it is
    raised. The batch after, and the pause that holds its planned parts (None: none). A batch
    that stops already (cancel, window, failure) is not checked."""
    if is_stopping(batch, deps.clock()):
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


def idle(deps: Deps, batch: BatchRecord) -> dict[str, Any]:
    """BATCH_ENABLED is off: send nothing to any provider and move nothing on (no part is
    submitted, polled, cancelled or collected; no cancel, window's end or owner's failure is
    acted on: each needs the provider, or would end requests the provider may have run and
    billed), as a disabled worker stops claiming and sweeping; look again when a gateway
    chain would (what the provider already has runs on there, within its own window). The
    batch's run mark is kept while a provider batch of it may run (a delete still waits)."""
    settings = deps.settings
    wait = max(1, math.ceil(max(settings.runtime_refresh_seconds, settings.batch_slot_wait_seconds)))
    note_live(deps, batch.id, wait)
    logger.info("provider step idle: batch inference is disabled", extra={"batch_id": batch.id})
    return step(Next.PROVIDER, wait)


def note_live(deps: Deps, batch_id: str, wait: float) -> None:
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


def forbidden(deps: Deps, batch: BatchRecord, part: Part) -> dict[str, Any] | None:
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
    end_left(deps, batch, part, End(RequestStatus.FAILED, Tally(failed=1), error={**error, "status": None}))
    save_part(deps, batch, part.replace(status=PartStatus.COLLECTED, error=error))
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
            save_part(deps, batch, other.replace(status=PartStatus.SKIPPED))
    return lifecycle.run_on_gateway(deps, batch.id, reason=reason.value)


def lost(deps: Deps, batch: BatchRecord, part: Part) -> int | dict[str, Any] | None:
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
        service_for(deps, batch, part).cancel(part.provider_batch_id)
    message = (
        "The provider's batch service no longer knows the batch this request was sent in (it lost "
        "it), so its answer cannot be read; it was not recorded as run."
    )
    error = {"code": "provider_batch_lost", "message": message}
    lost = save_part(deps, batch, part.replace(status=PartStatus.LOST, error=error))
    if lost is None:
        return 0  # another step moved it: look again
    discard(deps, batch, lost)  # what may be left of it there (an input file)
    fresh = deps.batches.get_record(batch.id) or batch
    if is_stopping(fresh, deps.clock()):
        return None  # its Cancel or Expire step ends what is left, as for any stop
    here = _run_here(deps, fresh, lost, ModeReason.PROVIDER_LOST)
    if here is not None:
        return here
    end_left(deps, fresh, lost, End(RequestStatus.FAILED, Tally(failed=1), error={**error, "status": None}))
    return None
