"""The model's gate: a chain's way to a slot of its model.

At each decision point the chain's loop (``run.chain``) asks ``ModelGate``, which asks
scheduling (``scheduling.admission.Admission``) and does what the answer needs: it reads
the slot map and the share, notes the batch waiting for a slot (``domain.fairness``), waits
in place for room a yield left, and holds the slot (``run.slot.SlotHolder``). The answer is
``None`` (go on) or a ``Wait``, which the chain turns into its stop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from batchgw.deps import Deps
from batchgw.domain import contention
from batchgw.domain.batch import BatchRecord, is_flex
from batchgw.domain.contention import Tag
from batchgw.domain.errors import StorageError
from batchgw.domain.fairness import held_by_batch
from batchgw.observability import logger
from batchgw.run.aio import io
from batchgw.run.slot import SlotHolder, share_of, slot_map_of
from batchgw.scheduling.admission import Admission, Start, StopReason, Wait
from batchgw.storage.slots import SlotGrant, SlotState


class ModelGate:
    """One chain run's way to its model's slots (see the module's docstring)."""

    def __init__(
        self,
        deps: Deps,
        batch_id: str,
        *,
        full: int,
        deadline: float,
        taken_over: asyncio.Event,
        tag: Callable[[], Tag] | None = None,
    ) -> None:
        self.deps = deps
        self.batch_id = batch_id
        self.deadline = deadline
        self.taken_over = taken_over
        self.slot = SlotHolder(deps, batch_id, tag)
        self.tag = self.slot.tag  # how the batch ranks on its model's slot map (``domain.contention``)
        # It counts the times in a row the chain found its model full (``ChainMessage.full``).
        self.admission = Admission(
            lambda: deps.settings.batch_slot_wait_seconds,
            lambda: deps.settings.batch_yield_in_place_seconds,
            full=full,
            tuning=deps.tuning,
        )
        self.going_for: str | None = None  # the model this chain waited in place for, and went

    @property
    def full(self) -> int:
        """The times in a row the chain found its model full, this time included."""
        return self.admission.full

    def held_back(self, batch: BatchRecord) -> Wait | None:
        """A wait while the batch says its owner's quota, budget or role holds it back."""
        decision = self.admission.owner_paused(batch, self.deps.clock())
        return None if isinstance(decision, Start) else decision

    async def before_start(self, model: str, now: float) -> Wait | None:
        """Before the chain takes anything: ``model``'s slot map read, is there a slot this
        batch may ask for? A wait when the model is full, yielded, given way or paused
        (the batch noted waiting when the model is full or yielded)."""
        deps = self.deps
        # Two reads, both made at once: a chain's start waits for one round trip, not two.
        state, share = await asyncio.gather(io(deps.slots.read, model), share_of(deps, model))
        deps.ledger.saw(model, state)
        paused_until = deps.health.paused_until(model)
        decision = self.admission.before_slot(
            self.batch_id,
            state,
            share,
            paused_until=paused_until,
            now=now,
            tag=self.tag() if deps.settings.batch_tenant_shares else None,
            by_tenant=deps.settings.batch_tenant_shares,
        )
        if isinstance(decision, Start):
            return None
        if decision.reason in (StopReason.MODEL_FULL, StopReason.YIELD):
            await self.note_waiting(model, state, decision.seconds)
        return decision

    async def hold(self, model: str) -> SlotGrant:
        """Hold a slot of ``model`` (``SlotHolder.hold``); once granted, the chain's count of
        full starts over."""
        grant = await self.slot.hold(model)
        went_for, self.going_for = self.going_for, None
        if grant.granted and went_for == model:  # it went for room it saw, and holds it
            self.deps.ledger.arrived(model)
        # Refused, the room it saw was another process's: it counts as going on, and no other
        # chain of this process goes for that room until ``Tuning.going_seconds`` have passed.
        if grant.granted:
            self.admission.granted()
        return grant

    async def refused(self, model: str, grant: SlotGrant, now: float) -> Wait:
        """Why the slot write refused (``hold``), and how long to wait; a batch that found the
        model full or yielded is noted waiting."""
        share = await share_of(self.deps, model) if Admission.needs_share(grant) else None
        decision = self.admission.refused(grant, share, now=now)
        if share is not None:
            # The expired waiters it drops are those seen last: no read on the way.
            await self.note_waiting(model, self.deps.ledger.last(model), decision.seconds)
        return decision

    async def wait_in_place(self, model: str, wait: float, still_runs: Callable[[], Awaitable[bool]]) -> bool:
        """Whether ``model``'s batch share has room again while the chain waits in place, as
        this process sees it: a chain that yielded to interactive traffic waits here, holding
        nothing, looking as often as the share is read: a round of ``wait`` seconds, then
        further rounds for as long as the share still yields (``Admission.in_place_round``),
        before it leaves for ``wait`` seconds. Each further round asks ``still_runs`` (the
        batch read again: a cancel meanwhile ends the wait) and notes the batch waiting
        again. (A chain that left at once came back by a message a second or two later, and
        the room the traffic left stood empty until then.)"""
        deps, tuning = self.deps, self.deps.tuning
        needed = deps.settings.batch_upstream_timeout_seconds + tuning.segment_margin_seconds
        waited, round_seconds = 0.0, wait  # the first round as long as its note says
        flex = is_flex(self.batch_id)
        while self.deadline - deps.clock() - needed > round_seconds:
            for _ in range(self.admission.looks(round_seconds)):
                await asyncio.sleep(tuning.room_look_seconds)
                if self.taken_over.is_set():
                    return False
                share = await share_of(deps, model)
                # read again when due; a flex request's caller waits: at every look
                await slot_map_of(deps, model, fresh=flex)
                if deps.ledger.going(model, share.slots):
                    self.going_for = model
                    return True
            waited += round_seconds
            next_round = self.admission.in_place_round(wait, waited, share, owed=flex)
            if next_round is None:
                return False
            round_seconds = next_round
            if not await still_runs():
                return False  # it leaves; its next run reads the batch and stops there
            await self.note_waiting(model, deps.ledger.last(model), round_seconds)
        return False

    async def note_waiting(self, model: str, state: SlotState, wait: float) -> None:
        """Note the chain's batch as waiting for a slot of ``model`` (``domain.fairness``)
        until after the chain's next try: a batch that holds more than its part gives one
        up meanwhile."""
        now = self.deps.clock()
        until = now + 2 * wait + self.deps.settings.batch_slot_wait_seconds
        expired = [batch for batch, at in state.waiting.items() if at < now]
        tag: str | None = None
        stale: list[str] = []
        if self.deps.settings.batch_tenant_shares:  # else no tag: an even share per batch
            live = [batch for batch, at in state.waiting.items() if at >= now]
            stale = contention.stale_tags(state.tags, held_by_batch(state.holders, now), live)
            tag = contention.tag_of(self.tag())
        try:
            await io(
                self.deps.slots.wait, model, self.batch_id, until=until, expired=expired, tag=tag, stale=stale
            )
        except StorageError:
            # Not noted, the batch waits as a first-come one would: the slot stays the judge.
            logger.warning(
                "could not note the batch waiting", extra={"batch_id": self.batch_id}, exc_info=True
            )
