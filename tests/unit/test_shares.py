"""Tenants share a model's batch slots (``domain.shares``): weighted max-min fair across
tenants, priority then deadline then creation within one, and the estimate made at create."""

from __future__ import annotations

import itertools
import math
import random
from collections import defaultdict
from dataclasses import replace
from fractions import Fraction

import pytest
from batchgw.domain.shares import (
    DEADLINE_MARGIN,
    Claim,
    Pace,
    allocate,
    fair_shares,
    gives_back,
    giving_back,
    may_take,
    order_key,
    promise,
    reserves,
    tenant_slots,
)
from hypothesis import given, settings
from hypothesis import strategies as st


def claim(batch: str, tenant: str, demand: int, created_at: float = 0.0, **fields: object) -> Claim:
    return Claim(batch, tenant, demand, created_at, **fields)  # type: ignore[arg-type]


def per_tenant(allocation: dict[str, int], claims: list[Claim]) -> dict[str, int]:
    totals: dict[str, int] = defaultdict(int)
    for c in claims:
        totals[c.tenant] += allocation[c.batch_id]
    return dict(totals)


def test_a_tenant_with_one_batch_holds_half_beside_a_tenant_with_three() -> None:
    claims = [
        claim("a1", "alice", 100, 1),
        claim("a2", "alice", 100, 2),
        claim("a3", "alice", 100, 3),
        claim("b1", "bob", 100, 4),
    ]
    allocation = allocate(32, claims)
    assert allocation["b1"] == 16
    assert per_tenant(allocation, claims) == {"alice": 16, "bob": 16}


def test_a_tenants_weight_scales_its_share() -> None:
    claims = [claim("a", "alice", 100, weight=3.0), claim("b", "bob", 100)]
    assert allocate(40, claims) == {"a": 30, "b": 10}


def test_a_tenant_needing_less_than_its_share_leaves_the_rest_to_the_others() -> None:
    claims = [claim("a", "alice", 2), claim("b", "bob", 50)]
    assert allocate(10, claims) == {"a": 2, "b": 8}
    three = [claim("a", "alice", 2), claim("b", "bob", 50), claim("c", "carol", 50)]
    assert allocate(10, three) == {"a": 2, "b": 4, "c": 4}


def test_with_more_slots_than_demand_every_batch_gets_its_demand() -> None:
    claims = [claim("a", "alice", 3), claim("b", "bob", 5)]
    assert allocate(64, claims) == {"a": 3, "b": 5}


def test_within_a_tenant_priority_comes_first_then_the_deadline_then_creation() -> None:
    claims = [
        claim("old", "alice", 10, created_at=1),
        claim("new", "alice", 10, created_at=5),
        claim("due-late", "alice", 10, created_at=9, complete_by=500),
        claim("due-soon", "alice", 10, created_at=9, complete_by=100),
        claim("urgent", "alice", 10, created_at=10, priority=2),
        claim("low", "alice", 10, created_at=0, priority=-1),
    ]
    assert [c.batch_id for c in sorted(claims, key=order_key)] == [
        "urgent",
        "due-soon",
        "due-late",
        "old",
        "new",
        "low",
    ]
    allocation = allocate(25, claims)
    assert allocation == {"urgent": 10, "due-soon": 10, "due-late": 5, "old": 0, "new": 0, "low": 0}


def test_the_batch_id_breaks_the_last_tie() -> None:
    claims = [claim("b", "alice", 5, 1), claim("a", "alice", 5, 1)]
    assert allocate(5, claims) == {"a": 5, "b": 0}


def test_the_slot_rounding_leaves_goes_to_the_largest_remainder_then_the_first_tenant() -> None:
    claims = [claim("a", "alice", 10, 1), claim("b", "bob", 10, 2), claim("c", "carol", 10, 3)]
    assert allocate(10, claims) == {"a": 4, "b": 3, "c": 3}
    weighted = [claim("a", "alice", 10, 1), claim("b", "bob", 10, 2, weight=2.0)]
    assert allocate(10, weighted) == {"a": 3, "b": 7}  # 3.33 and 6.67: bob's remainder is larger


def test_the_allocation_is_the_same_whatever_order_the_claims_come_in() -> None:
    rng = random.Random(7)
    claims = [
        claim(f"b{i}", f"t{i % 4}", rng.randint(0, 30), rng.random(), priority=rng.randint(-1, 1))
        for i in range(20)
    ]
    first = allocate(37, claims)
    for _ in range(10):
        rng.shuffle(claims)
        assert allocate(37, claims) == first


def test_a_batch_over_its_allocation_gives_a_slot_back_only_while_another_lacks_one() -> None:
    allocation = {"a": 5, "b": 5}
    assert gives_back("a", 10, {"a": 8, "b": 2}, allocation)
    assert not gives_back("b", 10, {"a": 8, "b": 2}, allocation)
    assert not gives_back("a", 10, {"a": 5, "b": 5}, allocation)
    # Free slots enough for b: a keeps what it holds, b takes the free ones.
    assert not gives_back("a", 13, {"a": 8, "b": 2}, {"a": 8, "b": 5})


def test_the_model_over_its_slots_makes_batches_over_their_allocation_give_back() -> None:
    # Interactive traffic took slots: the batch slots fell to 6 while 10 were held.
    assert gives_back("a", 6, {"a": 5, "b": 5}, {"a": 3, "b": 3})


def test_a_free_slot_goes_first_to_a_batch_below_its_allocation_and_never_stands_idle() -> None:
    allocation = {"a": 5, "b": 5}
    held = {"a": 5, "b": 4}
    assert may_take("b", 10, held, allocation)
    assert not may_take("a", 10, held, allocation)
    assert not may_take("b", 9, held, allocation)  # no slot free
    # Two free, b lacks one: a may take the other (no slot idle).
    assert may_take("a", 11, held, {"a": 6, "b": 5})


# --- deadlines at risk -----------------------------------------------------------------------------


def test_a_deadline_at_risk_gets_the_slots_it_needs_beyond_its_tenants_fair_share() -> None:
    # 100 requests of 1 s due in 10 s: 100 / (10 * margin) slots to end in time, of 20.
    due = claim("due", "alice", 100, complete_by=10.0)
    claims = [due, claim("b", "bob", 100), claim("c", "carol", 100)]
    need = math.ceil(100 / (10 * DEADLINE_MARGIN))
    assert allocate(20, claims)["due"] == 6  # a third (rounded down: b and c come first), without
    allocation = allocate(20, claims, Pace(now=0.0, request_seconds=1.0))
    assert allocation["due"] == need
    assert allocation["b"] + allocation["c"] == 20 - need
    assert abs(allocation["b"] - allocation["c"]) <= 1  # the rest still shared fairly


def test_a_deadline_not_at_risk_changes_nothing() -> None:
    claims = [claim("due", "alice", 100, complete_by=1e6), claim("b", "bob", 100), claim("c", "carol", 100)]
    assert allocate(20, claims, Pace(now=0.0, request_seconds=1.0)) == allocate(20, claims)


def test_a_deadline_at_risk_comes_before_a_higher_priority_batch_of_its_own_tenant() -> None:
    claims = [claim("urgent", "alice", 50, priority=5), claim("due", "alice", 50, complete_by=10.0)]
    allocation = allocate(10, claims, Pace(now=0.0, request_seconds=1.0))
    need = math.ceil(50 / (10 * DEADLINE_MARGIN))
    assert allocation == {"urgent": 10 - need, "due": need}


def test_reserves_go_earliest_deadline_first_while_slots_last_and_none_to_a_missed_one() -> None:
    claims = [
        claim("later", "a", 100, complete_by=20.0),
        claim("sooner", "b", 100, complete_by=10.0),
        claim("missed", "c", 100, complete_by=5.0),
    ]
    assert reserves(16, claims, Pace(now=6.0, request_seconds=1.0)) == {"sooner": 16, "later": 0}


# --- the estimate ----------------------------------------------------------------------------------


def test_a_lone_batch_ends_after_its_requests_over_its_slots_at_the_models_pace() -> None:
    made = promise(100.0, claim("a", "alice", 100), [], slots=10, request_seconds=2.0)
    assert made.estimated_completion_at == pytest.approx(100 + 100 * 2 / 10)


def test_a_batch_beside_another_tenant_runs_on_half_then_on_all_when_that_one_ends() -> None:
    # 10 slots, 1 s a request: b (40 left) and a (100) run on 5 each; b ends at 8 s, a has
    # 60 left, on 10 slots: 6 s more.
    made = promise(0.0, claim("a", "alice", 100), [claim("b", "bob", 40)], slots=10, request_seconds=1.0)
    assert made.estimated_completion_at == pytest.approx(14.0)


def test_a_batch_behind_its_tenants_earlier_batch_waits_for_that_one() -> None:
    # Alice's earlier batch takes her whole share (10 slots alone): 50 s, then 30 s more.
    ahead = claim("first", "alice", 500, created_at=0)
    made = promise(1.0, claim("second", "alice", 300, created_at=1), [ahead], slots=10, request_seconds=1.0)
    assert made.estimated_completion_at == pytest.approx(1 + 50 + 30)


def test_a_deadline_before_the_estimate_is_infeasible_and_names_the_earliest_completion() -> None:
    made = promise(0.0, claim("a", "alice", 100, complete_by=5.0), [], slots=10, request_seconds=1.0)
    assert not made.feasible
    assert made.earliest_completion_at == pytest.approx(10.0)
    assert promise(
        0.0, claim("a", "alice", 100, complete_by=10.0), [], slots=10, request_seconds=1.0
    ).feasible
    assert promise(0.0, claim("a", "alice", 100), [], slots=10, request_seconds=1.0).feasible


def test_a_model_without_batch_slots_can_promise_no_deadline() -> None:
    made = promise(0.0, claim("a", "alice", 1, complete_by=1e12), [], slots=0, request_seconds=1.0)
    assert not made.feasible


# --- properties ------------------------------------------------------------------------------------

claims_strategy = st.lists(
    st.tuples(
        st.integers(0, 5),  # tenant
        st.integers(0, 40),  # demand
        st.integers(-2, 2),  # priority
        st.sampled_from([1.0, 1.0, 2.0, 0.5, 3.0]),  # the tenant's weight
    ),
    min_size=1,
    max_size=12,
)


def build(raw: list[tuple[int, int, int, float]]) -> list[Claim]:
    weights: dict[int, float] = {}
    claims = []
    for index, (tenant, demand, priority, weight) in enumerate(raw):
        weights.setdefault(tenant, weight)  # one weight per tenant
        claims.append(
            claim(f"b{index}", f"t{tenant}", demand, index, priority=priority, weight=weights[tenant])
        )
    return claims


def exact_fair_shares(slots: int, claims: list[Claim]) -> dict[str, Fraction]:
    """The weighted max-min fair shares by the textbook loop, in exact fractions."""
    demands: dict[str, int] = defaultdict(int)
    weights: dict[str, Fraction] = {}
    for c in claims:
        demands[c.tenant] += c.demand
        weights[c.tenant] = Fraction(c.weight)
    shares: dict[str, Fraction] = {}
    active = set(demands)
    left = Fraction(slots)
    while active:
        level = left / sum(weights[t] for t in active)
        capped = {t for t in active if demands[t] <= level * weights[t]}
        if not capped:
            shares.update({t: level * weights[t] for t in active})
            break
        for t in capped:
            shares[t] = Fraction(demands[t])
            left -= demands[t]
        active -= capped
    return shares


@settings(max_examples=300, deadline=None)
@given(claims_strategy, st.integers(0, 120))
def test_the_allocation_uses_every_slot_some_batch_can_use_and_no_more(
    raw: list[tuple[int, int, int, float]], slots: int
) -> None:
    claims = build(raw)
    allocation = allocate(slots, claims)
    assert sum(allocation.values()) == min(slots, sum(c.demand for c in claims))
    assert all(0 <= allocation[c.batch_id] <= c.demand for c in claims)


@settings(max_examples=300, deadline=None)
@given(claims_strategy, st.integers(0, 120))
def test_each_tenant_holds_its_max_min_fair_share_within_a_slot(
    raw: list[tuple[int, int, int, float]], slots: int
) -> None:
    claims = build(raw)
    allocation = allocate(slots, claims)
    held = per_tenant(allocation, claims)
    exact = exact_fair_shares(slots, claims)
    for tenant, share in exact.items():
        assert share - 1 < held[tenant] < share + 1
    # No tenant short of its demand could take a slot from another without leaving itself
    # the richer of the two, by weight.
    weight = {c.tenant: Fraction(c.weight) for c in claims}
    demand = {t: sum(c.demand for c in claims if c.tenant == t) for t in held}
    for poor in held:
        if held[poor] < demand[poor]:
            for rich in held:
                if rich != poor and held[rich] > 0:
                    assert (held[poor] + 1) / weight[poor] > (held[rich] - 1) / weight[rich]


@settings(max_examples=200, deadline=None)
@given(claims_strategy, st.integers(0, 120))
def test_within_a_tenant_a_batch_gets_slots_only_once_those_ahead_have_their_demand(
    raw: list[tuple[int, int, int, float]], slots: int
) -> None:
    claims = build(raw)
    allocation = allocate(slots, claims)
    by_tenant: dict[str, list[Claim]] = defaultdict(list)
    for c in sorted(claims, key=order_key):
        by_tenant[c.tenant].append(c)
    for queue in by_tenant.values():
        for ahead, behind in itertools.pairwise(queue):
            if allocation[behind.batch_id] > 0:
                assert allocation[ahead.batch_id] == ahead.demand


def test_fair_shares_add_up_to_the_slots_when_demand_exceeds_them() -> None:
    shares = fair_shares(10, {"a": 2, "b": 50, "c": 50}, {"a": 1.0, "b": 1.0, "c": 1.0})
    assert shares == pytest.approx({"a": 2.0, "b": 4.0, "c": 4.0})
    assert tenant_slots(10, [claim("a", "a", 2), claim("b", "b", 50), claim("c", "c", 50)]) == {
        "a": 2,
        "b": 4,
        "c": 4,
    }


@settings(max_examples=200, deadline=None)
@given(
    st.dictionaries(st.sampled_from("abcdef"), st.integers(0, 12), min_size=1),
    st.dictionaries(st.sampled_from("abcdef"), st.integers(0, 12), min_size=1),
    st.integers(0, 60),
)
def test_the_batches_giving_back_are_those_gives_back_names_one_by_one(
    held: dict[str, int], allocation: dict[str, int], slots: int
) -> None:
    named = {batch for batch in held if gives_back(batch, slots, held, allocation)}
    assert giving_back(slots, held, allocation) == named


@settings(max_examples=200, deadline=None)
@given(claims_strategy, st.integers(0, 120), st.lists(st.floats(1, 500), min_size=12, max_size=12))
def test_with_deadlines_at_risk_the_allocation_still_uses_every_usable_slot_and_no_more(
    raw: list[tuple[int, int, int, float]], slots: int, due: list[float]
) -> None:
    claims = [replace(c, complete_by=due[i] if i % 2 else None) for i, c in enumerate(build(raw))]
    allocation = allocate(slots, claims, Pace(now=0.0, request_seconds=1.0))
    assert sum(allocation.values()) == min(slots, sum(c.demand for c in claims))
    assert all(0 <= allocation[c.batch_id] <= c.demand for c in claims)
    kept = reserves(slots, claims, Pace(now=0.0, request_seconds=1.0))
    assert all(allocation[batch] >= count for batch, count in kept.items())
