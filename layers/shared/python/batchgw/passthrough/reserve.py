"""An interactive request's reservation: what it may cost at most, held against its caller's
quotas and the key's budgets from before its call until its cost is charged, as a batch
request's is (``run.owner``).

Before the call, what the caller and the key were charged and what their requests still
running (interactive and batch) have reserved are read together with the version of the
caller's slot map (``storage.slots``), and judged (``domain.spend.blocked``): a used-up
quota or budget answers 429 ``<reason>_exceeded``; reservations that would reach one
answer 429 ``quota_reserved`` with ``Retry-After``. Else the request's hold is written,
conditional on that version: two requests judged against the same reservations cannot both
be let through (the later one reads again). So a burst passes a quota or budget by at most
one request's most.

The hold is released after the cost is charged (the charge first: spend plus reservations
never undercount), and expires on its own if its process dies (``until``), so nothing leaks.
A caller whom no quota or budget limits holds nothing.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from batchgw.deps import Deps
from batchgw.domain.errors import TooManyRequests
from batchgw.domain.spend import Spend, blocked, held_refusal, needs_spend, refusal
from batchgw.storage.slots import Hold, UserSlotStore
from batchgw.storage.spend import Payer

HOLD_TRIES = 24  # reads and holds while the caller's other requests keep adding theirs first
HOLD_MARGIN_SECONDS = 60.0  # a hold outlives its call by this: room to charge it before it expires
RETRY_AFTER_SECONDS = 2  # what a request refused for reservations is told to wait
_BACKOFF_SECONDS = 0.02  # the most a try waits (at random) before reading again


class QuotaReserved(TooManyRequests):
    """Requests of the caller still running may use up a quota or budget (their
    reservations): nothing was charged past it yet, so the caller may try again shortly."""

    def __init__(self, message: str) -> None:
        super().__init__(message, code="quota_reserved")

    def headers(self) -> dict[str, str]:
        return {"Retry-After": str(RETRY_AFTER_SECONDS)}


@asynccontextmanager
async def reserved(deps: Deps, payer: Payer, most: int, *, call_seconds: float) -> AsyncIterator[None]:
    """Hold ``most`` (nano-dollars) against ``payer``'s quotas and budgets while the block
    runs (raises TooManyRequests, holding nothing, when they leave no room); the block
    charges the request's cost before it ends."""
    token = await asyncio.to_thread(_hold, deps, payer, most, call_seconds)
    try:
        yield
    finally:
        if token is not None:
            await asyncio.to_thread(deps.user_slots.release_interactive, payer.user_id, token)


def _hold(deps: Deps, payer: Payer, most: int, call_seconds: float) -> str | None:
    """Judge and hold (see the module): the hold's token, or None when nothing limits the
    payer (nothing held)."""
    user, keys = deps.accounts.account(payer.user_id)
    key = next((k for k in keys if k.id == payer.key_id), None)
    if user is None or key is None or not needs_spend(user, key):
        return None
    token = UserSlotStore.new_token()
    key_id = payer.key_id or ""
    for _ in range(HOLD_TRIES):
        now = deps.clock()
        # The slot map is read before the spend (``read_with``): a request charged and released
        # in between counts twice, never not at all.
        user_spend, key_spend, found = deps.spend.read_with(payer, now, [UserSlotStore.key(payer.user_id)])
        slots = UserSlotStore.parse(found[0] if found else None)
        stop = blocked(
            user,
            key,
            Spend(user_spend.today, user_spend.month, slots.reserved(now)),
            Spend(key_spend.today, key_spend.month, slots.reserved(now, key_id=key_id)),
        )
        if stop is not None:
            if stop.by_reservations:
                raise QuotaReserved(held_refusal(stop.reason))
            raise TooManyRequests(refusal(stop.reason), code=f"{stop.reason.value}_exceeded")
        hold = Hold(until=now + call_seconds + HOLD_MARGIN_SECONDS, reserved=most, key_id=key_id)
        gone = slots.expired_interactive(now)
        if deps.user_slots.hold_interactive(payer.user_id, token, hold, version=slots.version, gone=gone):
            return token
        time.sleep(random.uniform(0, _BACKOFF_SECONDS))  # spreads the next reads of a burst apart
    raise QuotaReserved(
        "Too many of your requests are starting at once to count them against your quota; try again."
    )
