"""Work messages survive their trip through the queue, old ones included."""

from __future__ import annotations

import json

from batchgw.domain.chains import ChainMessage, RequestMessage, decode


def test_a_chain_message_comes_back_as_sent_with_its_generation_and_full_streak() -> None:
    for message in (
        ChainMessage("batch_1", 2, 7, 16),
        ChainMessage("batch_1", 2, 7, 16, generation=3, full=5),
        ChainMessage("batch_1", 2, 7, 16, slot="batch_1.ab12"),
        RequestMessage("batch_1", 9),
    ):
        assert decode(message.encode()) == message


def test_a_message_sent_before_the_full_streak_existed_reads_as_none_in_a_row() -> None:
    assert "f" not in json.loads(ChainMessage("batch_1", 0, 0, 4).encode())
    assert decode('{"b":"batch_1","c":0,"i":4,"w":4,"g":2}') == ChainMessage("batch_1", 0, 4, 4, generation=2)


def test_a_slot_taken_for_a_new_chain_is_its_first_runs_alone_not_its_continuations_or_parts() -> None:
    chain = ChainMessage("batch_1", 2, 7, 16, slot="batch_1.ab12")
    assert chain.resume_at(23).slot == ""
    parts = chain.split(total=400, chains=16)
    assert parts is not None and all(part.slot == "" for part in parts)


def indexes(message: ChainMessage, total: int) -> list[int]:
    return list(range(message.next_index, total, message.stride))


def test_a_split_chain_and_its_new_half_walk_exactly_what_it_had_left_between_them() -> None:
    chain = ChainMessage("batch_1", 3, 35, 16, generation=2, full=3)
    halves = chain.split(total=400, chains=16)
    assert halves is not None
    kept, new = halves
    assert (kept.next_index, kept.stride, kept.full) == (35, 32, 0)
    assert (new.next_index, new.stride, new.generation, new.chain) == (51, 32, 2, 3)
    assert sorted(indexes(kept, 400) + indexes(new, 400)) == indexes(chain, 400)
    assert chain.remaining(400) == len(indexes(chain, 400)) == 23


def test_a_chain_with_little_left_or_a_stride_at_its_widest_does_not_split() -> None:
    total = 16 * 8
    assert ChainMessage("batch_1", 0, total - 16 * 3, 16).split(total, chains=16) is None  # 3 left
    assert ChainMessage("batch_1", 0, total - 16 * 4, 16).split(total, chains=16) is not None  # 4 left
    assert ChainMessage("batch_1", 0, 0, 32).split(10_000, chains=16) is not None
    assert ChainMessage("batch_1", 0, 0, 512).split(10_000, chains=16) is not None
    assert ChainMessage("batch_1", 0, 0, 1024).split(10_000, chains=16) is None  # 64 times the first


def test_a_chain_split_in_four_and_its_new_chains_walk_exactly_what_it_had_left_between_them() -> None:
    chain = ChainMessage("batch_1", 3, 35, 16, generation=2, full=3)
    parts = chain.split(total=400, chains=16, ways=4)
    assert parts is not None
    assert [(p.next_index, p.stride, p.full, p.generation) for p in parts] == [
        (35, 64, 0, 2),
        (51, 64, 0, 2),
        (67, 64, 0, 2),
        (83, 64, 0, 2),
    ]
    walked = [i for part in parts for i in indexes(part, 400)]
    assert sorted(walked) == indexes(chain, 400) and len(set(walked)) == len(walked)


def test_a_chain_splits_into_as_many_parts_as_each_keeps_two_and_its_stride_stays_within_bound() -> None:
    assert ChainMessage("batch_1", 0, 0, 16).ways(10_000, chains=16) == 4
    assert ChainMessage("batch_1", 0, 0, 16).ways(10_000, chains=16, most=3) == 3
    total = 16 * 100
    assert ChainMessage("batch_1", 0, total - 16 * 7, 16).ways(total, chains=16) == 3  # 7 left: 3 parts of 2
    assert ChainMessage("batch_1", 0, total - 16 * 3, 16).ways(total, chains=16) == 1  # 3 left
    assert ChainMessage("batch_1", 0, 0, 512).ways(10_000, chains=16) == 2  # 1,024: 64 times the first
    assert ChainMessage("batch_1", 0, 0, 300).ways(10_000, chains=16) == 3  # 900 within, 1,200 not
    assert ChainMessage("batch_1", 0, total - 16 * 7, 16).split(total, chains=16, ways=4) is None
