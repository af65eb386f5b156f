"""Money is counted once: each attempt's cost is charged to the batch, its owner and its
key in the same transaction that records it, retried attempts included, and never again."""

from __future__ import annotations

import asyncio

import pytest
from batchgw.api import batches
from batchgw.deps import Deps
from batchgw.domain.chains import ChainMessage
from batchgw.domain.decisions import MAX_LOST_ATTEMPTS
from batchgw.domain.outcome import Outcome
from batchgw.run import lifecycle, reconcile
from batchgw.run.chain import run_message
from batchgw.run.owner import priced
from batchgw.storage.requests import RequestStore
from batchgw.storage.spend import Payer

from local.simulator import Simulator
from tests.integration.conftest import make_deps, receive_all
from tests.integration.test_every_batch_ends import (
    ALICE,
    LostAnswers,
    claim,
    lossy_requests,
    prepared,
    settle,
)
from tests.support import FakeClock

pytestmark = pytest.mark.usefixtures("aws_env")

DROPPED = Outcome("retry", error={"code": "upstream_error", "message": "dropped"}, usage_known=False)
BILLED_ERROR = Outcome(
    "retry", error={"code": "service_unavailable", "message": "busy"}, input_tokens=1000, output_tokens=0
)


def test_an_attempt_whose_answer_was_lost_counts_as_unknown_cost_when_it_is_retried(sim: Simulator) -> None:
    deps = make_deps(sim, FakeClock())
    batch_id = prepared(deps, 1)
    receive_all(deps)
    settled = settle(deps, batch_id, claim(deps, batch_id, 0), DROPPED)
    assert settled.retry_at is not None
    assert batches.get_batch(deps, ALICE, batch_id)["cost_unknown_attempts"] == 1  # before the request ends


def test_a_retried_attempts_known_cost_is_in_the_batchs_cost(sim: Simulator) -> None:
    deps = make_deps(sim, FakeClock())
    batch_id = prepared(deps, 1)
    receive_all(deps)
    settle(deps, batch_id, claim(deps, batch_id, 0), BILLED_ERROR)
    batch = batches.get_batch(deps, ALICE, batch_id)
    assert batch["cost_usd"] == 0.0005 and batch["usage"]["input_tokens"] == 1000  # $0.50 per million


def test_a_retry_whose_answer_was_lost_is_charged_once(sim: Simulator) -> None:
    deps = make_deps(sim, FakeClock())
    batch_id = prepared(deps, 1)
    receive_all(deps)
    deps.requests = RequestStore(
        LostAnswers(deps.requests._table.client, {"transact_write_items"}),
        deps.settings.requests_table,
        deps.settings.batches_table,
    )
    settled = settle(deps, batch_id, claim(deps, batch_id, 0), DROPPED)
    assert settled.retry_at is not None  # recognised as scheduled
    assert batches.get_batch(deps, ALICE, batch_id)["cost_unknown_attempts"] == 1


def test_the_owners_and_keys_spend_is_what_the_batch_cost_to_the_nano_dollar(sim: Simulator) -> None:
    clock = FakeClock()
    deps = make_deps(sim, clock)
    batch_id = prepared(deps, 4)
    receive_all(deps)
    real_requests = deps.requests
    deps.requests = lossy_requests(deps, "transact_write_items")
    settle(deps, batch_id, claim(deps, batch_id, 0), BILLED_ERROR)  # a charged retry, its answer lost
    deps.requests = real_requests
    claim(deps, batch_id, 1, owner="killed")  # a worker that dies mid-request
    clock.advance(61)
    asyncio.run(run_message(deps, ChainMessage(batch_id, 0, 0, 1), owner="w", deadline=clock() + 900))

    batch = deps.batches.get(batch_id)
    assert batch is not None and batch.counts.left == 0
    assert batch.counts.cost_unknown_attempts == 1  # the killed worker's attempt: of unknown cost
    user, key = deps.spend.read(Payer(ALICE.user_id, ALICE.key_id), clock())
    # It counts against quotas at the most it could have cost, apart from the known cost.
    assert user.unknown_today == user.unknown_month == key.unknown_month > 0
    known = user.month - user.unknown_month
    assert known == user.today - user.unknown_today == key.month - key.unknown_month == batch.counts.cost_nano
    assert batch.counts.cost_nano == 500_000 + 4 * 5500  # the billed retry, then four answers


def _priced_batch(sim: Simulator, n: int) -> tuple[Deps, FakeClock, str, int]:
    """A prepared batch of ``n`` requests, and what its first could cost at most: what an
    attempt of it whose cost is unknown is charged."""
    clock = FakeClock()
    deps = make_deps(sim, clock)
    batch_id = prepared(deps, n)
    receive_all(deps)
    stored = deps.requests.get(batch_id, 0)
    assert stored is not None
    return deps, clock, batch_id, priced(deps, "/v1/chat/completions", stored)[1]


def test_a_lost_attempt_of_a_request_ended_by_the_reconciler_counts_against_quotas_at_its_most(
    sim: Simulator,
) -> None:
    deps, clock, batch_id, most = _priced_batch(sim, 2)
    claim(deps, batch_id, 0, owner="a worker that dies")
    batches.cancel_batch(deps, ALICE, batch_id)
    lifecycle.cancel(deps, batch_id)
    clock.advance(61)
    reconcile.reconcile(deps, batch_id)  # ends the abandoned request
    user, key = deps.spend.read(Payer(ALICE.user_id, ALICE.key_id), clock())
    assert most > 0 and (user.unknown_today, key.unknown_today) == (most, most)
    assert user.today == most  # it counts toward pausing and budgets
    assert batches.get_batch(deps, ALICE, batch_id)["cost_usd"] == 0  # not a known cost


@pytest.mark.parametrize("stop", ["cancel", "expire"])
def test_a_lost_attempt_of_a_request_given_back_unrun_counts_at_its_most_when_the_stop_ends_it(
    sim: Simulator, stop: str
) -> None:
    deps, clock, batch_id, most = _priced_batch(sim, 2)
    claim(deps, batch_id, 0, owner="a worker that dies")
    clock.advance(61)
    taken = claim(deps, batch_id, 0, owner="the worker that took it over")  # its lost attempt noted
    assert taken.lost == 1
    assert deps.requests.release(taken).value == "released"  # given back unrun (its model was full)
    if stop == "cancel":
        batches.cancel_batch(deps, ALICE, batch_id)
        lifecycle.cancel(deps, batch_id)
    else:
        clock.advance(24 * 3600)
        lifecycle.expire(deps, batch_id)
    batch = batches.get_batch(deps, ALICE, batch_id)
    assert batch["request_counts"]["completed"] == 0 and batch["cost_unknown_attempts"] == 1
    assert sum(1 for _ in deps.requests.unfinished(batch_id)) == 0  # both ended by the stop
    user, key = deps.spend.read(Payer(ALICE.user_id, ALICE.key_id), clock())
    assert most > 0 and (user.unknown_today, key.unknown_today) == (most, most)


def test_lost_attempts_of_a_request_ended_unrun_for_losing_its_workers_count_at_their_most(
    sim: Simulator,
) -> None:
    deps, clock, batch_id, most = _priced_batch(sim, 1)
    for n in range(MAX_LOST_ATTEMPTS + 1):  # each worker (each run its own owner) dies mid-request
        claim(deps, batch_id, 0, owner=f"a worker that dies {n}")
        clock.advance(61)
    asyncio.run(run_message(deps, ChainMessage(batch_id, 0, 0, 1), owner="w", deadline=clock() + 900))
    batch = batches.get_batch(deps, ALICE, batch_id)
    assert batch["request_counts"]["failed"] == 1  # ended without another call
    user, _ = deps.spend.read(Payer(ALICE.user_id, ALICE.key_id), clock())
    lost = batch["cost_unknown_attempts"]
    assert lost == MAX_LOST_ATTEMPTS + 1 and most > 0 and user.unknown_today == lost * most
