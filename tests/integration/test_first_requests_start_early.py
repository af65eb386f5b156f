"""A batch's first requests start while prepare writes the rest: its chains start once the
first chunk is written, wait at the ``written`` frontier for the others, and a retried
prepare goes on from that frontier without touching what ran."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any

import pytest
from batchgw.api import batches
from batchgw.api import results as results_api
from batchgw.deps import Deps
from batchgw.domain.chains import decode
from batchgw.domain.request import RequestRecord, request_id
from batchgw.run import ending, lifecycle
from batchgw.run.chain import run_message
from batchgw.storage.requests import ClaimKind

from local.simulator import Simulator
from tests.integration.conftest import body_of, chat_request, make_deps, receive_all
from tests.integration.test_item_leases import ALICE
from tests.support import FakeClock, spec_counts, wait_for

pytestmark = pytest.mark.usefixtures("aws_env")

N = 250  # a first chunk of FIRST_WRITE (100), then the other 150


class PrepareCrash(Exception):
    pass


def _create(deps: Deps, n: int = N) -> str:
    batch = batches.create_batch(
        deps, ALICE, body_of([chat_request(f"r-{i}", f"hello {i}") for i in range(n)])
    )
    return str(batch["id"])


def _stored(deps: Deps, batch_id: str) -> list[RequestRecord]:
    return list(deps.requests.all(batch_id))


def _crash_after_first_chunk(
    deps: Deps, monkeypatch: pytest.MonkeyPatch, death: BaseException | None = None
) -> None:
    """prepare fails (``death``, by default ``PrepareCrash``) once the first chunk is written
    and the chains are started."""
    put_new = deps.requests.put_new
    calls = 0

    def failing(requests: Sequence[RequestRecord]) -> None:
        nonlocal calls
        calls += 1
        if calls > 1:
            raise death or PrepareCrash("the lifecycle function died")
        put_new(requests)

    monkeypatch.setattr(deps.requests, "put_new", failing)


def _crashed_mid_write(sim: Simulator, monkeypatch: pytest.MonkeyPatch) -> tuple[Deps, str]:
    """A batch of N whose prepare died once its first chunk was written and its chains sent."""
    deps = make_deps(sim, FakeClock(), BATCH_MODEL_CONCURRENCY=4)
    batch_id = _create(deps)
    with monkeypatch.context() as patched:
        _crash_after_first_chunk(deps, patched)
        with pytest.raises(PrepareCrash):
            lifecycle.prepare(deps, batch_id)
    return deps, batch_id


def test_chains_start_once_the_first_requests_are_written_and_prepare_writes_the_rest(
    sim: Simulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    deps = make_deps(sim, FakeClock(), BATCH_MODEL_CONCURRENCY=4)
    batch_id = _create(deps)
    seen_at_start: list[tuple[str, int, int]] = []
    send_many = deps.queue.send_many

    def sending(messages: Sequence[Any]) -> None:
        record = deps.batches.get_record(batch_id)
        assert record is not None
        seen_at_start.append((record.status.value, record.written_count, len(_stored(deps, batch_id))))
        send_many(messages)

    monkeypatch.setattr(deps.queue, "send_many", sending)
    routed = lifecycle.prepare(deps, batch_id)

    assert seen_at_start == [("in_progress", lifecycle.FIRST_WRITE, lifecycle.FIRST_WRITE)]
    assert routed["next"] == "park"
    record = deps.batches.get_record(batch_id)
    assert record is not None and record.all_written and record.written_count == N
    assert [r.index for r in _stored(deps, batch_id)] == list(range(N))
    assert len(receive_all(deps)) == 4  # the chains, sent once


def _run_all(deps: Deps, messages: list[dict[str, Any]], *, meanwhile: Callable[[], Any]) -> None:
    """Run every chain message at once, with ``meanwhile`` (blocking) run alongside them; then
    the messages they sent (a chain that split, as room came free), until none is left."""

    def run(batch: list[dict[str, Any]]) -> list[asyncio.Task[Any]]:
        return [
            asyncio.create_task(
                run_message(deps, decode(message["Body"]), owner=f"w{i}", deadline=deps.clock() + 900)
            )
            for i, message in enumerate(batch)
        ]

    async def scenario() -> None:
        chains = run(messages)
        await asyncio.to_thread(meanwhile)
        await asyncio.gather(*chains)
        while sent := await asyncio.to_thread(receive_all, deps):
            await asyncio.gather(*run(sent))

    asyncio.run(scenario())


def test_a_chain_waits_at_the_written_frontier_and_a_retried_prepare_reruns_nothing(
    sim: Simulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    deps, batch_id = _crashed_mid_write(sim, monkeypatch)
    record = deps.batches.get_record(batch_id)
    assert record is not None and record.status.value == "in_progress" and record.written_count == 100
    missing: list[int] = []
    claim = deps.requests.claim

    def claiming(batch: str, index: int, *args: Any) -> Any:
        claimed = claim(batch, index, *args)
        if claimed.kind is ClaimKind.MISSING:
            missing.append(index)
        return claimed

    monkeypatch.setattr(deps.requests, "claim", claiming)

    def retried_prepare() -> None:
        # Step Functions retries prepare once the chains have run every written request and
        # are waiting at the frontier.
        wait_for(lambda: _completed(deps, batch_id) == 100, timeout=60, what="the first 100 requests to end")
        assert lifecycle.prepare(deps, batch_id)["next"] == "park"

    _run_all(deps, receive_all(deps), meanwhile=retried_prepare)

    assert missing == []  # no chain claimed a request not written yet
    assert _completed(deps, batch_id) == N
    assert sim.stats()["models"]["sim-chat"]["requests"] == N  # none ran twice
    assert {(r.status.value, r.attempts) for r in _stored(deps, batch_id)} == {("succeeded", 1)}


def _completed(deps: Deps, batch_id: str) -> int:
    batch = deps.batches.get(batch_id)
    return 0 if batch is None else batch.counts.completed


def test_results_list_requests_past_the_frontier_from_the_input(
    sim: Simulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    deps, batch_id = _crashed_mid_write(sim, monkeypatch)

    page = results_api.results_page(
        deps, ALICE, batch_id, {"limit": ["150"], "after": [request_id(batch_id, 49)]}
    )
    assert isinstance(page, dict)
    assert [r["custom_id"] for r in page["data"]] == [f"r-{i}" for i in range(50, 200)]
    assert {r["status"] for r in page["data"]} == {"queued"} and page["has_more"] is True
    rest = results_api.results_page(deps, ALICE, batch_id, {"after": [page["last_id"]], "limit": ["1000"]})
    assert isinstance(rest, dict)
    assert [r["custom_id"] for r in rest["data"]] == [f"r-{i}" for i in range(200, N)]
    assert rest["has_more"] is False


def test_a_batch_failed_before_its_requests_were_all_written_lists_the_rest_as_failed(
    sim: Simulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    deps, batch_id = _crashed_mid_write(sim, monkeypatch)
    ending.fail(deps, batch_id, "States.TaskFailed")  # prepare's retries ran out

    page = results_api.results_page(deps, ALICE, batch_id, {"limit": ["1000"]})
    assert isinstance(page, dict)
    assert [r["custom_id"] for r in page["data"]] == [f"r-{i}" for i in range(N)]
    assert {(r["status"], r["error"]["code"]) for r in page["data"]} == {("failed", "batch_failed")}
    assert page["has_more"] is False
    counted = spec_counts(batches.get_batch(deps, ALICE, batch_id))
    assert counted == {"total": N, "completed": 0, "failed": N}
    ending.fail(deps, batch_id, "States.TaskFailed")  # a retried step counts nothing again
    assert spec_counts(batches.get_batch(deps, ALICE, batch_id)) == counted
