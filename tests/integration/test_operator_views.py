"""What operators see (moto, the simulator): the summary per user and overall against the
batches' own counts, every user's batches with the user filter, a running batch's ETA, and
the request log — one entry per upstream call, filtered by model, status and time."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from batchgw.api import admin, batches
from batchgw.deps import Deps
from batchgw.domain.chains import RequestMessage
from batchgw.domain.errors import BadRequest
from batchgw.domain.principal import Principal
from batchgw.run import lifecycle

from local.simulator import Simulator
from tests.integration.conftest import body_of, chat_request, make_deps, receive_all
from tests.integration.test_owner_gate import prepared, run, walk
from tests.support import FakeClock

pytestmark = pytest.mark.usefixtures("aws_env")

ADMIN = Principal(user_id="user-admin", role="admin", key_id="key_local_admin")
ALICE = Principal(user_id="user-alice", role="internal", key_id="key_local_alice")
BOB = Principal(user_id="user-bob", role="internal", key_id="key_local_bob")
# Retries far enough off that a chain hands them on rather than wait (the clock is fake).
SLOW_RETRIES = {"BATCH_RETRY_BASE_SECONDS": "600", "BATCH_RETRY_MAX_SECONDS": "600"}


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def deps(sim: Simulator, clock: FakeClock) -> Deps:
    return make_deps(sim, clock, **SLOW_RETRIES)


def finished(deps: Deps, clock: FakeClock, principal: Principal, texts: list[str]) -> dict[str, Any]:
    """A batch of ``texts`` run to its end: its retries run once they are due."""
    batch = batches.create_batch(
        deps, principal, body_of([chat_request(f"r-{i}", text) for i, text in enumerate(texts)])
    )
    lifecycle.prepare(deps, batch["id"])
    receive_all(deps)
    walk(deps, batch["id"])
    clock.advance(1200)
    for index in range(len(texts)):  # the retries the chain handed on, due now (ended ones pass)
        run(deps, RequestMessage(batch["id"], index))
    return batches.get_batch(deps, principal, batch["id"])


def test_the_summary_adds_up_each_users_batches_and_the_overall_totals(deps: Deps, clock: FakeClock) -> None:
    a = finished(deps, clock, ALICE, ["one", "two", "[[sim status=400]] three"])
    b = finished(deps, clock, BOB, ["[[sim status=503 fail=1]] four", "five"])
    cancelled = batches.create_batch(deps, BOB, body_of([chat_request("c", "never")]))
    lifecycle.prepare(deps, cancelled["id"])
    batches.cancel_batch(deps, BOB, cancelled["id"])
    lifecycle.cancel(deps, cancelled["id"])

    shown = admin.summary(deps, ADMIN, {})
    rows = {row["user_id"]: row for row in shown["users"]}
    alice, bob = rows["user-alice"], rows["user-bob"]
    assert (alice["user_name"], alice["email"]) == ("alice", "alice@batchgw.local")
    assert alice["requests"] == {
        "succeeded": 2,
        "failed": 1,
        "expired_unrun": 0,
        "cancelled": 0,
        "not_finished": 0,
    }
    assert bob["requests"] == {
        "succeeded": 2,
        "failed": 0,
        "expired_unrun": 0,
        "cancelled": 1,
        "not_finished": 0,
    }
    assert alice["cost_usd"] == a["cost_usd"] and bob["cost_usd"] == pytest.approx(b["cost_usd"])
    assert alice["input_tokens"] == a["usage"]["input_tokens"]
    assert (alice["batches"], bob["batches"]) == (1, 2)
    total = shown["total"]
    assert total["requests"]["succeeded"] == 4 and total["batches"] == 3
    assert total["cost_usd"] == pytest.approx(a["cost_usd"] + b["cost_usd"])
    only = admin.summary(deps, ADMIN, {"user": ["user-bob"]})
    assert [row["user_id"] for row in only["users"]] == ["user-bob"]


def test_expired_requests_are_counted_as_failed_and_as_expired_unrun(deps: Deps, clock: FakeClock) -> None:
    batch = batches.create_batch(deps, ALICE, body_of([chat_request(f"r-{i}", "x") for i in range(3)]))
    lifecycle.prepare(deps, batch["id"])
    receive_all(deps)
    clock.advance(25 * 3600)
    lifecycle.expire(deps, batch["id"])
    row = admin.summary(deps, ADMIN, {"user": ["user-alice"]})["users"][0]
    assert row["requests"]["failed"] == 3 and row["requests"]["expired_unrun"] == 3


def test_every_users_batches_are_listed_newest_first_and_by_user(deps: Deps, clock: FakeClock) -> None:
    ids = []
    for principal in (ALICE, BOB, ALICE):
        ids.append(batches.create_batch(deps, principal, body_of([chat_request("a", "x")]))["id"])
        clock.advance(2)
    listed = admin.list_jobs(deps, ADMIN, {})
    assert [b["id"] for b in listed["data"]] == ids[::-1]
    assert [b["user_id"] for b in listed["data"]] == ["user-alice", "user-bob", "user-alice"]
    bobs = admin.list_jobs(deps, ADMIN, {"user": ["user-bob"]})
    assert [b["id"] for b in bobs["data"]] == [ids[1]]
    page = admin.list_jobs(deps, ADMIN, {"limit": ["2"]})
    assert [b["id"] for b in page["data"]] == ids[:0:-1] and page["has_more"]
    rest = admin.list_jobs(deps, ADMIN, {"limit": ["2"], "after": [page["last_id"]]})
    assert [b["id"] for b in rest["data"]] == [ids[0]] and not rest["has_more"]


def test_a_running_batch_shows_when_it_should_finish_and_warns_when_its_window_closes_first(
    deps: Deps, clock: FakeClock
) -> None:
    batch_id = prepared(deps, ALICE, 10)
    assert batches.get_batch(deps, ALICE, batch_id)["eta"] is None  # nothing done yet: no pace
    clock.advance(60)
    walk(deps, batch_id, start=5)  # five requests in the first minute
    eta = batches.get_batch(deps, ALICE, batch_id)["eta"]
    now = clock()
    assert eta["requests_per_minute"] == pytest.approx(5, rel=0.01)
    assert eta["estimated_completion_at"] == pytest.approx(now + 60, abs=2)  # five more at that pace
    assert eta["window_closes_first"] is False and eta["warning"] is None
    clock.advance(24 * 3600 - 90)  # the pace is now five a day; the window closes within a minute
    late = batches.get_batch(deps, ALICE, batch_id)["eta"]
    assert late["window_closes_first"] is True and "expire" in late["warning"]


def test_the_request_log_has_one_entry_per_upstream_call(
    deps: Deps, sim: Simulator, clock: FakeClock
) -> None:
    batch = finished(deps, clock, ALICE, ["ok", "[[sim status=503 fail=1]] flaky", "[[sim status=400]] bad"])
    log = admin.attempts(deps, ADMIN, batch["id"], {})["data"]
    assert len(log) == sim.stats()["models"]["sim-chat"]["requests"] == 4
    by_outcome = sorted((e["custom_id"], e["outcome"], e["status_code"]) for e in log)
    assert by_outcome == [
        ("r-0", "success", 200),
        ("r-1", "retry", 503),
        ("r-1", "success", 200),
        ("r-2", "failed", 400),
    ]
    entry = next(e for e in log if e["custom_id"] == "r-0")
    assert entry["route"] in {"primary", "backup"} and entry["model"] == "sim-chat"
    assert entry["cost_usd"] > 0 and entry["input_tokens"] > 0 and entry["worker"]
    assert sum(e["cost_usd"] for e in log) == pytest.approx(batch["cost_usd"])
    assert [e["ended_at"] for e in log] == sorted((e["ended_at"] for e in log), reverse=True)
    retry = admin.attempts(deps, ADMIN, batch["id"], {"status": ["retry"]})["data"]
    assert [(e["custom_id"], e["error_code"]) for e in retry] == [("r-1", "service_unavailable")]
    assert len(admin.attempts(deps, ADMIN, batch["id"], {"status": ["400"]})["data"]) == 1
    assert admin.attempts(deps, ADMIN, batch["id"], {"model": ["sim-embed"]})["data"] == []


def test_the_request_log_reads_a_time_range_start_inclusive_end_exclusive(
    deps: Deps, clock: FakeClock
) -> None:
    batch_id = prepared(deps, ALICE, 3)
    for index in range(3):
        walk_one(deps, batch_id, index)
        clock.advance(10)
    times = sorted(e["ended_at"] for e in admin.attempts(deps, ADMIN, batch_id, {})["data"])

    def between(start: float, end: float) -> int:
        params = {"start_time": [iso(start)], "end_time": [iso(end)]}
        return len(admin.attempts(deps, ADMIN, batch_id, params)["data"])

    assert between(times[0], times[2]) == 2  # the start counts, the end does not
    assert between(times[0], times[2] + 0.001) == 3
    assert between(times[1] + 0.001, times[2]) == 0
    with pytest.raises(BadRequest):
        admin.attempts(deps, ADMIN, batch_id, {"start_time": ["2026-12-01T10:00:00"]})  # no timezone
    with pytest.raises(BadRequest):
        admin.attempts(deps, ADMIN, batch_id, {"start_time": [iso(times[2])], "end_time": [iso(times[0])]})
    page = admin.attempts(deps, ADMIN, batch_id, {"limit": ["2"]})
    rest = admin.attempts(deps, ADMIN, batch_id, {"after": [page["last_id"]]})
    assert len(page["data"]) == 2 and page["has_more"] and len(rest["data"]) == 1


def walk_one(deps: Deps, batch_id: str, index: int) -> None:
    run(deps, RequestMessage(batch_id, index))


def iso(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, tz=UTC).isoformat(timespec="milliseconds")
