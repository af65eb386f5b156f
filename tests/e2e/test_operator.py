"""The operator's plane over HTTP, on a stack of its own (its changes would slow the other
tests' batches): runtime settings reach the running workers and api processes within 10 s,
BATCH_ENABLED off and on, a model's cap lowered, set to 0 and restored while a batch runs,
and batch work giving way to interactive load: the load gateway processes report, and the
requests of the gateway's own interactive path (driven with the OpenAI SDK).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import openai
import pytest

from local.denials import DENY_PARTITIONS_ENV
from local.run import LocalStack
from tests.e2e.conftest import Api, aws_calls_dir, chat, root, stack_for
from tests.support import spec_counts, wait_for

PROPAGATION_LIMIT = 10.0  # seconds: the bound on a change reaching every process
YIELD_LIMIT = 2.0  # seconds: the bound on batch work giving way to reported interactive load
YIELD_SETTINGS = ("BATCH_YIELD_TO_INTERACTIVE", "BATCH_SHARED_INTERACTIVE_LOAD", "BATCH_INTERACTIVE_RESERVE")
REFRESH_SECONDS = 5.0  # BATCHGW_RUNTIME_REFRESH_SECONDS: by then every process has read it
ENV = {
    "BATCH_MODEL_CONCURRENCY": "8",
    "BATCH_LEASE_SECONDS": "30",
    # The interactive path's most (``passthrough.serve``): the give-way test's 20-s requests.
    "BATCH_UPSTREAM_TIMEOUT_SECONDS": "25",
    "BATCH_WORKER_TIMEOUT_SECONDS": "60",
    "BATCH_RECONCILE_SECONDS": "3",
    "BATCH_SLOT_WAIT_SECONDS": "0.5",
    "BATCH_ROUTE_CIRCUIT_SECONDS": "2",
    # A flex request finding no batch slot answers 429 this soon (one that finds the model full
    # of a batch takes a slot in a few seconds: a worker environment started, a chain handed on).
    "BATCH_FLEX_WAIT_SECONDS": "15",
}


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    logs = tmp_path_factory.mktemp("operator-logs")
    env = {**ENV, "BATCHGW_AWS_CALLS_DIR": str(aws_calls_dir(tmp_path_factory) / logs.name)}
    with LocalStack(
        api_port=0, sim_port=0, moto_port=0, env_overrides=env, workers=2, api_processes=2, log_dir=logs
    ) as running:
        yield running


@pytest.fixture
def admin(stack: LocalStack) -> Iterator[httpx.Client]:
    changed: list[float] = []  # when the test (or this clean-up) last changed what processes read

    def note(request: httpx.Request) -> None:
        if request.method != "GET":
            changed.append(time.monotonic())

    client = root(stack, "sk-local-admin")
    client.event_hooks["request"].append(note)
    yield client
    # Only what the test left set is reset: a reset of what was already the default changes nothing.
    left = {s["name"] for s in client.get("/admin/config").json()["data"] if s["source"] == "runtime"}
    for name in ("BATCH_ENABLED", "BATCH_MIN_ROLE", *YIELD_SETTINGS):
        if name in left:
            client.delete(f"/admin/config/{name}")
    for report in client.get("/admin/interactive-load").json()["data"]:
        client.delete(f"/admin/interactive-load/{report['id']}")
    model = next(m for m in client.get("/admin/batch/models").json()["data"] if m["id"] == "sim-chat")
    if model["max_concurrency"] is not None:
        client.patch("/admin/batch/models/sim-chat", json={"max_concurrency": None})
    # Every process has read the defaults again before the next test (the other api process
    # may still hold a test's override for up to one refresh interval after its last change).
    if changed:
        time.sleep(max(0.0, changed[-1] + REFRESH_SECONDS + 0.5 - time.monotonic()))


@pytest.fixture
def alice(stack: LocalStack) -> Api:  # the session's own is bound to the session's stack
    return Api(stack, "sk-local-alice")


def in_flight(sim: httpx.Client) -> tuple[int, int]:
    """sim-chat's requests in flight now, and seen so far."""
    counts = sim.get("/_sim/stats").json()["models"].get("sim-chat", {})
    return int(counts.get("in_flight", 0)), int(counts.get("requests", 0))


def batch_in_flight(sim: httpx.Client) -> int:
    """The batch's requests in flight now (those ``slow_batch`` tags)."""
    return int(sim.get("/_sim/stats").json().get("tags", {}).get(BATCH_TAG, {}).get("in_flight", 0))


BATCH_TAG = "batchwork"


def slow_batch(alice: Api, n: int, latency_ms: int = 300) -> str:
    created = alice.create(
        [chat(f"r{i}", f"[[sim latency_ms={latency_ms} tag={BATCH_TAG}]] {i}") for i in range(n)]
    )
    assert created.status_code == 200, created.text
    return str(created.json()["id"])


def nothing_starts_after(sim: httpx.Client, patched: float) -> None:
    """Once every process has read the change, no request starts (for a few seconds)."""
    time.sleep(max(0.0, patched + REFRESH_SECONDS + 0.5 - time.monotonic()))
    seen = in_flight(sim)
    time.sleep(2)
    assert in_flight(sim) == seen and seen[0] == 0


def seconds_until(condition: Any, *, what: str, steady: float = 0.0, timeout: float = 30) -> float:
    """Seconds from now until ``condition()`` holds (and keeps holding for ``steady`` s)."""
    start = time.monotonic()
    held_since: float | None = None
    while True:
        now = time.monotonic()
        if condition():
            held_since = now if held_since is None else held_since
            if now - held_since >= steady:
                return held_since - start
        else:
            held_since = None
        assert now - start < timeout, f"timed out waiting for {what}"
        time.sleep(0.05)


def test_a_setting_reaches_every_api_process_within_10_seconds(admin: httpx.Client, alice: Api) -> None:
    # An empty create is 400 to a role that may create, 403 below BATCH_MIN_ROLE: with two api
    # processes, the change is seen once every call, whichever process answers, says 403.
    assert alice.http.post("/batches", json={}).status_code == 400
    assert admin.patch("/admin/config/BATCH_MIN_ROLE", json={"value": "admin"}).status_code == 200
    took = seconds_until(
        lambda: all(alice.http.post("/batches", json={}).status_code == 403 for _ in range(4)),
        what="BATCH_MIN_ROLE to reach every api process",
        steady=1.0,
    )
    print(f"api processes saw BATCH_MIN_ROLE after {took:.2f} s")
    assert took < PROPAGATION_LIMIT
    assert admin.delete("/admin/config/BATCH_MIN_ROLE").json()["value"] == "internal"


def test_a_model_cap_lowered_to_2_holds_within_10_seconds_0_pauses_and_null_restores(
    admin: httpx.Client, alice: Api, sim: httpx.Client
) -> None:
    batch_id = slow_batch(alice, 300)
    seconds_until(lambda: in_flight(sim)[0] >= 6, what="the batch to fill the model's cap of 8")

    assert admin.patch("/admin/batch/models/sim-chat", json={"max_concurrency": 2}).status_code == 200
    took = seconds_until(lambda: in_flight(sim)[0] <= 2, what="the cap of 2 to hold", steady=2.0)
    print(f"workers held the lowered cap after {took:.2f} s")
    assert took < PROPAGATION_LIMIT
    model = next(m for m in admin.get("/admin/batch/models").json()["data"] if m["id"] == "sim-chat")
    assert model["effective_concurrency"] == 2 and model["running"] <= 2 and model["queued"] > 0

    assert admin.patch("/admin/batch/models/sim-chat", json={"max_concurrency": 0}).status_code == 200
    patched = time.monotonic()
    took = seconds_until(lambda: in_flight(sim)[0] == 0, what="a cap of 0 to pause the model", steady=1.0)
    assert took < PROPAGATION_LIMIT
    nothing_starts_after(sim, patched)  # paused
    assert alice.batch(batch_id)["status"] == "in_progress"

    assert admin.patch("/admin/batch/models/sim-chat", json={"max_concurrency": None}).status_code == 200
    seconds_until(lambda: in_flight(sim)[0] > 2, what="the default cap to come back")
    batch = alice.wait_final(batch_id, timeout=120)
    assert batch["status"] == "completed" and batch["request_counts"]["completed"] == 300


def test_batch_disabled_stops_new_requests_and_404s_then_enabled_resumes(
    admin: httpx.Client, alice: Api, sim: httpx.Client
) -> None:
    batch_id = slow_batch(alice, 120)
    seconds_until(lambda: in_flight(sim)[0] >= 4, what="the batch to start")

    assert admin.patch("/admin/config/BATCH_ENABLED", json={"value": False}).status_code == 200
    patched = time.monotonic()
    took = seconds_until(lambda: in_flight(sim)[0] == 0, what="no request running", steady=1.0)
    print(f"workers stopped starting requests after {took:.2f} s")
    assert took < PROPAGATION_LIMIT
    nothing_starts_after(sim, patched)  # no queued request starts
    took = seconds_until(
        lambda: all(
            alice.http.get(path).status_code == 404 for path in ("/batches", f"/batches/{batch_id}", "/files")
        ),
        what="every api process to answer 404",
        steady=1.0,
    )
    assert took < PROPAGATION_LIMIT
    assert alice.http.post("/batches", json={"requests": [chat("x", "hi")]}).status_code == 404

    assert admin.delete("/admin/config/BATCH_ENABLED").json()["value"] is True
    # Every api process answers again within the refresh interval; until then one may 404.
    batch = wait_for(
        lambda: (
            (r := alice.http.get(f"/batches/{batch_id}")).status_code == 200
            and r.json()["status"] == "completed"
            and r.json()
        ),
        timeout=120,
        interval=0.2,
        what="the kept batch to resume and finish",
    )
    assert spec_counts(batch) == {"total": 120, "completed": 120, "failed": 0}


def test_a_route_disallowed_mid_batch_fails_its_queued_requests_while_another_routes_work_goes_on(
    admin: httpx.Client, alice: Api, sim: httpx.Client
) -> None:
    cut = alice.create(
        [chat(f"c{i}", f"[[sim latency_ms=300]] {i}", model="sim-chat-only") for i in range(300)]
    )
    kept = slow_batch(alice, 60, latency_ms=200)
    assert cut.status_code == 200
    cut_id = cut.json()["id"]
    wait_for(
        lambda: alice.batch(cut_id)["request_counts"]["completed"] >= 4, timeout=30, what="the batch to start"
    )
    route = "/admin/routing/provider-route-batch/sim-chat-only/primary"
    try:
        assert admin.patch(route, json={"batch_allowed": False}).json()["batch_allowed"] is False
        ended = alice.wait_final(cut_id, timeout=60)
        assert ended["status"] == "completed" and 0 < ended["request_counts"]["failed"] < 300
        failed = [r for r in alice.results(cut_id) if r["status"] == "failed"]
        assert {r["error"]["code"] for r in failed} == {"batch_route_unavailable"}
        assert len(failed) == ended["request_counts"]["failed"]
        other = alice.wait_final(kept, timeout=120)
        assert spec_counts(other) == {"total": 60, "completed": 60, "failed": 0}
        refused = alice.create([chat("x", "hi", model="sim-chat-only")])
        assert refused.status_code == 400 and refused.json()["error"]["code"] == "batch_route_unavailable"
    finally:
        admin.patch(route, json={"batch_allowed": None})


def test_requests_fail_over_to_the_second_route_when_the_first_refuses_connections(
    alice: Api, sim: httpx.Client
) -> None:
    sim.post("/_sim/listeners/backup", json={"up": False}).raise_for_status()
    try:
        batch = alice.wait_final(slow_batch(alice, 40, latency_ms=50), timeout=60)
        assert spec_counts(batch) == {"total": 40, "completed": 40, "failed": 0}
        assert sim.get("/_sim/stats").json()["routes"] == {"primary": 40, "backup": 0}
    finally:
        sim.post("/_sim/listeners/backup", json={"up": True}).raise_for_status()
    time.sleep(2)  # BATCH_ROUTE_CIRCUIT_SECONDS: the workers try the backup route again
    batch = alice.wait_final(slow_batch(alice, 40, latency_ms=50), timeout=60)
    assert batch["request_counts"]["completed"] == 40
    assert sim.get("/_sim/stats").json()["routes"]["backup"] > 0  # back in the rotation


def test_summary_eta_and_the_request_log_agree_with_the_batch_and_the_simulator(
    admin: httpx.Client, alice: Api, sim: httpx.Client
) -> None:
    before = admin.get("/admin/batch/summary", params={"user": "user-alice"}).json()["users"][0]
    texts = [f"[[sim latency_ms=100]] {i}" for i in range(80)] + ["[[sim status=400]] bad"]
    created = alice.create([chat(f"r{i}", text) for i, text in enumerate(texts)])
    batch_id = created.json()["id"]
    running = wait_for(
        lambda: (b := alice.batch(batch_id))["eta"] is not None and b, timeout=30, what="an ETA to show"
    )
    eta = running["eta"]
    assert eta["requests_per_minute"] > 0 and eta["window_closes_first"] is False
    assert eta["estimated_completion_at"] >= running["in_progress_at"]
    batch = alice.wait_final(batch_id, timeout=120)
    assert batch["eta"] is None  # ended: nothing to estimate

    after = admin.get("/admin/batch/summary", params={"user": "user-alice"}).json()["users"][0]
    assert (
        after["requests"]["succeeded"] - before["requests"]["succeeded"]
        == batch["request_counts"]["completed"]
    )
    assert (
        after["requests"]["failed"] - before["requests"]["failed"] == batch["request_counts"]["failed"] == 1
    )
    assert after["cost_usd"] - before["cost_usd"] == pytest.approx(batch["cost_usd"])
    listed = admin.get("/admin/batch/jobs", params={"user": "user-alice", "limit": 1}).json()["data"]
    assert [(b["id"], b["user_id"]) for b in listed] == [(batch_id, "user-alice")]

    log: list[dict[str, Any]] = []
    params: dict[str, Any] = {"limit": 50}
    while True:
        page = admin.get(f"/admin/batch/jobs/{batch_id}/attempts", params=params).json()
        log += page["data"]
        if not page["has_more"]:
            break
        params["after"] = page["last_id"]
    assert len(log) == sim.get("/_sim/stats").json()["models"]["sim-chat"]["requests"] == 81
    assert sorted(e["custom_id"] for e in log) == sorted(f"r{i}" for i in range(81))
    assert {e["route"] for e in log} <= {"primary", "backup"}
    failed = admin.get(f"/admin/batch/jobs/{batch_id}/attempts", params={"status": "400"}).json()["data"]
    assert [e["custom_id"] for e in failed] == ["r80"]


def share_of(admin: httpx.Client) -> dict[str, Any]:
    model = next(m for m in admin.get("/admin/batch/models").json()["data"] if m["id"] == "sim-chat")
    return {k: v for k, v in model["batch_share"].items() if not k.startswith("adaptive")}


def test_a_batch_gives_way_to_reported_interactive_load_within_2_seconds_and_takes_it_back(
    admin: httpx.Client, alice: Api, sim: httpx.Client
) -> None:
    batch_id = slow_batch(alice, 400)
    seconds_until(lambda: in_flight(sim)[0] >= 7, what="the batch to fill the model's cap of 8")

    # A gateway process has 5 interactive requests in flight on sim-chat: with 2 slots of
    # headroom for them to grow into, 1 slot is left.
    put = admin.put("/admin/interactive-load/gw-a", json={"models": {"sim-chat": 5}, "ttl_seconds": 60})
    assert put.status_code == 200, put.text
    took = seconds_until(lambda: in_flight(sim)[0] <= 1, what="the batch to give 7 slots way", steady=1.0)
    print(f"batch work gave way to 5 interactive requests and their headroom after {took:.2f} s")
    assert took < YIELD_LIMIT
    assert share_of(admin) == {
        "slots": 1,
        "interactive_in_flight": 5,
        "interactive_reserve": 0,
        "interactive_headroom": 2,
        "reason": "yielding",
    }

    # Two reporters add up; once both are gone the batch takes the whole cap again.
    admin.put("/admin/interactive-load/gw-b", json={"models": {"sim-chat": 2}, "ttl_seconds": 60})
    took = seconds_until(lambda: in_flight(sim)[0] == 0, what="the batch to give every slot way", steady=1.0)
    assert took < YIELD_LIMIT
    listed = admin.get("/admin/interactive-load").json()
    assert listed["in_flight"] == {"sim-chat": 7} and [r["id"] for r in listed["data"]] == ["gw-a", "gw-b"]
    assert admin.delete("/admin/interactive-load/gw-a").status_code == 200
    assert admin.delete("/admin/interactive-load/gw-b").status_code == 200
    seconds_until(lambda: in_flight(sim)[0] >= 7, what="the batch to take the whole cap back")
    assert share_of(admin)["reason"] == "cap"
    # The worker said its requests were batch work (x-batchgw-source): the simulator told them apart.
    latency = sim.get("/_sim/stats").json()["latency"]["sim-chat"]
    assert latency["batch"]["count"] > 0 and latency["interactive"]["count"] == 0
    alice.http.post(f"/batches/{batch_id}/cancel")


def test_a_batch_gives_way_to_requests_of_the_interactive_path_within_2_seconds_and_takes_it_back(
    stack: LocalStack, admin: httpx.Client, alice: Api, sim: httpx.Client
) -> None:
    client = openai.OpenAI(base_url=stack.api_url, api_key="sk-local-bob", max_retries=0, timeout=60)
    # The interactive function starts an execution environment for each request it serves at
    # once (two at a time, each importing its handler): on CI's loaded machine the fifth one
    # started 9 s after the first. A wave of five starts most of them first (each api process
    # keeps its own), and the five requests below take 20 s each, so that they are at the
    # model together even when one of them waits for an environment to start.
    with ThreadPoolExecutor(5) as warming:
        warm = [{"role": "user", "content": "[[sim latency_ms=500 tag=warm]] warm"}]
        ready = [
            warming.submit(client.chat.completions.create, model="sim-chat", messages=warm) for _ in range(5)
        ]
        [r.result(timeout=60) for r in ready]
    sim.post("/_sim/reset").raise_for_status()
    batch_id = slow_batch(alice, 600)
    seconds_until(lambda: batch_in_flight(sim) >= 7, what="the batch to fill the model's cap of 8")
    bob = root(stack, "sk-local-bob")
    bob_before = bob.get("/v1/me").json()["spend_today_usd"]

    # Five callers of the gateway's own chat completions route, each answered in 20 s.

    def ask(i: int) -> Any:
        return client.chat.completions.create(
            model="sim-chat",
            messages=[{"role": "user", "content": f"[[sim latency_ms=20000 tag=live]] q{i}"}],
        )

    with ThreadPoolExecutor(5) as callers:
        answers = [callers.submit(ask, i) for i in range(5)]
        seconds_until(
            lambda: sim.get("/_sim/stats").json()["tags"].get("live", {}).get("in_flight") == 5,
            what="the 5 interactive requests to reach the model",
        )
        took = seconds_until(
            lambda: batch_in_flight(sim) <= 1, what="the batch to give 7 slots way", steady=1.0
        )
        print(f"batch work gave way to 5 requests of the interactive path after {took:.2f} s")
        assert took < YIELD_LIMIT
        assert share_of(admin) == {
            "slots": 1,
            "interactive_in_flight": 5,
            "interactive_reserve": 0,
            "interactive_headroom": 2,
            "reason": "yielding",
        }
        completions = [a.result(timeout=60) for a in answers]
        assert [c.choices[0].message.content.endswith(f"q{i}") for i, c in enumerate(completions)] == [
            True
        ] * 5
    # Their leases went with them: the batch takes the whole cap back.
    seconds_until(lambda: batch_in_flight(sim) >= 7, what="the batch to take the whole cap back")
    assert share_of(admin)["reason"] == "cap"
    assert admin.get("/admin/interactive-load").json()["data"] == []
    latency = sim.get("/_sim/stats").json()["latency"]["sim-chat"]
    assert latency["interactive"]["count"] == 5
    # Bob paid for his five, once each, at sim-chat's price (0.5 and 1.5 USD per million tokens).
    cost = sum(c.usage.prompt_tokens * 0.5 + c.usage.completion_tokens * 1.5 for c in completions) / 1e6
    spent = bob.get("/v1/me").json()["spend_today_usd"] - bob_before
    assert spent == pytest.approx(cost, rel=1e-6)
    alice.http.post(f"/batches/{batch_id}/cancel")


def test_a_report_that_is_not_renewed_stops_counting_when_its_ttl_runs_out(
    admin: httpx.Client, alice: Api, sim: httpx.Client
) -> None:
    batch_id = slow_batch(alice, 400)
    seconds_until(lambda: in_flight(sim)[0] >= 7, what="the batch to fill the model's cap of 8")
    admin.put("/admin/interactive-load/gw-dies", json={"models": {"sim-chat": 8}, "ttl_seconds": 3})
    seconds_until(lambda: in_flight(sim)[0] == 0, what="the batch to give the whole cap way", steady=0.5)
    # Its reporter died: nobody renews the report, and the batch takes the cap back.
    seconds_until(lambda: in_flight(sim)[0] >= 7, what="the dead reporter's load to vanish", timeout=20)
    assert admin.get("/admin/interactive-load").json()["data"] == []
    alice.http.post(f"/batches/{batch_id}/cancel")


def test_the_reserve_keeps_slots_free_and_yield_off_fills_the_cap_whatever_the_load(
    admin: httpx.Client, alice: Api, sim: httpx.Client
) -> None:
    batch_id = slow_batch(alice, 600)
    seconds_until(lambda: in_flight(sim)[0] >= 7, what="the batch to fill the model's cap of 8")

    assert admin.patch("/admin/config/BATCH_INTERACTIVE_RESERVE", json={"value": 4}).status_code == 200
    seconds_until(
        lambda: in_flight(sim)[0] <= 4, what="the reserve to hold", steady=1.0, timeout=PROPAGATION_LIMIT
    )
    peak = 0
    for _ in range(30):  # the batch never holds the last 4 slots
        peak = max(peak, in_flight(sim)[0])
        time.sleep(0.05)
    assert peak <= 4
    admin.put("/admin/interactive-load/gw-a", json={"models": {"sim-chat": 3}, "ttl_seconds": 60})
    seconds_until(lambda: in_flight(sim)[0] <= 1, what="the reserve and the load to add up", steady=1.0)
    assert share_of(admin) == {
        "slots": 1,
        "interactive_in_flight": 3,
        "interactive_reserve": 4,
        "interactive_headroom": 1,  # the reserve, larger, holds instead
        "reason": "yielding",
    }

    # Yield off: batch work fills the cap whatever the interactive load and the reserve.
    assert admin.patch("/admin/config/BATCH_YIELD_TO_INTERACTIVE", json={"value": False}).status_code == 200
    seconds_until(lambda: in_flight(sim)[0] >= 7, what="the batch to fill the cap with yield off", timeout=20)
    assert share_of(admin) == {
        "slots": 8,
        "interactive_in_flight": None,
        "interactive_reserve": 0,
        "interactive_headroom": 0,
        "reason": "yield_off",
    }
    alice.http.post(f"/batches/{batch_id}/cancel")


def test_interactive_load_reports_are_checked_and_for_administrators_only(
    stack: LocalStack, admin: httpx.Client
) -> None:
    user = root(stack, "sk-local-alice")
    assert user.put("/admin/interactive-load/gw", json={"models": {"sim-chat": 1}}).status_code == 403
    assert user.get("/admin/interactive-load").status_code == 403
    for body, param in [
        ({"models": {"sim-chat": -1}}, "models.sim-chat"),
        ({"models": {"sim-chat": 1.5}}, "models.sim-chat"),
        ({"models": {"sim-chat": True}}, "models.sim-chat"),
        ({"models": []}, "models"),
        ({}, "models"),
        ({"models": {}, "ttl_seconds": 0}, "ttl_seconds"),
        ({"models": {}, "ttl_seconds": 3601}, "ttl_seconds"),
        ({"models": {}, "extra": 1}, "models"),
    ]:
        resp = admin.put("/admin/interactive-load/gw", json=body)
        assert resp.status_code == 400, (body, resp.text)
        assert resp.json()["error"]["param"] == param
    assert admin.put("/admin/interactive-load/bad%20id", json={"models": {}}).status_code == 400
    assert admin.delete("/admin/interactive-load/nobody").status_code == 404
    stored = admin.put("/admin/interactive-load/gw", json={"models": {"sim-chat": 0, "other": 2}})
    assert stored.status_code == 200
    body = stored.json()
    assert body["models"] == {"other": 2} and body["expires_at"] - body["reported_at"] in (10, 11)


def test_while_the_interactive_load_cannot_be_read_no_batch_request_starts_unless_only_own_load_counts(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    # A stack whose control table refuses every read of the load reports (as IAM would).
    with stack_for(tmp_path_factory, "unreadable", {**ENV, DENY_PARTITIONS_ENV: "interactive"}) as denied:
        admin, alice = root(denied, "sk-local-admin"), Api(denied, "sk-local-alice")
        sim = httpx.Client(base_url=denied.sim_url, timeout=10)
        batch_id = slow_batch(alice, 20, latency_ms=50)
        wait_for(
            lambda: alice.batch(batch_id)["status"] == "in_progress", timeout=30, what="the batch to start"
        )
        time.sleep(3)  # its chains have asked for slots, and been refused: fail closed
        assert in_flight(sim) == (0, 0)
        assert share_of(admin) == {
            "slots": 0,
            "interactive_in_flight": None,
            "interactive_reserve": 0,
            "interactive_headroom": 0,
            "reason": "interactive_load_unknown",
        }
        listed = admin.get("/admin/interactive-load")
        assert listed.status_code == 503
        assert listed.json()["error"]["code"] == "interactive_load_unreadable"
        # Counting only this deployment's own load, an unreadable table counts as none.
        assert (
            admin.patch("/admin/config/BATCH_SHARED_INTERACTIVE_LOAD", json={"value": False}).status_code
            == 200
        )
        batch = alice.wait_final(batch_id, timeout=60)
        assert batch["status"] == "completed" and batch["request_counts"]["completed"] == 20


def test_a_saturated_model_makes_the_batch_back_off_to_its_capacity_and_healthy_answers_grow_it_back(
    admin: httpx.Client, alice: Api, sim: httpx.Client
) -> None:
    def adaptive() -> dict[str, Any]:
        model = next(m for m in admin.get("/admin/batch/models").json()["data"] if m["id"] == "sim-chat")
        return dict(model["batch_share"])

    # The upstream serves 3 requests at once and refuses the rest at once with 429, as a server
    # without a queue does. (A run of refusals in a row would pause the model outright,
    # BATCH_MODEL_PAUSE_AFTER_FAILURES: set aside here, so that the share shows what it does.)
    capacity = 3
    admin.patch("/admin/config/BATCH_MODEL_PAUSE_AFTER_FAILURES", json={"value": 1000}).raise_for_status()
    sim.post("/_sim/capacity", json={"sim-chat": capacity}).raise_for_status()
    sim.post("/_sim/overflow", json={"sim-chat": 429}).raise_for_status()
    try:
        time.sleep(REFRESH_SECONDS + 0.5)  # every process has read the setting
        batch_id = slow_batch(alice, 300)
        # The refusals, across many requests, lower the model's limit for every worker...
        lowered = wait_for(
            lambda: (s := adaptive())["reason"] == "adaptive" and s,
            timeout=30,
            what="the 429s to lower the limit",
        )
        assert lowered["adaptive_reason"] == "upstream_saturated" and lowered["slots"] < 8
        # ...down to about what the model can serve, within seconds.
        seconds_until(
            lambda: adaptive()["slots"] <= capacity + 1,
            what="the share to come down to the capacity",
            timeout=20,
        )
        # The model has room again: healthy answers raise the limit back, step by step, until
        # the model is unconstrained again and the batch fills the cap.
        sim.post("/_sim/overflow", json={"sim-chat": None}).raise_for_status()
        sim.post("/_sim/capacity", json={"sim-chat": None}).raise_for_status()
        seconds_until(lambda: adaptive()["adaptive_limit"] is None, what="the limit to be lifted", timeout=60)
        seconds_until(lambda: batch_in_flight(sim) >= 7, what="the batch to fill the cap again", timeout=20)
        batch = alice.wait_final(batch_id, timeout=180)
        assert batch["status"] == "completed" and batch["request_counts"]["completed"] == 300
    finally:
        sim.post("/_sim/overflow", json={"sim-chat": None})
        sim.post("/_sim/capacity", json={"sim-chat": None})
        admin.delete("/admin/config/BATCH_MODEL_PAUSE_AFTER_FAILURES")


FLEX_TAG = "flexwork"


def flex_chat(stack: LocalStack, text: str) -> Any:
    client = openai.OpenAI(base_url=stack.api_url, api_key="sk-local-bob", max_retries=0)
    return client.chat.completions.create(
        model="sim-chat",
        messages=[{"role": "user", "content": f"[[sim tag={FLEX_TAG}]] {text}"}],
        service_tier="flex",
    )


def flex_requests(sim: httpx.Client) -> int:
    return int(sim.get("/_sim/stats").json().get("tags", {}).get(FLEX_TAG, {}).get("requests", 0))


def test_a_flex_request_takes_a_slot_of_a_batch_filling_the_model_as_one_of_its_requests_ends(
    stack: LocalStack, admin: httpx.Client, alice: Api, sim: httpx.Client
) -> None:
    batch_id = slow_batch(alice, 400, latency_ms=1000)
    seconds_until(lambda: batch_in_flight(sim) >= 8, what="the batch to fill the model's cap of 8")
    answer = flex_chat(stack, "ahead of the batch")  # within BATCH_FLEX_WAIT_SECONDS, or a 429
    assert answer.service_tier == "flex" and answer.choices[0].message.content.endswith("ahead of the batch")
    assert flex_requests(sim) == 1
    left = alice.batch(batch_id)["request_counts"]
    assert left["completed"] < 100  # answered while the batch still had most of its requests to run
    alice.http.post(f"/batches/{batch_id}/cancel")
    alice.wait_final(batch_id, timeout=60)


def test_a_flex_request_on_a_model_held_by_interactive_traffic_answers_429_and_calls_no_model(
    stack: LocalStack, admin: httpx.Client, sim: httpx.Client
) -> None:
    put = admin.put("/admin/interactive-load/gw-flex", json={"models": {"sim-chat": 20}, "ttl_seconds": 60})
    assert put.status_code == 200, put.text
    seconds_until(lambda: share_of(admin)["slots"] == 0, what="no batch share left")
    started = time.monotonic()
    with pytest.raises(openai.RateLimitError) as refused:
        flex_chat(stack, "no room")
    took = time.monotonic() - started
    print(f"the flex request was refused after {took:.2f} s")
    assert took < 29  # within API Gateway's limit
    assert refused.value.code == "resource_unavailable"
    assert int(refused.value.response.headers["retry-after"]) > 0
    assert flex_requests(sim) == 0
