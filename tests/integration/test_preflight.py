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
from batchgw.storage.slots import Hold
from batchgw.storage.spend import PROVIDER_UNSTORED_SECONDS

from functions.admin import handler as admin_api
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


# --- what the requests may cost -----------------------------------------------------------------

SIM_CHAT_IN, SIM_CHAT_OUT = 0.5e-6, 1.5e-6  # USD per token (config/models.local.json)


def set_daily_quota(deps: Deps, monkeypatch: pytest.MonkeyPatch, usd: float) -> None:
    monkeypatch.setattr(admin_api, "get_deps", lambda: deps)
    event = http_event(
        "PATCH", "/admin/users/user-alice", body={"daily_quota_usd": usd}, key="sk-local-admin"
    )
    assert admin_api.handler(event, LambdaContext())["statusCode"] == 200  # type: ignore[arg-type]


def test_the_cost_is_bounded_from_no_output_to_the_most_each_request_may_ask_for(
    deps: Deps, monkeypatch: pytest.MonkeyPatch
) -> None:
    file_id = upload(deps, [chat("a"), chat("b")])
    cost = json.loads(call(deps, monkeypatch, {"input_file_id": file_id, "max_tokens": 40})["body"])["cost"]
    (model,) = cost["models"]
    assert (model["model"], model["requests"], model["output_tokens_most"]) == ("sim-chat", 2, 80)
    assert model["input_tokens"] > 2 * len(SECRET) // 4  # estimated from the bodies, generously
    assert model["min_usd"] == pytest.approx(model["input_tokens"] * SIM_CHAT_IN, abs=1e-9)
    assert model["max_usd"] == pytest.approx(model["min_usd"] + 80 * SIM_CHAT_OUT, abs=1e-9)
    assert (cost["min_usd"], cost["max_usd"]) == (model["min_usd"], model["max_usd"])
    assert cost["spend_left_usd"] is None and cost["fits"] == "yes"  # no quota limits alice
    # Without max_tokens, each request may write as much as its model allows (16,384 tokens).
    unbounded = json.loads(call(deps, monkeypatch, {"input_file_id": file_id})["body"])["cost"]
    assert unbounded["models"][0]["output_tokens_most"] == 2 * 16384


def test_the_answer_says_whether_the_cost_fits_what_the_quota_leaves(
    deps: Deps, monkeypatch: pytest.MonkeyPatch
) -> None:
    file_id = upload(deps, [chat("a"), chat("b")])
    set_daily_quota(deps, monkeypatch, 0.01)  # more than the least, less than 32,768 tokens of output
    cost = json.loads(call(deps, monkeypatch, {"input_file_id": file_id})["body"])["cost"]
    assert (cost["spend_left_usd"], cost["fits"]) == (0.01, "maybe")
    set_daily_quota(deps, monkeypatch, 0.000001)
    cost = json.loads(call(deps, monkeypatch, {"input_file_id": file_id})["body"])["cost"]
    assert cost["fits"] == "no"
    set_daily_quota(deps, monkeypatch, 5)
    assert json.loads(call(deps, monkeypatch, {"input_file_id": file_id})["body"])["cost"]["fits"] == "yes"


def test_what_is_left_counts_the_provider_batches_accepted_and_not_yet_charged(
    deps: Deps, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A provider batch accepted a moment ago holds what it may cost: a create now would count
    # it, and so does the check.
    file_id = upload(deps, [chat("a"), chat("b")])
    set_daily_quota(deps, monkeypatch, 0.05)
    hold = Hold(until=deps.clock() + PROVIDER_UNSTORED_SECONDS, reserved=45_000_000, key_id="key_local_alice")
    assert deps.user_slots.hold_provider("user-alice", "batch_accepted", hold, version=0, gone=[])
    cost = json.loads(call(deps, monkeypatch, {"input_file_id": file_id, "max_tokens": 40})["body"])["cost"]
    assert cost["spend_left_usd"] == pytest.approx(0.005) and cost["fits"] == "yes"
    cost = json.loads(call(deps, monkeypatch, {"input_file_id": file_id})["body"])["cost"]
    assert cost["fits"] == "maybe"  # 32,768 tokens of output fit 0.05 alone, not beside the hold


def test_direct_requests_are_checked_as_a_create_would_and_bounded_per_model(
    deps: Deps, sim: Simulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    requests = [chat("a", max_tokens=10), chat("b", max_tokens=10), chat("c", max_tokens=10)]
    requests[2]["body"]["model"] = "sim-chat-only"
    answer = json.loads(call(deps, monkeypatch, {"requests": requests})["body"])
    assert answer["valid"] is True and answer["requests"] == 3 and answer["input_file_id"] is None
    assert answer["endpoint"] == "/v1/chat/completions" and answer["model"] is None  # two models
    assert [(m["model"], m["requests"], m["output_tokens_most"]) for m in answer["cost"]["models"]] == [
        ("sim-chat", 2, 20),
        ("sim-chat-only", 1, 10),
    ]
    assert answer["cost"]["max_usd"] == pytest.approx(sum(m["max_usd"] for m in answer["cost"]["models"]))
    assert sim.stats()["models"]["sim-chat"]["requests"] == 0
    assert deps.batches.list_for_owner(ALICE.user_id, limit=10)[0] == []

    del requests[1]["custom_id"]
    bad = json.loads(call(deps, monkeypatch, {"requests": requests})["body"])
    assert bad["valid"] is False and bad["cost"] is None
    assert bad["problems"][0]["field"] is not None and "custom_id" in bad["problems"][0]["message"]
    csv_text = call(deps, monkeypatch, {"requests": requests}, query="format=csv")["body"]
    assert csv_text.startswith("line,custom_id,field,code,message") and "custom_id" in csv_text
