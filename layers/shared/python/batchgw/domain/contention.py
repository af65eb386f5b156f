"""Batches contending for one model's slot map: who they are, and who gives way to whom.

Each batch on a model's slot map carries a tag (``tag_of``): its owner (the tenant), the
owner's weight, its priority, its ``complete_by`` and when it was made. ``yields`` turns
the map (slots held per batch, batches waiting, their tags) into ``domain.shares`` claims
and answers what a chain does: a batch that waits wants every slot it can get (its chains
split into the room it is given), one that only holds wants what it holds. So tenants share
the model max-min fair by weight, and within a tenant the batch first in ``shares.order_key``
is served first. A batch without a tag (a chain of an older release) counts as a tenant of
its own, of priority 0: the per-batch even share it had before. With
``BATCH_TENANT_SHARES`` off (the default) ``yields`` is that even share for every batch.

Pure: the callers read the slot map and act on the answer.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from batchgw.domain import fairness
from batchgw.domain.batch import BatchRecord, is_flex
from batchgw.domain.shares import Claim, allocate, gives_back, may_take

_SEPARATOR = "|"
_VERSION = "1"


@dataclass(frozen=True)
class Tag:
    """What the scheduler needs of a batch on a model's slot map, beyond its slots."""

    tenant: str
    weight: float = 1.0
    priority: int = 0
    complete_by: float | None = None
    created_at: float = 0.0


def untagged(batch_id: str) -> Tag:
    """The rank of a batch without a tag: a tenant of its own, of priority 0."""
    return Tag(tenant=f"batch:{batch_id}")


def batch_tag(batch: BatchRecord, weight: float) -> Tag:
    """The tag of ``batch`` (as read), whose owner weighs ``weight`` among tenants."""
    deadline = None if batch.complete_by is None else float(batch.complete_by)
    return Tag(batch.owner, weight, batch.priority, deadline, float(batch.created_at))


def tag_of(tag: Tag) -> str:
    """The tag as the slot map keeps it (one string)."""
    deadline = "" if tag.complete_by is None else f"{tag.complete_by:.3f}"
    return _SEPARATOR.join(
        [_VERSION, tag.tenant, f"{tag.weight:g}", str(tag.priority), deadline, f"{tag.created_at:.3f}"]
    )


def parse_tag(text: str | None) -> Tag | None:
    """The tag ``tag_of`` wrote (None: none, or one this release cannot read)."""
    if not text:
        return None
    parts = text.split(_SEPARATOR)
    if len(parts) != 6 or parts[0] != _VERSION:
        return None
    try:
        weight, priority, created_at = float(parts[2]), int(parts[3]), float(parts[5])
        complete_by = float(parts[4]) if parts[4] else None
    except ValueError:
        return None
    if not weight > 0:
        return None
    return Tag(parts[1], weight, priority, complete_by, created_at)


def contenders(
    slots: int,
    held: Mapping[str, int],
    waiting: Iterable[str],
    tags: Mapping[str, str],
    *,
    me: str,
    my_tag: Tag,
    holding: bool,
) -> list[Claim]:
    """The claims of every batch holding or waiting for a slot, and of ``me``: a waiting
    batch's demand is every slot (it splits into what it is given), a holding one's what it
    holds; ``me``, about to take a slot, one more than it holds."""
    waits = set(waiting)
    batches = {batch for batch, count in held.items() if count > 0 and batch} | waits | {me}
    claims = []
    for batch in sorted(batches):
        found = parse_tag(tags.get(batch))
        tag = found or (my_tag if batch == me else untagged(batch))
        demand = held.get(batch, 0)
        if batch in waits:
            demand = max(demand, slots)
        elif batch == me and not holding:
            demand += 1
        claims.append(
            Claim(
                batch_id=batch,
                tenant=tag.tenant,
                demand=demand,
                created_at=tag.created_at,
                priority=tag.priority,
                complete_by=tag.complete_by,
                weight=tag.weight,
            )
        )
    return claims


def yields(
    batch_id: str,
    slots: int,
    held: Mapping[str, int],
    waiting: Iterable[str],
    tags: Mapping[str, str],
    my_tag: Tag | None,
    *,
    holding: bool,
    by_tenant: bool,
) -> bool:
    """Whether a chain of ``batch_id`` lets its slot go at its next request (``holding``),
    or does not take a free one, for another batch that waits. ``by_tenant``
    (``BATCH_TENANT_SHARES``): its batch holds more than the allocation ``shares.allocate``
    gives it while the others lack slots; off, more than the even part per batch
    (``fairness.gives_way``). Never while no other batch waits.

    A flex request (``domain.batch.is_flex``) waiting goes first, either way: a batch's chain
    lets its slot go at its next request while fewer are free than flex requests wait, and
    takes a free one only if more are free than that (running requests are never
    interrupted): as many slots go to flex requests as wait, not every batch chain's that
    sees one waiting."""
    waits = set(waiting)
    flex_waiting = {batch for batch in waits if is_flex(batch)} - {batch_id}
    if flex_waiting and not is_flex(batch_id):
        free = slots - sum(held.values())
        return free < len(flex_waiting) if holding else free <= len(flex_waiting)
    if not by_tenant:
        return fairness.gives_way(batch_id, slots, held, waits, holding=holding)
    if not waits - {batch_id}:
        return False
    allocation = _allocation(batch_id, slots, held, waits, tags, my_tag, holding=holding)
    if holding:
        return gives_back(batch_id, slots, held, allocation)
    free = slots - sum(held.values())
    return free > 0 and not may_take(batch_id, slots, held, allocation)


def owed(
    batch_id: str,
    slots: int,
    held: Mapping[str, int],
    waiting: Iterable[str],
    tags: Mapping[str, str],
    my_tag: Tag | None,
) -> bool:
    """Whether ``batch_id``, finding the model full, is owed slots other batches hold: waiting,
    its allocation is more than it holds (they give them back at their next request)."""
    if not any(count > 0 and batch != batch_id for batch, count in held.items()):
        return False
    allocation = _allocation(batch_id, slots, held, set(waiting) | {batch_id}, tags, my_tag, holding=True)
    return allocation.get(batch_id, 0) > held.get(batch_id, 0)


def _allocation(
    batch_id: str,
    slots: int,
    held: Mapping[str, int],
    waiting: set[str],
    tags: Mapping[str, str],
    my_tag: Tag | None,
    *,
    holding: bool,
) -> dict[str, int]:
    mine = my_tag or untagged(batch_id)
    return allocate(slots, contenders(slots, held, waiting, tags, me=batch_id, my_tag=mine, holding=holding))


def stale_tags(tags: Iterable[str], held: Mapping[str, int], waiting: Iterable[str]) -> list[str]:
    """The batches whose tag the map keeps though they neither hold a slot nor wait."""
    present = {batch for batch, count in held.items() if count > 0} | set(waiting)
    return [batch for batch in tags if batch not in present]
