"""Charges kept in counter shards (``run.charges``): an owner no quota or budget limits is
charged through their batch's shards and the spend catches up when they are rolled up, by
the process as its run ends, by the finalize, by the purge; every charge reaches the spend
exactly once, whoever rolls it up and whatever dies first. An owner a limit applies to is
charged in the attempt's own transaction."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from batchgw.api import batches
from batchgw.deps import Deps
from batchgw.domain.batch import shard_sk
from batchgw.domain.chains import ChainMessage
from batchgw.domain.outcome import Outcome
from batchgw.run import attempt, charges, ending, lifecycle, owner
from batchgw.storage.spend import Payer

from local.simulator import Simulator
from tests.integration.conftest import make_deps, receive_all
from tests.integration.test_every_batch_ends import ALICE, claim, finish, prepared, run
from tests.support import FakeClock

pytestmark = pytest.mark.usefixtures("aws_env")

ANSWER = Outcome("success", status_code=200, body={"ok": True}, input_tokens=1000, output_tokens=100)
PAYER = Payer(ALICE.user_id, ALICE.key_id)


@pytest.fixture
def deps(sim: Simulator) -> Deps:
    built = make_deps(sim, FakeClock())
    charges._kept.clear()
    return built


def spent(deps: Deps) -> int:
    user, key = deps.spend.read(PAYER, deps.clock())
    assert user.month == key.month
    return user.month


def cost(deps: Deps, batch_id: str) -> int:
    batch = deps.batches.get(batch_id)
    assert batch is not None
    return batch.counts.cost_nano


def ended_unrolled(deps: Deps, batch_id: str, index: int, *, defer: bool = True) -> None:
    """An attempt recorded by a process that then dies before it rolls up what it kept."""
    batch = deps.batches.get_record(batch_id)
    assert batch is not None
    held = claim(deps, batch_id, index)
    asyncio.run(attempt.settle(deps, batch, held, ANSWER, started=deps.clock(), defer=defer))
    charges._kept.clear()  # the process is gone, and what it meant to roll up with it


def test_an_unlimited_owner_is_charged_when_the_run_ends_exactly_what_the_batch_cost(deps: Deps) -> None:
    batch_id = prepared(deps, 3)
    receive_all(deps)
    run(deps, ChainMessage(batch_id, 0, 0, 1))

    assert cost(deps, batch_id) > 0
    assert spent(deps) == cost(deps, batch_id)
    charges.roll_up_batch(deps, batch_id)  # again, as the finalize does: nothing more
    assert spent(deps) == cost(deps, batch_id)


def test_charges_a_dead_process_kept_reach_the_spend_once_when_the_batch_is_finalized(deps: Deps) -> None:
    batch_id = prepared(deps, 2)
    receive_all(deps)
    ended_unrolled(deps, batch_id, 0)
    ended_unrolled(deps, batch_id, 1)
    assert spent(deps) == 0  # kept in the shards, not charged in the attempts' transactions

    finish(deps, batch_id)
    assert spent(deps) == cost(deps, batch_id) > 0
    ending.finalize(deps, batch_id)  # a retried step
    charges.roll_up_batch(deps, batch_id)
    assert spent(deps) == cost(deps, batch_id)


def test_two_roll_ups_of_one_shard_read_at_once_charge_it_once(deps: Deps) -> None:
    batch_id = prepared(deps, 1)
    receive_all(deps)
    ended_unrolled(deps, batch_id, 0)
    key = {"pk": {"S": batch_id}, "sk": {"S": shard_sk(0)}}
    stale = deps.batches._table.get(key)  # what a second roll-up read before the first wrote
    assert stale is not None
    charge = charges._charge(deps)

    now = deps.clock()
    assert deps.batches.roll_up([(batch_id, 0)], charge, now=now) == (cost(deps, batch_id), [])
    assert cost(deps, batch_id) > 0
    again = deps.batches.roll_up([(batch_id, 0)], charge, now=now, items=[stale])
    assert again == (0, [])  # refused, read again: nothing owed
    assert spent(deps) == cost(deps, batch_id)


def test_a_batch_deleted_while_it_ran_has_what_its_shards_kept_charged_by_its_purge(deps: Deps) -> None:
    batch_id = prepared(deps, 3)
    receive_all(deps)
    ended_unrolled(deps, batch_id, 0)
    kept = cost(deps, batch_id)
    assert batches.delete_batch(deps, ALICE, batch_id)["deleted"]
    lifecycle.purge(deps, batch_id)
    assert spent(deps) == kept > 0


def test_a_roll_up_that_reads_the_shard_just_before_an_attempts_write_leaves_its_charge_for_the_next(
    deps: Deps, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another chain of the process rolls up what it kept while this attempt's write is on
    its way: the shard is still on the process's list once the write lands, and the next
    roll-up charges it."""
    batch_id = prepared(deps, 1)
    receive_all(deps)
    batch = deps.batches.get_record(batch_id)
    assert batch is not None
    real_record_end = deps.requests.record_end

    def rolled_up_first(*args: Any, **kwargs: Any) -> Any:
        charges.roll_up_kept(deps)
        return real_record_end(*args, **kwargs)

    monkeypatch.setattr(deps.requests, "record_end", rolled_up_first)
    asyncio.run(
        attempt.settle(deps, batch, claim(deps, batch_id, 0), ANSWER, started=deps.clock(), defer=True)
    )
    assert charges.kept(batch_id) and spent(deps) == 0
    charges.roll_up_kept(deps)
    assert spent(deps) == cost(deps, batch_id) > 0


def test_a_limited_owner_is_charged_in_the_attempts_own_transaction(deps: Deps) -> None:
    batch_id = prepared(deps, 1)
    receive_all(deps)
    ended_unrolled(deps, batch_id, 0, defer=False)
    assert spent(deps) == cost(deps, batch_id) > 0


def test_an_administrators_change_to_an_account_has_every_process_roll_up_what_it_kept(deps: Deps) -> None:
    batch_id = prepared(deps, 2)
    receive_all(deps)
    batch = deps.batches.get_record(batch_id)
    assert batch is not None
    asyncio.run(
        attempt.settle(deps, batch, claim(deps, batch_id, 0), ANSWER, started=deps.clock(), defer=True)
    )
    assert charges.kept(batch_id) and spent(deps) == 0
    asyncio.run(owner.account_of(deps, ALICE.user_id))  # the accounts as this process read them
    deps.live.note_accounts_changed()  # an administrator sets a quota, say
    asyncio.run(owner.account_of(deps, ALICE.user_id))  # a chain's next look at any owner
    assert not charges.kept(batch_id) and spent(deps) == cost(deps, batch_id) > 0


def test_a_shard_rolled_up_lately_is_left_to_a_later_roll_up_unless_all_are_asked_for(deps: Deps) -> None:
    batch_id = prepared(deps, 40)
    receive_all(deps)
    batch = deps.batches.get_record(batch_id)
    assert batch is not None
    later = batch.shard_count  # a request of the same shard as the first
    ended_unrolled(deps, batch_id, 0)
    charges.roll_up_batch(deps, batch_id)  # another process rolled the shards up just now
    first = spent(deps)
    ended_unrolled(deps, batch_id, later)
    charges.note(batch, batch.shard_of(later))

    charges.roll_up_kept(deps, all_of_them=False)  # within ROLL_SECONDS of that: left, and kept
    assert spent(deps) == first and charges.kept(batch_id)
    deps.clock.advance(charges.ROLL_SECONDS)  # type: ignore[attr-defined]
    charges.roll_up_kept(deps, all_of_them=False)
    assert spent(deps) == cost(deps, batch_id) > first and not charges.kept(batch_id)
