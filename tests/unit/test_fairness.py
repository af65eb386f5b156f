"""Batches on one model share its slots (``domain.fairness``): who gives way to a batch that
waits, as a pure function of the slot map."""

from __future__ import annotations

from batchgw.domain.fairness import batch_of, even_part, gives_way, held_by_batch, token_of


def test_nobody_gives_way_when_no_other_batch_waits() -> None:
    assert not gives_way("a", 32, {"a": 32}, [], holding=True)
    assert not gives_way("a", 32, {"a": 32}, ["a"], holding=True)  # its own chains wait: no one else


def test_a_batch_holding_every_slot_gives_way_down_to_its_even_part_while_another_waits() -> None:
    assert gives_way("a", 32, {"a": 32}, ["b"], holding=True)
    assert gives_way("a", 32, {"a": 17}, ["b"], holding=True)
    assert not gives_way("a", 32, {"a": 16}, ["b"], holding=True)
    # A new chain of it takes no slot that would put it over its part.
    assert gives_way("a", 32, {"a": 16}, ["b"], holding=False)
    assert not gives_way("a", 32, {"a": 15}, ["b"], holding=False)


def test_the_even_part_counts_the_batches_holding_and_waiting() -> None:
    held = {"a": 20, "b": 10}
    assert even_part(32, 3) == 10
    assert gives_way("a", 32, held, ["c"], holding=True)
    assert not gives_way("b", 32, held, ["c"], holding=True)  # at its part: keeps it


def test_a_waiting_batch_that_holds_its_part_already_is_not_let_in_further() -> None:
    assert not gives_way("a", 32, {"a": 16, "b": 16}, ["b"], holding=True)
    assert gives_way("a", 32, {"a": 20, "b": 12}, ["b"], holding=True)


def test_with_more_batches_than_slots_each_keeps_the_one_it_holds() -> None:
    held = {"a": 1, "b": 1}
    assert not gives_way("a", 2, held, ["c"], holding=True)
    assert gives_way("a", 2, held, ["c"], holding=False)  # but takes no second one


def test_a_slot_token_names_its_batch_and_a_lapsed_lease_holds_nothing() -> None:
    token = token_of("batch_01abc", "f00d")
    assert batch_of(token) == "batch_01abc" and batch_of("f00d") == ""
    holders = {token: 100.0, token_of("batch_01abc", "beef"): 50.0, token_of("batch_02", "1"): 100.0}
    assert held_by_batch(holders, now=60.0) == {"batch_01abc": 1, "batch_02": 1}
