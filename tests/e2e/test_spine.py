"""The spine over real HTTP: inline chat batches through the whole local stack."""

from __future__ import annotations

import json
import time

import httpx
import pytest

from local.run import LocalStack
from tests.e2e.conftest import MODEL_CAP, Api, chat
from tests.support import spec_counts, wait_for

pytestmark = pytest.mark.e2e


def test_a_200_request_batch_completes_with_every_result_matching_its_request(alice: Api) -> None:
    requests = [chat(f"q-{i}", f"question number {i}") for i in range(200)]
    created = alice.create(requests, metadata={"project": "eval-42"})
    assert created.status_code == 200, created.text
    batch = created.json()
    assert batch["status"] == "validating"
    assert batch["metadata"] == {"project": "eval-42"}
    for field in (
        "anthropic_version",
        "cost_usd",
        "cost_unknown_attempts",
        "results_expires_at",
        "error",
        "usage",
    ):
        assert field in batch

    done = alice.wait_final(batch["id"])
    assert done["status"] == "completed"
    assert spec_counts(done) == {"total": 200, "completed": 200, "failed": 0}
    assert done["cost_usd"] > 0 and done["usage"]["input_tokens"] > 0
    assert done["results_expires_at"] > done["completed_at"]

    results = alice.results(done["id"], limit=37)
    assert [r["custom_id"] for r in results] == [f"q-{i}" for i in range(200)]
    for i, result in enumerate(results):
        assert result["status"] == "completed" and result["error"] is None
        body = result["response"]["body"]
        assert body["choices"][0]["message"]["content"] == f"echo: question number {i}"


def test_the_model_cap_holds_across_two_worker_processes(alice: Api, sim: httpx.Client) -> None:
    requests = [chat(f"c-{i}", f"slow [[sim latency_ms=150]] {i}") for i in range(40)]
    batch = alice.create(requests).json()
    assert alice.wait_final(batch["id"])["request_counts"]["completed"] == 40
    stats = sim.get("/_sim/stats").json()["models"]["sim-chat"]
    assert stats["requests"] == 40
    assert 1 < stats["max_in_flight"] <= MODEL_CAP


def test_a_small_batch_runs_beside_a_large_one_that_filled_its_model(alice: Api, bob: Api) -> None:
    # 400 requests of 0.3 s on the model's 4 slots: half a minute, had it the slots alone.
    large = alice.create([chat(f"l-{i}", f"slow [[sim latency_ms=300]] {i}") for i in range(400)]).json()
    try:
        wait_for(
            lambda: alice.batch(large["id"])["request_counts"]["completed"] >= 8, timeout=30, what="under way"
        )
        small = bob.create([chat(f"s-{i}", f"quick {i}") for i in range(3)]).json()
        done = bob.wait_final(small["id"], timeout=30)
        still = alice.batch(large["id"])
        assert done["status"] == "completed" and spec_counts(done)["completed"] == 3
        assert still["status"] == "in_progress" and still["request_counts"]["completed"] < 300, still
    finally:  # whatever failed, the next test of this stack does not find the model full of it
        assert alice.http.post(f"/batches/{large['id']}/cancel").status_code == 200
        assert alice.wait_final(large["id"])["status"] == "cancelled"


def test_an_alias_runs_on_the_model_it_named_at_create(alice: Api, sim: httpx.Client) -> None:
    batch = alice.create([chat("a-1", "aliased", model="sim-chat-latest")]).json()
    done = alice.wait_final(batch["id"])
    assert done["status"] == "completed"
    assert sim.get("/_sim/stats").json()["models"]["sim-chat"]["requests"] == 1
    [result] = alice.results(batch["id"])
    assert result["response"]["body"]["model"] == "sim-chat"


def test_another_users_batch_reads_as_not_found_on_every_route(alice: Api, bob: Api, admin: Api) -> None:
    batch = alice.create([chat("t-1", "mine")]).json()
    alice.wait_final(batch["id"])
    bid = batch["id"]
    for method, path in [
        ("GET", f"/batches/{bid}"),
        ("GET", f"/batches/{bid}/results"),
        ("GET", f"/batches/{bid}/output.jsonl"),
        ("POST", f"/batches/{bid}/cancel"),
        ("DELETE", f"/batches/{bid}"),
    ]:
        resp = bob.http.request(method, path)
        assert resp.status_code == 404, (method, path, resp.text)
        assert resp.json()["error"]["message"]
    assert bid not in [b["id"] for b in bob.http.get("/batches", params={"limit": 100}).json()["data"]]
    assert admin.batch(bid)["id"] == bid
    assert alice.batch(bid)["status"] == "completed"


def test_missing_or_unknown_keys_are_401_and_low_roles_are_403(stack: LocalStack) -> None:
    body = {"requests": [chat("x", "hi")]}
    assert httpx.post(f"{stack.api_url}/batches", json=body).status_code == 401
    bad = httpx.post(f"{stack.api_url}/batches", json=body, headers={"Authorization": "Bearer sk-nope"})
    assert bad.status_code == 401 and bad.json()["error"]["type"] == "authentication_error"
    free = httpx.post(
        f"{stack.api_url}/batches", json=body, headers={"Authorization": "Bearer sk-local-free"}
    )
    assert free.status_code == 403
    listed = httpx.get(f"{stack.api_url}/batches", headers={"Authorization": "Bearer sk-local-free"})
    assert listed.status_code == 200  # reading stays open below BATCH_MIN_ROLE


def test_one_invalid_request_refuses_the_whole_batch_naming_it(alice: Api) -> None:
    before = alice.http.get("/batches", params={"limit": 100}).json()["data"]
    resp = alice.create([chat("q-1", "fine"), chat("q-2", "bad", model="no-such-model")])
    assert resp.status_code == 400
    assert resp.json()["error"]["message"] == "requests[1] (custom_id 'q-2'): Model 'no-such-model' not found"
    after = alice.http.get("/batches", params={"limit": 100}).json()["data"]
    assert [b["id"] for b in after] == [b["id"] for b in before]


@pytest.mark.parametrize(
    "raw",
    [
        b'{"requests": [{"custom_id": "n", "body": {"model": "sim-chat", "temperature": NaN, '
        b'"messages": [{"role": "user", "content": "x"}]}}]}',
        b'{"requests": [{"custom_id": "n", "body": {"model": "sim-chat", "messages": '
        b'[{"role": "user", "content": "x"}], "tools": [{"type": "function", "function": {"name": "f", '
        b'"parameters": {"default": Infinity}}}]}}]}',
        b'{"requests": [{"custom_id": "n", "body": {"model": "sim-chat", "stream": true, '
        b'"messages": [{"role": "user", "content": "x"}]}}]}',
        b'{"requests": [{"custom_id": "n", "body": {"model": "auto", '
        b'"messages": [{"role": "user", "content": "x"}]}}]}',
    ],
)
def test_requests_a_batch_cannot_run_are_refused_with_400(alice: Api, raw: bytes) -> None:
    resp = alice.http.post("/batches", content=raw, headers={"content-type": "application/json"})
    assert resp.status_code == 400, resp.text
    assert resp.json()["error"]["code"] == 400


def test_a_body_over_the_size_limit_is_413(alice: Api) -> None:
    big = "x" * (4 * 1024 * 1024 + 1000)  # over BATCH_MAX_BODY_MB, under the 6 MB Lambda payload
    resp = alice.create([chat("big", big)])
    assert resp.status_code == 413
    assert "MiB" in resp.json()["error"]["message"]


def test_listing_is_newest_first_with_paging_and_filters(alice: Api) -> None:
    start = int(time.time()) - 1
    ids = [alice.create([chat(f"l-{i}", "list me")]).json()["id"] for i in range(3)]
    page = alice.http.get("/batches", params={"limit": 2}).json()
    assert [b["id"] for b in page["data"]] == [ids[2], ids[1]]
    assert page["has_more"] is True and page["first_id"] == ids[2] and page["last_id"] == ids[1]
    rest = alice.http.get("/batches", params={"limit": 1, "after": page["last_id"]}).json()
    assert [b["id"] for b in rest["data"]] == [ids[0]]

    recent = alice.http.get("/batches", params={"created_after": start, "limit": 100}).json()["data"]
    assert {b["id"] for b in recent} >= set(ids)
    iso = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(start))
    # the same batches (their counts may move between the two reads: another test's may still run)
    assert [
        b["id"]
        for b in alice.http.get("/batches", params={"created_before": iso, "limit": 100}).json()["data"]
    ] == [
        b["id"]
        for b in alice.http.get("/batches", params={"created_before": start, "limit": 100}).json()["data"]
    ]
    older = alice.http.get("/batches", params={"created_before": start, "limit": 100}).json()["data"]
    assert not set(ids) & {b["id"] for b in older}

    for bid in ids:
        alice.wait_final(bid)
    both = alice.http.get(
        "/batches", params=[("status", "completed"), ("status", "cancelled"), ("limit", "100")]
    ).json()["data"]
    assert set(ids) <= {b["id"] for b in both}
    assert all(b["status"] in ("completed", "cancelled") for b in both)
    none = alice.http.get("/batches", params={"status": "expired"}).json()["data"]
    assert not set(ids) & {b["id"] for b in none}
    assert alice.http.get("/batches", params={"limit": 0}).status_code == 400
    assert alice.http.get("/batches", params={"status": "bogus"}).status_code == 400


def test_results_list_every_request_while_running_and_export_once_ended(alice: Api) -> None:
    requests = [chat("r-0", "quick"), chat("r-1", "slow [[sim latency_ms=1500]]")]
    batch = alice.create(requests).json()
    page = alice.http.get(f"/batches/{batch['id']}/results").json()
    assert len(page["data"]) in (0, 2)  # nothing until the workflow wrote the items, then all
    early = alice.http.get(f"/batches/{batch['id']}/output.jsonl")
    assert early.status_code == 409
    done = alice.wait_final(batch["id"])
    assert done["status"] == "completed"
    export = alice.http.get(f"/batches/{batch['id']}/output.jsonl")
    assert export.status_code == 200
    lines = [json.loads(line) for line in export.text.splitlines()]
    assert [line["custom_id"] for line in lines] == ["r-0", "r-1"]
    assert set(lines[0]) == {"id", "custom_id", "response", "error"}
    assert lines[1]["response"]["status_code"] == 200 and lines[1]["error"] is None
    assert alice.http.get(f"/batches/{batch['id']}/results", params={"limit": 1001}).status_code == 400
    assert (
        alice.http.get(f"/batches/{batch['id']}/results", params={"after": "batch_req_x_1"}).status_code
        == 400
    )
