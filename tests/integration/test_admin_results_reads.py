"""An administrator's read of another user's batch results is a read of that user's answers,
as the Prompts view's and a file's content are (``api.prompts``): ``GET
/v1/batches/{id}/results``, ``/output.jsonl`` and ``/output.jsonl?merged=true`` (which reads
the batches it retries too) are each recorded as ``batch.requests.read`` against the owner
before they are answered, one entry per read naming the batch, and refused with 403
``prompts_not_stored`` where prompts are not kept (DB_STORE_FULL_CONTENT off), with no entry.
The owner's own reads are neither audited nor refused."""

from __future__ import annotations

import json
from typing import Any

import pytest
from batchgw.deps import Deps

from local.simulator import Simulator
from tests.integration.conftest import make_deps
from tests.integration.test_admin_prompts import ADMIN, audit, chat
from tests.integration.test_console_batches import call
from tests.integration.test_retry_batches import ended_inline_batch, merged, run_to_end
from tests.support import FakeClock

pytestmark = pytest.mark.usefixtures("aws_env")


def lines(body: Any) -> list[dict[str, Any]]:
    text = body if isinstance(body, str) else json.dumps(body)
    return [json.loads(line) for line in text.splitlines() if line]


def retried(deps: Deps, monkeypatch: pytest.MonkeyPatch) -> tuple[str, str]:
    """alice's ended batch of four requests (two failed) and its retry, ended."""
    parent_id = ended_inline_batch(deps, monkeypatch)
    status, child = call(deps, monkeypatch, "POST", f"/v1/batches/{parent_id}/retry")
    assert status == 200, child
    run_to_end(deps, child["id"])
    return parent_id, str(child["id"])


def output(deps: Deps, monkeypatch: pytest.MonkeyPatch, batch_id: str, query: str = "", **kw: Any) -> Any:
    return call(deps, monkeypatch, "GET", f"/v1/batches/{batch_id}/output.jsonl", query=query, **kw)


def test_an_admins_read_of_another_users_results_is_audited_against_the_owner_once_per_read(
    sim: Simulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = FakeClock()
    deps = make_deps(sim, clock)
    parent_id, child_id = retried(deps, monkeypatch)
    # The owner's own reads are not an administrator's.
    assert call(deps, monkeypatch, "GET", f"/v1/batches/{parent_id}/results")[0] == 200
    assert output(deps, monkeypatch, parent_id)[0] == 200
    assert len(merged(deps, monkeypatch, child_id)) == 4
    assert audit(deps, monkeypatch) == []

    # A page of results: one entry for the page, not one per line.
    path = f"/v1/batches/{parent_id}/results"
    status, first = call(deps, monkeypatch, "GET", path, query="limit=3", key=ADMIN)
    assert status == 200 and len(first["data"]) == 3 and first["has_more"], first
    assert first["data"][0]["response"]["body"]["choices"][0]["message"]["content"]
    [entry] = audit(deps, monkeypatch)
    assert (entry["action"], entry["actor"], entry["key_id"], entry["target"]) == (
        "batch.requests.read",
        "user-admin",
        "key_local_admin",
        parent_id,
    )
    assert entry["detail"] == "results page from the first (limit 3)"
    clock.advance(1)  # the entries list newest first
    status, rest = call(deps, monkeypatch, "GET", path, query=f"after={first['last_id']}", key=ADMIN)
    assert status == 200 and [line["custom_id"] for line in rest["data"]] == ["r3"]
    assert f"after {first['last_id']!r}" in audit(deps, monkeypatch)[0]["detail"]

    # The whole output, and the merged output, which reads the parent's as well.
    clock.advance(1)
    status, whole = output(deps, monkeypatch, parent_id, key=ADMIN)
    assert status == 200 and len(lines(whole)) == 4
    clock.advance(1)
    status, both = output(deps, monkeypatch, child_id, "merged=true", key=ADMIN)
    assert status == 200 and [line["custom_id"] for line in lines(both)] == ["r0", "r1", "r2", "r3"]
    clock.advance(1)
    status, alone = output(deps, monkeypatch, parent_id, "merged=true", key=ADMIN)
    assert status == 200 and len(lines(alone)) == 4

    entries = audit(deps, monkeypatch)
    assert [(e["action"], e["actor"], e["target"]) for e in entries] == [
        ("batch.requests.read", "user-admin", parent_id),
        ("batch.requests.read", "user-admin", child_id),
        ("batch.requests.read", "user-admin", parent_id),
        ("batch.requests.read", "user-admin", parent_id),
        ("batch.requests.read", "user-admin", parent_id),
    ]
    assert entries[0]["detail"] == "output.jsonl?merged=true (its own results alone)"
    assert entries[1]["detail"] == "output.jsonl?merged=true (with the batches it retries)"
    assert entries[2]["detail"].startswith("output.jsonl (") and entries[2]["detail"].endswith(" bytes)")
    assert audit(deps, monkeypatch, "user-admin") == []  # against the batch's owner only


def test_an_admins_read_that_is_not_answered_is_not_audited(
    sim: Simulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    deps = make_deps(sim, FakeClock())
    status, batch = call(deps, monkeypatch, "POST", "/v1/batches", body={"requests": [chat("q-0", "hello")]})
    assert status == 200, batch
    status, error = output(deps, monkeypatch, batch["id"], key=ADMIN)
    assert (status, error["error"]["code"]) == (409, "batch_results_not_ready")
    status, error = output(deps, monkeypatch, batch["id"], "merged=true", key=ADMIN)
    assert (status, error["error"]["code"]) == (409, "batch_results_not_ready")
    path = f"/v1/batches/{batch['id']}/results"
    assert call(deps, monkeypatch, "GET", path, query="after=nobody", key=ADMIN)[0] == 400
    assert audit(deps, monkeypatch) == []


def test_an_admins_read_of_another_users_results_is_refused_where_prompts_are_not_kept(
    sim: Simulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    deps = make_deps(sim, FakeClock(), DB_STORE_FULL_CONTENT="false")
    parent_id, child_id = retried(deps, monkeypatch)
    reads = [
        ("GET", f"/v1/batches/{parent_id}/results", ""),
        ("GET", f"/v1/batches/{parent_id}/output.jsonl", ""),
        ("GET", f"/v1/batches/{child_id}/output.jsonl", "merged=true"),
    ]
    refused = [call(deps, monkeypatch, method, path, query=query, key=ADMIN) for method, path, query in reads]
    codes = [(status, error["error"]["code"]) for status, error in refused]
    assert codes == [(403, "prompts_not_stored")] * 3
    # The same 403 the Prompts view answers, and nothing recorded.
    status, prompts = call(deps, monkeypatch, "GET", f"/admin/batch/jobs/{parent_id}/requests", key=ADMIN)
    assert (status, prompts) == refused[0]
    assert audit(deps, monkeypatch) == []

    # The owner still reads their results; the batch's object stays readable to the admin.
    status, page = call(deps, monkeypatch, "GET", f"/v1/batches/{parent_id}/results")
    assert status == 200 and len(page["data"]) == 4
    status, whole = output(deps, monkeypatch, parent_id)
    assert status == 200 and len(lines(whole)) == 4
    assert [line["custom_id"] for line in merged(deps, monkeypatch, child_id)] == ["r0", "r1", "r2", "r3"]
    assert call(deps, monkeypatch, "GET", f"/v1/batches/{parent_id}", key=ADMIN)[0] == 200
    assert audit(deps, monkeypatch) == []
