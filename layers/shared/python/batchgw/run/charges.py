"""Charges an attempt's shard keeps, rolled up into its payer's spend.

An owner whom no quota or budget limits (``domain.spend.needs_spend``) is charged through
their batch's counter shards (``Deferred``), two write units an attempt fewer than updating
their spend item; ``storage.batch_shards.roll_up`` moves what the shards kept into the
spend, exactly once. The process that recorded the attempts rolls up every ``ROLL_SECONDS``,
at its invocation's last message and when an administrator changes an account; finalize
and purge roll up every shard. So no charge is lost with a process that dies.

When each roll-up happens, and how far the spend may lag: docs/design/ledger.md,
"From the code: run/charges.py".
"""

from __future__ import annotations

import random
import threading
from typing import Any

from batchgw.deps import Deps
from batchgw.domain.batch import BatchRecord
from batchgw.storage.batch_shards import Charge
from batchgw.storage.spend import SPEND_SHARDS, Payer

ROLL_SECONDS = 30.0  # how long a process keeps charges before it rolls them up (the spend's lag)

_lock = threading.Lock()
_kept: set[tuple[str, int]] = set()  # (batch, shard) where this process's attempts kept charges
_rolled_at = [0.0]


def note(batch: BatchRecord, shard: int) -> None:
    """An attempt of ``batch`` recorded in ``shard`` kept its charge there."""
    with _lock:
        _kept.add((batch.id, shard))


def waiting() -> bool:
    """Whether this process kept charges it has not rolled up."""
    return bool(_kept)


def due(now: float) -> bool:
    """Whether charges are kept and were last rolled up ``ROLL_SECONDS`` ago or more."""
    return bool(_kept) and now - _rolled_at[0] >= ROLL_SECONDS


def kept(batch_id: str) -> bool:
    """Whether this process kept charges of ``batch_id`` it has not rolled up."""
    with _lock:
        return any(batch == batch_id for batch, _ in _kept)


def roll_up_kept(deps: Deps, batch_id: str | None = None, *, all_of_them: bool = True) -> None:
    """Roll up the shards this process kept charges in (of ``batch_id`` only, when given).
    Unless ``all_of_them``, a shard some process rolled up within ``ROLL_SECONDS`` is kept
    for later: each shard is then written about once per ``ROLL_SECONDS`` however many
    processes kept charges in it. A shard that cannot be rolled up now is kept for the next
    time (and the finalize)."""
    now = deps.clock()
    with _lock:
        taken = sorted(key for key in _kept if batch_id is None or key[0] == batch_id)
        _kept.difference_update(taken)
        if batch_id is None:
            _rolled_at[0] = now
    since = None if all_of_them else now - ROLL_SECONDS
    try:
        _, left = deps.batches.roll_up(taken, _charge(deps), now=now, unless_since=since)
    except Exception:
        with _lock:
            _kept.update(taken)
        raise
    with _lock:
        _kept.update(left)


def roll_up_batch(deps: Deps, batch_id: str) -> None:
    """Roll up every shard of the batch (its finalize and its purge: idempotent)."""
    deps.batches.roll_up_all(batch_id, _charge(deps), now=deps.clock())


def _charge(deps: Deps) -> Charge:
    """The spend's updates that charge what shards kept, as of now (to any of the payer's
    spend shards: they only spread the writes)."""
    now = deps.clock()

    def charge(user_id: str, key_id: str | None, known: int, unknown: int) -> list[dict[str, Any]]:
        shard = random.randrange(SPEND_SHARDS)
        return deps.spend.charge_actions(
            Payer(user_id, key_id), known, now=now, shard=shard, unknown_nano=unknown
        )

    return charge
