"""The routes batch work may use, through the admin API (moto, the simulator's two
listeners): reported with their defaults and choices, refused at create when a model has
none, a queued request failing batch_route_unavailable when its model lost its last one,
and failover to the second route when the first refuses connections."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest
from batchgw.api import admin, batches, files
from batchgw.api import results as results_api
from batchgw.deps import Deps
from batchgw.domain.errors import BadRequest, NotFound
from batchgw.domain.principal import Principal
from batchgw.run import lifecycle
from batchgw.upstream import routing

from local.simulator import Simulator
from tests.integration.conftest import body_of, chat_request, make_deps
from tests.integration.test_owner_gate import prepared, walk
from tests.support import FakeClock

pytestmark = pytest.mark.usefixtures("aws_env")

ADMIN = Principal(user_id="user-admin", role="admin", key_id="key_local_admin")
ALICE = Principal(user_id="user-alice", role="internal", key_id="key_local_alice")


@pytest.fixture
def deps(sim: Simulator) -> Deps:
    return make_deps(sim, FakeClock())


def routes(deps: Deps) -> dict[tuple[str, str], dict[str, object]]:
    return {(r["model_id"], r["route_id"]): r for r in admin.list_routes(deps, ADMIN)["data"]}


def allow(deps: Deps, model: str, route: str, allowed: bool | None) -> dict[str, object]:
    return admin.set_route(deps, ADMIN, model, route, {"batch_allowed": allowed})


def test_each_route_reports_whether_batch_work_may_use_it_by_default_and_by_choice(deps: Deps) -> None:
    listed = routes(deps)
    assert {k for k in listed if k[0] == "sim-chat"} == {
        ("sim-chat", "primary"),
        ("sim-chat", "backup"),
        ("sim-chat", "cloud"),
    }
    cloud = listed[("sim-chat", "cloud")]
    assert (cloud["batch_allowed"], cloud["batch_allowed_default"], cloud["batch_allowed_choice"]) == (
        False,
        False,
        None,
    )
    assert listed[("sim-chat", "backup")]["batch_allowed"] is True  # auto, on 127.0.0.1
    chosen = allow(deps, "sim-chat", "cloud", True)
    assert (chosen["batch_allowed"], chosen["batch_allowed_default"], chosen["batch_allowed_choice"]) == (
        True,
        False,
        True,
    )
    assert allow(deps, "sim-chat", "cloud", None)["batch_allowed"] is False


def test_bad_route_choices_are_refused(deps: Deps) -> None:
    with pytest.raises(NotFound):
        allow(deps, "sim-chat", "nope", True)
    with pytest.raises(BadRequest):
        admin.set_route(deps, ADMIN, "sim-chat", "primary", {"batch_allowed": "yes"})
    with pytest.raises(BadRequest) as refused:
        allow(deps, "sim-embed", "primary", False)
    assert refused.value.code == "route_choice_not_supported"


def test_a_batch_for_a_model_without_a_batch_route_is_refused_at_create(deps: Deps) -> None:
    allow(deps, "sim-chat-only", "primary", False)
    with pytest.raises(BadRequest) as refused:
        batches.create_batch(deps, ALICE, body_of([chat_request("a", "hi", model="sim-chat-only")]))
    assert refused.value.status == 400 and refused.value.code == "batch_route_unavailable"
    allow(deps, "sim-chat-only", "primary", None)
    batches.create_batch(deps, ALICE, body_of([chat_request("a", "hi", model="sim-chat-only")]))


def test_a_file_batch_for_a_model_without_a_batch_route_fails_nothing_run(deps: Deps) -> None:
    request = {
        "method": "POST",
        "url": "/v1/chat/completions",
        **chat_request("a", "hi", model="sim-chat-only"),
    }
    line = json.dumps(request).encode() + b"\n"
    uploaded = files.upload_file(deps, ALICE, "multipart/form-data; boundary=x", _multipart(line))
    allow(deps, "sim-chat-only", "primary", False)
    created = batches.create_batch(
        deps,
        ALICE,
        b'{"input_file_id": "%s", "endpoint": "/v1/chat/completions", "completion_window": "24h"}'
        % uploaded["id"].encode(),
    )
    lifecycle.prepare(deps, created["id"])
    batch = batches.get_batch(deps, ALICE, created["id"])
    assert batch["status"] == "failed" and batch["errors"]["data"][0]["code"] == "batch_route_unavailable"


def _multipart(content: bytes) -> bytes:
    return (
        b'--x\r\nContent-Disposition: form-data; name="purpose"\r\n\r\nbatch\r\n'
        b'--x\r\nContent-Disposition: form-data; name="file"; filename="in.jsonl"\r\n'
        b"Content-Type: application/jsonl\r\n\r\n" + content + b"\r\n--x--\r\n"
    )


def test_queued_requests_fail_batch_route_unavailable_once_their_model_lost_its_last_route(
    deps: Deps, sim: Simulator
) -> None:
    batch_id = prepared(deps, ALICE, 4)
    walk(deps, batch_id, start=2)  # requests 2 and 3 run
    allow(deps, "sim-chat", "primary", False)
    allow(deps, "sim-chat", "backup", False)
    walk(deps, batch_id)  # 0 and 1 come up now
    page = results_api.results_page(deps, ALICE, batch_id, {})
    by_id = {r["custom_id"]: r for r in page["data"]}
    assert [by_id[f"r-{i}"]["status"] for i in range(4)] == ["failed", "failed", "completed", "completed"]
    assert by_id["r-0"]["error"]["code"] == "batch_route_unavailable"
    assert sim.stats()["models"]["sim-chat"]["requests"] == 2  # nothing was sent for them


def test_requests_fail_over_to_the_other_route_when_one_refuses_connections(
    deps: Deps, sim: Simulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    planned = routing.plan

    def backup_first(*args: Any, **kwargs: Any) -> routing.RoutePlan:
        """The weighted order, but the backup route always tried first (when allowed and closed)."""
        plan = planned(*args, **kwargs)
        return replace(plan, routes=sorted(plan.routes, key=lambda r: r.id != "backup"))

    monkeypatch.setattr(routing, "plan", backup_first)
    sim.set_backup(False)  # the backup route refuses connections ...
    batch_id = prepared(deps, ALICE, 6)
    walk(deps, batch_id)
    page = results_api.results_page(deps, ALICE, batch_id, {})
    assert [r["status"] for r in page["data"]] == ["completed"] * 6  # ... and nothing failed
    assert sim.stats()["routes"] == {"primary": 6, "backup": 0}
    log = admin.attempts(deps, ADMIN, batch_id, {})["data"]
    # The first request was failed over within its attempt; its refusal opened the backup's
    # circuit, so the others went straight to the primary.
    assert sorted(e["refused_routes"] for e in log) == [[]] * 5 + [["backup"]]
    assert all(e["route"] == "primary" and e["attempt"] == 1 for e in log)
