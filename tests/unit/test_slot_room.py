"""A model's room that no chain holds, as chains see it when they might split, or when
they wait in place for a slot (``SlotLedger.going``): one ledger per process."""

from __future__ import annotations

from typing import Any

from batchgw.domain.chains import ChainMessage
from batchgw.domain.errors import StorageError
from batchgw.domain.interactive import BatchShare, ShareWhy
from batchgw.scheduling.room import SlotLedger
from batchgw.scheduling.tuning import TUNING
from batchgw.storage.slots import SlotGrant, SlotState


class Shares:
    def __init__(self, slots: int) -> None:
        self.slots = slots

    def share(self, model: str) -> BatchShare:
        return BatchShare(self.slots, 16, 0, 0, ShareWhy.CAP)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class SlotMaps:
    """The slot map store: ``held[0]`` slots held (-1: unreadable), each read noted; a slot
    taken (``acquire``) while fewer than ``cap`` are held adds one, its token noted."""

    def __init__(self, held: list[int], clock: Clock) -> None:
        self.held, self.clock, self.reads, self.taken = held, clock, list[str](), list[str]()

    def acquire(self, model: str, token: str, *, cap: int, now: float, lease_seconds: float) -> SlotGrant:
        if self.held[0] >= cap:
            return SlotGrant(False)
        self.held[0] += 1
        self.taken.append(token)
        return SlotGrant(True)

    def read(self, model: str) -> SlotState:
        self.reads.append(model)
        if self.held[0] < 0:
            raise StorageError("unreadable")
        return SlotState({f"t{i}": self.clock.now + 60 for i in range(self.held[0])}, 0.0)


def room(held: list[int], slots: int = 16) -> tuple[SlotLedger, Clock, list[str]]:
    ledger, clock, maps = ledger_and_maps(held, slots)
    return ledger, clock, maps.reads


def ledger_and_maps(held: list[int], slots: int = 16) -> tuple[SlotLedger, Clock, SlotMaps]:
    clock = Clock()
    maps = SlotMaps(held, clock)
    shares: Any = Shares(slots)
    return SlotLedger(shares, maps, clock), clock, maps  # type: ignore[arg-type]  # a fake store


def test_a_chain_takes_several_units_of_the_same_reads_room_and_no_unit_twice() -> None:
    held = [8]
    slot_room, clock, reads = room(held)
    assert slot_room.take("m", most=3) == 0  # one read: not room yet
    clock.now += TUNING.room_read_seconds
    assert slot_room.take("m") == 1  # room 8 on both reads
    looked = len(reads)
    assert slot_room.take("m", most=3) == 3
    assert slot_room.take("m", most=5) == 4
    assert slot_room.take("m", most=3) == 0 and not slot_room.take("m")  # all 8 handed out
    assert len(reads) == looked  # no read of its own until the next is due


def test_room_seen_on_two_reads_in_a_row_is_handed_out_once_per_unit() -> None:
    held = [13]
    slot_room, clock, _ = room(held)
    assert not slot_room.take("m")  # one read: a chain between its stop and return looks like room
    clock.now += TUNING.room_read_seconds
    held[0] = 14
    assert [slot_room.take("m") for _ in range(4)] == [True, True, False, False]  # min(3, 2)


def test_room_is_read_at_most_once_per_interval_and_not_at_all_between() -> None:
    slot_room, clock, reads = room([10])
    slot_room.take("m")
    clock.now += TUNING.room_read_seconds / 2
    assert not slot_room.room_due("m")
    slot_room.take("m")
    assert reads == ["m"]
    clock.now += TUNING.room_read_seconds / 2
    assert slot_room.room_due("m")


def test_a_gap_between_reads_or_an_unreadable_count_is_no_room() -> None:
    held = [10]
    slot_room, clock, _ = room(held)
    slot_room.take("m")
    clock.now += 3 * TUNING.room_read_seconds  # too long ago to confirm anything
    assert not slot_room.take("m")
    clock.now += TUNING.room_read_seconds
    held[0] = -1
    assert not slot_room.take("m")


def test_a_model_whose_share_is_all_held_has_no_room() -> None:
    slot_room, clock, _ = room([8], slots=8)
    slot_room.take("m")
    clock.now += TUNING.room_read_seconds
    assert not slot_room.take("m")


def test_a_slot_given_by_a_chain_that_ended_is_room_for_its_batch_at_once_and_only_for_a_moment() -> None:
    slot_room, clock, _ = room([16])  # every slot held, as the reads see it
    slot_room.give("m", "b1")
    assert not slot_room.take("m", "b2")  # another batch's chains see it when the reads do
    assert slot_room.take("m", "b1")  # no read needed to confirm it
    assert not slot_room.take("m", "b1")  # handed out once
    slot_room.give("m", "b1")
    clock.now += TUNING.room_read_seconds  # not taken in time: another chain may hold it by now
    assert not slot_room.take("m", "b1")


def test_a_split_into_several_parts_takes_a_given_slot_first_then_the_reads_room() -> None:
    held = [14]
    slot_room, clock, _ = room(held)
    slot_room.take("m")
    clock.now += TUNING.room_read_seconds
    slot_room.give("m", "b1")
    assert slot_room.take("m", "b1", most=3) == 3  # the given unit, then 2 of the reads' room
    assert slot_room.take("m", "b1", most=3) == 0  # each handed out once
    slot_room.give("m", "b1")
    assert slot_room.take("m", "b2", most=3) == 0  # another batch's chains do not get it


def test_chains_waiting_in_place_go_one_per_unit_of_room_and_the_rest_wait_on() -> None:
    clock = Clock()
    board = SlotLedger(Any, Any, clock)  # type: ignore[arg-type]  # never reads: it is shown the map
    board.saw("m", SlotState({f"t{i}": clock.now + 60 for i in range(13)}, 0.0))
    # 13 held of a share of 16: three chains go, the fourth waits on.
    assert [board.going("m", 16) for _ in range(4)] == [True, True, True, False]
    assert board.going("m", 17) and not board.going("m", 17)  # a share one larger: one more goes
    clock.now += TUNING.going_seconds
    # Those that went hold their slots by now (or another process does): the board says so.
    board.saw("m", SlotState({f"t{i}": clock.now + 60 for i in range(16)}, 0.0))
    assert not board.going("m", 16)
    # A slot let go is room again, for one chain.
    board.let_go("m", "t0")
    assert [board.going("m", 16) for _ in range(2)] == [True, False]
    # Another model's room is its own.
    assert board.going("other", 1) and not board.going("other", 1)


def test_a_chain_that_went_for_room_and_asked_for_it_no_longer_holds_back_another() -> None:
    clock = Clock()
    board = SlotLedger(Any, Any, clock)  # type: ignore[arg-type]  # never reads: it is shown the map
    board.saw("m", SlotState({f"t{i}": clock.now + 60 for i in range(14)}, 0.0))
    assert [board.going("m", 16) for _ in range(3)] == [True, True, False]
    board.took("m", "new", clock.now + 60)  # one of the two took its slot...
    board.arrived("m")
    # ...and counts once, among the holders: 15 of 16, with one still on its way.
    assert not board.going("m", 16)
    board.let_go("m", "t0")  # a slot let go: room again at once, not going_seconds later
    assert board.going("m", 16)
    board.arrived("m")
    board.arrived("m")
    board.arrived("m")  # more arrivals than chains that went: nothing left to count
    assert board.going("m", 17)
    # A going that ran out is not the one an arrival takes off: the one still counting is.
    clock.now += TUNING.going_seconds
    board.saw("m", SlotState({f"t{i}": clock.now + 60 for i in range(13)}, 0.0))
    assert board.going("m", 15)  # one whose chain never asks (it stopped on its way)
    clock.now += 0.6 * TUNING.going_seconds
    assert board.going("m", 15)
    clock.now += 0.6 * TUNING.going_seconds  # the first ran out, the second counts
    board.took("m", "newer", clock.now + 60)
    board.arrived("m")
    assert board.going("m", 15)  # 14 held of 15, none going


def test_a_chain_splits_into_as_many_parts_as_the_room_it_takes_within_the_tunings_bounds() -> None:
    held = [12]
    ledger, clock, _ = room(held)
    chain = ChainMessage("b1", 0, 0, 16)
    assert ledger.ways(chain, total=10_000, chains=16) == TUNING.max_split_ways
    assert ledger.ways(ChainMessage("b1", 0, 10_000 - 16 * 3, 16), total=10_000, chains=16) == 1  # 3 left
    assert ledger.split("m", "b1", chain, 10_000, 16, most=4) is None  # one read: not room yet
    clock.now += TUNING.room_read_seconds
    held[0] = 14  # room 4, then 2: the smaller counts
    parts = ledger.split("m", "b1", chain, 10_000, 16, most=4)
    assert parts is not None and [part.stride for part in parts] == [48, 48, 48]
    assert [part.next_index for part in parts] == [0, 16, 32]
    assert ledger.split("m", "b1", parts[0], 10_000, 16, most=4) is None  # the room was handed out


def test_each_new_chain_of_a_split_carries_a_slot_taken_for_it_and_no_more_parts_than_slots() -> None:
    held = [12]
    ledger, clock, maps = ledger_and_maps(held)
    chain = ChainMessage("b1", 0, 0, 16)
    ledger.take("m")  # the first read: room 4
    clock.now += TUNING.room_read_seconds
    held[0] = 15  # the second: another process's chains took three of it meanwhile
    parts = ledger.split("m", "b1", chain, 10_000, 16, most=4)
    assert parts is not None and [(part.next_index, part.stride) for part in parts] == [(0, 32), (16, 32)]
    kept, new = parts
    assert kept.slot == "" and new.slot == maps.taken[0] and new.slot.startswith("b1")  # the batch's token
    assert held == [16]
    assert ledger.split("m", "b1", kept, 10_000, 16, most=4) is None  # none left: no split at all


def test_a_read_of_the_room_is_the_slot_maps_read_too() -> None:
    held = [12]
    ledger, clock, reads = room(held)
    ledger.read_room("m")
    assert reads == ["m"] and not ledger.map_due("m")  # the map as the room's read saw it
    assert ledger.look("m").running(clock.now) == 12 and reads == ["m"]
    ledger.read_room("m")  # not due yet: no read
    assert reads == ["m"]
    clock.now += TUNING.room_read_seconds
    held[0] = 13
    ledger.read_room("m")
    assert reads == ["m", "m"] and ledger.look("m").running(clock.now) == 13


def test_a_chain_asks_for_room_off_its_event_loop_only_when_a_read_is_due_or_room_is_left() -> None:
    slot_room, clock, _ = room([8])
    assert slot_room.may_take("m", "b1")  # never read: a read is due
    slot_room.take("m")  # the first read: no room yet
    assert not slot_room.may_take("m", "b1")  # none left, and the next read is not due
    clock.now += TUNING.room_read_seconds
    assert slot_room.may_take("m", "b1")  # the next read is due
    assert slot_room.take("m") == 1  # room 8 on both reads: 7 left
    assert slot_room.may_take("m", "b1")
    assert slot_room.take("m", most=7) == 7
    assert not slot_room.may_take("m", "b1")
    slot_room.give("m", "b1")  # a chain of b1 ended with its slot in hand
    assert slot_room.may_take("m", "b1") and not slot_room.may_take("m", "b2")
