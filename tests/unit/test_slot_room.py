"""A model's room that no chain holds, as chains see it when they might split."""

from __future__ import annotations

from typing import Any

from batchgw.domain.errors import StorageError
from batchgw.domain.interactive import BatchShare, ShareWhy
from batchgw.runtime import ROOM_READ_SECONDS, SlotRoom


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


def room(held: list[int], slots: int = 16) -> tuple[SlotRoom, Clock, list[str]]:
    clock, reads = Clock(), []

    def running(model: str) -> int:
        reads.append(model)
        if held[0] < 0:
            raise StorageError("unreadable")
        return held[0]

    shares: Any = Shares(slots)
    return SlotRoom(shares, running, clock), clock, reads


def test_room_seen_on_two_reads_in_a_row_is_handed_out_once_per_unit() -> None:
    held = [13]
    slot_room, clock, _ = room(held)
    assert not slot_room.take("m")  # one read: a chain between its stop and return looks like room
    clock.now += ROOM_READ_SECONDS
    held[0] = 14
    assert [slot_room.take("m") for _ in range(4)] == [True, True, False, False]  # min(3, 2)


def test_room_is_read_at_most_once_per_interval_and_not_at_all_between() -> None:
    slot_room, clock, reads = room([10])
    slot_room.take("m")
    clock.now += ROOM_READ_SECONDS / 2
    assert not slot_room.due("m")
    slot_room.take("m")
    assert reads == ["m"]
    clock.now += ROOM_READ_SECONDS / 2
    assert slot_room.due("m")


def test_a_gap_between_reads_or_an_unreadable_count_is_no_room() -> None:
    held = [10]
    slot_room, clock, _ = room(held)
    slot_room.take("m")
    clock.now += 3 * ROOM_READ_SECONDS  # too long ago to confirm anything
    assert not slot_room.take("m")
    clock.now += ROOM_READ_SECONDS
    held[0] = -1
    assert not slot_room.take("m")


def test_a_model_whose_share_is_all_held_has_no_room() -> None:
    slot_room, clock, _ = room([8], slots=8)
    slot_room.take("m")
    clock.now += ROOM_READ_SECONDS
    assert not slot_room.take("m")


def test_a_slot_given_by_a_chain_that_ended_is_room_for_its_batch_at_once_and_only_for_a_moment() -> None:
    slot_room, clock, _ = room([16])  # every slot held, as the reads see it
    slot_room.give("m", "b1")
    assert not slot_room.take("m", "b2")  # another batch's chains see it when the reads do
    assert slot_room.take("m", "b1")  # no read needed to confirm it
    assert not slot_room.take("m", "b1")  # handed out once
    slot_room.give("m", "b1")
    clock.now += ROOM_READ_SECONDS  # not taken in time: another chain may hold it by now
    assert not slot_room.take("m", "b1")
