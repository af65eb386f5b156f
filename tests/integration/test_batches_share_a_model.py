"""Batches on one model share its slots (``domain.fairness``; moto, the injected clock): a
batch that finds the model full while another holds it all is noted as waiting, the other's
chains give their slots way to it, and once it holds one it waits no longer."""

from __future__ import annotations

import asyncio

import pytest
from batchgw.api import batches
from batchgw.deps import Deps
from batchgw.domain.chains import ChainMessage, WorkMessage, decode
from batchgw.domain.fairness import token_of
from batchgw.domain.principal import Principal
from batchgw.run import lifecycle
from batchgw.run.chain import run_message

from local.simulator import Simulator
from tests.integration.conftest import body_of, chat_request, make_deps, receive_all
from tests.support import FakeClock

pytestmark = pytest.mark.usefixtures("aws_env")

ALICE = Principal(user_id="user-alice", role="internal", key_id="key_local_alice")
BOB = Principal(user_id="user-bob", role="internal", key_id="key_local_bob")
MODEL = "sim-chat"


def _prepared(deps: Deps, who: Principal, n: int, prefix: str) -> tuple[str, list[WorkMessage]]:
    batch_id = str(
        batches.create_batch(deps, who, body_of([chat_request(f"{prefix}{i}", "hi") for i in range(n)]))["id"]
    )
    lifecycle.prepare(deps, batch_id)
    return batch_id, [decode(message["Body"]) for message in receive_all(deps)]


def test_a_batch_holding_the_whole_model_gives_way_to_one_that_waits(sim: Simulator) -> None:
    clock = FakeClock()
    deps = make_deps(sim, clock, BATCH_MODEL_CONCURRENCY="2", BATCH_SLOT_WAIT_SECONDS="2")
    big, (big_chain, *other_big_chains) = _prepared(deps, ALICE, 6, "a")
    small, [small_chain] = _prepared(deps, BOB, 1, "b")
    # The big batch's chains elsewhere hold both slots of the model.
    elsewhere = [token_of(big, "one"), token_of(big, "two")]
    for token in elsewhere:
        assert deps.slots.acquire(MODEL, token, cap=2, now=clock(), lease_seconds=600).granted
    sent: list[tuple[WorkMessage, int]] = []
    deps.queue.send = lambda message, delay_seconds=0: sent.append((message, delay_seconds))  # type: ignore[method-assign]

    def run(message: WorkMessage) -> tuple[WorkMessage, int] | None:
        asyncio.run(run_message(deps, message, owner="w", deadline=clock() + 900))
        handed = sent.pop() if sent else None
        assert sent == []
        return handed

    # The small batch finds the model full: it comes back later, noted as waiting.
    small_again = run(small_chain)
    assert small_again is not None and small_again[1] >= 2
    assert deps.slots.read(MODEL).waiting_now(clock()) == [small]

    # One of the big batch's requests ends and its chain runs on: the model has room, but the
    # big batch holds more than its part (one of two) while the small one waits: it gives way.
    deps.slots.release(MODEL, elsewhere[0])
    clock.advance(3)  # this process's view of the slot map is read again
    handed = run(big_chain)
    assert handed is not None and isinstance(handed[0], ChainMessage) and handed[0].next_index == 0
    assert sim.stats()["models"][MODEL]["requests"] == 0

    # The small batch's chain comes back: it takes the slot left, and waits no longer.
    assert run(small_again[0]) is None
    assert sim.stats()["models"][MODEL]["requests"] == 1
    assert deps.slots.read(MODEL).waiting_now(clock()) == []

    # With no batch waiting, the big batch runs on the room it finds.
    for chain in (handed[0], *other_big_chains):
        assert run(chain) is None
    assert sim.stats()["models"][MODEL]["requests"] == 7


def test_a_batchs_tag_rides_on_its_slot_and_wait_and_an_administrators_change_wins(sim: Simulator) -> None:
    """The slot map keeps each contending batch's tag (``domain.contention``): the first a
    chain writes stays (a chain's copy of the batch may be older than a PATCH), ``set_tag``
    replaces it, and a wait drops the tags of batches that neither hold nor wait."""
    clock = FakeClock()
    deps = make_deps(sim, clock)
    slots = deps.slots
    assert slots.acquire(
        MODEL, token_of("batch_a", "1"), cap=4, now=clock(), lease_seconds=60, tag=("batch_a", "t1")
    ).granted
    assert slots.acquire(
        MODEL, token_of("batch_a", "2"), cap=4, now=clock(), lease_seconds=60, tag=("batch_a", "t2")
    ).granted
    assert slots.read(MODEL).tags == {"batch_a": "t1"}
    slots.set_tag(MODEL, "batch_a", "patched")
    slots.wait(MODEL, "batch_b", until=clock() + 30, tag="b1")
    slots.wait(MODEL, "batch_b", until=clock() + 30, tag="b2")
    assert slots.read(MODEL).tags == {"batch_a": "patched", "batch_b": "b1"}
    slots.set_tag(MODEL, "batch_gone", "old")
    slots.wait(MODEL, "batch_b", until=clock() + 30, tag="b1", stale=["batch_gone"])
    assert slots.read(MODEL).tags == {"batch_a": "patched", "batch_b": "b1"}
    slots.set_tag("no-map-yet", "batch_a", "t")  # no slot map: nothing to tag
    assert slots.read("no-map-yet").tags == {}
