"""``POST /v1/batches/preflight`` through the api function's handler (moto): an uploaded file
checked as the console would submit it, running, storing and billing nothing; its problems
as JSON or as a CSV or JSONL download; refused for a file that is not the caller's."""

from __future__ import annotations

import csv
import io
import json
from typing import Any

import pytest
from batchgw.api import files
from batchgw.deps import Deps
from batchgw.domain.principal import Principal

from functions.api import handler as api
from local.simulator import Simulator
from tests.integration.conftest import make_deps
from tests.support import FakeClock, LambdaContext, http_event

pytestmark = pytest.mark.usefixtures("aws_env")

ALICE = Principal(user_id="user-alice", role="internal", key_id="key_local_alice")
SECRET = "words-only-the-user-should-see"


def call(
    deps: Deps, monkeypatch: pytest.MonkeyPatch, body: Any, query: str = "", key: str = "sk-local-alice"
) -> dict[str, Any]:
    monkeypatch.setattr(api, "get_deps", lambda: deps)
    event = http_event("POST", "/v1/batches/preflight", body=body, query=query, key=key)
    return api.handler(event, LambdaContext())  # type: ignore[arg-type]


def upload(deps: Deps, lines: list[Any]) -> str:
    data = b"".join(
        (line if isinstance(line, bytes) else json.dumps(line).encode()) + b"\n" for line in lines
    )
    return files.new_input_file(deps, ALICE, "input.jsonl", data).id


def chat(custom_id: str, **fields: Any) -> dict[str, Any]:
    body = {"model": "sim-chat", "messages": [{"role": "user", "content": SECRET}], **fields}
    return {"custom_id": custom_id, "body": body}


@pytest.fixture
def deps(sim: Simulator) -> Deps:
    return make_deps(sim, FakeClock())


def test_a_valid_file_answers_the_batch_it_makes_and_nothing_runs_or_is_billed(
    deps: Deps, sim: Simulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    file_id = upload(deps, [chat("a"), chat("b")])
    answer = call(deps, monkeypatch, {"input_file_id": file_id, "temperature": 0.2, "max_tokens": 40})
    assert answer["statusCode"] == 200
    body = json.loads(answer["body"])
    assert body["object"] == "batch.preflight" and body["valid"] is True and body["problems"] == []
    assert (body["endpoint"], body["endpoint_from"], body["model"], body["requests"]) == (
        "/v1/chat/completions",
        "body",
        "sim-chat",
        2,
    )
    assert body["first_requests"][0]["body"]["temperature"] == 0.2
    assert body["first_requests"][0]["body"]["max_tokens"] == 40
    assert body["completion_window"] == "24h" and body["results_retention_days"] == 7
    assert body["billing"]["model"] == "sim-chat" and len(body["check"]) == 32
    assert sim.stats()["models"]["sim-chat"]["requests"] == 0
    assert deps.batches.list_for_owner(ALICE.user_id, limit=10)[0] == []
    # The same file, key and choices check to the same digest; other choices to another.
    again = json.loads(
        call(deps, monkeypatch, {"input_file_id": file_id, "temperature": 0.2, "max_tokens": 40})["body"]
    )
    other = json.loads(call(deps, monkeypatch, {"input_file_id": file_id})["body"])
    assert again["check"] == body["check"] != other["check"]


def test_problems_name_line_custom_id_and_field_and_download_as_csv_or_jsonl(
    deps: Deps, monkeypatch: pytest.MonkeyPatch
) -> None:
    file_id = upload(deps, [chat("a"), chat("b", max_completion_tokens=10), chat("c", user="me")])
    body = json.loads(call(deps, monkeypatch, {"input_file_id": file_id})["body"])
    assert body["valid"] is False and body["check"] is None and body["first_requests"] == []
    assert [(p["line"], p["custom_id"], p["field"], p["code"]) for p in body["problems"]] == [
        (2, "b", "body.max_completion_tokens", "unforwarded_field"),
        (3, "c", "body.user", "unforwarded_field"),
    ]
    as_csv = call(deps, monkeypatch, {"input_file_id": file_id}, query="format=csv")
    assert as_csv["statusCode"] == 200 and as_csv["headers"]["Content-Type"].startswith("text/csv")
    assert "attachment" in as_csv["headers"]["Content-Disposition"]
    rows = list(csv.DictReader(io.StringIO(as_csv["body"])))
    assert [(r["line"], r["custom_id"], r["field"]) for r in rows] == [
        ("2", "b", "body.max_completion_tokens"),
        ("3", "c", "body.user"),
    ]
    as_jsonl = call(deps, monkeypatch, {"input_file_id": file_id}, query="format=jsonl")
    assert [json.loads(line)["code"] for line in as_jsonl["body"].splitlines()] == ["unforwarded_field"] * 2
    for answer in (json.dumps(body), as_csv["body"], as_jsonl["body"]):
        assert SECRET not in answer


def test_bad_choices_or_another_users_file_are_refused_in_the_apis_shape(
    deps: Deps, monkeypatch: pytest.MonkeyPatch
) -> None:
    file_id = upload(deps, [chat("a")])
    for body, param in [
        ({}, "input_file_id"),
        ({"input_file_id": file_id, "temperature": "hot"}, "temperature"),
        ({"input_file_id": file_id, "max_tokens": 1.5}, "max_tokens"),
        ({"input_file_id": file_id, "extra": 1}, "extra"),
    ]:
        answer = call(deps, monkeypatch, body)
        assert answer["statusCode"] == 400, body
        assert json.loads(answer["body"])["error"]["param"] == param
    huge = json.loads(call(deps, monkeypatch, {"input_file_id": file_id, "temperature": 10**400})["body"])
    assert [(p["code"], p["field"]) for p in huge["problems"]] == [("invalid_override", "temperature")]
    bad_format = call(deps, monkeypatch, {"input_file_id": file_id}, query="format=xml")
    assert json.loads(bad_format["body"])["error"]["param"] == "format"
    bobs = call(deps, monkeypatch, {"input_file_id": file_id}, key="sk-local-bob")
    assert bobs["statusCode"] == 400
    assert json.loads(bobs["body"])["error"]["code"] == "invalid_input_file"
