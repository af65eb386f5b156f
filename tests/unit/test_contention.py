"""Batches contending for one model's slot map: their tags, and who gives way to whom."""

from __future__ import annotations

from functools import partial

import pytest
from batchgw.domain.contention import Tag, owed, parse_tag, stale_tags, tag_of, yields

# The decision with BATCH_TENANT_SHARES on.
gives_way = partial(yields, by_tenant=True)

ALICE = Tag("user-alice", created_at=100.0)
BOB = Tag("user-bob", created_at=200.0)


def tags(**batches: Tag) -> dict[str, str]:
    return {batch: tag_of(tag) for batch, tag in batches.items()}


def test_a_tag_reads_back_as_written_to_the_millisecond() -> None:
    tag = Tag(
        "user-alice", weight=2.5, priority=-7, complete_by=1_796_641_400.25, created_at=1_796_637_800.125
    )
    assert parse_tag(tag_of(tag)) == tag
    assert parse_tag(tag_of(Tag("u"))) == Tag("u")


def test_a_tag_this_release_cannot_read_is_no_tag() -> None:
    for text in (None, "", "2|u|1|0||0", "1|u|x|0||0", "1|u|0|0||0", "1|u|1|0|"):
        assert parse_tag(text) is None


def test_nobody_gives_way_while_no_other_batch_waits() -> None:
    held = {"a": 4}
    assert not gives_way("a", 4, held, [], {}, ALICE, holding=True)
    assert not gives_way("a", 4, held, ["a"], {}, ALICE, holding=True)


def test_a_later_batch_of_the_same_tenant_with_a_higher_priority_takes_every_slot() -> None:
    urgent = Tag("user-alice", priority=5, created_at=300.0)
    on_map = tags(a=ALICE, b=urgent)
    held = {"a": 4}
    assert gives_way("a", 4, held, ["b"], on_map, ALICE, holding=True)
    # Without the priority, the batch made first keeps its slots.
    assert not gives_way(
        "a", 4, held, ["b"], tags(a=ALICE, b=Tag("user-alice", created_at=300.0)), ALICE, holding=True
    )


def test_an_earlier_complete_by_goes_first_at_equal_priority() -> None:
    later = Tag("user-alice", complete_by=9_000.0, created_at=100.0)
    sooner = Tag("user-alice", complete_by=5_000.0, created_at=300.0)
    assert gives_way("a", 4, {"a": 4}, ["b"], tags(a=later, b=sooner), later, holding=True)


def test_two_tenants_share_the_model_by_half_whatever_their_batch_counts() -> None:
    on_map = tags(
        a1=ALICE, a2=Tag("user-alice", created_at=101.0), a3=Tag("user-alice", created_at=102.0), b=BOB
    )
    held = {"a1": 6, "a2": 1, "a3": 1}
    # Bob waits: alice's batches hold 8 of 8, 4 more than her half.
    assert gives_way("a1", 8, held, ["b"], on_map, ALICE, holding=True)
    # Once bob holds his half, nobody else gives way for him.
    held = {"a1": 4, "b": 4}
    assert not gives_way("a1", 8, held, ["b", "a2"], on_map, ALICE, holding=True)
    assert not gives_way("b", 8, held, ["a2"], on_map, BOB, holding=True)


def test_a_weight_doubles_a_tenants_share() -> None:
    heavy = Tag("user-bob", weight=2.0, created_at=200.0)
    on_map = tags(a=ALICE, b=heavy)
    # 2:1 of 6 slots: alice keeps 2.
    assert gives_way("a", 6, {"a": 3, "b": 3}, ["a", "b"], on_map, ALICE, holding=True)
    assert not gives_way("a", 6, {"a": 2, "b": 4}, ["a", "b"], on_map, ALICE, holding=True)


def test_a_batch_without_a_tag_is_a_tenant_of_its_own() -> None:
    # Two untagged batches (chains of an older release) share by half, as before.
    assert gives_way("a", 4, {"a": 4}, ["b"], {}, Tag("batch:a"), holding=True)
    assert not gives_way("a", 4, {"a": 2, "b": 2}, ["b"], {}, Tag("batch:a"), holding=True)


def test_a_free_slot_owed_to_a_waiting_batch_is_not_taken_by_another() -> None:
    urgent = Tag("user-alice", priority=5, created_at=300.0)
    on_map = tags(a=ALICE, b=urgent)
    assert gives_way("a", 4, {"b": 3}, ["b"], on_map, ALICE, holding=False)
    assert not gives_way("b", 4, {"b": 3}, ["a"], on_map, urgent, holding=False)


def test_a_batch_finding_the_model_full_is_owed_what_others_hold_beyond_their_share() -> None:
    assert owed("b", 4, {"a": 4}, [], tags(a=ALICE, b=BOB), BOB)
    assert not owed("b", 4, {"a": 2, "b": 2}, [], tags(a=ALICE, b=BOB), BOB)
    assert not owed("b", 4, {"b": 4}, [], tags(b=BOB), BOB)


def test_tags_of_batches_neither_holding_nor_waiting_are_stale() -> None:
    assert stale_tags(["a", "b", "c"], {"a": 1, "b": 0}, ["c"]) == ["b"]


def test_with_tenant_shares_off_every_batch_has_the_even_share_whatever_its_tag() -> None:
    urgent = Tag("user-alice", priority=5, created_at=300.0)
    on_map = tags(a=ALICE, b=urgent)
    # Off: b's priority counts for nothing; a keeps its even part (2 of 4) and gives the rest.
    assert yields("a", 4, {"a": 4}, ["b"], on_map, ALICE, holding=True, by_tenant=False)
    assert not yields("a", 4, {"a": 2, "b": 2}, ["b"], on_map, ALICE, holding=True, by_tenant=False)
    # On, the same map: a gives every slot to b.
    assert yields("a", 4, {"a": 2, "b": 2}, ["b"], on_map, ALICE, holding=True, by_tenant=True)


@pytest.mark.parametrize("by_tenant", [False, True])
def test_a_waiting_flex_request_goes_before_every_batch_whatever_its_share(by_tenant: bool) -> None:
    on_map = tags(a=ALICE)
    flex = "flex_1"
    # a holds every slot: it lets one go at its next request, though it holds no more than its part
    assert yields("a", 4, {"a": 4}, [flex], on_map, ALICE, holding=True, by_tenant=by_tenant)
    # ...as many as flex requests wait beyond the free slots, no more
    assert yields("a", 4, {"a": 3}, [flex, "flex_2"], on_map, ALICE, holding=True, by_tenant=by_tenant)
    assert not yields("a", 4, {"a": 3}, [flex], on_map, ALICE, holding=True, by_tenant=by_tenant)
    assert not yields("a", 4, {"a": 2, flex: 1}, [flex], on_map, ALICE, holding=True, by_tenant=by_tenant)
    # a free slot goes to the flex request, not to a batch: only one more than flex waits is a's
    assert yields("a", 4, {"a": 3}, [flex], on_map, ALICE, holding=False, by_tenant=by_tenant)
    assert not yields("a", 4, {"a": 2}, [flex], on_map, ALICE, holding=False, by_tenant=by_tenant)
    # the flex request itself gives way to no batch, and nothing changes once none waits
    assert not yields(flex, 4, {"a": 4}, ["a"], on_map, None, holding=False, by_tenant=by_tenant)
    assert not yields("a", 4, {"a": 3, flex: 1}, [], on_map, ALICE, holding=True, by_tenant=by_tenant)
