"""A chain whose walk has ended takes the requests its batch's other chains have not reached
yet, from the highest index down (``run.tail``; moto, the simulator, the injected clock):
every request still runs once, a chain that meets a request so taken passes it instead of
waiting out its lease, and one taken that cannot run now is handed on as a message of its
own, never merely given back."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest
from batchgw.api import batches
from batchgw.deps import Deps
from batchgw.domain.chains import ChainMessage, RequestMessage, WorkMessage, decode
from batchgw.domain.principal import Principal
from batchgw.domain.states import RequestStatus
from batchgw.run import lifecycle
from batchgw.run.chain import Why, run_message
from batchgw.run.tail import TAIL_MARK

from local.simulator import Simulator
from tests.integration.conftest import body_of, chat_request, make_deps, receive_all, tune
from tests.support import FakeClock

pytestmark = pytest.mark.usefixtures("aws_env")

ALICE = Principal(user_id="user-alice", role="internal", key_id="key_local_alice")
CHAINS = 3
TOTAL = 12  # three chains of four: indexes 0, 3, 6, 9 / 1, 4, 7, 10 / 2, 5, 8, 11


def prepared(sim: Simulator, **settings: str) -> tuple[Deps, str, list[ChainMessage]]:
    deps = make_deps(sim, FakeClock(), BATCH_MODEL_CONCURRENCY=str(CHAINS), **settings)
    requests = [chat_request(f"r-{i}", f"hello {i}") for i in range(TOTAL)]
    batch_id = str(batches.create_batch(deps, ALICE, body_of(requests))["id"])
    lifecycle.prepare(deps, batch_id)
    chains = sorted((decode(m["Body"]) for m in receive_all(deps)), key=lambda m: m.next_index)
    assert all(isinstance(m, ChainMessage) and m.stride == CHAINS for m in chains)
    return deps, batch_id, chains  # type: ignore[return-value]


def sending(deps: Deps, monkeypatch: pytest.MonkeyPatch) -> list[tuple[WorkMessage, int]]:
    sent: list[tuple[WorkMessage, int]] = []
    monkeypatch.setattr(
        deps.queue, "send", lambda message, delay_seconds=0: sent.append((message, delay_seconds))
    )
    return sent


def run(deps: Deps, message: WorkMessage) -> None:
    asyncio.run(run_message(deps, message, owner="w", deadline=deps.clock() + 900))


def stops(logged: list[logging.LogRecord]) -> list[str]:
    return [r.why for r in logged if r.getMessage() == "chain stopped"]  # type: ignore[attr-defined]


def statuses(deps: Deps, batch_id: str) -> list[RequestStatus]:
    found = [deps.requests.get(batch_id, i) for i in range(TOTAL)]
    return [r.status for r in found if r is not None]


def test_a_chain_whose_walk_ended_runs_the_requests_the_others_have_not_reached_each_once(
    sim: Simulator, monkeypatch: pytest.MonkeyPatch, logged: list[logging.LogRecord]
) -> None:
    deps, batch_id, (first, *others) = prepared(sim)
    sent = sending(deps, monkeypatch)
    run(deps, first)  # the other two chains' messages have not come yet
    assert statuses(deps, batch_id) == [RequestStatus.SUCCEEDED] * TOTAL
    assert sim.stats()["models"]["sim-chat"]["requests"] == TOTAL
    for message in others:  # they come, find every request of theirs ended, and finish
        run(deps, message)
    assert sim.stats()["models"]["sim-chat"]["requests"] == TOTAL  # none ran twice
    assert stops(logged) == [Why.FINISHED.value] * CHAINS and sent == []
    assert batches.get_batch(deps, ALICE, batch_id)["request_counts"]["completed"] == TOTAL


def test_the_tail_is_read_from_the_top_so_the_lagging_chains_keep_their_next_requests(
    sim: Simulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    deps, _, (first, *_) = prepared(sim)
    sending(deps, monkeypatch)
    tune(deps, monkeypatch, tail_read_items=3, tail_least_share=0.0)  # pages of three
    taken: list[int] = []
    claim = deps.requests.claim

    def claimed(batch: str, index: int, owner: str, *args: Any) -> Any:
        if owner.endswith(TAIL_MARK):
            taken.append(index)
        return claim(batch, index, owner, *args)

    monkeypatch.setattr(deps.requests, "claim", claimed)
    run(deps, first)
    # Its own walk was 0, 3, 6, 9; the others' are read highest first, where they would
    # reach last, three requests read at a time (two of them to take; each page in an
    # order of the chain's own).
    pages = [sorted(taken[k : k + 2], reverse=True) for k in range(0, len(taken), 2)]
    assert pages == [[11, 10], [8, 7], [5, 4], [2, 1]]


def test_a_chain_that_meets_a_request_taken_from_the_tail_passes_it_instead_of_waiting_out_its_lease(
    sim: Simulator, monkeypatch: pytest.MonkeyPatch, logged: list[logging.LogRecord]
) -> None:
    deps, batch_id, (_, second, third) = prepared(sim)
    sent = sending(deps, monkeypatch)
    # Another chain's tail holds request 7 (the second chain's third), running it now.
    taker = f"elsewhere{TAIL_MARK}"
    assert deps.requests.claim(batch_id, 7, taker, deps.clock(), 60).request is not None
    # ... and another worker (a duplicate, a dead one) request 2 (the third chain's first).
    assert deps.requests.claim(batch_id, 2, "another", deps.clock(), 60).request is not None
    run(deps, second)
    assert stops(logged)[-1] == Why.FINISHED.value and sent == []  # no wait for 7's lease
    request = deps.requests.get(batch_id, 7)
    assert request is not None and request.status is RequestStatus.RUNNING and request.lease_owner == taker
    # One held by any other worker is still waited for: its lease may run out.
    logged.clear()
    run(deps, third)
    assert stops(logged) == [Why.HELD_ELSEWHERE.value]


def test_a_request_taken_from_the_tail_that_cannot_run_now_is_handed_on_as_a_message_of_its_own(
    sim: Simulator, monkeypatch: pytest.MonkeyPatch, logged: list[logging.LogRecord]
) -> None:
    deps, batch_id, (first, *_) = prepared(sim)
    sent = sending(deps, monkeypatch)
    changed = deps.settings.model_copy(update={"batch_yield_in_place_seconds": 0.0})
    monkeypatch.setattr(deps.live, "settings", changed)  # a yield leaves at once
    claim = deps.requests.claim
    taken: list[int] = []

    def claimed(batch: str, index: int, owner: str, *args: Any) -> Any:
        if owner.endswith(TAIL_MARK) and not taken:
            taken.append(index)  # interactive traffic takes the model's every slot meanwhile
            deps.interactive.report("gateway-1", {"sim-chat": CHAINS}, now=deps.clock(), ttl_seconds=3600)
            deps.clock.advance(1)  # type: ignore[attr-defined]  # past the share's read age
        return claim(batch, index, owner, *args)

    monkeypatch.setattr(deps.requests, "claim", claimed)
    run(deps, first)
    assert stops(logged) == [Why.YIELDED.value]
    # The chain that owns it may have passed it already: it is not only given back.
    (index,) = taken
    assert [message for message, _ in sent] == [RequestMessage(batch_id, index)]
    request = deps.requests.get(batch_id, index)
    assert request is not None and request.status is RequestStatus.QUEUED


def test_a_sparse_page_ends_the_tail_leaving_the_rest_to_their_chains(
    sim: Simulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    deps, batch_id, (first, *_) = prepared(sim)
    sending(deps, monkeypatch)
    # Pages of three, sparse below three to take: the first (11, 10 and the chain's own 9) is.
    tune(deps, monkeypatch, tail_read_items=3, tail_least_share=1.0)
    run(deps, first)
    ran = [i for i, status in enumerate(statuses(deps, batch_id)) if status is RequestStatus.SUCCEEDED]
    assert ran == [0, 3, 6, 9, 10, 11]


def test_a_chain_that_ends_far_from_its_batchs_end_takes_nothing_and_leaves_its_slot_to_a_split(
    sim: Simulator, monkeypatch: pytest.MonkeyPatch, logged: list[logging.LogRecord]
) -> None:
    deps, batch_id, (first, *_) = prepared(sim)
    sending(deps, monkeypatch)
    given: list[tuple[str, str]] = []
    monkeypatch.setattr(deps.ledger, "give", lambda model, batch: given.append((model, batch)))
    # Pages of three: the first (11, 10 and the chain's own 9) is two thirds still to run,
    # more than the half that says the others walk far below.
    tune(deps, monkeypatch, tail_read_items=3, tail_most_share=0.5)
    run(deps, first)
    ran = [i for i, status in enumerate(statuses(deps, batch_id)) if status is RequestStatus.SUCCEEDED]
    assert ran == [0, 3, 6, 9]
    assert stops(logged) == [Why.FINISHED.value] and given == [("sim-chat", batch_id)]
