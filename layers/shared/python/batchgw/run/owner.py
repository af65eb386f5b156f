"""The owner's gate: before each request runs, the batch's key and account are checked again.

``OwnerGate.admit`` reads the owner's account (cached per process for
``BATCH_OWNER_CACHE_SECONDS``) and, when a quota or budget limits them, what they and the
key spent and reserved (one strongly consistent read), and judges (``domain.spend``):
run, wait, pause the batch, or fail it. A request let through holds one of its owner's
slots (the role's concurrency cap, across every model and process), carrying what it may
cost until its cost is charged. Without a cap and without limits, no slot is taken.

A chain keeps its slot from one request to the next (renewing it, with each request's
reservation), and lets it go when it stops.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from batchgw.deps import Deps
from batchgw.domain.accounts import KeyRecord, UserRecord
from batchgw.domain.batch import BatchRecord
from batchgw.domain.request import RequestRecord
from batchgw.domain.spend import (
    Judgement,
    Spend,
    Standing,
    judge,
    needs_spend,
    reservation_tokens,
)
from batchgw.observability import logger
from batchgw.run import charges
from batchgw.run.aio import io
from batchgw.storage.slots import Hold, UserSlots, UserSlotStore, UserTake
from batchgw.storage.spend import Payer
from batchgw.storage.workflow import Next

# A key of a batch stored without one (created before keys were recorded): always valid.
_ANY_KEY = KeyRecord(id="", user_id="", key_hash="", prefix="")
_TAKE_TRIES = 4  # reads and takes when other requests keep changing the reservations

_accounts: dict[str, tuple[float, UserRecord | None, list[KeyRecord]]] = {}
_read_under: list[int] = [0]  # the accounts version they were read under


def forget_accounts() -> None:
    """Drop what this process cached of owners' accounts (tests)."""
    _accounts.clear()


async def account_of(deps: Deps, user_id: str) -> tuple[UserRecord | None, list[KeyRecord]]:
    """The owner's account, as read at most ``BATCH_OWNER_CACHE_SECONDS`` ago."""
    now = deps.clock()
    version = deps.live.accounts_version
    if version != _read_under[0]:  # an administrator changed an account: read them afresh
        _accounts.clear()
        _read_under[0] = version
        # ...and a limit it may have set judges what this process kept of its owners' charges.
        await roll_up_kept(deps)
    cached = _accounts.get(user_id)
    if cached is None or cached[0] <= now:
        user, keys = await io(deps.accounts.account, user_id)
        cached = (now + deps.settings.batch_owner_cache_seconds, user, keys)
        _accounts[user_id] = cached
    return cached[1], cached[2]


async def roll_up_kept(deps: Deps, batch_id: str | None = None) -> None:
    """Roll up the charges this process kept (``run.charges``); what cannot be rolled up now
    is kept for the next time."""
    try:
        await io(charges.roll_up_kept, deps, batch_id)
    except Exception:
        logger.warning("kept charges not rolled up yet", exc_info=True)


def key_of(batch: BatchRecord, keys: list[KeyRecord]) -> KeyRecord | None:
    """The key that created ``batch``, of its owner's ``keys`` (None: gone; any key at all
    for a batch stored without one)."""
    return _ANY_KEY if batch.key_id is None else next((k for k in keys if k.id == batch.key_id), None)


@dataclass(frozen=True, slots=True)
class OwnerVerdict:
    """What its owner's account says of one request (``Standing``), and its body if read."""

    standing: Standing
    body: Any = None  # the request's body, when it was read to price what it may cost


class OwnerGate:
    """One chain's view of its batch's owner, and its hold on one of the owner's slots."""

    def __init__(self, deps: Deps, batch: BatchRecord) -> None:
        self._deps = deps
        self._batch = batch
        self._token = UserSlotStore.new_token()
        self._held: Hold | None = None
        self._reserve = 0  # what the request admitted last may cost at most
        self.limited = True  # a quota or budget limits the owner, as last read (so charges are not kept)
        self.weight = 1.0  # the owner's weight among tenants (``domain.contention``), as last read

    async def admit(self, held: RequestRecord) -> OwnerVerdict:
        """Whether ``held`` may run now; if so, this chain holds a slot of its owner with
        what the request may cost reserved."""
        deps, batch = self._deps, self._batch
        user, keys = await account_of(deps, batch.owner)
        if user is not None:
            self.weight = float(user.weight)
        key = key_of(batch, keys)
        limited = user is not None and key is not None and needs_spend(user, key)
        if limited and charges.kept(batch.id):
            # Newly limited: what this process kept of the batch's charges is judged too.
            await roll_up_kept(deps, batch.id)
        self.limited = limited
        # What the request may cost at most: held against the owner's quotas while it runs,
        # and charged at its end if its cost is never known (``reserved``).
        body, reserve = await self._reservation(held)
        for _ in range(_TAKE_TRIES):
            now = deps.clock()
            user_spend, key_spend, slots = Spend(), Spend(), None
            if limited:
                user_spend, key_spend, slots = await self._spent(now)
            standing = judge(
                user,
                key,
                now=now,
                min_role=deps.settings.batch_min_role,
                user_spend=user_spend,
                key_spend=key_spend,
                recheck_seconds=deps.settings.batch_quota_recheck_seconds,
                reservation_wait_seconds=deps.settings.batch_reservation_wait_seconds,
            )
            if standing.judgement is not Judgement.RUN:
                await self.release()
                return OwnerVerdict(standing, body)
            assert user is not None
            taken = await self._hold(user, reserve, now, None if slots is None else slots.version)
            if taken is UserTake.TAKEN:
                return OwnerVerdict(standing, body)
            if taken is UserTake.FULL:
                return OwnerVerdict(self._slot_wait(now), body)
        return OwnerVerdict(self._slot_wait(deps.clock()), body)

    @property
    def reserved(self) -> int:
        """What the request this chain holds a slot for may cost at most (nano-dollars)."""
        return 0 if self._held is None else self._reserve

    async def release(self) -> None:
        """Let go of the owner's slot (and the reservation it carries)."""
        if self._held is not None:
            self._held = None
            await io(self._deps.user_slots.release, self._batch.owner, self._token)

    # --- the steps ----------------------------------------------------------------------------

    async def _reservation(self, held: RequestRecord) -> tuple[Any, int]:
        """The request's body and what it may cost at most."""
        return await io(priced, self._deps, self._batch.endpoint, held)

    async def _spent(self, now: float) -> tuple[Spend, Spend, UserSlots]:
        """What the owner and the key spent and have reserved (besides this chain's own
        hold, which the request replaces), in one read."""
        deps, batch = self._deps, self._batch
        payer = Payer(batch.owner, batch.key_id)
        user_spend, key_spend, found = await io(
            deps.spend.read_with, payer, now, [UserSlotStore.key(batch.owner)]
        )
        slots = UserSlotStore.parse(found[0] if found else None)
        user_reserved = slots.reserved(now, besides=self._token)
        key_reserved = slots.reserved(now, key_id=batch.key_id or "", besides=self._token)
        return (
            Spend(user_spend.today, user_spend.month, user_reserved),
            Spend(key_spend.today, key_spend.month, key_reserved),
            slots,
        )

    async def _hold(self, user: UserRecord, reserve: int, now: float, version: int | None) -> UserTake:
        """Hold one of the owner's slots with ``reserve`` on it (renewing this chain's own
        hold when it is due, or when a quota or budget limits the owner: ``version`` is the
        slot map's as judged; without one, the reservation the hold carries is not judged by
        anyone until a limit comes, and a chain's next request under it writes it anew)."""
        deps = self._deps
        cap = deps.settings.role_concurrency(user.role)
        if cap == 0 and version is None:
            await self.release()  # neither a cap nor a limit: nothing to hold
            return UserTake.TAKEN
        # The hold outlasts the call it admits (BATCH_UPSTREAM_TIMEOUT_SECONDS bounds a call
        # whole) by half a request lease, so it never needs renewing while a call runs.
        call, lease = deps.settings.batch_upstream_timeout_seconds, deps.settings.batch_lease_seconds
        held = self._held
        covers_the_call = held is not None and held.until - now > call + lease / 2
        if version is None and held is not None and covers_the_call:
            self._reserve = reserve
            return UserTake.TAKEN
        hold = Hold(until=now + call + lease, reserved=reserve, key_id=self._batch.key_id or "")
        taken = await io(
            deps.user_slots.take, self._batch.owner, self._token, hold, cap=cap, now=now, version=version
        )
        if taken is UserTake.TAKEN:
            self._held, self._reserve = hold, reserve
        elif taken is UserTake.FULL:
            await self.release()
        return taken

    def _slot_wait(self, now: float) -> Standing:
        """The owner has as many requests running as their role allows: ask again shortly."""
        wait = self._deps.settings.batch_slot_wait_seconds * (1 + random.random())
        return Standing(Judgement.WAIT, check_at=now + wait)


def priced(deps: Deps, endpoint: str, request: RequestRecord) -> tuple[Any, int]:
    """``request``'s body (None when it cannot be read) and what it may cost at most, in
    nano-dollars (0 for a model no longer configured, or without a price): what a running
    attempt reserves, and what an attempt of unknown cost is charged."""
    spec = deps.catalog.models.get(request.model)
    try:
        body = deps.blobs.load_body(request.request_packed, request.request_ref)
    except Exception:  # its call reads it again and fails as the request's outcome
        logger.warning("could not read a request to price it", exc_info=True)
        body = None
    if spec is None or spec.price is None:
        return body, 0
    input_tokens, output_tokens = reservation_tokens(body, endpoint, model_max_output=spec.max_output_tokens)
    return body, spec.price.cost_nano(input_tokens, output_tokens)


async def pause_batch(deps: Deps, batch_id: str, standing: Standing) -> BatchRecord | None:
    """Say on the batch why its owner's account holds it back, and until when: the batch as
    changed (None when it was not)."""
    assert standing.reason is not None
    paused = {"reason": standing.reason.value, "until": standing.until, "check_at": standing.check_at}
    changed = await io(deps.batches.pause, batch_id, paused)
    logger.info("batch paused", extra={"batch_id": batch_id, **paused})
    return changed


async def resume_batch(deps: Deps, batch_id: str) -> BatchRecord | None:
    """The owner's account lets the batch run again: it is no longer paused."""
    changed = await io(deps.batches.resume, batch_id)
    logger.info("batch resumed", extra={"batch_id": batch_id})
    return changed


async def fail_for_owner(deps: Deps, batch_id: str, message: str) -> bool:
    """The batch's key or owner may no longer run it: mark it failing (no request starts;
    running ones finish) and wake its workflow to end the unstarted ones. False when the
    batch was no longer in progress (cancelled, ended or deleted meanwhile): it does not
    fail then."""
    error = {"code": "owner_unauthorized", "message": message}
    failed = await io(deps.batches.fail_for_owner, batch_id, error)
    if failed is None:
        return False
    logger.warning("batch failing for its owner", extra={"batch_id": batch_id, "reason": message})
    if failed.task_token is None or failed.cancel_swept:
        return True  # not parked yet (it finds the batch failing when it parks) or done already
    try:
        if await io(deps.workflow.wake, failed.task_token, Next.CANCEL):
            await io(deps.batches.clear_token, batch_id, failed.task_token)
    except Exception:  # the reconciler routes it within a period
        logger.warning("could not wake a failing batch's workflow", exc_info=True)
    return True
