"""May this chain start a request on model M now? ``Start``, or ``Wait(reason, seconds)``.

One ``Admission`` per chain run: it counts the times in a row the chain found its model full
(``ChainMessage.full``), so each wait is longer than the one before. It decides from what the
chain read (the slot map, the share, the pauses it knows of) and reads nothing itself; the
chain acts on the answer (``run.chain``), and the slot write stays the judge. The reasons:
``MODEL_PAUSED``, ``MODEL_FULL``, ``YIELD`` (waited in place first: ``in_place_round``),
``GIVE_WAY`` (``domain.fairness``) and ``OWNER_PAUSED``.

How long each waits, and why: docs/design/scheduling.md, "Admission" and
"From the code: scheduling/admission.py".
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum

from batchgw.domain import contention
from batchgw.domain.batch import BatchRecord, is_flex
from batchgw.domain.contention import Tag
from batchgw.domain.fairness import held_by_batch
from batchgw.domain.interactive import BatchShare
from batchgw.scheduling.tuning import TUNING, Tuning
from batchgw.storage.slots import SlotGrant, SlotState


class StopReason(StrEnum):
    """Why a chain may not start a request on its model now."""

    MODEL_PAUSED = "model paused"
    MODEL_FULL = "model full"
    YIELD = "yield to interactive"
    GIVE_WAY = "give way to another batch"
    OWNER_PAUSED = "owner paused"


@dataclass(frozen=True, slots=True)
class Start:
    """The chain may start (for a slot write: ask for the slot)."""


@dataclass(frozen=True, slots=True)
class Wait:
    """The chain may not start: why, and in how many seconds it asks again."""

    reason: StopReason
    seconds: float
    # The model is full, but its batch is owed slots other batches hold (``domain.contention``):
    # they give them back at their next request, and the chain waits in place to take them.
    owed: bool = False

    @property
    def in_place(self) -> bool:
        """Whether the chain first waits where it is, holding nothing, for the room to come
        back (``Admission.in_place_round``), before it leaves for ``seconds``."""
        return self.reason is StopReason.YIELD or self.owed


START = Start()


class Admission:
    """The admission of one chain's requests on its model (see the module's docstring)."""

    def __init__(
        self,
        slot_wait_seconds: Callable[[], float],
        in_place_seconds: Callable[[], float],
        *,
        full: int = 0,
        tuning: Tuning = TUNING,
        jitter: Callable[[], float] = random.random,
    ) -> None:
        self._slot_wait_seconds = slot_wait_seconds  # BATCH_SLOT_WAIT_SECONDS, as it is now
        self._in_place_seconds = in_place_seconds  # BATCH_YIELD_IN_PLACE_SECONDS, as it is now
        self._tuning = tuning
        self._jitter = jitter
        self.full = full  # the times in a row the chain found its model full

    def owner_paused(self, batch: BatchRecord, now: float) -> Start | Wait:
        """``OWNER_PAUSED`` while the batch says its owner's account holds it back."""
        if not batch.paused_at(now):
            return START
        assert batch.paused is not None
        return Wait(StopReason.OWNER_PAUSED, max(1.0, float(batch.paused["check_at"]) - now))

    def before_slot(
        self,
        batch_id: str,
        state: SlotState,
        share: BatchShare,
        *,
        paused_until: float,
        now: float,
        tag: Tag | None = None,
        by_tenant: bool = False,
    ) -> Start | Wait:
        """Before a chain of ``batch_id`` (ranked by its ``tag``) takes anything: whether the
        model, as read at ``now`` (its slot map ``state``, its batch ``share``, paused until
        ``paused_until`` as far as this process knows), has a slot this batch may ask for."""
        paused_until = max(state.paused_until, paused_until)
        if paused_until > now:
            return Wait(StopReason.MODEL_PAUSED, self.wait(paused_until - now))
        if state.running(now) < share.slots:
            held = held_by_batch(state.holders, now)
            waiting = state.waiting_now(now)
            if not contention.yields(
                batch_id, share.slots, held, waiting, state.tags, tag, holding=False, by_tenant=by_tenant
            ):
                return START
            return Wait(StopReason.GIVE_WAY, self.wait())
        full = self._full(share)
        held = held_by_batch(state.holders, now)
        if is_flex(batch_id) and any(count > 0 and not is_flex(b) for b, count in held.items()):
            # a flex request is owed the next slot a batch lets go (``contention.yields``)
            return Wait(full.reason, full.seconds, owed=True)
        if not by_tenant:
            return full
        if contention.owed(batch_id, share.slots, held, state.waiting_now(now), state.tags, tag):
            return Wait(full.reason, full.seconds, owed=True)
        return full

    def refused(self, grant: SlotGrant, share: BatchShare | None, *, now: float) -> Wait:
        """Why a slot write made at ``now`` refused a slot, and how long to wait. ``share``
        (the model's batch share now) is needed only when the model was neither paused nor
        given way to (``needs_share``)."""
        if grant.paused_until is not None:
            return Wait(StopReason.MODEL_PAUSED, self.wait(grant.paused_until - now))
        if grant.gave_way:
            return Wait(StopReason.GIVE_WAY, self.wait())
        assert share is not None
        return self._full(share)

    @staticmethod
    def needs_share(grant: SlotGrant) -> bool:
        """Whether ``refused`` needs the share to say why ``grant`` was refused."""
        return grant.paused_until is None and not grant.gave_way

    def granted(self) -> None:
        """The chain holds a slot: the next time it finds the model full is the first."""
        self.full = 0

    def _full(self, share: BatchShare) -> Wait:
        reason = StopReason.YIELD if share.yielding else StopReason.MODEL_FULL
        return Wait(reason, self.wait(yielded=reason is StopReason.YIELD))

    def wait(self, paused_for: float = 0.0, *, yielded: bool = False) -> float:
        """How long the chain waits, having found its model full once more (or paused for
        ``paused_for`` seconds): ``slot_wait`` jittered up to twice, the pause at least."""
        wait = self.slot_wait(yielded=yielded) * (1 + self._jitter())
        self.full += 1
        return max(wait, paused_for)

    def slot_wait(self, *, yielded: bool = False) -> float:
        """The wait before jitter, ``full`` times in a row full: the base doubled each time, up
        to ``slot_wait_max_factor`` times it (``yield_wait_max_factor`` for a chain that
        yielded: interactive bursts end, and the slots they leave are batch work's again)."""
        tuning = self._tuning
        most = tuning.yield_wait_max_factor if yielded else tuning.slot_wait_max_factor
        return self._slot_wait_seconds() * min(2**self.full, most)

    # --- the in-place wait of a chain that yielded --------------------------------------------

    def looks(self, round_seconds: float) -> int:
        """How many looks for room a round in place of ``round_seconds`` takes (one every
        ``Tuning.room_look_seconds``, one at least)."""
        return max(1, round(round_seconds / self._tuning.room_look_seconds))

    def in_place_round(
        self, first: float, waited: float, share: BatchShare, *, owed: bool = False
    ) -> float | None:
        """The next round a chain that yielded waits in place, having waited ``waited``
        seconds of rounds (the first was ``first`` seconds): at least
        ``Tuning.yield_round_seconds``, for as long as the share still yields (or the chain
        is ``owed`` the next slot a batch lets go: a flex request's), at most
        ``BATCH_YIELD_IN_PLACE_SECONDS`` in all. None: it leaves for ``first`` seconds."""
        round_seconds = max(first, self._tuning.yield_round_seconds)
        if not (share.yielding or owed) or waited + round_seconds > self._in_place_seconds():
            return None
        return round_seconds
