"""An administrator's read of another user's file content (``GET /v1/files/{id}/content``) is
a read of that user's prompts or answers, as the Prompts view's is: recorded as
``batch.requests.read`` against the owner before it is answered, whatever the file (an
uploaded input, a console export, a batch's output file), and refused with 403 where prompts
are not kept (DB_STORE_FULL_CONTENT off). The owner's own reads are not audited."""

from __future__ import annotations

import json
from typing import Any

import pytest
from batchgw.run import ending, lifecycle

from local.simulator import Simulator
from tests.integration.conftest import make_deps
from tests.integration.test_admin_prompts import ADMIN, audit, chat, started
from tests.integration.test_console_batches import call
from tests.integration.test_file_quotas import multipart
from tests.support import FakeClock

pytestmark = pytest.mark.usefixtures("aws_env")

# Two lines: the content reads back as text, not as one JSON document.
PROMPT = b"".join(
    json.dumps({"method": "POST", "url": "/v1/chat/completions", **chat(f"s-{i}", "my secret")}).encode()
    + b"\n"
    for i in (1, 2)
)


def uploaded(deps: Any, monkeypatch: pytest.MonkeyPatch, data: bytes = PROMPT) -> str:
    content_type, body = multipart(data)
    status, made = call(
        deps, monkeypatch, "POST", "/v1/files", body=body.decode(), headers={"content-type": content_type}
    )
    assert status == 200, made
    return str(made["id"])


def test_an_admins_read_of_another_users_file_is_audited_against_the_owner_before_it_is_answered(
    sim: Simulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = FakeClock()
    deps = make_deps(sim, clock)
    file_id = uploaded(deps, monkeypatch)
    status, own = call(deps, monkeypatch, "GET", f"/v1/files/{file_id}/content")
    assert status == 200 and "my secret" in own
    assert audit(deps, monkeypatch) == []  # the owner's own read is not an administrator's

    status, read = call(deps, monkeypatch, "GET", f"/v1/files/{file_id}/content", key=ADMIN)
    assert status == 200 and "my secret" in read
    [entry] = audit(deps, monkeypatch)
    assert (entry["action"], entry["actor"], entry["key_id"], entry["target"]) == (
        "batch.requests.read",
        "user-admin",
        "key_local_admin",
        file_id,
    )
    assert "'in.jsonl'" in entry["detail"] and f"({len(PROMPT)} bytes)" in entry["detail"]
    assert audit(deps, monkeypatch, "user-admin") == []  # against the file's owner only

    # A batch's output file holds the answers (here the echo of the prompts): read as well.
    body = {"input_file_id": file_id, "endpoint": "/v1/chat/completions", "completion_window": "24h"}
    batch_id = started(deps, monkeypatch, body, 2)
    lifecycle.park(deps, batch_id, "t")
    assert ending.finalize(deps, batch_id)["status"] == "completed"
    output = call(deps, monkeypatch, "GET", f"/v1/batches/{batch_id}")[1]["output_file_id"]
    clock.advance(1)  # the entries list newest first
    status, answers = call(deps, monkeypatch, "GET", f"/v1/files/{output}/content", key=ADMIN)
    assert status == 200 and "s-2" in answers
    newest = audit(deps, monkeypatch)[0]
    assert newest["target"] == output and "batch_output" in newest["detail"]


def test_an_admins_read_of_another_users_file_is_refused_where_prompts_are_not_kept(
    sim: Simulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    deps = make_deps(sim, FakeClock(), DB_STORE_FULL_CONTENT="false")
    file_id = uploaded(deps, monkeypatch)
    status, error = call(deps, monkeypatch, "GET", f"/v1/files/{file_id}/content", key=ADMIN)
    assert (status, error["error"]["code"]) == (403, "prompts_not_stored")
    assert audit(deps, monkeypatch) == []
    # The same 403 the Prompts view answers; the owner still reads their own file.
    batch_id = started(deps, monkeypatch, {"requests": [chat("q-0", "hello")]}, 0)
    status, prompts = call(deps, monkeypatch, "GET", f"/admin/batch/jobs/{batch_id}/requests", key=ADMIN)
    assert (status, prompts["error"]) == (403, error["error"])
    status, own = call(deps, monkeypatch, "GET", f"/v1/files/{file_id}/content")
    assert status == 200 and "my secret" in own
    # What the file is stays readable: only its content is refused.
    assert call(deps, monkeypatch, "GET", f"/v1/files/{file_id}", key=ADMIN)[0] == 200
