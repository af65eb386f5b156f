"""May a chain start a request on its model now (``scheduling.admission``): one test per stop
reason, and the start, with a fake clock and in-memory stores behind the share and the slot
map (no AWS)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import pytest
from batchgw.config.settings import Settings
from batchgw.domain.adaptive import Adaptive
from batchgw.domain.batch import BatchRecord
from batchgw.domain.fairness import token_of
from batchgw.domain.health import ModelHealth
from batchgw.domain.interactive import BatchShare, LoadReport
from batchgw.domain.states import BatchStatus
from batchgw.scheduling.admission import START, Admission, Start, StopReason, Wait
from batchgw.scheduling.share import BatchShares
from batchgw.scheduling.tuning import TUNING
from batchgw.storage.slots import SlotGrant, SlotState

from tests.support import FakeClock

MODEL = "m"
SLOT_WAIT = 2.0  # BATCH_SLOT_WAIT_SECONDS
LEASE = 600.0


class Live:
    """The live configuration as scheduling reads it: settings, and the model's cap."""

    def __init__(self, cap: int, **settings: object) -> None:
        self.settings = Settings.model_validate({"BATCH_SLOT_WAIT_SECONDS": SLOT_WAIT, **settings})
        self.cap = cap

    def model_cap(self, model: str) -> tuple[int, str]:
        return self.cap, "test"


class InteractiveStore:
    """The interactive load reports, in memory (``storage.interactive``): one reporter's."""

    def __init__(self) -> None:
        self.in_flight: dict[str, int] = {}

    def reports(self) -> list[LoadReport]:
        return [LoadReport("gateway-1", dict(self.in_flight), expires_at=float("inf"), reported_at=0.0)]


class LimitStore:
    """The adaptive limits, in memory (``storage.adaptive``): none."""

    def read(self) -> dict[str, Adaptive]:
        return {}


class SlotMap:
    """A model's slot map, in memory (``storage.slots``): who holds its slots, who waits."""

    def __init__(self) -> None:
        self.holders: dict[str, float] = {}
        self.waiting: dict[str, float] = {}
        self.paused_until = 0.0

    def take(self, batch_id: str, n: int, *, until: float) -> None:
        for _ in range(n):
            self.holders[token_of(batch_id, str(len(self.holders)))] = until

    def read(self, model: str) -> SlotState:
        return SlotState(dict(self.holders), self.paused_until, waiting=dict(self.waiting))


@dataclass
class World:
    clock: FakeClock
    live: Live
    interactive: InteractiveStore
    slots: SlotMap
    health: ModelHealth
    shares: BatchShares
    jitter: list[float] = field(default_factory=lambda: [0.0])

    def admission(self, full: int = 0) -> Admission:
        return Admission(
            lambda: self.live.settings.batch_slot_wait_seconds,
            lambda: self.live.settings.batch_yield_in_place_seconds,
            full=full,
            jitter=lambda: self.jitter[0],
        )

    def share(self) -> BatchShare:
        return self.shares.share(MODEL)

    def before_slot(self, admission: Admission, batch_id: str = "batch_a") -> Start | Wait:
        """What a chain of ``batch_id`` is told before it takes anything, from the stores."""
        now = self.clock()
        state = self.slots.read(MODEL)
        return admission.before_slot(
            batch_id, state, self.share(), paused_until=self.health.paused_until(MODEL), now=now
        )


@pytest.fixture
def world() -> World:
    clock, live, interactive = FakeClock(), Live(cap=4), InteractiveStore()
    shares = BatchShares(live, interactive, LimitStore(), clock)  # type: ignore[arg-type]
    return World(clock, live, interactive, SlotMap(), ModelHealth(), shares)


def test_a_chain_starts_when_the_model_has_a_slot_of_its_batch_share_free(world: World) -> None:
    world.slots.take("batch_a", 3, until=world.clock() + LEASE)
    admission = world.admission(full=2)
    assert world.before_slot(admission) == START
    admission.granted()  # the slot write granted it: the streak of full starts over
    assert admission.full == 0


def test_a_flex_request_finding_the_model_full_of_batches_waits_in_place_for_the_next_slot(
    world: World,
) -> None:
    world.slots.take("batch_a", 4, until=world.clock() + LEASE)
    wait = world.before_slot(world.admission(), "flex_1")
    assert wait == Wait(StopReason.MODEL_FULL, SLOT_WAIT, owed=True) and wait.in_place
    # held by flex requests alone, no batch gives one back: it waits as any chain does
    world.slots.holders.clear()
    world.slots.take("flex_2", 4, until=world.clock() + LEASE)
    assert world.before_slot(world.admission(), "flex_1") == Wait(StopReason.MODEL_FULL, SLOT_WAIT)


def test_a_chain_waits_when_every_slot_of_the_model_is_held(world: World) -> None:
    world.slots.take("batch_a", 4, until=world.clock() + LEASE)
    admission = world.admission()
    assert world.before_slot(admission) == Wait(StopReason.MODEL_FULL, SLOT_WAIT)
    assert not Wait(StopReason.MODEL_FULL, SLOT_WAIT).in_place
    # Each time in a row it waits twice as long, up to four times the base; jittered up to twice.
    waits = [world.before_slot(admission) for _ in range(3)]
    assert [wait.seconds for wait in waits if isinstance(wait, Wait)] == [4.0, 8.0, 8.0]
    world.jitter[0] = 0.5
    assert world.before_slot(admission) == Wait(StopReason.MODEL_FULL, 12.0)
    assert admission.full == 5  # carried on in its continuation (``ChainMessage.full``)


def test_slots_whose_lease_ran_out_count_as_free(world: World) -> None:
    world.slots.take("batch_a", 4, until=world.clock() + 1)
    world.clock.advance(2)
    assert world.before_slot(world.admission()) == START


def test_a_chain_yields_while_interactive_requests_take_the_free_slots_and_waits_in_place(
    world: World,
) -> None:
    world.slots.take("batch_a", 2, until=world.clock() + LEASE)
    world.interactive.in_flight[MODEL] = 2  # of a cap of 4, two are interactive traffic's
    admission = world.admission(full=3)
    wait = world.before_slot(admission)
    # It backs off at most twice the base: interactive bursts end.
    assert wait == Wait(StopReason.YIELD, 2 * SLOT_WAIT)
    assert isinstance(wait, Wait) and wait.in_place


def test_a_chain_gives_way_to_a_batch_that_waits_while_its_own_holds_more_than_its_part(
    world: World,
) -> None:
    world.slots.take("batch_a", 2, until=world.clock() + LEASE)
    world.slots.take("batch_b", 1, until=world.clock() + LEASE)
    world.slots.waiting["batch_b"] = world.clock() + 60  # b found the model full and waits
    admission = world.admission()
    # One slot is free: a chain of a (two held, its even part) leaves it to b ...
    assert world.before_slot(admission, "batch_a") == Wait(StopReason.GIVE_WAY, SLOT_WAIT)
    # ... and one of b takes it.
    assert world.before_slot(world.admission(), "batch_b") == START


def test_a_chain_waits_out_its_models_pause_however_short_its_backoff(world: World) -> None:
    world.health.note_pause(MODEL, world.clock() + 30)  # the upstream's failures paused it here
    assert world.before_slot(world.admission()) == Wait(StopReason.MODEL_PAUSED, 30.0)
    world.slots.paused_until = world.clock() + 45  # another process paused it on the slot map
    assert world.before_slot(world.admission()) == Wait(StopReason.MODEL_PAUSED, 45.0)
    world.clock.advance(46)
    assert world.before_slot(world.admission()) == START


def test_a_chain_of_a_batch_its_owner_holds_back_waits_until_it_is_checked_again(world: World) -> None:
    now = world.clock()
    batch = BatchRecord("batch_a", "user_a", BatchStatus.IN_PROGRESS, "/v1/chat/completions", int(now), "k")
    admission = world.admission()
    assert admission.owner_paused(batch, now) == START
    paused = replace(batch, paused={"reason": "quota", "check_at": now + 300})
    assert admission.owner_paused(paused, now) == Wait(StopReason.OWNER_PAUSED, 300.0)
    # Due to be checked again: it goes on (and the owner's gate checks it).
    assert admission.owner_paused(paused, now + 300) == START
    # Never less than a second between looks.
    assert admission.owner_paused(replace(batch, paused={"check_at": now + 0.1}), now) == Wait(
        StopReason.OWNER_PAUSED, 1.0
    )


def test_a_refused_slot_write_says_why_the_model_was_paused_given_way_full_or_yielded(world: World) -> None:
    now = world.clock()
    admission = world.admission()
    assert admission.refused(SlotGrant(False, paused_until=now + 50), None, now=now) == Wait(
        StopReason.MODEL_PAUSED, 50.0
    )
    assert admission.refused(SlotGrant(False, gave_way=True), None, now=now) == Wait(
        StopReason.GIVE_WAY, 2 * SLOT_WAIT
    )
    assert not Admission.needs_share(SlotGrant(False, gave_way=True))
    full = SlotGrant(False)
    assert Admission.needs_share(full)
    assert admission.refused(full, world.share(), now=now) == Wait(StopReason.MODEL_FULL, 4 * SLOT_WAIT)
    world.interactive.in_flight[MODEL] = 1
    world.clock.advance(world.live.settings.batch_share_read_seconds)  # the reports are read again
    assert admission.refused(full, world.share(), now=world.clock()) == Wait(StopReason.YIELD, 2 * SLOT_WAIT)


def test_a_chain_that_yielded_waits_in_place_round_after_round_while_the_share_yields(world: World) -> None:
    world.interactive.in_flight[MODEL] = 1
    admission, yielding = world.admission(), world.share()
    assert yielding.yielding
    first = 2.0
    assert admission.looks(first) == round(first / TUNING.room_look_seconds)
    assert admission.looks(0.0) == 1  # one look at least
    # Further rounds last at least yield_round_seconds ...
    assert admission.in_place_round(first, first, yielding) == TUNING.yield_round_seconds
    # ... for as long as the share yields ...
    world.interactive.in_flight[MODEL] = 0
    world.clock.advance(10)  # past the peak held and the reads' age
    assert not world.share().yielding
    assert admission.in_place_round(first, first, world.share()) is None
    # a flex request owed the next slot a batch lets go waits on, the share yielding or not
    assert admission.in_place_round(first, first, world.share(), owed=True) == TUNING.yield_round_seconds
    # ... and BATCH_YIELD_IN_PLACE_SECONDS in all at most: then it leaves.
    limit = world.live.settings.batch_yield_in_place_seconds
    assert admission.in_place_round(first, limit - TUNING.yield_round_seconds, yielding) is not None
    assert admission.in_place_round(first, limit - TUNING.yield_round_seconds + 0.1, yielding) is None


def test_an_administrators_in_place_limit_applies_from_the_next_round(world: World) -> None:
    world.interactive.in_flight[MODEL] = 1
    admission, yielding = world.admission(), world.share()
    assert admission.in_place_round(2.0, 10.0, yielding) == TUNING.yield_round_seconds
    # BATCH_YIELD_IN_PLACE_SECONDS lowered at run time: the chain that waited 10 s leaves.
    world.live.settings = world.live.settings.model_copy(update={"batch_yield_in_place_seconds": 12.0})
    assert admission.in_place_round(2.0, 10.0, yielding) is None
    # 0: a chain leaves after its first look.
    world.live.settings = world.live.settings.model_copy(update={"batch_yield_in_place_seconds": 0.0})
    assert admission.in_place_round(2.0, 0.0, yielding) is None
