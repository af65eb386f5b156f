"""Tenants sharing a model's batch slots: who should hold how many, and when a batch ends.

Across tenants, weighted max-min fair (``fair_shares``): each tenant with work on the model
gets slots in proportion to its weight, and a tenant that needs less than that leaves the
rest to the others. Within a tenant, its share goes to its batches in ``order_key`` order:
higher priority, then earlier ``complete_by`` (none last), then creation. ``allocate`` turns
that into whole slots per batch; ``gives_back`` and ``may_take`` say what a chain does with
them (running requests are never interrupted: a batch over its allocation gives a slot back
at its next request). ``promise`` estimates when a new batch would end. Why, and what the
simulation measured: docs/design/scheduling.md, "Deadlines, priorities and tenants".

Pure: the callers read the slot map and the batches, and act on the answer.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

# A share within this much of a whole slot counts as that slot (float sums of weights).
_EPSILON = 1e-9


@dataclass(frozen=True)
class Claim:
    """A batch's claim on one model's batch slots.

    ``demand`` is the slots it can use now: its requests waiting plus those running. Every
    claim of one tenant carries that tenant's ``weight`` (an administrator's, 1 by default).
    """

    batch_id: str
    tenant: str
    demand: int
    created_at: float
    priority: int = 0
    complete_by: float | None = None
    weight: float = 1.0

    def __post_init__(self) -> None:
        if self.demand < 0:
            raise ValueError(f"demand must not be negative: {self.demand}")
        if not self.weight > 0:
            raise ValueError(f"weight must be positive: {self.weight}")


def order_key(claim: Claim) -> tuple[int, bool, float, float, str]:
    """Within a tenant, who is served first: higher priority, then the earlier ``complete_by``
    (a batch without one after those with one), then the earlier created, then the batch id."""
    deadline = claim.complete_by
    return (-claim.priority, deadline is None, deadline or 0.0, claim.created_at, claim.batch_id)


def fair_shares(slots: float, demands: Mapping[str, int], weights: Mapping[str, float]) -> dict[str, float]:
    """Each tenant's weighted max-min fair share of ``slots`` (water-filling, not rounded).

    A tenant gets ``level * weight`` for the one ``level`` at which the shares add up to
    ``slots``, or its demand when that is less; with more slots than demand, every demand.
    """
    order = sorted(demands, key=lambda tenant: (demands[tenant] / weights[tenant], tenant))
    shares: dict[str, float] = {}
    left = max(0.0, float(slots))
    weight_left = math.fsum(weights[tenant] for tenant in order)
    for index, tenant in enumerate(order):
        level = left / weight_left if weight_left > 0 else 0.0
        if demands[tenant] <= level * weights[tenant] + _EPSILON:
            shares[tenant] = float(demands[tenant])
            left = max(0.0, left - demands[tenant])
            weight_left -= weights[tenant]
            continue
        for rest in order[index:]:
            shares[rest] = level * weights[rest]
        break
    return shares


def tenant_slots(slots: int, claims: Iterable[Claim]) -> dict[str, int]:
    """Whole slots per tenant: the fair shares rounded down, the slots rounding leaves given
    by largest remainder, then to the tenant whose first batch came first (then its id).

    Never more than ``slots`` in all nor more than a tenant's demand; exactly
    ``min(slots, total demand)``: no slot is left idle while a tenant needs one.
    """
    demands: dict[str, int] = defaultdict(int)
    weights: dict[str, float] = {}
    first: dict[str, tuple[float, str]] = {}
    for claim in claims:
        demands[claim.tenant] += claim.demand
        weights[claim.tenant] = max(weights.get(claim.tenant, 0.0), claim.weight)
        seen = (claim.created_at, claim.batch_id)
        first[claim.tenant] = min(first.get(claim.tenant, seen), seen)
    slots = max(0, slots)
    total = sum(demands.values())
    if total <= slots:
        return dict(demands)
    shares = fair_shares(slots, demands, weights)
    whole = {tenant: min(demands[tenant], math.floor(share + _EPSILON)) for tenant, share in shares.items()}
    ranked = sorted(shares, key=lambda tenant: (whole[tenant] - shares[tenant], first[tenant], tenant))
    left = slots - sum(whole.values())
    while left > 0:  # once round, as a rule: each remainder is below a slot
        for tenant in ranked:
            if left > 0 and whole[tenant] < demands[tenant]:
                whole[tenant] += 1
                left -= 1
    for tenant in reversed(ranked):  # only if floats rounded a share past a slot
        while left < 0 and whole[tenant] > 0:
            whole[tenant] -= 1
            left += 1
    return whole


def allocate(slots: int, claims: Sequence[Claim]) -> dict[str, int]:
    """The slots each batch should hold: its tenant's whole slots (``tenant_slots``) handed to
    the tenant's batches in ``order_key`` order, each up to its demand.

    Every claim's batch is in the answer (0 for one that gets none). The allocation adds up
    to ``min(slots, total demand)``, and it is a function of the claims alone (their order
    does not matter).
    """
    per_tenant = tenant_slots(slots, claims)
    allocation: dict[str, int] = {}
    for claim in sorted(claims, key=order_key):
        give = min(claim.demand, per_tenant[claim.tenant])
        per_tenant[claim.tenant] -= give
        allocation[claim.batch_id] = allocation.get(claim.batch_id, 0) + give
    return allocation


def shortfall(held: Mapping[str, int], allocation: Mapping[str, int], *, but: str = "") -> int:
    """The slots batches (other than ``but``) lack to hold their allocation."""
    return sum(max(0, want - held.get(batch, 0)) for batch, want in allocation.items() if batch != but)


def gives_back(batch_id: str, slots: int, held: Mapping[str, int], allocation: Mapping[str, int]) -> bool:
    """Whether a chain of ``batch_id`` should let its slot go at its next request (a request
    running is never interrupted): the batch holds more than its allocation while other
    batches lack more slots than are free (or the model holds more than ``slots``)."""
    if held.get(batch_id, 0) <= allocation.get(batch_id, 0):
        return False
    free = slots - sum(held.values())
    return shortfall(held, allocation, but=batch_id) > free


def giving_back(slots: int, held: Mapping[str, int], allocation: Mapping[str, int]) -> frozenset[str]:
    """Every batch ``gives_back`` would name, in one pass over the slot map."""
    free = slots - sum(held.values())
    if shortfall(held, allocation) <= free:
        return frozenset()
    return frozenset(batch for batch, count in held.items() if count > allocation.get(batch, 0))


def may_take(batch_id: str, slots: int, held: Mapping[str, int], allocation: Mapping[str, int]) -> bool:
    """Whether a chain of ``batch_id`` may take a free slot: the batch holds less than its
    allocation, or more slots are free than the other batches lack (none stands idle)."""
    free = slots - sum(held.values())
    if free <= 0:
        return False
    if held.get(batch_id, 0) < allocation.get(batch_id, 0):
        return True
    return free > shortfall(held, allocation, but=batch_id)


@dataclass(frozen=True)
class Promise:
    """When a batch would end, and whether that meets its ``complete_by``."""

    estimated_completion_at: float
    complete_by: float | None

    @property
    def feasible(self) -> bool:
        return self.complete_by is None or self.estimated_completion_at <= self.complete_by

    @property
    def earliest_completion_at(self) -> float:
        return self.estimated_completion_at


def promise(
    now: float, claim: Claim, others: Sequence[Claim], *, slots: int, request_seconds: float
) -> Promise:
    """When ``claim``'s batch would end on a model whose other batches are ``others``.

    Assumes: the model keeps ``slots`` batch slots; each slot ends a request every
    ``request_seconds`` (the model's recent pace); every demand is the batch's requests left,
    each batch running at its allocation (``allocate``) until one ends, the allocation made
    again then; no batch arrives meanwhile. So it is the estimate under the tenant's share,
    after what the tenant's batches ahead take, and a batch that arrives later (another
    tenant's, or one of a higher priority in the same tenant) can delay it.
    """
    if claim.demand == 0:
        return Promise(now, claim.complete_by)
    if slots <= 0 or request_seconds <= 0:
        return Promise(math.inf, claim.complete_by)
    left = {other.batch_id: float(other.demand) for other in others if other.demand > 0}
    left[claim.batch_id] = float(claim.demand)
    claims = {other.batch_id: other for other in others}
    claims[claim.batch_id] = claim
    clock = now
    while True:
        current = [replace(claims[batch], demand=math.ceil(rest - _EPSILON)) for batch, rest in left.items()]
        allocation = allocate(slots, current)
        rates = {batch: count / request_seconds for batch, count in allocation.items() if count > 0}
        # Until the next batch ends (this one gets no slot before a batch ahead of it ends).
        step = min(left[batch] / rate for batch, rate in rates.items())
        clock += step
        if claim.batch_id in rates and left[claim.batch_id] / rates[claim.batch_id] <= step + _EPSILON:
            return Promise(clock, claim.complete_by)
        for batch, rate in rates.items():
            left[batch] -= rate * step
            if left[batch] <= _EPSILON:
                del left[batch]
