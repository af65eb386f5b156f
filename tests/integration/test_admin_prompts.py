"""The admin's Prompts (a batch's stored requests with their answers), a page at a time, each
read audited against the batch's owner before it is answered; 403 where prompts are not kept."""

from __future__ import annotations

import json
from typing import Any

import pytest
from batchgw.api import files
from batchgw.deps import Deps
from batchgw.domain.chains import RequestMessage
from batchgw.domain.principal import Principal
from batchgw.run import lifecycle

from local.simulator import Simulator
from tests.integration.conftest import make_deps, receive_all
from tests.integration.test_console_batches import call
from tests.integration.test_owner_gate import run
from tests.support import FakeClock

pytestmark = pytest.mark.usefixtures("aws_env")

ADMIN = "sk-local-admin"
ALICE = Principal(user_id="user-alice", role="internal", key_id="key_local_alice")


def chat(custom_id: str, text: str) -> dict[str, Any]:
    return {
        "custom_id": custom_id,
        "body": {"model": "sim-chat", "messages": [{"role": "user", "content": text}]},
    }


def started(deps: Deps, monkeypatch: pytest.MonkeyPatch, body: dict[str, Any], run_first: int) -> str:
    status, batch = call(deps, monkeypatch, "POST", "/v1/batches", body=body)
    assert status == 200, batch
    lifecycle.prepare(deps, batch["id"])
    receive_all(deps)
    for index in range(run_first):
        run(deps, RequestMessage(batch["id"], index))
    return str(batch["id"])


def audit(deps: Deps, monkeypatch: pytest.MonkeyPatch, user: str = ALICE.user_id) -> list[dict[str, Any]]:
    status, page = call(deps, monkeypatch, "GET", "/admin/audit", query=f"user={user}", key=ADMIN)
    assert status == 200, page
    return list(page["data"])


def test_an_admin_reads_a_batchs_requests_and_answers_a_page_at_a_time_each_read_audited(
    sim: Simulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = FakeClock()
    deps = make_deps(sim, clock)
    batch_id = started(deps, monkeypatch, {"requests": [chat(f"q-{i}", f"hello {i}") for i in range(3)]}, 2)
    path = f"/admin/batch/jobs/{batch_id}/requests"

    status, first = call(deps, monkeypatch, "GET", path, query="limit=2", key=ADMIN)
    assert status == 200, first
    assert [entry["custom_id"] for entry in first["data"]] == ["q-0", "q-1"] and first["has_more"]
    entry = first["data"][0]
    assert entry["request"]["body"]["messages"][0]["content"] == "hello 0"
    assert entry["status"] == "succeeded" and entry["response"]["status_code"] == 200
    assert entry["response"]["body"]["choices"][0]["message"]["content"]
    clock.advance(1)
    _, rest = call(deps, monkeypatch, "GET", path, query=f"limit=2&after={first['last_id']}", key=ADMIN)
    assert [(e["custom_id"], e["response"]) for e in rest["data"]] == [("q-2", None)] and not rest["has_more"]

    entries = audit(deps, monkeypatch)
    assert [(e["action"], e["actor"], e["target"]) for e in entries] == [
        ("batch.requests.read", "user-admin", batch_id)
    ] * 2
    assert "'q-2'" in entries[0]["detail"] and "'q-0' to 'q-1'" in entries[1]["detail"]  # newest first
    assert audit(deps, monkeypatch, "user-bob") == []  # against the batch's owner only


def test_a_file_batchs_requests_are_read_from_its_own_copy(
    sim: Simulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    deps = make_deps(sim, FakeClock())
    request = {"model": "sim-chat", "messages": [{"role": "user", "content": "from a file"}]}
    line = json.dumps({"custom_id": "f-1", "method": "POST", "url": "/v1/chat/completions", "body": request})
    line = line.encode() + b"\n"
    file_id = files.new_input_file(deps, ALICE, "in.jsonl", line).id
    body = {"input_file_id": file_id, "endpoint": "/v1/chat/completions", "completion_window": "24h"}
    batch_id = started(deps, monkeypatch, body, 1)
    assert call(deps, monkeypatch, "DELETE", f"/v1/files/{file_id}")[0] == 200  # the batch keeps its copy
    _, page = call(deps, monkeypatch, "GET", f"/admin/batch/jobs/{batch_id}/requests", key=ADMIN)
    assert page["data"][0]["request"]["body"]["messages"][0]["content"] == "from a file"


def test_prompts_answer_403_and_record_nothing_where_prompts_are_not_kept(
    sim: Simulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    deps = make_deps(sim, FakeClock(), DB_STORE_FULL_CONTENT="false")
    batch_id = started(deps, monkeypatch, {"requests": [chat("q-0", "hello")]}, 1)
    status, error = call(deps, monkeypatch, "GET", f"/admin/batch/jobs/{batch_id}/requests", key=ADMIN)
    assert (status, error["error"]["code"]) == (403, "prompts_not_stored")
    assert audit(deps, monkeypatch) == []
    status, error = call(
        deps, monkeypatch, "GET", "/admin/audit", query="user=user-alice&after=bad", key=ADMIN
    )
    assert (status, error["error"]["param"]) == (400, "after")
