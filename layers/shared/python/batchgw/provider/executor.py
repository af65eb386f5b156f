"""The provider step: a batch run on its provider's batch service, moved on by one step of
its workflow each time (``Next.PROVIDER``), until it routes to cancel, expire or finalize
like a batch the gateway ran.

Each step plans the batch's parts once (``planning``), then moves every part on: submits a
planned part, finds again a part whose submit answer was lost (``submitting``), polls a
submitted one (cancelling it at the provider when the batch stops), and collects one that
ended (``collecting``): each of its lines ends one of our requests, at the batch price fixed
when the batch was created, in the same write that records it (``run.attempt``). A step that
dies anywhere is run again by the workflow: a part's every change is a conditional write on
the part as read, a request already ended is skipped, and a submit whose answer was lost is
looked up by its mark before it is sent again (OpenAI; Anthropic keeps no mark, see
``submitting.recover``).

Neither our ids nor the user's custom_ids reach the provider (``domain.provider.line_id``),
and the provider's ids stay in the part: every message from it is scrubbed of them.

A provider-run batch keeps a gateway-run batch's promises (``promises``): its key and owner
checked again at each step, a forbidden route, BATCH_ENABLED off, a provider batch the
provider lost, and the run mark a delete waits for; the purge deletes what is left at the
provider (``cleanup.provider_purge``).
"""

from __future__ import annotations

import math
from typing import Any

import httpx

from batchgw.deps import Deps
from batchgw.domain.batch import BatchRecord
from batchgw.domain.provider import Part, PartStatus
from batchgw.domain.spend import Standing
from batchgw.domain.states import BatchStatus
from batchgw.observability import logger
from batchgw.provider.cleanup import discard
from batchgw.provider.collecting import poll
from batchgw.provider.parts import is_stopping, save_part
from batchgw.provider.planning import plan, planned_reruns
from batchgw.provider.promises import LIVE_MARK, check_owner, forbidden, idle, lost, note_live
from batchgw.provider.services import Gone
from batchgw.provider.submitting import cancel_orphans, orphan_grace, recover, submit
from batchgw.run import attempt, lifecycle
from batchgw.storage.workflow import Next, step


def provider_step(deps: Deps, batch_id: str) -> dict[str, Any]:
    """Move the provider-run batch on; where its workflow goes next. The request counts its
    lines noted (``storage.reqlog``) are written before the step answers, as a chain writes
    its own when it stops."""
    try:
        return _step(deps, batch_id)
    finally:
        attempt.flush_noted(deps)


def _step(deps: Deps, batch_id: str) -> dict[str, Any]:
    batch = deps.batches.get_record(batch_id)
    if batch is None or batch.status.is_final or batch.status is BatchStatus.FINALIZING:
        return step(Next.FINALIZE)
    if not batch.on_provider:
        return lifecycle.park_step(deps, batch)  # it runs on the gateway's chains now
    if not deps.settings.batch_enabled:
        return idle(deps, batch)
    batch, held = check_owner(deps, batch)
    parts = deps.provider_parts.parts(batch_id)
    if not parts and is_stopping(batch, deps.clock()):
        return _finish(deps, batch_id)  # stopped before anything was planned: nothing was sent
    if not parts:
        planned = plan(deps, batch)
        if isinstance(planned, dict):
            deps.batches.fail_for_owner(batch_id, planned)
            return step(Next.CANCEL)  # its requests end batch_failed; nothing was sent
        deps.provider_parts.plan(batch_id, planned)
        parts = deps.provider_parts.parts(batch_id)
    if any(not part.ended and not part.live for part in parts):
        # A part may be sent now: the mark a delete waits for is written first, so a delete
        # that comes once the provider has it finds the mark (``note_live`` keeps or drops it).
        until = deps.clock() + deps.settings.batch_worker_timeout_seconds
        deps.batches.mark_run(batch_id, LIVE_MARK, until=until)
    waits: list[int] = []
    for part in parts:
        orphans_in = part.orphans_due_in(deps.clock(), orphan_grace(deps))
        if orphans_in == 0:
            part = cancel_orphans(deps, batch, part)
        elif orphans_in is not None:
            waits.append(int(orphans_in) + 1)
        if part.ended:
            if part.left_at_provider:
                discard(deps, batch, part)
            continue
        moved = _move(deps, batch, part, held)
        if isinstance(moved, dict):
            note_live(deps, batch_id, 0)
            return moved  # the batch runs on the gateway after all
        if moved is not None:
            waits.append(moved)
    if waits:
        closes_in = _window_closes_in(batch, deps.clock())
        if closes_in is not None:
            waits.append(closes_in)  # its stop cancels the provider batches then
        wait = max(0, min(waits))
        note_live(deps, batch_id, wait)
        return step(Next.PROVIDER, wait)
    if planned_reruns(deps, batch, len(parts)):
        return step(Next.PROVIDER)
    return _finish(deps, batch_id)


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


def _move(deps: Deps, batch: BatchRecord, part: Part, held: Standing | None) -> int | dict[str, Any] | None:
    """Move ``part`` on: seconds until it is looked at again, the route of a batch that runs
    on the gateway after all, or None when it ended. A planned part is held (not submitted)
    while its owner's account pauses the batch (``held``)."""
    now = deps.clock()
    if part.status is PartStatus.PLANNED:
        if is_stopping(batch, now):
            # the stop's sweep ends its requests
            save_part(deps, batch, part.replace(status=PartStatus.SKIPPED))
            return None
        if part.route in deps.live.forbidden_routes(part.model):
            return forbidden(deps, batch, part)
        if held is not None:
            return max(1, math.ceil((held.check_at or now) - now))
        if part.retry_at is not None and part.retry_at > now:
            return int(part.retry_at - now) + 1
        return submit(deps, batch, part)
    try:
        if part.status is PartStatus.SUBMITTING:
            return recover(deps, batch, part)
        return poll(deps, batch, part)
    except Gone:
        return lost(deps, batch, part)
    except httpx.HTTPError as exc:
        # The provider could not be reached, or answered an error: looked at again later
        # (the window's end stops it in the end), never failing the batch for a blip.
        logger.warning(
            "provider batch service unreachable",
            extra={"batch_id": batch.id, "part": part.n, "error": type(exc).__name__},
        )
        if is_stopping(batch, now) and not part.stop_seen:
            save_part(deps, batch, part.replace(stop_seen=True))  # the stop is tried again at the next poll
        return part.next_poll_seconds(deps.settings.batch_provider_poll_max_seconds)


def _window_closes_in(batch: BatchRecord, now: float) -> int | None:
    if batch.expires_at is None or batch.expiring or batch.window_closed(now):
        return None
    return max(1, math.ceil(batch.expires_at - now))


def _finish(deps: Deps, batch_id: str) -> dict[str, Any]:
    """Every part ended: the batch routes as a gateway-run one whose chains are done."""
    note_live(deps, batch_id, 0)
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
