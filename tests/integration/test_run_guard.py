"""A worker learns whether its batch still runs from the write that records a request's
end (moto, the injected clock): every change that stops a batch halts its counter shards
in the same transaction, so a chain reads its batch once, not once per request."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest
from batchgw.api import batches
from batchgw.api import results as results_api
from batchgw.deps import Deps
from batchgw.domain.batch import Tally
from batchgw.domain.chains import ChainMessage, decode
from batchgw.domain.principal import Principal
from batchgw.domain.request import RequestEnd, RequestRecord
from batchgw.domain.states import RequestStatus
from batchgw.run import attempt, lifecycle
from batchgw.run.chain import run_message
from batchgw.storage.dynamo import Table
from batchgw.storage.requests import ClaimKind, Recorded, RunGuard

from local.simulator import Simulator
from tests.integration.conftest import body_of, chat_request, make_deps, receive_all
from tests.support import FakeClock

pytestmark = pytest.mark.usefixtures("aws_env")

ALICE = Principal(user_id="user-alice", role="internal", key_id="key_local_alice")
OWNER_ERROR = {"code": "owner_unauthorized", "message": "The batch's key was revoked."}
ONE_CHAIN = {"BATCH_MODEL_CONCURRENCY": "1", "BATCH_COUNTER_SHARDS": "2"}


def prepared(deps: Deps, n: int) -> str:
    batch = batches.create_batch(deps, ALICE, body_of([chat_request(f"r-{i}", f"hi {i}") for i in range(n)]))
    lifecycle.prepare(deps, batch["id"])
    return str(batch["id"])


def claim(deps: Deps, batch_id: str, index: int) -> RequestRecord:
    claimed = deps.requests.claim(batch_id, index, "w", deps.clock(), 60)
    assert claimed.kind is ClaimKind.CLAIMED and claimed.request is not None
    return claimed.request


def record(deps: Deps, held: RequestRecord, guard: RunGuard | None) -> Recorded:
    ending = RequestEnd(status=RequestStatus.SUCCEEDED, ended_at=deps.clock())
    shard = held.index % int(ONE_CHAIN["BATCH_COUNTER_SHARDS"])
    return deps.requests.record_end(held, shard=shard, end=ending, tally=Tally(completed=1), guard=guard)


def chain_messages(deps: Deps) -> list[ChainMessage]:
    return [m for m in (decode(raw["Body"]) for raw in receive_all(deps)) if isinstance(m, ChainMessage)]


STOPS: dict[str, Callable[[Deps, str], Any]] = {
    "cancelled": lambda deps, batch_id: batches.cancel_batch(deps, ALICE, batch_id),
    "window closed": lambda deps, batch_id: lifecycle.expire(deps, batch_id),
    "results full": lambda deps, batch_id: deps.batches.mark_results_full(batch_id),
    "owner failed": lambda deps, batch_id: deps.batches.fail_for_owner(
        batch_id, {"code": "owner_unauthorized", "message": "no"}
    ),
    "step failed": lambda deps, batch_id: deps.batches.start_failing(batch_id, None),
    "deleted": lambda deps, batch_id: deps.batches.delete_record(batch_id, now=deps.clock()),
}


@pytest.mark.parametrize("stop", sorted(STOPS))
def test_every_stop_is_seen_by_the_next_guarded_end_in_every_shard(sim: Simulator, stop: str) -> None:
    deps = make_deps(sim, FakeClock(), **ONE_CHAIN)
    batch_id = prepared(deps, 6)
    first, *running = [claim(deps, batch_id, i) for i in (0, 1, 2)]  # shards 0, 1 and 0
    assert record(deps, first, RunGuard()) is Recorded.RUNS
    STOPS[stop](deps, batch_id)
    for held in running:  # ended and counted all the same, but told the batch stopped
        assert record(deps, held, RunGuard()) in (Recorded.OK, Recorded.SHARD_FINISHED)
        after = deps.requests.get(batch_id, held.index)
        assert after is not None and after.status is RequestStatus.SUCCEEDED


def test_a_newer_generation_supersedes_only_the_older_chains(sim: Simulator) -> None:
    deps = make_deps(sim, FakeClock(), **ONE_CHAIN)
    batch_id = prepared(deps, 6)
    assert deps.batches.set_generation(batch_id, 1)
    assert record(deps, claim(deps, batch_id, 0), RunGuard(generation=0)) is Recorded.OK
    assert record(deps, claim(deps, batch_id, 1), RunGuard(generation=1)) is Recorded.RUNS
    assert record(deps, claim(deps, batch_id, 2), RunGuard()) is Recorded.RUNS  # a lone request


def test_a_chain_reads_its_batch_once_however_many_requests_it_runs(
    sim: Simulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    deps = make_deps(sim, FakeClock(), **ONE_CHAIN)
    reads = [0]
    real = deps.batches.get_record

    def counting(batch_id: str) -> Any:
        reads[0] += 1
        return real(batch_id)

    monkeypatch.setattr(deps.batches, "get_record", counting)
    counted = []
    for n in (3, 9):
        batch_id = prepared(deps, n)
        (message,) = chain_messages(deps)
        reads[0] = 0
        asyncio.run(run_message(deps, message, owner="w", deadline=deps.clock() + 900))
        assert [r["status"] for r in results_api.results_page(deps, ALICE, batch_id, {})["data"]] == [
            "completed"
        ] * n
        counted.append(reads[0])
    assert counted[0] == counted[1], counted


def test_a_cancel_while_a_request_is_with_the_upstream_starts_no_further_request(
    sim: Simulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    deps = make_deps(sim, FakeClock(), **ONE_CHAIN)
    batch_id = prepared(deps, 6)
    (message,) = chain_messages(deps)
    real_call = attempt.call

    async def cancelling_call(deps: Deps, batch: Any, held: RequestRecord, *args: Any, **kw: Any) -> Any:
        if held.index == 1:
            await asyncio.to_thread(batches.cancel_batch, deps, ALICE, batch_id)
        return await real_call(deps, batch, held, *args, **kw)

    monkeypatch.setattr(attempt, "call", cancelling_call)
    asyncio.run(run_message(deps, message, owner="w", deadline=deps.clock() + 900))
    assert sim.stats()["models"]["sim-chat"]["requests"] == 2  # 0, and 1 already with the upstream
    lifecycle.cancel(deps, batch_id)
    page = results_api.results_page(deps, ALICE, batch_id, {})["data"]
    assert [(r["status"], r["error"] and r["error"]["code"]) for r in page] == [
        ("completed", None),
        ("completed", None),
    ] + [("cancelled", "batch_cancelled")] * 4


def test_an_ended_request_keeps_its_answer_and_lets_its_body_go(sim: Simulator) -> None:
    deps = make_deps(sim, FakeClock(), **ONE_CHAIN)
    batch_id = prepared(deps, 2)
    (message,) = chain_messages(deps)
    assert deps.requests.get(batch_id, 0).request_packed is not None  # type: ignore[union-attr]
    asyncio.run(run_message(deps, message, owner="w", deadline=deps.clock() + 900))
    for index in (0, 1):
        ended = deps.requests.get(batch_id, index)
        assert ended is not None and ended.status is RequestStatus.SUCCEEDED
        assert ended.request_packed is None and ended.response_packed is not None


def test_a_refused_end_takes_one_more_try_told_by_the_shard_it_found(
    sim: Simulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A refused count returns the shard as it was: one left, so the next try is the
    shard's last; more, so the guard refused and the next try goes without it."""
    tries: list[int] = []
    transact = Table.transact

    def counted(self: Table, actions: Any, *, failure: str) -> Any:
        tries.append(1)
        return transact(self, actions, failure=failure)

    monkeypatch.setattr(Table, "transact", counted)
    deps = make_deps(sim, FakeClock(), **ONE_CHAIN)
    batch_id = prepared(deps, 6)  # shard 0 counts requests 0, 2 and 4
    held = [claim(deps, batch_id, i) for i in (0, 2, 4)]

    def tries_of(request: RequestRecord) -> tuple[Recorded, int]:
        tries.clear()
        return record(deps, request, RunGuard()), len(tries)

    assert tries_of(held[0]) == (Recorded.RUNS, 1)
    deps.batches.mark_results_full(batch_id)  # a stop: the guard refuses
    assert tries_of(held[1]) == (Recorded.OK, 2)  # two were left: again, unguarded
    assert tries_of(held[2]) == (Recorded.SHARD_FINISHED, 2)  # one was left: again, as the last
