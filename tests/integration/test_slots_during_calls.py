"""A long upstream call keeps its model slot (renewed with the request's lease), and a call
whose slot was lost to another holder stops, counted, rather than exceed the model's cap."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest
from batchgw.api import batches
from batchgw.deps import Deps
from batchgw.domain.chains import ChainMessage, RequestMessage, decode
from batchgw.domain.principal import Principal
from batchgw.domain.states import RequestStatus
from batchgw.run import lifecycle
from batchgw.run.chain import run_message

from local.simulator import Simulator
from tests.integration.conftest import body_of, chat_request, make_deps, receive_all
from tests.support import wait_for

pytestmark = pytest.mark.usefixtures("aws_env")

ALICE = Principal(user_id="user-alice", role="internal", key_id="key_local_alice")
LEASE = 1.5  # renewed every 0.5 s while a call runs
SETTINGS = {
    "BATCH_LEASE_SECONDS": str(LEASE),
    "BATCH_MODEL_CONCURRENCY": "1",
    "BATCH_RETRY_BASE_SECONDS": "60",
}


class MovingClock:
    """Real time, which a test can also move ahead at once (a long call, without the wait)."""

    def __init__(self) -> None:
        self.offset = 1_800_000_000.0 - time.monotonic()

    def __call__(self) -> float:
        return time.monotonic() + self.offset

    def advance(self, seconds: float) -> None:
        self.offset += seconds


def _start(deps: Deps, text: str) -> tuple[str, threading.Thread]:
    batch = batches.create_batch(deps, ALICE, body_of([chat_request("r", text)]))
    lifecycle.prepare(deps, batch["id"])
    message = RequestMessage(batch["id"], 0)
    run = threading.Thread(
        target=lambda: asyncio.run(run_message(deps, message, owner="w1", deadline=deps.clock() + 900))
    )
    run.start()
    return str(batch["id"]), run


def _in_flight(sim: Simulator) -> int:
    return int(sim.stats()["models"]["sim-chat"]["in_flight"])


def test_a_call_longer_than_the_slot_lease_keeps_its_slot_and_the_cap(sim: Simulator) -> None:
    clock = MovingClock()
    deps = make_deps(sim, clock, **SETTINGS)
    batch_id, run = _start(deps, "long [[sim latency_ms=3000]]")
    wait_for(lambda: _in_flight(sim) == 1, timeout=10, what="the call to start")
    [token] = deps.slots.holders("sim-chat")

    clock.advance(10 * LEASE)  # far past the lease the slot was taken with
    wait_for(
        lambda: deps.slots.holders("sim-chat").get(token, 0) > clock(), timeout=5, what="the slot renewed"
    )
    assert not deps.slots.acquire("sim-chat", "another", cap=1, now=clock(), lease_seconds=LEASE).granted

    run.join(timeout=30)
    request = deps.requests.get(batch_id, 0)
    assert request is not None and request.status is RequestStatus.SUCCEEDED


def test_a_call_whose_slot_was_taken_by_another_holder_stops_and_is_counted(sim: Simulator) -> None:
    clock = MovingClock()
    deps = make_deps(sim, clock, **SETTINGS)
    batch_id, run = _start(deps, "long [[sim latency_ms=20000]]")
    wait_for(lambda: _in_flight(sim) == 1, timeout=10, what="the call to start")
    [token] = deps.slots.holders("sim-chat")

    # The slot lapses and another worker takes the model's only one.
    deps.slots.release("sim-chat", token)
    assert deps.slots.acquire("sim-chat", "intruder", cap=1, now=clock(), lease_seconds=600).granted

    run.join(timeout=10)  # long before the call's 20 s: it was stopped
    assert not run.is_alive()
    request = deps.requests.get(batch_id, 0)
    assert request is not None and request.status is RequestStatus.RETRY_WAIT
    assert request.attempts == 1 and request.error is not None
    assert "slot" in request.error["message"]
    counted = sum(shard.tally.cost_unknown for shard in deps.batches.shards(batch_id))
    assert counted == 1  # the stopped call may have run: counted once, of unknown cost
    assert deps.slots.holders("sim-chat").keys() == {"intruder"}  # the cap held


def test_the_owners_slot_outlasts_each_call_it_admits_so_no_call_renews_it(sim: Simulator) -> None:
    clock = MovingClock()
    deps = make_deps(sim, clock, **SETTINGS, BATCH_ROLE_CONCURRENCY_INTERNAL="1")
    call = deps.settings.batch_upstream_timeout_seconds
    batch = batches.create_batch(
        deps, ALICE, body_of([chat_request(f"r{i}", f"{i} [[sim latency_ms=1000]]") for i in range(2)])
    )
    lifecycle.prepare(deps, batch["id"])
    [message] = receive_all(deps)  # one chain runs both requests, one hold of the owner's slot
    chain = decode(message["Body"])
    assert isinstance(chain, ChainMessage)
    run = threading.Thread(
        target=lambda: asyncio.run(run_message(deps, chain, owner="w1", deadline=deps.clock() + 3600))
    )
    run.start()
    wait_for(lambda: _in_flight(sim) == 1, timeout=10, what="the first call to start")
    # Less of the hold is left than the next call may take, more than half of it.
    clock.advance(call / 2 - 10)
    wait_for(lambda: sim.stats()["models"]["sim-chat"]["requests"] == 2, timeout=15, what="the second call")

    [hold] = deps.user_slots.read("user-alice").holds.values()
    assert hold.until - clock() > call  # taken again at its admission: it outlasts the call

    run.join(timeout=30)
    assert not run.is_alive()
