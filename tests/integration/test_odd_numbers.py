"""Numbers a client writes that ``str.isdigit`` takes and ``int`` does not (or that DynamoDB
cannot store) are 400s naming their field, never 500s: results and attempt cursors, the
attempts' status filter, a model's cap, a key's expiry."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import urlencode

import pytest
from batchgw.deps import Deps

from functions.admin import handler as admin
from functions.api import handler as api
from local.simulator import Simulator
from tests.integration.conftest import make_deps
from tests.support import FakeClock, LambdaContext, http_event

pytestmark = pytest.mark.usefixtures("aws_env")
ADMIN, ALICE = "sk-local-admin", "sk-local-alice"
ODD = ["²", "٣", "1" * 5000, "0x1f", " 7"]


@pytest.fixture
def deps(sim: Simulator, monkeypatch: pytest.MonkeyPatch) -> Deps:
    built = make_deps(sim, FakeClock())
    monkeypatch.setattr(api, "get_deps", lambda: built)
    monkeypatch.setattr(admin, "get_deps", lambda: built)
    return built


def call(method: str, path: str, key: str = ALICE, body: Any = None, query: str = "") -> tuple[int, Any]:
    function = admin if path.startswith("/admin/") else api
    event = http_event(method, path, key=key, body=body, query=query)
    response = function.handler(event, LambdaContext())  # type: ignore[arg-type]
    return int(response["statusCode"]), json.loads(response.get("body") or "null")


def a_batch() -> str:
    body = {
        "requests": [
            {"custom_id": "a", "body": {"model": "sim-chat", "messages": [{"role": "user", "content": "x"}]}}
        ]
    }
    status, batch = call("POST", "/v1/batches", body=body)
    assert status == 200, batch
    return str(batch["id"])


@pytest.mark.parametrize("tail", ODD)
def test_a_results_cursor_of_odd_digits_is_400(deps: Deps, tail: str) -> None:
    batch_id = a_batch()
    after = f"batch_req_{batch_id.removeprefix('batch_')}_{tail}"
    status, answer = call("GET", f"/v1/batches/{batch_id}/results", query=urlencode({"after": after}))
    assert status == 400 and answer["error"]["param"] == "after", answer


@pytest.mark.parametrize("odd", ODD)
def test_the_attempts_filters_of_odd_digits_are_400(deps: Deps, odd: str) -> None:
    batch_id = a_batch()
    path = f"/admin/batch/jobs/{batch_id}/attempts"
    status, answer = call("GET", path, ADMIN, query=urlencode({"status": odd}))
    assert status == 400 and answer["error"]["param"] == "status", answer
    status, answer = call("GET", path, ADMIN, query=urlencode({"after": f"att_{odd}"}))
    assert status == 400 and answer["error"]["param"] == "after", answer


@pytest.mark.parametrize("value", [10**130, 2**63, 100_001])
def test_a_model_cap_past_any_real_one_is_400(deps: Deps, value: int) -> None:
    status, answer = call("PATCH", "/admin/batch/models/sim-chat", ADMIN, {"max_concurrency": value})
    assert status == 400 and answer["error"]["param"] == "max_concurrency", answer


def test_a_key_expiry_past_the_year_9999_is_400(deps: Deps) -> None:
    status, answer = call("PATCH", "/admin/keys/key_local_alice", ADMIN, {"expires_at": 10**130})
    assert status == 400 and answer["error"]["param"] == "expires_at", answer
    assert call("GET", "/v1/batches")[0] == 200  # the key still works
