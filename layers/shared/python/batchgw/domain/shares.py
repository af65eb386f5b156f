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
# A batch with a ``complete_by`` is kept the slots that would end it in this share of its time
# left (``reserves``): requests' lengths vary, and the batch slots move with interactive traffic.
DEADLINE_MARGIN = 0.8


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


def fair_shares(
    slots: float,
    demands: Mapping[str, int],
    weights: Mapping[str, float],
    floors: Mapping[str, int] | None = None,
) -> dict[str, float]:
    """Each tenant's weighted max-min fair share of ``slots`` (water-filling, not rounded).

    A tenant gets ``level * weight`` for the one ``level`` at which the shares add up to
    ``slots``, but never less than its floor (0 unless given) nor more than its demand; with
    more slots than demand, every demand. The floors must add up to ``slots`` at most.
    """
    if sum(demands.values()) <= slots:
        return {tenant: float(demand) for tenant, demand in demands.items()}
    floor = {tenant: min(demand, (floors or {}).get(tenant, 0)) for tenant, demand in demands.items()}
    # Sweep the level up: a tenant's share grows with it from its floor to its demand.
    points = sorted(
        [(floor[tenant] / weights[tenant], 0, tenant) for tenant in demands]
        + [(demands[tenant] / weights[tenant], 1, tenant) for tenant in demands]
    )
    total, slope, level = float(sum(floor.values())), 0.0, 0.0
    for point, ends, tenant in points:
        reach = total + slope * (point - level)
        if slope > 0 and reach >= slots:
            level += (slots - total) / slope
            break
        total, level = reach, point
        slope += -weights[tenant] if ends else weights[tenant]
    return {
        tenant: min(float(demands[tenant]), max(float(floor[tenant]), level * weights[tenant]))
        for tenant in demands
    }


@dataclass(frozen=True)
class Pace:
    """The moment an allocation is made and the model's recent pace: a slot ends a request
    every ``request_seconds``. Given to ``allocate``, it makes room for deadlines at risk."""

    now: float
    request_seconds: float


def reserves(slots: int, claims: Iterable[Claim], pace: Pace) -> dict[str, int]:
    """The slots each batch with a ``complete_by`` needs to end by it at the model's pace,
    aiming ``DEADLINE_MARGIN`` of its time left ahead, earliest deadline first while slots
    last. A batch already past its ``complete_by`` has missed it: none for it."""
    kept: dict[str, int] = {}
    left = max(0, slots)
    dated = [claim for claim in claims if claim.complete_by is not None and claim.complete_by > pace.now]
    for claim in sorted(dated, key=order_key):
        assert claim.complete_by is not None
        seconds = (claim.complete_by - pace.now) * DEADLINE_MARGIN
        need = math.ceil(claim.demand * pace.request_seconds / seconds - _EPSILON)
        kept[claim.batch_id] = min(need, claim.demand, left)
        left -= kept[claim.batch_id]
    return kept


def tenant_slots(
    slots: int, claims: Iterable[Claim], kept: Mapping[str, int] | None = None
) -> dict[str, int]:
    """Whole slots per tenant: the fair shares rounded down, the slots rounding leaves given
    by largest remainder, then to the tenant whose first batch came first (then its id).

    A tenant gets at least the slots ``kept`` for its batches (``reserves``). Never more than
    ``slots`` in all nor more than a tenant's demand; exactly ``min(slots, total demand)``: no
    slot is left idle while a tenant needs one.
    """
    demands: dict[str, int] = defaultdict(int)
    weights: dict[str, float] = {}
    first: dict[str, tuple[float, str]] = {}
    floors: dict[str, int] = defaultdict(int)
    for claim in claims:
        demands[claim.tenant] += claim.demand
        weights[claim.tenant] = max(weights.get(claim.tenant, 0.0), claim.weight)
        seen = (claim.created_at, claim.batch_id)
        first[claim.tenant] = min(first.get(claim.tenant, seen), seen)
        floors[claim.tenant] += (kept or {}).get(claim.batch_id, 0)
    slots = max(0, slots)
    total = sum(demands.values())
    if total <= slots:
        return dict(demands)
    shares = fair_shares(slots, demands, weights, floors)
    whole = {tenant: min(demands[tenant], math.floor(share + _EPSILON)) for tenant, share in shares.items()}
    ranked = sorted(shares, key=lambda tenant: (whole[tenant] - shares[tenant], first[tenant], tenant))
    left = slots - sum(whole.values())
    while left > 0:  # once round, as a rule: each remainder is below a slot
        for tenant in ranked:
            if left > 0 and whole[tenant] < demands[tenant]:
                whole[tenant] += 1
                left -= 1
    for tenant in reversed(ranked):  # only if floats rounded a share past a slot
        while left < 0 and whole[tenant] > floors[tenant]:
            whole[tenant] -= 1
            left += 1
    return whole


def allocate(slots: int, claims: Sequence[Claim], pace: Pace | None = None) -> dict[str, int]:
    """The slots each batch should hold: its tenant's whole slots (``tenant_slots``) handed to
    the tenant's batches in ``order_key`` order, each up to its demand.

    With ``pace``, deadlines at risk come first: each batch with a ``complete_by`` has the
    slots it needs to end by it (``reserves``) kept for it, from its tenant's share when that
    is enough, beyond it (from other tenants) when not; the rest is shared as without.
    Every claim's batch is in the answer (0 for one that gets none). The allocation adds up
    to ``min(slots, total demand)``, and it is a function of the claims alone (their order
    does not matter).
    """
    kept = reserves(slots, claims, pace) if pace is not None else {}
    per_tenant = tenant_slots(slots, claims, kept)
    allocation: dict[str, int] = {}
    for claim in claims:
        give = kept.get(claim.batch_id, 0)
        per_tenant[claim.tenant] -= give
        allocation[claim.batch_id] = allocation.get(claim.batch_id, 0) + give
    for claim in sorted(claims, key=order_key):
        give = min(claim.demand - kept.get(claim.batch_id, 0), per_tenant[claim.tenant])
        per_tenant[claim.tenant] -= give
        allocation[claim.batch_id] += give
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
    each batch running at its fair allocation (``allocate`` without a pace: no room kept for
    deadlines) until one ends, the allocation made again then; no batch arrives meanwhile.
    So it is the estimate under the tenant's share, after what the tenant's batches ahead
    take. A batch that arrives later (another tenant's, or one of a higher priority in the
    same tenant) or busier interactive traffic can delay it: the room ``allocate`` keeps for
    a deadline at risk, given a pace, is what holds a promise made here then.
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
