"""A chain that finds its model full waits longer each time in a row, and starts over once
it gets a slot (moto, the injected clock): many batches waiting on one busy model do not
spend the store on asking for slots."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from batchgw.api import batches
from batchgw.deps import Deps
from batchgw.domain.chains import ChainMessage, WorkMessage, decode
from batchgw.domain.principal import Principal
from batchgw.run import lifecycle
from batchgw.run.chain import run_message

from local.simulator import Simulator
from tests.integration.conftest import body_of, chat_request, make_deps, receive_all
from tests.support import FakeClock

pytestmark = pytest.mark.usefixtures("aws_env")

ALICE = Principal(user_id="user-alice", role="internal", key_id="key_local_alice")
BASE = 2.0  # BATCH_SLOT_WAIT_SECONDS


def handing_on(deps: Deps) -> list[tuple[WorkMessage, int]]:
    """The messages the worker sends from now on, with their delays (kept off the queue)."""
    sent: list[tuple[WorkMessage, int]] = []
    deps.queue.send = lambda message, delay_seconds=0: sent.append((message, delay_seconds))  # type: ignore[method-assign]
    return sent


def record(store: object, name: str, calls: list[str]) -> None:
    """Note each call of ``store.name`` in ``calls`` (and make it)."""
    original = getattr(store, name)

    def recorded(*args: Any, **kwargs: Any) -> Any:
        calls.append(name)
        return original(*args, **kwargs)

    setattr(store, name, recorded)


def test_a_chain_that_finds_its_model_full_waits_longer_each_time_and_starts_over_once_it_runs(
    sim: Simulator,
) -> None:
    clock = FakeClock()
    deps = make_deps(sim, clock, BATCH_MODEL_CONCURRENCY="1", BATCH_SLOT_WAIT_SECONDS=str(BASE))
    requests = [chat_request("r-0", "hello", "sim-chat"), chat_request("r-1", "hello", "sim-chat-only")]
    batch_id = batches.create_batch(deps, ALICE, body_of(requests))["id"]
    lifecycle.prepare(deps, batch_id)
    [first] = receive_all(deps)
    for model in ("sim-chat", "sim-chat-only"):  # both models full: another holder has the slot
        assert deps.slots.acquire(model, f"other-{model}", cap=1, now=clock(), lease_seconds=600).granted
    sent = handing_on(deps)

    def run(message: WorkMessage) -> tuple[ChainMessage, int]:
        asyncio.run(run_message(deps, message, owner="w", deadline=clock() + 900))
        [(handed, delay)] = sent
        sent.clear()
        assert isinstance(handed, ChainMessage)
        return handed, delay

    message = decode(first["Body"])
    assert isinstance(message, ChainMessage)
    delays = []
    for _ in range(4):
        message, delay = run(message)
        assert message.next_index == 0
        delays.append(delay)
    assert message.full == 4
    # Jittered up to twice the wait: 2-4 s, then 4-8, then 8-16, and no longer after that.
    for delay, factor in zip(delays, (1, 2, 4, 4), strict=True):
        assert BASE * factor <= delay <= 2 * BASE * factor, delays

    deps.slots.release("sim-chat", "other-sim-chat")
    handed, delay = run(message)  # runs r-0, then finds sim-chat-only full: a first time
    assert (handed.next_index, handed.full) == (1, 1)
    assert BASE <= delay <= 2 * BASE
    assert sim.stats()["models"]["sim-chat"]["requests"] == 1


def test_a_chain_of_a_one_model_batch_that_finds_it_full_comes_back_later_having_claimed_nothing(
    sim: Simulator,
) -> None:
    clock = FakeClock()
    deps = make_deps(sim, clock, BATCH_MODEL_CONCURRENCY="1", BATCH_SLOT_WAIT_SECONDS=str(BASE))
    batch_id = batches.create_batch(
        deps, ALICE, body_of([chat_request(f"r-{i}", "hello") for i in range(2)])
    )["id"]
    lifecycle.prepare(deps, batch_id)
    [first] = receive_all(deps)
    assert deps.slots.acquire("sim-chat", "other", cap=1, now=clock(), lease_seconds=600).granted
    sent = handing_on(deps)
    writes: list[str] = []
    for store, name in ((deps.requests, "claim"), (deps.requests, "release"), (deps.batches, "mark_run")):
        record(store, name, writes)

    message = decode(first["Body"])
    for factor in (1, 2):
        asyncio.run(run_message(deps, message, owner="w", deadline=clock() + 900))
        [(message, delay)] = sent
        sent.clear()
        assert isinstance(message, ChainMessage) and message.next_index == 0
        assert BASE * factor <= delay <= 2 * BASE * factor
    assert writes == []  # no mark, no claim, nothing to give back

    deps.slots.release("sim-chat", "other")
    asyncio.run(run_message(deps, message, owner="w", deadline=clock() + 900))
    assert sent == [] and sim.stats()["models"]["sim-chat"]["requests"] == 2
