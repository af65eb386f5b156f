"""Batches on one model share its batch slots: a batch that finds the model full while
another batch holds more than its even part is let in as that batch gives way.

A chain that finds its model full notes its batch as waiting on the model's slot map; a
chain of a batch holding more than the even part (the slots over the batches holding or
waiting for them) gives its slot back at its next request, until the waiting batch holds its
part. Why (a first-come model lets one large batch hold every slot): docs/design/scheduling.md,
"From the code: domain/fairness.py".

Pure: the callers read the slot map (``storage.slots``) and act on the answer.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping

# A slot token is "<batch id>/<random>": who holds the slot is on the map itself.
TOKEN_SEPARATOR = "/"


def token_of(batch_id: str, nonce: str) -> str:
    return f"{batch_id}{TOKEN_SEPARATOR}{nonce}"


def batch_of(token: str) -> str:
    """The batch a slot token belongs to ("" for a token without one)."""
    batch_id, separator, _ = token.rpartition(TOKEN_SEPARATOR)
    return batch_id if separator else ""


def held_by_batch(holders: Mapping[str, float], now: float) -> Counter[str]:
    """The live slots of each batch (a lease that ran out is held by no one)."""
    return Counter(batch_of(token) for token, until in holders.items() if until >= now)


def even_part(cap: int, batches: int) -> int:
    """The slots each of ``batches`` batches may keep while another waits (one at least)."""
    return max(1, cap // max(1, batches))


def gives_way(
    batch_id: str, cap: int, held: Mapping[str, int], waiting: Iterable[str], *, holding: bool
) -> bool:
    """Whether a chain of ``batch_id`` should leave its slot (``holding``), or not take one,
    for a batch that waits: one waits holding less than the even part, and ``batch_id``
    would hold more than it."""
    others = {batch for batch in waiting if batch != batch_id}
    if not others:
        return False
    contenders = {batch for batch, count in held.items() if count > 0 and batch} | others | {batch_id}
    part = even_part(cap, len(contenders))
    if all(held.get(batch, 0) >= part for batch in others):
        return False
    mine = held.get(batch_id, 0) + (0 if holding else 1)
    return mine > part
