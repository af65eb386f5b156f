"""A chain that lags behind its batch's others splits in two while its model has room no
chain holds (moto, the injected clock): the batch's end runs on as many chains as the model
has room for, and every request still runs once. Each new chain runs in a slot its split took
for it in the slot map, which a duplicate of its message cannot hold as well."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import Any

import pytest
from batchgw.api import batches
from batchgw.deps import Deps
from batchgw.domain.chains import ChainMessage, WorkMessage, decode
from batchgw.domain.fairness import token_of
from batchgw.domain.principal import Principal
from batchgw.domain.states import RequestStatus
from batchgw.run import chain, lifecycle
from batchgw.run.chain import run_message
from batchgw.run.slot import SlotHolder, share_of
from batchgw.scheduling.tuning import TUNING

from local.simulator import Simulator
from tests.integration.conftest import body_of, chat_request, make_deps, receive_all
from tests.support import FakeClock

pytestmark = pytest.mark.usefixtures("aws_env")

ALICE = Principal(user_id="user-alice", role="internal", key_id="key_local_alice")
CAP = 4
TOTAL = 80  # 4 chains of 20


def handing_on(deps: Deps) -> list[WorkMessage]:
    sent: list[WorkMessage] = []
    deps.queue.send = lambda message, delay_seconds=0: sent.append(message)  # type: ignore[method-assign]
    return sent


def ticking(deps: Deps, clock: FakeClock) -> None:
    """Each claim takes a second of the injected clock: the room is read every other one."""
    claim = deps.requests.claim

    def claimed(*args: Any, **kwargs: Any) -> Any:
        clock.advance(TUNING.room_read_seconds / 2)
        return claim(*args, **kwargs)

    deps.requests.claim = claimed  # type: ignore[method-assign]


def others_hold(deps: Deps, clock: FakeClock) -> set[str]:
    """The batch's other three chains hold their slots of the model (of its cap of four)."""
    others = {f"other-{holder}" for holder in range(CAP - 1)}
    for token in others:
        assert deps.slots.acquire("sim-chat", token, cap=CAP, now=clock(), lease_seconds=3600).granted
    return others


def start(
    sim: Simulator, clock: FakeClock, *, beside: bool = False, **settings: str
) -> tuple[Deps, str, ChainMessage]:
    """The batch prepared, its first chain's message. ``beside``: a split's new chains start in
    the process that split (``Tuning.chains_beside_most``); else each is sent, for the test to run."""
    deps = make_deps(sim, clock, BATCH_MODEL_CONCURRENCY=str(CAP), **settings)
    if not beside:
        deps.tuning = replace(TUNING, chains_beside_most=0)
    requests = [chat_request(f"r-{i}", "hello") for i in range(TOTAL)]
    batch_id = batches.create_batch(deps, ALICE, body_of(requests))["id"]
    lifecycle.prepare(deps, batch_id)
    chains = [decode(m["Body"]) for m in receive_all(deps)]
    first = next(m for m in chains if isinstance(m, ChainMessage) and m.next_index == 0)
    assert isinstance(first, ChainMessage) and first.stride == CAP
    ticking(deps, clock)
    return deps, batch_id, first


def test_a_chain_alone_on_a_model_with_room_splits_and_its_halves_run_each_of_its_requests_once(
    sim: Simulator,
) -> None:
    clock = FakeClock()
    deps, batch_id, first = start(sim, clock)
    sent = handing_on(deps)
    # The other three chains are elsewhere (not running): three slots nobody holds.
    asyncio.run(run_message(deps, first, owner="w", deadline=clock() + 900))
    split_off = list(sent)
    assert split_off, "the lone chain never split"
    assert all(isinstance(m, ChainMessage) for m in split_off)
    assert max(m.stride for m in split_off if isinstance(m, ChainMessage)) <= 4 * CAP
    todo = list(split_off)
    while todo:  # the halves, and any half they split off in turn
        sent.clear()
        asyncio.run(run_message(deps, todo.pop(), owner="w", deadline=clock() + 900))
        todo += sent
    mine = [deps.requests.get(batch_id, i) for i in range(0, TOTAL, CAP)]
    assert all(r is not None and r.status is RequestStatus.SUCCEEDED for r in mine)
    others = [deps.requests.get(batch_id, i) for i in range(TOTAL) if i % CAP]
    assert all(r is not None and r.status is RequestStatus.QUEUED for r in others)
    assert sim.stats()["models"]["sim-chat"]["requests"] == TOTAL // CAP  # none ran twice


def test_a_splits_new_chains_run_beside_it_in_its_invocation_which_ends_once_they_have(
    sim: Simulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = FakeClock()
    deps, batch_id, first = start(sim, clock, beside=True)
    sent = handing_on(deps)
    started: list[WorkMessage] = []
    run = chain.run_message

    async def running(deps: Deps, message: WorkMessage, **kwargs: Any) -> None:
        started.append(message)
        await run(deps, message, **kwargs)

    monkeypatch.setattr(chain, "run_message", running)  # the new chains' runs, not the first's
    asyncio.run(run_message(deps, first, owner="invocation:w", deadline=clock() + 900))
    assert started, "the lone chain never split"
    assert sent == []  # no new chain went through the queue
    mine = [deps.requests.get(batch_id, i) for i in range(0, TOTAL, CAP)]
    assert all(r is not None and r.status is RequestStatus.SUCCEEDED for r in mine)  # all ended by then
    assert sim.stats()["models"]["sim-chat"]["requests"] == TOTAL // CAP  # none ran twice


def test_a_chain_started_beside_that_fails_fails_the_run_that_started_it(
    sim: Simulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = FakeClock()
    deps, _, first = start(sim, clock, beside=True)
    handing_on(deps)

    async def failing(deps: Deps, message: WorkMessage, **kwargs: Any) -> None:
        raise RuntimeError("the new chain's environment broke")

    monkeypatch.setattr(chain, "run_message", failing)
    # Its message then comes back (a partial batch failure), and walks the new chain's indexes.
    with pytest.raises(RuntimeError, match="environment broke"):
        asyncio.run(run_message(deps, first, owner="invocation:w", deadline=clock() + 900))


def test_a_chain_with_room_for_three_more_splits_in_four_at_once(sim: Simulator) -> None:
    clock = FakeClock()
    deps, _, first = start(sim, clock)
    sent = handing_on(deps)
    asyncio.run(run_message(deps, first, owner="w", deadline=clock() + 900))
    # Its first split (once two reads have seen the room) sends the three new chains
    # together, for the indexes after where it stood: one round, not two doublings.
    new = [m for m in sent[:3] if isinstance(m, ChainMessage)]
    at = new[0].next_index - CAP
    assert [(m.next_index, m.stride) for m in new] == [(at + k * CAP, 4 * CAP) for k in (1, 2, 3)]


def test_a_chain_whose_model_is_all_held_does_not_split(sim: Simulator) -> None:
    clock = FakeClock()
    deps, _, first = start(sim, clock)
    others_hold(deps, clock)
    sent = handing_on(deps)
    asyncio.run(run_message(deps, first, owner="w", deadline=clock() + 900))
    assert sent == []
    assert sim.stats()["models"]["sim-chat"]["requests"] == TOTAL // CAP


def test_a_new_chain_runs_in_the_slot_its_split_took_for_it_while_the_model_is_full(sim: Simulator) -> None:
    clock = FakeClock()
    deps, batch_id, first = start(sim, clock)
    others_hold(deps, clock)
    reserved = token_of(batch_id, "split")  # the fourth: taken by the split that sent the chain
    seconds = TUNING.split_slot_seconds
    assert deps.slots.acquire("sim-chat", reserved, cap=CAP, now=clock(), lease_seconds=seconds).granted
    handing_on(deps)
    asyncio.run(run_message(deps, replace(first, slot=reserved), owner="w", deadline=clock() + 900))
    assert sim.stats()["models"]["sim-chat"]["requests"] == TOTAL // CAP  # its whole walk, in that slot
    assert reserved not in deps.slots.holders("sim-chat")


def test_a_duplicate_of_a_split_message_does_not_hold_the_slot_taken_for_it_too(sim: Simulator) -> None:
    clock = FakeClock()
    deps, batch_id, _ = start(sim, clock)
    others = others_hold(deps, clock)
    reserved = token_of(batch_id, "split")
    assert deps.slots.acquire("sim-chat", reserved, cap=CAP, now=clock(), lease_seconds=60).granted
    first, duplicate = SlotHolder(deps, batch_id), SlotHolder(deps, batch_id)
    first.adopt("sim-chat", reserved)
    duplicate.adopt("sim-chat", reserved)
    assert asyncio.run(first.hold("sim-chat")).granted
    assert not asyncio.run(duplicate.hold("sim-chat")).granted  # the model is full: four held
    assert set(deps.slots.holders("sim-chat")) == others | {first.token}


def test_a_new_chain_lets_the_slot_its_split_took_go_when_the_share_shrank_meanwhile(sim: Simulator) -> None:
    clock = FakeClock()
    # The share is one slot less than the cap: interactive traffic's reserve.
    deps, batch_id, _ = start(sim, clock, BATCH_INTERACTIVE_RESERVE="1")
    assert asyncio.run(share_of(deps, "sim-chat")).slots == CAP - 1
    others = others_hold(deps, clock)
    reserved = token_of(batch_id, "split")  # taken while the share was still the whole cap
    assert deps.slots.acquire("sim-chat", reserved, cap=CAP, now=clock(), lease_seconds=60).granted
    chain = SlotHolder(deps, batch_id)
    chain.adopt("sim-chat", reserved)
    assert not asyncio.run(chain.hold("sim-chat")).granted  # four would be one past the share
    assert set(deps.slots.holders("sim-chat")) == others  # let go
