"""The create shapes and checks of the other two specs (001: OMG's gateway options; 003: Merge
Gateway's create shape, its line rules and ``usage.cost``), through the api handler."""

from __future__ import annotations

import json
from typing import Any

import pytest
from batchgw.api import files
from batchgw.deps import Deps
from batchgw.domain.chains import RequestMessage
from batchgw.domain.files import file_key
from batchgw.domain.principal import Principal
from batchgw.run import ending, lifecycle

from local.simulator import Simulator
from tests.integration.conftest import make_deps, receive_all
from tests.integration.test_console_batches import call
from tests.integration.test_owner_gate import run
from tests.support import FakeClock, spec_counts

pytestmark = pytest.mark.usefixtures("aws_env")

CHAT_URL = "/v1/chat/completions"
ALICE = Principal(user_id="user-alice", role="internal", key_id="key_local_alice")


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def deps(sim: Simulator, clock: FakeClock) -> Deps:
    return make_deps(sim, clock, BATCH_RETRY_BASE_SECONDS="60", BATCH_RETRY_MAX_SECONDS="60")


def message(text: str) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": text}]}


def create(deps: Deps, monkeypatch: pytest.MonkeyPatch, body: dict[str, Any]) -> tuple[int, Any]:
    return call(deps, monkeypatch, "POST", "/v1/batches", body=body)


# --- 003: the create shape with a top-level endpoint and model ----------------------------------


def test_a_create_with_a_top_level_model_and_endpoint_gives_each_request_them(
    deps: Deps, sim: Simulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    body = {
        "endpoint": CHAT_URL,
        "model": "sim-chat",
        "metadata": {"job": "ticket-triage"},
        "requests": [
            {
                "custom_id": "ticket-1041",
                "body": {**message("Classify: My invoice is wrong."), "max_tokens": 50},
            },
            {
                "custom_id": "ticket-1042",
                "body": {**message("Classify: I cannot log in."), "model": "sim-chat"},
            },
        ],
    }
    status, batch = create(deps, monkeypatch, body)
    assert status == 200, batch
    assert batch["endpoint"] == CHAT_URL and batch["request_counts"]["total"] == 2
    lifecycle.prepare(deps, batch["id"])
    receive_all(deps)
    for index in range(2):
        run(deps, RequestMessage(batch["id"], index))
    _, results = call(deps, monkeypatch, "GET", f"/v1/batches/{batch['id']}/results")
    assert [r["response"]["body"]["model"] for r in results["data"]] == ["sim-chat", "sim-chat"]


def test_a_request_naming_another_model_or_url_than_the_create_is_refused_naming_it(
    deps: Deps, monkeypatch: pytest.MonkeyPatch
) -> None:
    other_model = {"custom_id": "b", "body": {**message("hi"), "model": "sim-chat-latest"}}
    status, error = create(
        deps,
        monkeypatch,
        {"model": "sim-chat", "requests": [{"custom_id": "a", "body": message("hi")}, other_model]},
    )
    assert status == 400
    assert error["error"]["param"] == "requests[1].body.model"
    assert "differs from the batch's model 'sim-chat'" in error["error"]["message"]

    other_url = {"custom_id": "a", "url": "/v1/embeddings", "body": {"model": "sim-embed", "input": "x"}}
    status, error = create(deps, monkeypatch, {"endpoint": CHAT_URL, "requests": [other_url]})
    assert status == 400 and error["error"]["param"] == "requests[0].url"

    status, error = create(deps, monkeypatch, {"endpoint": "/v1/images", "requests": [other_url]})
    assert status == 400
    assert (error["error"]["param"], error["error"]["code"]) == ("endpoint", "unsupported_batch_endpoint")
    assert call(deps, monkeypatch, "GET", "/v1/batches")[1]["data"] == []  # nothing stored


def test_a_chat_request_asking_for_web_search_is_refused_as_unsupported(
    deps: Deps, monkeypatch: pytest.MonkeyPatch
) -> None:
    request = {"custom_id": "a", "body": {**message("news?"), "model": "sim-chat", "web_search_options": {}}}
    status, error = create(deps, monkeypatch, {"requests": [request]})
    assert status == 400
    assert error["error"]["param"] == "requests[0].body.web_search_options"
    assert "web search is not supported" in error["error"]["message"]


def test_the_batch_reports_its_cost_as_usage_cost_beside_cost_usd(
    deps: Deps, monkeypatch: pytest.MonkeyPatch
) -> None:
    status, batch = create(
        deps,
        monkeypatch,
        {"model": "sim-chat", "requests": [{"custom_id": "a", "body": message("hello there")}]},
    )
    assert status == 200
    lifecycle.prepare(deps, batch["id"])
    receive_all(deps)
    run(deps, RequestMessage(batch["id"], 0))
    _, batch = call(deps, monkeypatch, "GET", f"/v1/batches/{batch['id']}")
    assert batch["cost_usd"] > 0 and batch["usage"]["cost"] == batch["cost_usd"]


# --- 001: omg_mode and omg_retries, checked and kept ----------------------------------------


@pytest.mark.parametrize(
    ("name", "value"),
    [("omg_mode", "provider"), ("omg_mode", "AUTO"), ("omg_retries", "3"), ("omg_retries", "-1")],
)
def test_a_gateway_option_outside_its_values_is_refused(
    deps: Deps, monkeypatch: pytest.MonkeyPatch, name: str, value: str
) -> None:
    request = {"custom_id": "a", "body": {**message("hi"), "model": "sim-chat"}}
    status, error = create(deps, monkeypatch, {"requests": [request], "metadata": {name: value}})
    assert status == 400
    assert error["error"]["param"] == f"metadata.{name}"


def test_omg_retries_runs_a_request_that_failed_for_good_that_many_times_more(
    deps: Deps, sim: Simulator, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    requests = [
        {"custom_id": "flaky", "body": {**message("[[sim status=400 fail=2]] a"), "model": "sim-chat"}},
        {"custom_id": "broken", "body": {**message("[[sim status=400]] b"), "model": "sim-chat"}},
    ]
    status, batch = create(
        deps, monkeypatch, {"requests": requests, "metadata": {"omg_mode": "gateway", "omg_retries": "2"}}
    )
    assert status == 200 and batch["metadata"] == {"omg_mode": "gateway", "omg_retries": "2"}
    lifecycle.prepare(deps, batch["id"])
    receive_all(deps)
    for _ in range(4):  # the first tries, two reruns each, and a fourth round with nothing left
        for index in range(2):
            run(deps, RequestMessage(batch["id"], index))
        clock.advance(120)
    _, batch = call(deps, monkeypatch, "GET", f"/v1/batches/{batch['id']}")
    assert spec_counts(batch) == {"total": 2, "completed": 1, "failed": 1}  # flaky passed its third try
    assert sim.stats()["models"]["sim-chat"]["requests"] == 6  # three tries each, never a fourth


# --- 001: file batches turned off, and a failed file batch's error ------------------------------


def upload(deps: Deps, content: bytes) -> str:
    return files.new_input_file(deps, ALICE, "in.jsonl", content).id


def test_a_file_batch_while_file_batches_are_off_is_refused_as_batch_files_disabled(
    sim: Simulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    deps = make_deps(sim, FakeClock(), BATCH_FILES_ENABLED="false")
    line = {"custom_id": "a", "url": CHAT_URL, "body": {**message("hi"), "model": "sim-chat"}}
    file_id = upload(deps, json.dumps(line).encode() + b"\n")
    status, error = create(
        deps, monkeypatch, {"input_file_id": file_id, "endpoint": CHAT_URL, "completion_window": "24h"}
    )
    assert status == 400
    assert (error["error"]["code"], error["error"]["param"]) == ("batch_files_disabled", "input_file_id")
    status, _ = create(deps, monkeypatch, {"requests": [line]})
    assert status == 200  # direct requests still run


def test_a_failed_file_batchs_error_has_its_type_and_param(
    deps: Deps, monkeypatch: pytest.MonkeyPatch
) -> None:
    file_id = upload(deps, b'{"custom_id": "a"}\nnot json\n')
    status, batch = create(
        deps, monkeypatch, {"input_file_id": file_id, "endpoint": CHAT_URL, "completion_window": "24h"}
    )
    assert status == 200
    lifecycle.prepare(deps, batch["id"])
    _, batch = call(deps, monkeypatch, "GET", f"/v1/batches/{batch['id']}")
    assert batch["status"] == "failed"
    error = batch["error"]
    assert (error["type"], error["code"], error["param"]) == (
        "invalid_request_error",
        "invalid_batch_input",
        "input_file_id",
    )
    assert [e["line"] for e in batch["errors"]["data"]] == [1, 2]


# --- delete without a 5xx --------------------------------------------------------------------


def test_a_download_of_a_file_whose_bytes_are_gone_answers_404(
    deps: Deps, monkeypatch: pytest.MonkeyPatch
) -> None:
    file_id = upload(deps, b'{"custom_id": "a"}\n')
    deps.blobs.delete(file_key(file_id))  # as a delete or purge that has taken the bytes already
    status, error = call(deps, monkeypatch, "GET", f"/v1/files/{file_id}/content")
    assert (status, error["error"]["code"]) == (404, "file_not_found")


def test_a_purge_or_delete_hides_a_file_before_its_bytes_go(
    deps: Deps, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each delete of a file's bytes is watched: a download at that moment already answers 404."""
    line = {
        "custom_id": "a",
        "method": "POST",
        "url": CHAT_URL,
        "body": {**message("hi"), "model": "sim-chat"},
    }
    source = upload(deps, json.dumps(line).encode() + b"\n")
    _, batch = create(
        deps, monkeypatch, {"input_file_id": source, "endpoint": CHAT_URL, "completion_window": "24h"}
    )
    lifecycle.prepare(deps, batch["id"])
    receive_all(deps)
    run(deps, RequestMessage(batch["id"], 0))
    lifecycle.park(deps, batch["id"], "t")
    ending.finalize(deps, batch["id"])
    ended = call(deps, monkeypatch, "GET", f"/v1/batches/{batch['id']}")[1]
    output_file_id = ended["output_file_id"]
    assert output_file_id is not None, ended
    input_file_id = upload(deps, b'{"custom_id": "a"}\n')
    seen: dict[str, int] = {}
    delete = deps.blobs.delete

    def watched(key: str) -> None:
        for file_id in (output_file_id, input_file_id):
            if key == file_key(file_id):
                seen[file_id] = call(deps, monkeypatch, "GET", f"/v1/files/{file_id}/content")[0]
        delete(key)

    monkeypatch.setattr(deps.blobs, "delete", watched)
    assert call(deps, monkeypatch, "DELETE", f"/v1/files/{input_file_id}")[0] == 200
    lifecycle.purge(deps, batch["id"])  # the end of its retention
    assert seen == {input_file_id: 404, output_file_id: 404}
