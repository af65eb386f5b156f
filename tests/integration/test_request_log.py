"""The request log across batches (``GET /admin/requests``) and request volume
(``GET /admin/request-metrics``): every upstream call, batch or interactive, listed newest
first and counted per hour, each bar with the batch worker's requests in it."""

from __future__ import annotations

from typing import Any

import boto3
import pytest
from batchgw.deps import Deps
from batchgw.domain.attempts import AttemptEntry
from batchgw.domain.chains import RequestMessage
from batchgw.run import lifecycle

from local.simulator import Simulator
from tests.integration.conftest import make_deps, receive_all
from tests.integration.test_console_batches import call
from tests.integration.test_owner_gate import run
from tests.integration.test_passthrough import call as interactive_call
from tests.integration.test_passthrough import chat as interactive_chat
from tests.support import FakeClock

pytestmark = pytest.mark.usefixtures("aws_env")

ADMIN = "sk-local-admin"
HOUR = 3600
START = 1_800_000_000  # a round hour (500,000 hours since the epoch)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(START + 60.0)


@pytest.fixture
def deps(sim: Simulator, clock: FakeClock, monkeypatch: pytest.MonkeyPatch) -> Deps:
    from functions.interactive import handler as interactive

    built = make_deps(sim, clock)
    monkeypatch.setattr(interactive, "get_deps", lambda: built)
    return built


def chat(custom_id: str, text: str) -> dict[str, Any]:
    return {
        "custom_id": custom_id,
        "body": {"model": "sim-chat", "messages": [{"role": "user", "content": text}]},
    }


def batch_of(
    deps: Deps, monkeypatch: pytest.MonkeyPatch, texts: list[str], key: str = "sk-local-alice"
) -> str:
    requests = [chat(f"r-{i}", text) for i, text in enumerate(texts)]
    status, batch = call(deps, monkeypatch, "POST", "/v1/batches", body={"requests": requests}, key=key)
    assert status == 200, batch
    lifecycle.prepare(deps, batch["id"])
    receive_all(deps)
    return str(batch["id"])


def admin_get(deps: Deps, monkeypatch: pytest.MonkeyPatch, path: str, query: str = "") -> Any:
    status, body = call(deps, monkeypatch, "GET", path, query=query, key=ADMIN)
    assert status == 200, body
    return body


def test_every_batchs_calls_are_listed_newest_first_paged_and_one_batch_by_its_id(
    deps: Deps, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    alices = batch_of(deps, monkeypatch, ["a", "b"])
    bobs = batch_of(deps, monkeypatch, ["c"], key="sk-local-bob")
    for batch_id, index in ((alices, 0), (bobs, 0), (alices, 1)):
        clock.advance(1)
        run(deps, RequestMessage(batch_id, index))

    listed = admin_get(deps, monkeypatch, "/admin/requests", "source=batch")["data"]
    assert [(r["batch_id"], r["request_index"], r["user_id"]) for r in listed] == [
        (alices, 1, "user-alice"),
        (bobs, 0, "user-bob"),
        (alices, 0, "user-alice"),
    ]
    assert {(r["source"], r["outcome"], r["status_code"]) for r in listed} == {("batch", "success", 200)}

    first = admin_get(deps, monkeypatch, "/admin/requests", "source=batch&limit=2")
    assert first["has_more"] and len(first["data"]) == 2
    rest = admin_get(deps, monkeypatch, "/admin/requests", f"source=batch&limit=2&after={first['last_id']}")
    assert [r["id"] for r in first["data"] + rest["data"]] == [r["id"] for r in listed] and not rest[
        "has_more"
    ]

    own = admin_get(deps, monkeypatch, "/admin/requests", f"source=batch&batch_id={alices}&limit=1")
    assert [r["request_index"] for r in own["data"]] == [1] and own["has_more"]
    after = admin_get(
        deps, monkeypatch, "/admin/requests", f"source=batch&batch_id={alices}&after={own['last_id']}"
    )
    assert [r["request_index"] for r in after["data"]] == [0]

    # start inclusive, end exclusive: Bob's request ended at START + 62 exactly
    window = admin_get(
        deps, monkeypatch, "/admin/requests", f"source=batch&start_time={START + 62}&end_time={START + 63}"
    )
    assert [r["batch_id"] for r in window["data"]] == [bobs]
    iso = admin_get(
        deps,
        monkeypatch,
        "/admin/requests",
        "source=batch&start_time=2027-01-15T08:01:01Z&end_time=2027-01-15T08:01:02Z",
    )
    assert [r["batch_id"] for r in iso["data"]] == [alices]  # START + 61, as ISO 8601 with zones
    assert admin_get(deps, monkeypatch, "/admin/requests")["data"] == []  # interactive by default


def test_batch_calls_logged_before_the_index_are_listed_with_the_indexed_ones(
    deps: Deps, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A batch's call is listed through the requests table's index of its batch's log; one
    logged before that index, as an item of the control table, is listed until its retention
    ends. An indexed one leaves the list with its batch."""
    batch_id = batch_of(deps, monkeypatch, ["a", "b"])
    clock.advance(1)
    run(deps, RequestMessage(batch_id, 0))
    older = AttemptEntry(
        batch_id="batch_before",
        index=7,
        custom_id="r-7",
        model="sim-chat",
        attempt=1,
        outcome="success",
        ended_at=START + 30.0,
        latency_ms=5,
        status_code=200,
        user_id="user-bob",
    )
    legacy = deps.reqlog.entry_action("batch", older, ttl=START + 86400)["Put"]  # as workers wrote it
    boto3.client("dynamodb").put_item(**legacy)
    clock.advance(1)
    run(deps, RequestMessage(batch_id, 1))

    listed = admin_get(deps, monkeypatch, "/admin/requests", "source=batch")["data"]
    assert [(r["batch_id"], r["request_index"]) for r in listed] == [
        (batch_id, 1),
        (batch_id, 0),
        ("batch_before", 7),
    ]

    assert call(deps, monkeypatch, "DELETE", f"/v1/batches/{batch_id}")[0] == 200
    lifecycle.purge(deps, batch_id)  # the workflow's step that deletes what a batch held
    listed = admin_get(deps, monkeypatch, "/admin/requests", "source=batch")["data"]
    assert [(r["batch_id"], r["request_index"]) for r in listed] == [("batch_before", 7)]


def test_interactive_requests_are_logged_and_counted_apart_with_the_batch_ones_in_every_bar(
    deps: Deps, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    batch_id = batch_of(deps, monkeypatch, ["fine", "[[sim status=400]] broken", "later"])
    run(deps, RequestMessage(batch_id, 0))
    run(deps, RequestMessage(batch_id, 1))
    assert interactive_call("/v1/chat/completions", interactive_chat("hello"))[0] == 200
    clock.advance(HOUR)  # the next hour
    run(deps, RequestMessage(batch_id, 2))
    assert interactive_call("/v1/chat/completions", interactive_chat("[[sim status=400]] no"))[0] == 400
    clock.advance(1)
    assert interactive_call("/v1/chat/completions", interactive_chat("again"))[0] == 200

    listed = admin_get(deps, monkeypatch, "/admin/requests", "source=interactive")["data"]
    assert [(r["source"], r["status_code"], r["batch_id"], r["user_id"]) for r in listed] == [
        ("interactive", 200, None, "user-alice"),
        ("interactive", 400, None, "user-alice"),
        ("interactive", 200, None, "user-alice"),
    ]

    window = f"start_time={START}&end_time={START + 2 * HOUR}"
    metrics = admin_get(deps, monkeypatch, "/admin/request-metrics", window)
    assert metrics["source"] == "interactive" and metrics["interval"] == "hour"
    assert [
        (
            bar["start_time"],
            bar["request_count"],
            bar["error_count"],
            bar["batch_request_count"],
            bar["batch_error_count"],
        )
        for bar in metrics["data"]
    ] == [(START, 1, 0, 2, 1), (START + HOUR, 2, 1, 1, 0)]
    assert (
        metrics["requests"],
        metrics["error_requests"],
        metrics["batch_requests"],
        metrics["batch_error_requests"],
    ) == (
        3,
        1,
        3,
        1,
    )
    daily = admin_get(deps, monkeypatch, "/admin/request-metrics", f"source=batch&interval=day&{window}")
    assert [(bar["request_count"], bar["batch_request_count"]) for bar in daily["data"]] == [(3, 3)]
    assert daily["data"][0]["start_time"] == START // 86400 * 86400


@pytest.mark.parametrize(
    ("path", "query", "param"),
    [
        ("/admin/requests", "source=everything", "source"),
        ("/admin/requests", "batch_id=batch_1", "batch_id"),
        ("/admin/requests", "after=nope", "after"),
        ("/admin/requests", f"start_time={START - 91 * 86400}", "start_time"),
        ("/admin/requests", "start_time=2027-01-15T08:00:00", "start_time"),  # no timezone
        ("/admin/request-metrics", "interval=minute", "interval"),
        ("/admin/request-metrics", f"start_time={START}&end_time={START}", "start_time"),
    ],
)
def test_a_bad_filter_is_refused_naming_it(
    deps: Deps, monkeypatch: pytest.MonkeyPatch, path: str, query: str, param: str
) -> None:
    status, error = call(deps, monkeypatch, "GET", path, query=query, key=ADMIN)
    assert (status, error["error"]["param"]) == (400, param)


def test_counts_a_flush_could_not_write_are_written_by_the_next_one(
    deps: Deps, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    batch_id = batch_of(deps, monkeypatch, ["a", "b"])
    real = deps.reqlog._table.update
    failing = {"left": 1}

    def update(*args: Any, **kwargs: Any) -> Any:
        if failing["left"]:
            failing["left"] -= 1
            raise RuntimeError("throttled")
        return real(*args, **kwargs)

    monkeypatch.setattr(deps.reqlog._table, "update", update)
    run(deps, RequestMessage(batch_id, 0))  # its run's flush fails: the count waits
    assert deps.reqlog.waiting
    run(deps, RequestMessage(batch_id, 1))
    window = f"source=batch&start_time={START}&end_time={START + HOUR}"
    assert admin_get(deps, monkeypatch, "/admin/request-metrics", window)["batch_requests"] == 2
