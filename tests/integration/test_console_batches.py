"""The console's Batches page calls through the api function's handler (moto): the rows as
the page shows them, found by group and by name a page at a time on the server, one batch's
details, and the create page's submission (its check matched, its Idempotency-Key replayed,
its stored requests the canonical ones)."""

from __future__ import annotations

import base64
import gzip
import json
from typing import Any

import pytest
from batchgw.api import files
from batchgw.deps import Deps
from batchgw.domain.files import file_key
from batchgw.domain.principal import Principal
from batchgw.domain.states import BatchStatus
from batchgw.storage.blobs import input_file_key

from functions.admin import handler as admin_api
from functions.api import handler as api
from local.simulator import Simulator
from tests.integration.conftest import make_deps
from tests.support import FakeClock, LambdaContext, http_event

pytestmark = pytest.mark.usefixtures("aws_env")

ALICE = Principal(user_id="user-alice", role="internal", key_id="key_local_alice")


@pytest.fixture
def deps(sim: Simulator) -> Deps:
    return make_deps(sim, FakeClock())


def call(
    deps: Deps,
    monkeypatch: pytest.MonkeyPatch,
    method: str,
    path: str,
    *,
    body: Any = None,
    query: str = "",
    key: str = "sk-local-alice",
    headers: dict[str, str] | None = None,
) -> tuple[int, Any]:
    handler = admin_api if path.startswith("/admin/") else api
    monkeypatch.setattr(handler, "get_deps", lambda: deps)
    event = http_event(method, path, body=body, query=query, key=key, headers=headers)
    answer = handler.handler(event, LambdaContext())  # type: ignore[arg-type]
    text = answer["body"]
    if answer.get("isBase64Encoded"):  # a file's content
        text = base64.b64decode(text).decode()
    try:
        return answer["statusCode"], json.loads(text) if text else None
    except ValueError:  # not one JSON document (a JSONL file's content)
        return answer["statusCode"], text


def chat(custom_id: str, model: str = "sim-chat", **fields: Any) -> dict[str, Any]:
    return {
        "custom_id": custom_id,
        "body": {"model": model, "messages": [{"role": "user", "content": "hi"}], **fields},
    }


def upload(deps: Deps, lines: list[dict[str, Any]]) -> str:
    data = b"".join(json.dumps(line).encode() + b"\n" for line in lines)
    return files.new_input_file(deps, ALICE, "input.jsonl", data).id


def create(
    deps: Deps, monkeypatch: pytest.MonkeyPatch, name: str, n: int = 1, key: str = "sk-local-alice"
) -> str:
    status, body = call(
        deps,
        monkeypatch,
        "POST",
        "/v1/batches",
        body={"requests": [chat(f"r{i}") for i in range(n)], "metadata": {"name": name}},
        key=key,
    )
    assert status == 200, body
    return str(body["id"])


def end(deps: Deps, batch_id: str, status: BatchStatus) -> None:
    """Move a batch to its end by hand (the workflow is a fake here)."""
    ended = deps.batches.end(
        batch_id,
        {"status": status.value, f"{status.value}_at": int(deps.clock())},
        from_statuses=[BatchStatus.VALIDATING],
    )
    assert ended is not None and ended.status is status


# --- the list -----------------------------------------------------------------------------


def test_rows_carry_the_group_note_and_actions_the_server_decided(
    deps: Deps, monkeypatch: pytest.MonkeyPatch
) -> None:
    batch_id = create(deps, monkeypatch, "first", n=2)
    status, page = call(deps, monkeypatch, "GET", "/console/api/batches")
    assert status == 200
    (row,) = page["data"]
    assert row["id"] == batch_id and row["name"] == "first"
    assert (row["group"], row["target"], row["input_method"]) == ("processing", "Chat Completions", "inline")
    assert row["note"] and row["models"] == ["sim-chat"]
    assert row["may"] == {"cancel": True, "delete": True, "download": False, "retry": False}
    assert row["issue"] is None
    assert row["outcomes"]["not_ended"] == 2


def test_a_group_or_a_search_pages_on_the_server_from_where_the_last_page_stopped(
    deps: Deps, monkeypatch: pytest.MonkeyPatch
) -> None:
    made = []
    for i in range(7):
        deps.clock.advance(1)  # type: ignore[attr-defined]
        made.append(create(deps, monkeypatch, f"{'nightly' if i % 2 else 'adhoc'} {i}"))
    for batch_id in made[:3]:
        end(deps, batch_id, BatchStatus.CANCELLED)
    seen: list[str] = []
    after = ""
    while True:
        status, page = call(
            deps, monkeypatch, "GET", "/console/api/batches", query=f"group=processing&limit=2{after}"
        )
        assert status == 200, page
        assert len(page["data"]) <= 2 and all(r["group"] == "processing" for r in page["data"])
        seen += [r["id"] for r in page["data"]]
        if not page["has_more"]:
            break
        after = f"&after={page['next_after']}"
    assert seen == list(reversed(made[3:]))
    status, page = call(deps, monkeypatch, "GET", "/console/api/batches", query="q=NIGHTLY")
    assert [r["name"] for r in page["data"]] == ["nightly 5", "nightly 3", "nightly 1"]
    status, page = call(deps, monkeypatch, "GET", "/console/api/batches", query=f"q={made[0]}")
    assert [r["id"] for r in page["data"]] == [made[0]]
    status, page = call(deps, monkeypatch, "GET", "/console/api/batches", query="group=cancelled&q=adhoc")
    assert [r["name"] for r in page["data"]] == ["adhoc 2", "adhoc 0"]


def test_a_list_call_refuses_an_unknown_group_and_never_shows_another_users_batch(
    deps: Deps, monkeypatch: pytest.MonkeyPatch
) -> None:
    bobs = create(deps, monkeypatch, "bob's", key="sk-local-bob")
    status, body = call(deps, monkeypatch, "GET", "/console/api/batches", query="group=done")
    assert status == 400 and body["error"]["param"] == "group"
    status, page = call(deps, monkeypatch, "GET", "/console/api/batches", query=f"q={bobs}")
    assert page["data"] == []
    status, body = call(deps, monkeypatch, "GET", f"/console/api/batches/{bobs}")
    assert status == 404


def test_the_admin_list_shows_every_users_batches_and_whose_each_is(
    deps: Deps, monkeypatch: pytest.MonkeyPatch
) -> None:
    alices = create(deps, monkeypatch, "alice's")
    bobs = create(deps, monkeypatch, "bob's", key="sk-local-bob")
    status, page = call(deps, monkeypatch, "GET", "/admin/console/batches", key="sk-local-admin")
    assert status == 200
    owners = {r["id"]: r["user_id"] for r in page["data"]}
    assert owners[alices] == "user-alice" and owners[bobs] == "user-bob"
    status, page = call(
        deps, monkeypatch, "GET", "/admin/console/batches", query="user=user-bob", key="sk-local-admin"
    )
    assert [r["id"] for r in page["data"]] == [bobs]
    status, _ = call(deps, monkeypatch, "GET", "/admin/console/batches")
    assert status == 403


# --- the submission -----------------------------------------------------------------------


def checked_submission(
    deps: Deps, monkeypatch: pytest.MonkeyPatch, lines: list[dict[str, Any]]
) -> dict[str, Any]:
    """A submission's body for a file of ``lines``, with the check its preflight answered."""
    file_id = upload(deps, lines)
    checked = preflight(deps, monkeypatch, {"input_file_id": file_id})
    return {"input_file_id": file_id, "name": "n", "check": checked["check"]}


def submit(
    deps: Deps, monkeypatch: pytest.MonkeyPatch, body: dict[str, Any], key: str = "sk-local-alice"
) -> tuple[int, Any]:
    return call(
        deps,
        monkeypatch,
        "POST",
        "/console/api/batches",
        body=body,
        key=key,
        headers={"Idempotency-Key": "k"},
    )


def preflight(deps: Deps, monkeypatch: pytest.MonkeyPatch, body: dict[str, Any]) -> dict[str, Any]:
    status, answer = call(deps, monkeypatch, "POST", "/v1/batches/preflight", body=body)
    assert status == 200, answer
    return dict(answer)


def test_a_submission_stores_the_canonical_requests_and_a_replay_finds_the_same_batch(
    deps: Deps, monkeypatch: pytest.MonkeyPatch
) -> None:
    file_id = upload(deps, [chat("a", max_tokens=5), chat("b")])
    choices = {"input_file_id": file_id, "temperature": 0.5}
    checked = preflight(deps, monkeypatch, choices)
    body = {**choices, "name": "from the console", "description": "two lines", "check": checked["check"]}
    key = {"Idempotency-Key": "console-1"}
    status, made = call(deps, monkeypatch, "POST", "/console/api/batches", body=body, headers=key)
    assert status == 200, made
    assert made["metadata"] == {
        "name": "from the console",
        "console": "1",
        "description": "two lines",
        "console_choices": '{"temperature":0.5}',
    }
    assert made["input_file_id"] == file_id and made["endpoint"] == "/v1/chat/completions"
    stored = deps.blobs.get(input_file_key(made["id"]))
    if stored[:2] == b"\x1f\x8b":
        stored = gzip.decompress(stored)
    lines = [json.loads(line) for line in stored.splitlines()]
    assert [line["custom_id"] for line in lines] == ["a", "b"]
    assert all(line["url"] == "/v1/chat/completions" and line["method"] == "POST" for line in lines)
    assert all(line["body"]["temperature"] == 0.5 and line["body"]["model"] == "sim-chat" for line in lines)
    # The answer lost, the page sends it again with its key: the same batch, not a second.
    status, again = call(deps, monkeypatch, "POST", "/console/api/batches", body=body, headers=key)
    assert status == 200 and again["id"] == made["id"]
    assert len(deps.batches.list_for_owner(ALICE.user_id, limit=10)[0]) == 1


def test_a_submission_whose_check_no_longer_matches_is_refused_and_makes_nothing(
    deps: Deps, monkeypatch: pytest.MonkeyPatch
) -> None:
    file_id = upload(deps, [chat("a")])
    checked = preflight(deps, monkeypatch, {"input_file_id": file_id})
    # Other choices than the ones checked (as a changed key or model would): refused.
    body = {"input_file_id": file_id, "temperature": 1.0, "name": "n", "check": checked["check"]}
    status, refused = call(
        deps, monkeypatch, "POST", "/console/api/batches", body=body, headers={"Idempotency-Key": "k2"}
    )
    assert status == 409 and refused["error"]["code"] == "check_outdated"
    status, refused = call(
        deps,
        monkeypatch,
        "POST",
        "/console/api/batches",
        body={**body, "check": checked["check"], "temperature": None},
    )
    assert status == 400 and refused["error"]["code"] == "idempotency_key_required"
    status, refused = call(
        deps,
        monkeypatch,
        "POST",
        "/console/api/batches",
        body={"input_file_id": file_id, "name": " ", "check": checked["check"]},
        headers={"Idempotency-Key": "k3"},
    )
    assert status == 400 and refused["error"]["param"] == "name"
    assert deps.batches.list_for_owner(ALICE.user_id, limit=10)[0] == []


def test_a_submission_under_another_key_than_the_one_checked_is_refused(
    deps: Deps, monkeypatch: pytest.MonkeyPatch
) -> None:
    from batchgw.api.accounts import new_key

    body = checked_submission(deps, monkeypatch, [chat("a")])
    _, other_key = new_key(deps, ALICE.user_id, name="second")
    status, refused = submit(deps, monkeypatch, body, key=other_key)
    assert status == 409 and refused["error"]["code"] == "check_outdated"
    assert deps.batches.list_for_owner(ALICE.user_id, limit=10)[0] == []


def test_a_submission_is_refused_below_the_minimum_role(deps: Deps, monkeypatch: pytest.MonkeyPatch) -> None:
    body = checked_submission(deps, monkeypatch, [chat("a")])
    status, refused = submit(deps, monkeypatch, body, key="sk-local-free")
    assert status in (400, 403), refused
    assert status == 403 and "create batches" in refused["error"]["message"]
    assert deps.batches.list_for_owner("user-free", limit=10)[0] == []


def test_the_models_offered_are_the_ones_the_caller_may_use(
    deps: Deps, monkeypatch: pytest.MonkeyPatch
) -> None:
    status, page = call(deps, monkeypatch, "GET", "/console/api/models")
    assert status == 200
    ids = [m["id"] for m in page["data"]]
    assert "sim-chat" in ids and ids == sorted(ids)
    assert all(m["endpoints"] for m in page["data"])


def test_a_finished_batchs_failed_requests_export_as_a_new_input_file_and_it_can_be_copied(
    deps: Deps, monkeypatch: pytest.MonkeyPatch, sim: Simulator
) -> None:
    file_id = upload(deps, [chat("a", temperature=1.0), chat("b")])
    choices = {"input_file_id": file_id, "max_tokens": 7}
    checked = preflight(deps, monkeypatch, choices)
    body = {**choices, "name": "to copy", "check": checked["check"]}
    status, made = call(
        deps, monkeypatch, "POST", "/console/api/batches", body=body, headers={"Idempotency-Key": "c"}
    )
    assert status == 200, made
    # Copy as new batch: the source file and the settings, while the file is stored.
    status, shown = call(deps, monkeypatch, "GET", f"/console/api/batches/{made['id']}")
    assert shown["copy"] == {
        "input_file_id": file_id,
        "filename": "input.jsonl",
        "endpoint": "/v1/chat/completions",
        "name": "to copy",
        "description": None,
        "choices": {"max_tokens": 7},
    }
    assert shown["may"]["export_unfinished"] is False  # not finished
    status, refused = call(deps, monkeypatch, "POST", f"/console/api/batches/{made['id']}/export-unfinished")
    assert status == 409 and refused["error"]["code"] == "batch_not_finished"
    status, _ = call(deps, monkeypatch, "DELETE", f"/v1/files/{file_id}")
    assert status == 200
    status, shown = call(deps, monkeypatch, "GET", f"/console/api/batches/{made['id']}")
    assert shown["copy"]["input_file_id"] is None and shown["copy"]["choices"] == {"max_tokens": 7}
    # A direct-requests batch is not copied.
    inline = create(deps, monkeypatch, "inline")
    status, shown = call(deps, monkeypatch, "GET", f"/console/api/batches/{inline}")
    assert shown["copy"] is None


def test_export_unfinished_writes_the_failed_expired_and_cancelled_requests_as_stored(
    deps: Deps, monkeypatch: pytest.MonkeyPatch
) -> None:
    from batchgw.domain.request import RequestRecord
    from batchgw.domain.states import RequestStatus

    batch_id = create(deps, monkeypatch, "mixed", n=4)
    # Ended requests keep no body (the answer takes its place); the fourth was never written.
    statuses = [RequestStatus.SUCCEEDED, RequestStatus.FAILED, RequestStatus.CANCELLED]
    deps.requests.put_new(
        [RequestRecord(batch_id, i, f"r{i}", "sim-chat", status=statuses[i]) for i in range(3)]
    )
    end(deps, batch_id, BatchStatus.CANCELLED)
    status, exported = call(deps, monkeypatch, "POST", f"/console/api/batches/{batch_id}/export-unfinished")
    assert status == 200, exported
    assert exported["object"] == "file" and exported["purpose"] == "batch" and exported["requests"] == 3
    lines = [json.loads(line) for line in deps.blobs.get(file_key(exported["id"])).splitlines()]
    assert [line["custom_id"] for line in lines] == ["r1", "r2", "r3"]
    assert lines[0] == {
        "custom_id": "r1",
        "method": "POST",
        "url": "/v1/chat/completions",
        "body": {"model": "sim-chat", "messages": [{"role": "user", "content": "hi"}]},
    }
    # Someone else's batch reads as not found.
    status, _ = call(
        deps, monkeypatch, "POST", f"/console/api/batches/{batch_id}/export-unfinished", key="sk-local-bob"
    )
    assert status == 404
