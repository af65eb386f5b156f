"""What keeps a running chain's holds alive while its call runs: the run's mark on its batch,
the request's lease (and the lease of the request claimed ahead), the model's slot. Each
renewal runs in the renewal lane (``run.aio.renewal``), never behind the work."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

from batchgw.deps import Deps
from batchgw.domain.request import RequestRecord
from batchgw.observability import logger
from batchgw.run.aio import renewal
from batchgw.run.slot import SlotHolder


async def mark(deps: Deps, batch_id: str, token: str) -> bool:
    """Mark the batch as run by this run for one lease (``BatchStore.mark_run``)."""
    until = deps.clock() + deps.settings.batch_lease_seconds
    await renewal(deps.batches.mark_run, batch_id, token, until=until)
    return True


async def keep_marked(deps: Deps, batch_id: str, token: str) -> None:
    """Renew the run's mark every third of a lease until cancelled."""
    while True:  # a failed renewal is tried again next time: the mark lasts a whole lease
        await asyncio.sleep(deps.settings.batch_lease_seconds / 3)
        await renewed("the run's mark", mark(deps, batch_id, token))


async def keep_leased(
    deps: Deps,
    batch_id: str,
    held: RequestRecord,
    slot: SlotHolder,
    claimed_ahead: Callable[[], RequestRecord | None],
    slot_lost: asyncio.Event,
) -> None:
    """Renew the request's lease and the model's slot while the call runs: a lease of a
    few minutes covers a call of any length, and a dead worker's request and slot come
    back a few minutes later (the owner's slot was taken to outlast the call).

    A request taken over meanwhile is left to its call (recording its end finds the
    lease lost, as the other worker counts this attempt); a slot lost to another holder
    sets ``slot_lost``, which stops the call (the attempt counted, of unknown cost, and
    tried again), since running on would exceed the model's cap.
    """
    lease = deps.settings.batch_lease_seconds
    leased = True
    while True:
        await asyncio.sleep(lease / 3)
        if leased:
            leased = await renewed("a request's lease", _renew_request(deps, held, lease))
        ahead = claimed_ahead()
        if ahead is not None:
            await renewed("the lease of the request claimed ahead", _renew_request(deps, ahead, lease))
        if not await renewed("the model's slot", slot.keep()):
            logger.warning(
                "slot lost during a call: stopping it",
                extra={"batch_id": batch_id, "index": held.index, "model": held.model},
            )
            slot_lost.set()
            return


async def _renew_request(deps: Deps, held: RequestRecord, lease: float) -> bool:
    return await renewal(deps.requests.renew, held, until=deps.clock() + lease)


async def renewed(what: str, renewing: Coroutine[Any, Any, bool]) -> bool:
    """Whether a renewal kept what it renews; a renewal that failed may be retried on
    the next tick (the lease may still be long enough): it counts as kept."""
    try:
        return await renewing
    except Exception:
        logger.warning("could not renew during a call", extra={"renewing": what}, exc_info=True)
        return True
