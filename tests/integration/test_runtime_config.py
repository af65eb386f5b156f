"""Runtime settings and model caps through the admin API and the command line (moto)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from batchgw.config.__main__ import main as config_cli
from batchgw.deps import Deps
from batchgw.live_config import LiveConfig
from batchgw.storage.aws import get_clients
from batchgw.storage.runtime import RuntimeStore

from functions.admin import handler as admin
from functions.api import handler as api
from local.simulator import Simulator
from tests.integration.conftest import body_of, chat_request, make_deps
from tests.integration.test_owner_gate import ALICE as OWNER
from tests.integration.test_owner_gate import prepared, walk
from tests.support import FakeClock, LambdaContext, http_event

pytestmark = pytest.mark.usefixtures("aws_env")
ADMIN, ALICE = "sk-local-admin", "sk-local-alice"


@pytest.fixture
def deps(sim: Simulator, monkeypatch: pytest.MonkeyPatch) -> Deps:
    built = make_deps(sim, FakeClock())
    monkeypatch.setattr(api, "get_deps", lambda: built)
    monkeypatch.setattr(admin, "get_deps", lambda: built)
    return built


def call(method: str, path: str, key: str = ADMIN, body: Any = None) -> tuple[int, Any]:
    function = admin if path.startswith("/admin/") else api  # as the HTTP API routes
    response = function.handler(http_event(method, path, key=key, body=body), LambdaContext())  # type: ignore[arg-type]
    return int(response["statusCode"]), json.loads(response.get("body") or "null")


def setting(name: str) -> dict[str, Any]:
    return next(s for s in call("GET", "/admin/config")[1]["data"] if s["name"] == name)


def other_process(deps: Deps) -> LiveConfig:
    """What another gateway process reads of the same table."""
    live = LiveConfig(deps.live.base, store(deps), deps.catalog)
    live.refresh(force=True)
    return live


def store(deps: Deps) -> RuntimeStore:
    return RuntimeStore(get_clients().dynamodb, deps.settings.control_table)


def test_every_setting_is_listed_with_its_value_default_source_and_description(deps: Deps) -> None:
    listed = {s["name"]: s for s in call("GET", "/admin/config")[1]["data"]}
    assert listed["BATCH_MODEL_CONCURRENCY"] == {
        "name": "BATCH_MODEL_CONCURRENCY",
        "value": 64,
        "default": 64,
        "source": "default",
        "description": listed["BATCH_MODEL_CONCURRENCY"]["description"],
    }
    assert "BATCH_RETRY_BASE_SECONDS" in listed and "BATCH_QUEUED_ALERT_HOURS" in listed
    assert all(s["description"] for s in listed.values())
    assert "BATCHGW_CONTROL_TABLE" not in listed and "BATCH_EXPANSION_ENABLED" not in listed
    assert listed["BATCH_ENABLED"]["value"] is True


def test_a_patched_setting_applies_here_at_once_and_in_another_process_on_its_next_read(deps: Deps) -> None:
    status, changed = call("PATCH", "/admin/config/BATCH_MIN_ROLE", body={"value": "admin"})
    assert status == 200 and changed["value"] == "admin" and changed["source"] == "runtime"
    assert changed["default"] == "internal"
    status, error = call("POST", "/v1/batches", ALICE, json.loads(body_of([chat_request("a", "hi")])))
    assert status == 403 and "admin" in error["error"]["message"]  # alice is internal: below the new minimum
    assert other_process(deps).settings.batch_min_role == "admin"
    status, reset = call("DELETE", "/admin/config/BATCH_MIN_ROLE")
    assert status == 200 and reset["value"] == "internal" and reset["source"] == "default"
    assert other_process(deps).settings.batch_min_role == "internal"


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("BATCH_MIN_ROLE", "owner"),
        ("BATCH_MODEL_CONCURRENCY", -1),
        ("BATCH_COMPLETION_WINDOW_HOURS", 200),
        ("BATCH_ENABLED", "maybe"),
        ("BATCH_MAX_BODY_MB", 32),
        ("BATCH_MAX_REQUESTS", [1]),
        # What would stop every batch request: an upstream call longer than a worker lives.
        ("BATCH_UPSTREAM_TIMEOUT_SECONDS", 1000),
        ("BATCH_UPSTREAM_TIMEOUT_SECONDS", 895),
        # A receiver's deadline past the webhook function's life.
        ("BATCH_WEBHOOK_TIMEOUT_SECONDS", 60),
        # A rate so low its Retry-After is hours away.
        ("BATCH_API_RATE_PER_KEY", 0.001),
    ],
)
def test_a_bad_value_is_400_and_changes_nothing(deps: Deps, name: str, value: Any) -> None:
    before = setting(name)
    status, error = call("PATCH", f"/admin/config/{name}", body={"value": value})
    assert status == 400 and error["error"]["code"] == "invalid_setting" and name in error["error"]["message"]
    assert setting(name) == before and other_process(deps).overrides.settings == {}


def test_unknown_and_fixed_names_are_404(deps: Deps) -> None:
    for name in ("BATCH_NOPE", "BATCHGW_CONTROL_TABLE", "BATCH_WORKER_TIMEOUT_SECONDS"):
        status, error = call("PATCH", f"/admin/config/{name}", body={"value": "1"})
        assert status == 404 and error["error"]["code"] == "setting_not_found"
        assert call("DELETE", f"/admin/config/{name}")[0] == 404


def test_a_null_value_or_a_missing_one_is_400(deps: Deps) -> None:
    assert call("PATCH", "/admin/config/BATCH_MIN_ROLE", body={"value": None})[0] == 400
    assert call("PATCH", "/admin/config/BATCH_MIN_ROLE", body={})[0] == 400


def test_the_retired_expansion_setting_cannot_be_set_and_a_stored_row_changes_nothing(deps: Deps) -> None:
    status, error = call("PATCH", "/admin/config/BATCH_EXPANSION_ENABLED", body={"value": False})
    assert status == 400 and error["error"]["code"] == "setting_retired"
    store(deps).set_setting("BATCH_EXPANSION_ENABLED", "false", by="old-release", now=0)
    deps.live.refresh(force=True)
    assert call("GET", "/v1/batches", ALICE)[0] == 200  # still serving
    assert "BATCH_EXPANSION_ENABLED" not in {s["name"] for s in call("GET", "/admin/config")[1]["data"]}
    status, deleted = call("DELETE", "/admin/config/BATCH_EXPANSION_ENABLED")
    assert status == 200 and deleted == {"name": "BATCH_EXPANSION_ENABLED", "deleted": True, "retired": True}
    assert other_process(deps).overrides.settings == {}


def test_a_stored_value_a_newer_rule_refuses_is_ignored_not_fatal(deps: Deps) -> None:
    store(deps).set_setting("BATCH_MODEL_CONCURRENCY", "lots", by="someone", now=0)
    deps.live.refresh(force=True)
    assert deps.settings.batch_model_concurrency == 64
    assert setting("BATCH_MODEL_CONCURRENCY")["source"] == "default"


def test_batch_disabled_answers_404_on_batch_and_file_routes_but_keeps_batches(deps: Deps) -> None:
    status, created = call("POST", "/v1/batches", ALICE, json.loads(body_of([chat_request("a", "hi")])))
    assert status == 200
    assert call("PATCH", "/admin/config/BATCH_ENABLED", body={"value": False})[0] == 200
    for method, path in [
        ("GET", "/v1/batches"),
        ("GET", f"/v1/batches/{created['id']}"),
        ("GET", "/v1/files"),
    ]:
        status, error = call(method, path, ALICE)
        assert status == 404 and error["error"]["code"] == "batch_disabled"
    assert call("GET", "/v1/me", ALICE)[0] == 200  # not a batch route
    assert call("DELETE", "/admin/config/BATCH_ENABLED")[0] == 200
    assert call("GET", f"/v1/batches/{created['id']}", ALICE)[1]["status"] == created["status"]


def test_model_caps_are_listed_set_paused_and_reset(deps: Deps) -> None:
    models = {m["id"]: m for m in call("GET", "/admin/batch/models")[1]["data"]}
    assert models["sim-chat"]["max_concurrency"] is None and models["sim-chat"]["paused"] is None
    assert models["sim-chat"]["concurrency_source"] in {"models_config", "BATCH_MODEL_CONCURRENCY"}
    status, capped = call("PATCH", "/admin/batch/models/sim-chat", body={"max_concurrency": 2})
    assert status == 200 and capped["max_concurrency"] == 2 and capped["effective_concurrency"] == 2
    assert capped["concurrency_source"] == "admin" and other_process(deps).model_cap("sim-chat") == (
        2,
        "admin",
    )
    paused = call("PATCH", "/admin/batch/models/sim-chat", body={"max_concurrency": 0})[1]
    assert paused["paused"] == {"reason": "max_concurrency_zero", "until": None}
    restored = call("PATCH", "/admin/batch/models/sim-chat", body={"max_concurrency": None})[1]
    assert (
        restored["max_concurrency"] is None
        and restored["effective_concurrency"] == models["sim-chat"]["effective_concurrency"]
    )


@pytest.mark.parametrize("body", [{"max_concurrency": -1}, {"max_concurrency": "2"}, {"cap": 2}, None])
def test_a_bad_model_cap_is_400(deps: Deps, body: Any) -> None:
    assert call("PATCH", "/admin/batch/models/sim-chat", body=body)[0] == 400
    assert other_process(deps).overrides.caps == {}


def test_an_unknown_model_is_404(deps: Deps) -> None:
    assert call("PATCH", "/admin/batch/models/nope", body={"max_concurrency": 1})[0] == 404


def test_queued_requests_are_counted_per_model(deps: Deps) -> None:
    requests = [chat_request(f"r{i}", "hi") for i in range(3)] + [
        chat_request("e", "x", model="sim-chat-only")
    ]
    assert call("POST", "/v1/batches", ALICE, json.loads(body_of(requests)))[0] == 200
    models = {m["id"]: m for m in call("GET", "/admin/batch/models")[1]["data"]}
    assert models["sim-chat"]["queued"] == 4 and models["sim-chat-only"]["queued"] == 4
    assert models["sim-embed"]["queued"] == 0


def test_the_command_line_shows_sets_and_resets(deps: Deps, capsys: pytest.CaptureFixture[str]) -> None:
    assert config_cli(["set", "BATCH_MODEL_CONCURRENCY", "5"]) == 0
    assert json.loads(capsys.readouterr().out)["value"] == 5
    deps.live.refresh(force=True)
    assert deps.settings.batch_model_concurrency == 5
    assert config_cli(["show", "BATCH_MODEL_CONCURRENCY"]) == 0
    assert json.loads(capsys.readouterr().out)["source"] == "runtime"
    assert config_cli(["set", "BATCH_MODEL_CONCURRENCY", "many"]) == 2
    assert "Invalid value" in capsys.readouterr().err
    assert config_cli(["reset", "BATCH_MODEL_CONCURRENCY"]) == 0
    deps.live.refresh(force=True)
    assert deps.settings.batch_model_concurrency == 64


def test_batch_model_concurrency_0_pauses_batch_work_on_models_without_a_cap_of_their_own(
    deps: Deps, sim: Simulator
) -> None:
    assert call("PATCH", "/admin/config/BATCH_MODEL_CONCURRENCY", body={"value": 0})[0] == 200
    models = {m["id"]: m for m in call("GET", "/admin/batch/models")[1]["data"]}
    assert models["sim-chat"]["paused"] == {"reason": "max_concurrency_zero", "until": None}
    batch_id = prepared(deps, OWNER, 3)
    walk(deps, batch_id)  # no request may start
    assert sim.stats()["models"]["sim-chat"]["requests"] == 0
    assert call("GET", f"/v1/batches/{batch_id}", ALICE)[1]["request_counts"]["completed"] == 0
    assert call("DELETE", "/admin/config/BATCH_MODEL_CONCURRENCY")[0] == 200
    walk(deps, batch_id)
    assert call("GET", f"/v1/batches/{batch_id}", ALICE)[1]["request_counts"]["completed"] == 3


def test_no_request_rate_keeps_an_administrator_from_the_admin_routes(deps: Deps) -> None:
    assert call("PATCH", "/admin/config/BATCH_API_RATE_PER_KEY", body={"value": 0.1})[0] == 200
    answers = [call("GET", "/v1/batches", ALICE)[0] for _ in range(3)]
    assert 429 in answers  # the user is held to it
    assert [call("GET", "/admin/config")[0] for _ in range(5)] == [200] * 5
    assert call("DELETE", "/admin/config/BATCH_API_RATE_PER_KEY")[0] == 200
