"""The primary spec's rules where the gateway once differed from it, one test per rule,
through the public interface (HTTP and the SDKs) on the local stack; and issue 57's window of
a background response, on the stack with one batch slot that rules 1 and 9 use."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from openai import OpenAI

from local.run import LocalStack
from tests.e2e.conftest import STACK_ENV, Account, Api, chat, root, stack_for
from tests.support import wait_for

pytestmark = pytest.mark.e2e


@pytest.fixture
def client(stack: LocalStack) -> OpenAI:
    return OpenAI(base_url=stack.api_url, api_key="sk-local-alice", max_retries=0)


def ended(api: Api, n: int, text: str = "paged") -> list[str]:
    ids = [api.create([chat(f"p-{i}", f"{text} {i}")]).json()["id"] for i in range(n)]
    for batch_id in ids:
        api.wait_final(batch_id)
    return ids


# 3. List paging survives deletion.
def test_rule_3_list_paging_goes_on_after_the_batch_named_by_after_was_deleted(admin: Api) -> None:
    ids = ended(admin, 3)  # the admin key keeps this listing to itself
    newest_first = list(reversed(ids))
    first = admin.http.get("/batches", params={"limit": 1}).json()
    assert [b["id"] for b in first["data"]] == newest_first[:1]
    assert admin.http.delete(f"/batches/{newest_first[0]}").status_code == 200
    wait_for(lambda: admin.http.get(f"/batches/{newest_first[0]}").status_code == 404, timeout=20)
    after = admin.http.get("/batches", params={"limit": 2, "after": newest_first[0]})
    assert after.status_code == 200
    assert [b["id"] for b in after.json()["data"]] == newest_first[1:3]


def test_rule_3_file_list_paging_goes_on_after_the_file_named_by_after_was_deleted(
    client: OpenAI, tmp_path: Path
) -> None:
    path = tmp_path / "f.jsonl"
    path.write_text(
        json.dumps(
            {
                "custom_id": "f",
                "method": "POST",
                "url": "/v1/chat/completions",
                "body": {"model": "sim-chat", "messages": [{"role": "user", "content": "x"}]},
            }
        )
        + "\n"
    )
    made = [client.files.create(file=path.open("rb"), purpose="batch").id for _ in range(3)]
    client.files.delete(made[1])
    page = client.files.list(after=made[1], order="asc")
    assert made[2] in [f.id for f in page.data] and made[0] not in [f.id for f in page.data]


# 7. A byte-order mark at the start of a create body or an input file is accepted.
def test_rule_7_a_byte_order_mark_opening_a_create_body_or_a_file_is_accepted(
    alice: Api, client: OpenAI, tmp_path: Path
) -> None:
    body = b"\xef\xbb\xbf" + json.dumps({"requests": [chat("bom", "hello")]}).encode()
    created = alice.http.post("/batches", content=body, headers={"content-type": "application/json"})
    assert created.status_code == 200
    assert alice.wait_final(created.json()["id"])["request_counts"]["completed"] == 1
    path = tmp_path / "bom.jsonl"
    line = {
        "custom_id": "b",
        "method": "POST",
        "url": "/v1/chat/completions",
        "body": {"model": "sim-chat", "messages": [{"role": "user", "content": "x"}]},
    }
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps(line).encode() + b"\n")
    upload = client.files.create(file=path.open("rb"), purpose="batch")
    batch = client.batches.create(
        input_file_id=upload.id, endpoint="/v1/chat/completions", completion_window="24h"
    )
    done = wait_for(
        lambda: (b := client.batches.retrieve(batch.id)).status in ("completed", "failed") and b, timeout=60
    )
    assert (
        done.status == "completed" and done.request_counts is not None and done.request_counts.completed == 1
    )


# 8. Inline batches take the same windows as file batches.
@pytest.mark.parametrize(("window", "hours"), [("48h", 48), ("72h", 72), ("168h", 168)])
def test_rule_8_an_inline_batch_takes_the_file_batches_windows(alice: Api, window: str, hours: int) -> None:
    created = alice.create([chat("w", "windowed")], completion_window=window).json()
    assert created["completion_window"] == window
    assert created["expires_at"] - created["created_at"] == hours * 3600
    assert alice.create([chat("w", "x")], completion_window="12h").status_code == 400
    alice.wait_final(created["id"])  # ended, its request counts in no later test's model stats


# 4. A failed file batch says why.
def test_rule_4_a_file_batch_that_fails_validation_has_its_error_set(
    alice: Api, client: OpenAI, tmp_path: Path
) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text("{not json\n")
    upload = client.files.create(file=path.open("rb"), purpose="batch")
    batch = client.batches.create(
        input_file_id=upload.id, endpoint="/v1/chat/completions", completion_window="24h"
    )
    done = alice.wait_final(batch.id)
    assert done["status"] == "failed"
    assert done["error"]["code"] == "invalid_batch_input" and "errors" in done["error"]["message"]
    assert [e["code"] for e in done["errors"]["data"]] == ["invalid_json"]


# 10. Upstream answers that are not valid JSON and UTF-8 fail the request, permanently.
@pytest.mark.parametrize("directive", ["nan", "surrogate"])
def test_rule_10_an_answer_with_nan_or_a_lone_surrogate_fails_as_upstream_error_keeping_its_charge(
    alice: Api, sim: httpx.Client, directive: str
) -> None:
    batch = alice.create([chat("n", f"broken [[sim {directive}]]")]).json()
    done = alice.wait_final(batch["id"])
    [result] = alice.results(batch["id"])
    assert result["status"] == "failed" and result["response"] is None
    assert result["error"]["code"] == "upstream_error" and result["error"]["status"] == 502
    assert done["cost_usd"] > 0 and done["cost_unknown_attempts"] == 0  # its usage was still readable
    assert sim.get("/_sim/stats").json()["models"]["sim-chat"]["requests"] == 1  # never retried
    output = alice.http.get(f"/batches/{batch['id']}/output.jsonl")
    assert json.loads(output.text.splitlines()[0])["error"]["code"] == "upstream_error"


# Rules 1 and 9 need a slow model and a short window of their own; so does a background
# response that cannot start before its window closes (the model's one slot held).
WINDOW = 4
BACKGROUND_WINDOW = 4


@pytest.fixture(scope="module")
def slow(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    env = {
        **STACK_ENV,
        "BATCH_MODEL_CONCURRENCY": "1",
        "BATCH_COMPLETION_WINDOW_HOURS": str(WINDOW / 3600),
        "BATCH_MAX_QUEUED_REQUESTS_PER_USER": "5",
        "BATCH_UPSTREAM_TIMEOUT_SECONDS": "40",  # a request may outlast the window
        "BATCH_BACKGROUND_WINDOW_SECONDS": str(BACKGROUND_WINDOW),
    }
    with stack_for(tmp_path_factory, "rules", env) as running:
        yield running


# 1. Unfinished requests are counted as unfinished.
def test_rule_1_only_requests_not_yet_ended_count_against_the_queued_request_limit(slow: LocalStack) -> None:
    api = Api(slow, "sk-local-bob")
    admin = root(slow, "sk-local-admin")
    # Both batches get a window no loaded machine can outrun (a runtime setting: a batch keeps the
    # value it was created with), and the request left unfinished runs on a model of its own, so
    # which request the one slot of sim-chat serves first cannot matter.
    window = "/admin/config/BATCH_COMPLETION_WINDOW_HOURS"
    assert admin.patch(window, json={"value": 1}).status_code == 200
    try:
        running = api.create([chat("s", "slow [[sim latency_ms=30000]]", model="sim-chat-only")])
        quick = api.create([chat(f"f-{i}", "quick") for i in range(3)])
    finally:
        admin.delete(window)
    assert running.status_code == 200 and quick.status_code == 200
    api.wait_final(quick.json()["id"])
    assert api.batch(running.json()["id"])["status"] in ("validating", "in_progress")
    # One request is left unfinished: 1 + 4 is within the limit of 5 (with the 3 ended ones, 8 would not be).
    # They wait behind it on its model's one slot: none of them ends before the next create.
    second = api.create(
        [chat(f"g-{i}", "more [[sim latency_ms=30000]]", model="sim-chat-only") for i in range(4)]
    )
    assert second.status_code == 200, second.text
    assert api.create([chat("h", "one too many")]).status_code == 429
    for batch in (running, second):
        api.http.post(f"/batches/{batch.json()['id']}/cancel")


# 9. A cancel after the window closed still ends cancelled.
def test_rule_9_a_cancel_after_the_window_closed_ends_cancelled(slow: LocalStack) -> None:
    api = Api(slow, "sk-local-alice")
    sim = httpx.Client(base_url=slow.sim_url, timeout=10)
    # This batch's window (a runtime setting: it keeps the value it was created with) is long
    # enough for its first request to start however loaded the machine is, and that request
    # runs well past it, so the batch is still running when the cancel comes.
    admin = root(slow, "sk-local-admin")
    window = "/admin/config/BATCH_COMPLETION_WINDOW_HOURS"
    assert admin.patch(window, json={"value": 12 / 3600}).status_code == 200
    requests = [chat(f"c-{i}", f"slow [[sim latency_ms=25000]] {i}") for i in range(3)]
    try:
        batch = api.create(requests).json()
    finally:
        admin.delete(window)
    wait_for(
        lambda: sim.get("/_sim/stats").json()["models"]["sim-chat"]["in_flight"] > 0,
        timeout=12,
        what="the first request to start",
    )
    assert time.time() < batch["expires_at"]
    wait_for(lambda: time.time() > batch["expires_at"] + 0.3, timeout=20, interval=0.05)
    cancelled = api.http.post(f"/batches/{batch['id']}/cancel").json()
    assert cancelled["status"] in ("cancelling", "cancelled"), cancelled["status"]
    done = api.wait_final(batch["id"], timeout=60)
    assert done["status"] == "cancelled" and done["cancelled_at"] is not None


# A background response's window (issue 57): past it, one that could not run ends incomplete.
def test_a_background_response_whose_window_closes_before_it_can_start_ends_incomplete_uncharged(
    slow: LocalStack,
) -> None:
    alice = Api(slow, "sk-local-alice")
    # A batch holds sim-chat's one batch slot far longer than the response's window.
    hold = alice.create([chat("hold", "hold [[sim latency_ms=30000]]")]).json()["id"]
    wait_for(
        lambda: alice.results(hold)[0]["status"] == "in_progress", timeout=40, what="the slot to be held"
    )
    try:
        user = Account(slow)
        key = str(user.api.http.headers["Authorization"]).removeprefix("Bearer ")
        client = OpenAI(base_url=slow.api_url, api_key=key, max_retries=0)
        created = client.responses.create(model="sim-chat", input="never runs", background=True)
        assert created.status == "queued"
        done = wait_for(
            lambda: (
                (r := client.responses.retrieve(created.id)).status not in ("queued", "in_progress") and r
            ),
            timeout=BACKGROUND_WINDOW + 30,  # the window, then a reconcile (every 3 s), on a loaded machine
            interval=0.2,
            what=f"{created.id} to end",
        )
        assert time.time() >= created.created_at + BACKGROUND_WINDOW
    finally:
        alice.http.post(f"/batches/{hold}/cancel")
    assert done.status == "incomplete" and done.id == created.id and done.background is True
    assert done.incomplete_details is not None
    assert done.incomplete_details.reason == "background_window_expired"
    assert done.error is not None and done.error.code == "background_window_expired"
    assert done.output == [] and done.usage is None
    # Never called, never charged: no call in its request log, nothing spent by its owner.
    calls = root(slow, "sk-local-admin").get(
        "/admin/requests", params={"source": "batch", "batch_id": created.id}
    )
    assert calls.raise_for_status().json()["data"] == []
    assert user.api.http.get("/me").raise_for_status().json()["spend_today_usd"] == 0
    # It stays readable, as it ended, through the SDK and in the caller's list.
    again = client.responses.retrieve(created.id)
    assert again.status == "incomplete" and again.incomplete_details == done.incomplete_details
    listed = user.api.http.get("/responses").raise_for_status().json()["data"]
    assert [(r["id"], r["status"]) for r in listed] == [(created.id, "incomplete")]


# 6. Every request is listed from the first moment.
def test_rule_6_right_after_create_every_request_is_listed(alice: Api) -> None:
    created = alice.create([chat(f"e-{i}", f"early [[sim latency_ms=300]] {i}") for i in range(12)]).json()
    page = alice.http.get(f"/batches/{created['id']}/results", params={"limit": 5}).json()
    assert [r["custom_id"] for r in page["data"]] == [f"e-{i}" for i in range(5)] and page["has_more"] is True
    assert all(r["status"] in ("queued", "in_progress", "completed") for r in page["data"])
    assert [r["custom_id"] for r in alice.results(created["id"])] == [f"e-{i}" for i in range(12)]


# 14. Limits the platform sets are honest.
def test_rule_14_a_body_over_the_platforms_limit_is_a_413_naming_the_routes_for_larger_inputs(
    alice: Api,
) -> None:
    big = {"requests": [chat("big", "x" * (4 * 1024 * 1024 + 1000))]}  # over BATCH_MAX_BODY_MB (4 MiB)
    refused = alice.http.post("/batches", json=big)
    assert refused.status_code == 413
    error = refused.json()["error"]
    assert error["type"] == "request_too_large" and "/v1/uploads" in error["message"]
    assert "/v1/files/presigned" in error["message"]


# 13. The validation report's codes exist for direct requests too.
def test_rule_13_a_request_asking_more_output_than_its_model_answers_is_max_tokens_too_large(
    alice: Api,
) -> None:
    refused = alice.create([chat("m", "long", max_tokens=16385)])
    assert refused.status_code == 400
    error = refused.json()["error"]
    assert error["param"] == "requests[0].body.max_tokens" and "16384" in error["message"]
