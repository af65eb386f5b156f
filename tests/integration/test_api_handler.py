"""The api function's handler on moto, driven by API Gateway v2 events."""

from __future__ import annotations

import json
from typing import Any

import pytest
from batchgw.deps import Deps

from functions.api import handler as api
from local.simulator import Simulator
from tests.integration.conftest import chat_request, make_deps
from tests.support import FakeClock, LambdaContext, http_event, spec_counts

pytestmark = pytest.mark.usefixtures("aws_env")


def call(deps: Deps, monkeypatch: pytest.MonkeyPatch, event: dict[str, Any]) -> tuple[int, Any]:
    monkeypatch.setattr(api, "get_deps", lambda: deps)
    response = api.handler(event, LambdaContext())  # type: ignore[arg-type]
    body = response.get("body") or "null"
    return int(response["statusCode"]), json.loads(body)


def create_body(n: int = 1) -> dict[str, Any]:
    return {"requests": [chat_request(f"q-{i}", f"hello {i}") for i in range(n)]}


def test_create_answers_the_batch_object_with_every_field(
    sim: Simulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    deps = make_deps(sim, FakeClock())
    status, body = call(deps, monkeypatch, http_event("POST", "/v1/batches", body=create_body(2)))
    assert status == 200
    assert body["object"] == "batch" and body["status"] == "validating"
    assert spec_counts(body) == {"total": 2, "completed": 0, "failed": 0}
    assert set(body) >= {
        "id",
        "endpoint",
        "errors",
        "input_file_id",
        "completion_window",
        "output_file_id",
        "error_file_id",
        "created_at",
        "in_progress_at",
        "expires_at",
        "finalizing_at",
        "completed_at",
        "failed_at",
        "expired_at",
        "cancelling_at",
        "cancelled_at",
        "metadata",
        "usage",
        "anthropic_version",
        "cost_usd",
        "cost_unknown_attempts",
        "results_expires_at",
        "error",
    }
    assert body["expires_at"] - body["created_at"] == 24 * 3600
    assert deps.workflow.started == [body["id"]]  # type: ignore[attr-defined]


def test_batch_enabled_off_answers_404_on_every_route(
    sim: Simulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    deps = make_deps(sim, FakeClock(), BATCH_ENABLED="false")
    for method, path in [("POST", "/v1/batches"), ("GET", "/v1/batches"), ("GET", "/v1/batches/batch_x")]:
        status, body = call(deps, monkeypatch, http_event(method, path, body=create_body()))
        assert status == 404 and body["error"]["code"] == "batch_disabled"


def test_too_many_unfinished_batches_is_429_too_many_open_batches(
    sim: Simulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    deps = make_deps(sim, FakeClock(), BATCH_MAX_ACTIVE_PER_USER="2")
    for _ in range(2):
        assert call(deps, monkeypatch, http_event("POST", "/v1/batches", body=create_body()))[0] == 200
    status, body = call(deps, monkeypatch, http_event("POST", "/v1/batches", body=create_body()))
    # One name (spec 003's), in the spec's error shape; 001's job_limit_exceeded is not used.
    assert status == 429
    assert body["error"]["code"] == "too_many_open_batches"
    assert body["error"]["type"] and "2" in body["error"]["message"]
    # Another user is not affected.
    assert (
        call(deps, monkeypatch, http_event("POST", "/v1/batches", key="sk-local-bob", body=create_body()))[0]
        == 200
    )


def test_too_many_unfinished_requests_is_429(sim: Simulator, monkeypatch: pytest.MonkeyPatch) -> None:
    deps = make_deps(sim, FakeClock(), BATCH_MAX_QUEUED_REQUESTS_PER_USER="5")
    assert call(deps, monkeypatch, http_event("POST", "/v1/batches", body=create_body(3)))[0] == 200
    status, body = call(deps, monkeypatch, http_event("POST", "/v1/batches", body=create_body(3)))
    assert status == 429 and body["error"]["code"] == "queued_request_limit"


def test_unknown_routes_answer_404_in_the_error_shape(
    sim: Simulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    deps = make_deps(sim, FakeClock())
    status, body = call(deps, monkeypatch, http_event("GET", "/v1/nothing-here"))
    assert status == 404 and body["error"]["message"].startswith("Unknown route")


def test_a_window_of_zero_means_no_expiry(sim: Simulator, monkeypatch: pytest.MonkeyPatch) -> None:
    deps = make_deps(sim, FakeClock(), BATCH_COMPLETION_WINDOW_HOURS="0")
    status, body = call(deps, monkeypatch, http_event("POST", "/v1/batches", body=create_body()))
    assert status == 200 and body["expires_at"] is None and body["completion_window"] == "none"
