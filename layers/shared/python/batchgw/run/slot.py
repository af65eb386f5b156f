"""The model slot a chain holds while it runs, renewed before it can lapse."""

from __future__ import annotations

import asyncio
import weakref
from collections import Counter
from collections.abc import Callable
from dataclasses import replace

from batchgw.deps import Deps
from batchgw.domain import contention
from batchgw.domain.contention import Tag
from batchgw.domain.errors import StorageError
from batchgw.domain.fairness import held_by_batch, token_of
from batchgw.domain.interactive import BatchShare
from batchgw.observability import logger, metrics
from batchgw.run.aio import io, renewal
from batchgw.scheduling.room import SlotLedger
from batchgw.scheduling.share import BatchShares
from batchgw.storage.slots import SlotGrant, SlotState, SlotStore


class SlotHolder:
    """One chain's hold on one slot of one model at a time (see ``storage.slots``), for a
    chain of ``batch_id`` (the slot's token names it: ``domain.fairness``), whose ``tag``
    (``domain.contention``: its owner, weight, priority...) says how it ranks."""

    def __init__(self, deps: Deps, batch_id: str, tag: Callable[[], Tag] | None = None) -> None:
        self._deps = deps
        self.batch_id = batch_id
        self.tag = tag or (lambda: contention.untagged(batch_id))
        self.model: str | None = None
        self.token = token_of(batch_id, SlotStore.new_token())
        self._until = 0.0
        self._cap = 0  # the model's cap when the slot was granted
        self._reserved: tuple[str, str] | None = None  # (model, token): a slot a split took for it

    async def hold(self, model: str) -> SlotGrant:
        """Hold a slot of ``model``: the one held (renewed when half its lease is gone), or a
        new one, letting go of another model's. Not granted while the model is full or paused,
        nor while another batch waits for a slot its batch holds more than its part of
        (``domain.fairness``: the slot held is given back). When its batch share shrank (an
        administrator lowered the cap, or interactive traffic takes more of it), the slot
        held is kept if the model's slots are within the new share (one write), else given
        back and asked for again, so the new share holds once the requests running now end."""
        deps = self._deps
        lease = deps.settings.batch_lease_seconds
        now = deps.clock()
        paused_until = deps.health.paused_until(model)
        if paused_until > now:
            await self.release()
            return SlotGrant(False, paused_until=paused_until)
        # Its cap less what interactive traffic takes of it now (``domain.interactive``).
        cap = (await share_of(deps, model)).slots
        if await self._took_over(model, cap, now):
            return SlotGrant(True)
        if self.model == model and cap < self._cap:
            # Its share shrank: kept while the slots held fit the new share (no slot let go
            # and taken again: another chain could take it between), else asked for again.
            kept = await io(deps.slots.renew, model, self.token, now=now, lease_seconds=lease, within=cap)
            if kept:
                self._until, self._cap = now + lease, cap
            else:
                await self.release()
        if await self._gives_way(model, cap, now):
            await self.release()
            return SlotGrant(False, gave_way=True)
        if self.model == model:
            self._cap = cap
            if self._until - now > lease / 2:
                return SlotGrant(True)
            if await io(deps.slots.renew, model, self.token, now=now, lease_seconds=lease):
                self._until = now + lease
                return SlotGrant(True)
            self.model = None  # our lease lapsed and was purged: take a slot anew
            _in_use(model, -1)
        await self.release()
        by_tenant = deps.settings.batch_tenant_shares  # else no tag: an even share per batch
        tagged = (self.batch_id, contention.tag_of(self.tag())) if by_tenant else None
        grant = await io(
            deps.slots.acquire, model, self.token, cap=cap, now=now, lease_seconds=lease, tag=tagged
        )
        if grant.granted:
            self.model, self._until, self._cap = model, now + lease, cap
            _in_use(model, +1)
            await self._served(model, grant)
        elif grant.paused_until is not None:
            deps.health.note_pause(model, grant.paused_until)
        return grant

    def adopt(self, model: str, token: str) -> None:
        """The slot of ``model`` a split took as ``token`` for this chain (``SlotLedger.split``):
        its first ``hold`` of that model takes it over, if it is still there."""
        self._reserved = (model, token)

    @property
    def reserved(self) -> bool:
        """Whether a slot a split took for this chain waits for its first ``hold``."""
        return self._reserved is not None

    async def _took_over(self, model: str, cap: int, now: float) -> bool:
        """Whether this first hold took over the slot a split took for the chain: one write
        (not a renewal of the split's token: a duplicate of its message must not hold the
        same slot too), within the share ``cap`` now. Gone (ran out, or taken over by that
        duplicate), or beyond the share: let go, and asked for as usual."""
        reserved, self._reserved = self._reserved, None
        if reserved is None or reserved[0] != model or self.model is not None:
            return False
        deps, lease = self._deps, self._deps.settings.batch_lease_seconds
        taken = await io(
            deps.slots.take_over, model, reserved[1], self.token, cap=cap, now=now, lease_seconds=lease
        )
        deps.ledger.let_go(model, reserved[1])
        if not taken:
            return False
        self.model, self._until, self._cap = model, now + lease, cap
        _in_use(model, +1)
        deps.ledger.took(model, self.token, now + lease)
        return True

    async def _gives_way(self, model: str, cap: int, now: float) -> bool:
        """Whether this chain's batch leaves the slot to a batch that waits for one."""
        state = await slot_map_of(self._deps, model)
        waiting = state.waiting_now(now)
        if not waiting:
            return False
        held = held_by_batch(state.holders, now)
        return contention.yields(
            self.batch_id,
            cap,
            held,
            waiting,
            state.tags,
            self.tag(),
            holding=self.model == model,
            by_tenant=self._deps.settings.batch_tenant_shares,
        )

    async def _served(self, model: str, grant: SlotGrant) -> None:
        """A slot taken: this process's view has it, and the batch waits no longer."""
        ledger, state = self._deps.ledger, grant.state
        if state is None:
            ledger.took(model, self.token, self._until)
            return
        if self.batch_id in state.waiting:
            try:
                await io(self._deps.slots.stop_waiting, model, self.batch_id)
            except StorageError:  # its note runs out soon enough
                logger.warning("batch still noted waiting", extra={"batch_id": self.batch_id}, exc_info=True)
            waiting = {batch: until for batch, until in state.waiting.items() if batch != self.batch_id}
            state = replace(state, waiting=waiting)
        ledger.saw(model, state)

    async def keep(self) -> bool:
        """Renew the slot held while a call runs (``run.chain`` does, on the request lease's
        cadence). If it lapsed and was purged, take one again if the model has room; False
        when it has none: another holder has the slot now, and the call must stop or the
        model's cap would be exceeded."""
        model = self.model
        if model is None:
            return True
        deps = self._deps
        lease = deps.settings.batch_lease_seconds
        now = deps.clock()
        if await renewal(deps.slots.renew, model, self.token, now=now, lease_seconds=lease):
            self._until = now + lease
            return True
        # A request already running goes on while the model's whole cap allows it, whatever
        # interactive traffic takes of it: only new batch requests give way.
        cap = deps.live.model_cap(model)[0]
        grant = await renewal(deps.slots.acquire, model, self.token, cap=cap, now=now, lease_seconds=lease)
        if grant.granted:
            self._until, self._cap = now + lease, cap
            deps.ledger.took(model, self.token, self._until)
            return True
        self.model = None
        _in_use(model, -1)
        return False

    async def release(self) -> None:
        if self.model is not None:
            model, self.model = self.model, None
            _in_use(model, -1)
            self._deps.ledger.let_go(model, self.token)
            await io(self._deps.slots.release, model, self.token)


async def share_of(deps: Deps, model: str) -> BatchShare:
    """``model``'s batch share now: as last read when that is fresh (no thread hop on the
    chain's path); when it is only recent, as last read too, while one read for the whole
    process is made beside the chains (no chain waits for it: each chain's next request
    would otherwise wait for a round trip to the table four times a second per process);
    else read again off the event loop, the chain waiting for it."""
    shares = deps.shares
    if shares.fresh():
        return shares.share(model, read=False)
    if shares.recent():
        _read_beside(shares)
        return shares.share(model, read=False)
    return await io(shares.share, model)


async def slot_map_of(deps: Deps, model: str, *, fresh: bool = False) -> SlotState:
    """``model``'s slot map as this process sees it (``scheduling.room.SlotLedger``): as last
    read when that is fresh, else (or when ``fresh`` is asked) read again off the event loop."""
    ledger = deps.ledger
    if fresh or ledger.map_due(model):
        return await io(ledger.look, model, fresh=True)
    return ledger.look(model)


def read_ahead(deps: Deps, model: str, *, room: bool) -> None:
    """At an answer, start the reads the chain's next steps need, beside the writes that
    record it: the shares (for its next slot) when they are no longer fresh, and with
    ``room`` the model's room (for a split) when it is due. Those steps then find them read,
    where they would make their round trips one after another behind the writes. (A step
    that comes before a read ahead answers waits for it: none is made twice.)"""
    if not deps.shares.fresh():
        _read_beside(deps.shares)
    ledger = deps.ledger
    if room and ledger.room_due(model):
        pending = _room_ahead.setdefault(ledger, {})
        if model not in pending or pending[model].done():
            pending[model] = asyncio.ensure_future(io(ledger.read_room, model))
            pending[model].add_done_callback(_warn_if_failed)


# The reads made beside the chains, per process and event loop: the batch shares', and each
# model's room.
_beside: weakref.WeakKeyDictionary[BatchShares, asyncio.Future[None]] = weakref.WeakKeyDictionary()
_room_ahead: weakref.WeakKeyDictionary[SlotLedger, dict[str, asyncio.Future[None]]] = (
    weakref.WeakKeyDictionary()
)


def _read_beside(shares: BatchShares) -> None:
    pending = _beside.get(shares)
    if pending is None or pending.done():
        _beside[shares] = asyncio.ensure_future(io(shares.refresh))
        _beside[shares].add_done_callback(_warn_if_failed)


def _warn_if_failed(done: asyncio.Future[None]) -> None:
    if not done.cancelled() and done.exception() is not None:  # read again at the next look
        logger.warning("read beside the chains failed", exc_info=done.exception())


# Slots the chains of this process hold now, per model (the SlotsInUse metric).
_held: Counter[str] = Counter()


def _in_use(model: str, change: int) -> None:
    _held[model] += change
    metrics.value("SlotsInUse", _held[model], model=model)
