"""Retry as a child batch, through the api function's handler (moto): ``POST
/v1/batches/{id}/retry`` opens a batch of the parent's requests that did not succeed, linked
both ways, once per Idempotency-Key; nothing that succeeded runs again; and
``output.jsonl?merged=true`` reads the child's results with its ancestors' successes."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from batchgw.api import files
from batchgw.deps import Deps
from batchgw.domain.chains import decode
from batchgw.domain.errors import StorageError
from batchgw.domain.principal import Principal
from batchgw.run import ending, lifecycle
from batchgw.run.chain import run_message
from batchgw.storage import batches as storage_batches
from batchgw.storage.blobs import input_file_key

from local.simulator import Simulator
from tests.integration.conftest import make_deps, receive_all
from tests.integration.test_console_batches import call
from tests.support import FakeClock, spec_counts

pytestmark = pytest.mark.usefixtures("aws_env")

ALICE = Principal(user_id="user-alice", role="internal", key_id="key_local_alice")
CHAT_URL = "/v1/chat/completions"
# The first attempt answers 400 (not tried again); the same request later succeeds.
FAILS_ONCE = "[[sim status=400 fail=1]]"
FAILS_ALWAYS = "[[sim status=400]]"


@pytest.fixture
def deps(sim: Simulator) -> Deps:
    return make_deps(sim, FakeClock())


def chat(custom_id: str, text: str) -> dict[str, Any]:
    return {
        "custom_id": custom_id,
        "body": {"model": "sim-chat", "messages": [{"role": "user", "content": text}]},
    }


TEXTS = {"r0": "fine", "r1": f"flaky {FAILS_ONCE}", "r2": f"broken {FAILS_ALWAYS}", "r3": "fine too"}


def run_to_end(deps: Deps, batch_id: str) -> None:
    lifecycle.prepare(deps, batch_id)
    for message in receive_all(deps):
        asyncio.run(run_message(deps, decode(message["Body"]), owner="w", deadline=deps.clock() + 900))
    lifecycle.park(deps, batch_id, "t")
    ending.finalize(deps, batch_id)


def ended_inline_batch(deps: Deps, monkeypatch: pytest.MonkeyPatch) -> str:
    requests = [chat(custom_id, text) for custom_id, text in TEXTS.items()]
    status, batch = call(
        deps, monkeypatch, "POST", "/v1/batches", body={"requests": requests, "metadata": {"name": "first"}}
    )
    assert status == 200, batch
    run_to_end(deps, batch["id"])
    return str(batch["id"])


def merged(deps: Deps, monkeypatch: pytest.MonkeyPatch, batch_id: str) -> list[dict[str, Any]]:
    status, body = call(deps, monkeypatch, "GET", f"/v1/batches/{batch_id}/output.jsonl", query="merged=true")
    assert status == 200, body
    text = body if isinstance(body, str) else json.dumps(body)
    return [json.loads(line) for line in text.splitlines() if line]


def test_retry_runs_only_the_requests_that_did_not_succeed_and_links_parent_and_child(
    deps: Deps, sim: Simulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    parent_id = ended_inline_batch(deps, monkeypatch)
    _, parent = call(deps, monkeypatch, "GET", f"/v1/batches/{parent_id}")
    assert spec_counts(parent) == {"total": 4, "completed": 2, "failed": 2}
    before = sim.stats()["models"]["sim-chat"]["requests"]

    status, child = call(deps, monkeypatch, "POST", f"/v1/batches/{parent_id}/retry")
    assert status == 200, child
    assert child["parent_batch_id"] == parent_id and child["request_counts"]["total"] == 2
    assert child["endpoint"] == CHAT_URL and child["metadata"] == {"name": "first"}
    _, parent = call(deps, monkeypatch, "GET", f"/v1/batches/{parent_id}")
    assert parent["retry_batch_ids"] == [child["id"]]

    run_to_end(deps, child["id"])
    _, child = call(deps, monkeypatch, "GET", f"/v1/batches/{child['id']}")
    assert child["status"] == "completed"
    assert spec_counts(child) == {"total": 2, "completed": 1, "failed": 1}
    assert sim.stats()["models"]["sim-chat"]["requests"] - before == 2  # r1 and r2 only

    lines = merged(deps, monkeypatch, child["id"])
    assert [line["custom_id"] for line in lines] == ["r0", "r1", "r2", "r3"]
    batch_of = {line["custom_id"]: line["id"].split("_req_")[0] for line in lines}
    assert [line["error"] is None for line in lines] == [True, True, False, True]
    assert (
        child["id"].removeprefix("batch_") in lines[1]["id"]
        and child["id"].removeprefix("batch_") in lines[2]["id"]
    )
    assert (
        parent_id.removeprefix("batch_") in lines[0]["id"]
        and parent_id.removeprefix("batch_") in lines[3]["id"]
    ), batch_of


def test_a_retry_of_a_retry_merges_every_generation_in_the_first_order(
    deps: Deps, monkeypatch: pytest.MonkeyPatch
) -> None:
    parent_id = ended_inline_batch(deps, monkeypatch)
    _, child = call(deps, monkeypatch, "POST", f"/v1/batches/{parent_id}/retry")
    run_to_end(deps, child["id"])
    _, grandchild = call(deps, monkeypatch, "POST", f"/v1/batches/{child['id']}/retry")
    assert grandchild["request_counts"]["total"] == 1  # r2, which failed twice
    run_to_end(deps, grandchild["id"])
    lines = merged(deps, monkeypatch, grandchild["id"])
    assert [line["custom_id"] for line in lines] == ["r0", "r1", "r2", "r3"]
    assert grandchild["id"].removeprefix("batch_") in lines[2]["id"]
    assert [line["error"] is None for line in lines] == [True, True, False, True]


def test_the_same_idempotency_key_finds_the_same_child(deps: Deps, monkeypatch: pytest.MonkeyPatch) -> None:
    parent_id = ended_inline_batch(deps, monkeypatch)
    headers = {"Idempotency-Key": "retry-once-1"}
    first = call(deps, monkeypatch, "POST", f"/v1/batches/{parent_id}/retry", headers=headers)
    again = call(deps, monkeypatch, "POST", f"/v1/batches/{parent_id}/retry", headers=headers)
    assert first[0] == again[0] == 200 and first[1]["id"] == again[1]["id"]
    _, parent = call(deps, monkeypatch, "GET", f"/v1/batches/{parent_id}")
    assert parent["retry_batch_ids"] == [first[1]["id"]]
    other = call(
        deps,
        monkeypatch,
        "POST",
        f"/v1/batches/{parent_id}/retry",
        body={"metadata": {"x": "y"}},
        headers=headers,
    )
    assert other[0] == 409, other


def test_error_codes_choose_which_requests_run_again(deps: Deps, monkeypatch: pytest.MonkeyPatch) -> None:
    parent_id = ended_inline_batch(deps, monkeypatch)
    _, results = call(deps, monkeypatch, "GET", f"/v1/batches/{parent_id}/results")
    code = next(r["error"]["code"] for r in results["data"] if r["custom_id"] == "r1")
    status, child = call(
        deps, monkeypatch, "POST", f"/v1/batches/{parent_id}/retry", body={"error_codes": [code]}
    )
    assert status == 200 and child["request_counts"]["total"] == 2  # both ended with that code
    status, refused = call(
        deps, monkeypatch, "POST", f"/v1/batches/{parent_id}/retry", body={"error_codes": ["batch_expired"]}
    )
    assert status == 400 and refused["error"]["code"] == "nothing_to_retry"


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"error_codes": []}, "error_codes"),
        ({"error_codes": [3]}, "error_codes"),
        ({"completion_window": "7d"}, "completion_window"),
        ({"metadata": "x"}, "metadata"),
        ({"requests": []}, "requests"),
    ],
)
def test_a_bad_retry_body_is_refused_naming_its_field(
    deps: Deps, monkeypatch: pytest.MonkeyPatch, body: dict[str, Any], param: str
) -> None:
    parent_id = ended_inline_batch(deps, monkeypatch)
    status, answer = call(deps, monkeypatch, "POST", f"/v1/batches/{parent_id}/retry", body=body)
    assert status == 400 and answer["error"]["param"] == param, answer
    _, parent = call(deps, monkeypatch, "GET", f"/v1/batches/{parent_id}")
    assert parent["retry_batch_ids"] == []


def test_only_the_owner_retries_an_ended_batch(deps: Deps, monkeypatch: pytest.MonkeyPatch) -> None:
    status, running = call(deps, monkeypatch, "POST", "/v1/batches", body={"requests": [chat("a", "hi")]})
    assert status == 200
    status, answer = call(deps, monkeypatch, "POST", f"/v1/batches/{running['id']}/retry")
    assert status == 409 and answer["error"]["code"] == "batch_not_finished"
    status, answer = call(deps, monkeypatch, "POST", f"/v1/batches/{running['id']}/retry", key="sk-local-bob")
    assert status == 404
    run_to_end(deps, running["id"])
    status, answer = call(deps, monkeypatch, "POST", f"/v1/batches/{running['id']}/retry")
    assert status == 400 and answer["error"]["code"] == "nothing_to_retry"


def create_file_batch(
    deps: Deps, monkeypatch: pytest.MonkeyPatch, texts: dict[str, str]
) -> tuple[Any, dict[str, Any]]:
    """Alice's file batch of a chat request per ``texts`` entry: its input file and the batch."""
    lines = [
        {"custom_id": custom_id, "method": "POST", "url": CHAT_URL, "body": chat(custom_id, text)["body"]}
        for custom_id, text in texts.items()
    ]
    return file_batch_of(deps, monkeypatch, b"".join(json.dumps(x).encode() + b"\n" for x in lines))


def file_batch_of(deps: Deps, monkeypatch: pytest.MonkeyPatch, content: bytes) -> tuple[Any, dict[str, Any]]:
    """Alice's file batch of ``content``, as uploaded: its input file and the batch."""
    upload = files.new_input_file(deps, ALICE, "in.jsonl", content)
    status, batch = call(
        deps,
        monkeypatch,
        "POST",
        "/v1/batches",
        body={"input_file_id": upload.id, "endpoint": CHAT_URL, "completion_window": "24h"},
    )
    assert status == 200, batch
    return upload, batch


def test_a_file_batch_child_gets_its_own_input_file_and_result_files(
    deps: Deps, monkeypatch: pytest.MonkeyPatch
) -> None:
    upload, parent = create_file_batch(deps, monkeypatch, TEXTS)
    run_to_end(deps, parent["id"])

    status, child = call(deps, monkeypatch, "POST", f"/v1/batches/{parent['id']}/retry")
    assert status == 200, child
    assert child["input_file_id"] not in (None, upload.id)
    status, content = call(deps, monkeypatch, "GET", f"/v1/files/{child['input_file_id']}/content")
    assert status == 200
    kept = [json.loads(line) for line in content.splitlines()]
    assert [line["custom_id"] for line in kept] == ["r1", "r2"]
    assert all(line["url"] == CHAT_URL and line["body"]["model"] == "sim-chat" for line in kept)

    run_to_end(deps, child["id"])
    _, child = call(deps, monkeypatch, "GET", f"/v1/batches/{child['id']}")
    assert child["output_file_id"] and child["error_file_id"]
    assert [line["custom_id"] for line in merged(deps, monkeypatch, child["id"])] == ["r0", "r1", "r2", "r3"]


def test_merged_results_need_the_parents_results(deps: Deps, monkeypatch: pytest.MonkeyPatch) -> None:
    parent_id = ended_inline_batch(deps, monkeypatch)
    _, child = call(deps, monkeypatch, "POST", f"/v1/batches/{parent_id}/retry")
    status, answer = call(
        deps, monkeypatch, "GET", f"/v1/batches/{child['id']}/output.jsonl", query="merged=true"
    )
    assert status == 409 and answer["error"]["code"] == "batch_results_not_ready"
    run_to_end(deps, child["id"])
    assert call(deps, monkeypatch, "DELETE", f"/v1/batches/{parent_id}")[0] == 200
    status, answer = call(
        deps, monkeypatch, "GET", f"/v1/batches/{child['id']}/output.jsonl", query="merged=true"
    )
    assert status == 409 and answer["error"]["code"] == "parent_results_unavailable"
    status, own = call(deps, monkeypatch, "GET", f"/v1/batches/{child['id']}/output.jsonl")
    assert status == 200 and len(own.splitlines()) == 2


def test_a_parent_with_all_its_retries_refuses_another_and_stores_nothing(
    deps: Deps, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(storage_batches, "MAX_CHILDREN", 1)
    parent_id = ended_inline_batch(deps, monkeypatch)
    assert call(deps, monkeypatch, "POST", f"/v1/batches/{parent_id}/retry")[0] == 200
    status, answer = call(deps, monkeypatch, "POST", f"/v1/batches/{parent_id}/retry")
    assert status == 409 and answer["error"]["code"] == "retry_refused", answer
    _, listed = call(deps, monkeypatch, "GET", "/v1/batches")
    assert len(listed["data"]) == 2  # the parent and its one child: the refused one left nothing
    assert deps.usage.read(ALICE.user_id).batches == 1  # only the child is unfinished


# --- a batch that failed before its requests were stored -----------------------------------------

FINE = {"r0": "fine", "r1": "fine too", "r2": "also fine"}


def file_batch_failed_reading_its_input(deps: Deps, monkeypatch: pytest.MonkeyPatch) -> tuple[str, str]:
    """A file batch whose prepare failed reading its own copy of its input (as a copy whose
    checksum did not match did), and which the workflow's failure step then failed: nothing
    of it was validated, counted or stored. Its id and its input file's."""
    upload, batch = create_file_batch(deps, monkeypatch, FINE)

    def unreadable(*_: Any, **__: Any) -> Any:
        raise StorageError("could not read the batch's input copy")

    with monkeypatch.context() as failing:
        failing.setattr(lifecycle, "input_lines", unreadable)
        with pytest.raises(StorageError):
            lifecycle.prepare(deps, batch["id"])
    error = {"Error": "StorageError", "Cause": json.dumps({"errorMessage": "could not read"})}
    assert ending.fail(deps, batch["id"], ending.cause_of(error))["status"] == "failed"
    return str(batch["id"]), upload.id


def test_a_batch_failed_before_its_requests_were_stored_retries_its_whole_input(
    deps: Deps, sim: Simulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    parent_id, _ = file_batch_failed_reading_its_input(deps, monkeypatch)
    _, parent = call(deps, monkeypatch, "GET", f"/v1/batches/{parent_id}")
    assert parent["status"] == "failed" and parent["error"]["code"] == "internal_error"
    assert parent["errors"] is None and parent["request_counts"]["total"] == 0
    _, row = call(deps, monkeypatch, "GET", f"/console/api/batches/{parent_id}")
    assert row["may"]["retry"] is True and row["issue"]["next"].startswith("Retry the batch")
    before = sim.stats()["models"].get("sim-chat", {}).get("requests", 0)

    headers = {"Idempotency-Key": "retry-whole-input"}
    status, child = call(deps, monkeypatch, "POST", f"/v1/batches/{parent_id}/retry", headers=headers)
    assert status == 200, child
    again = call(deps, monkeypatch, "POST", f"/v1/batches/{parent_id}/retry", headers=headers)
    assert again[0] == 200 and again[1]["id"] == child["id"]  # one child per key
    assert child["parent_batch_id"] == parent_id and child["input_file_id"]
    _, content = call(deps, monkeypatch, "GET", f"/v1/files/{child['input_file_id']}/content")
    assert [json.loads(line)["custom_id"] for line in content.splitlines()] == list(FINE)

    run_to_end(deps, child["id"])
    _, child = call(deps, monkeypatch, "GET", f"/v1/batches/{child['id']}")
    assert child["status"] == "completed" and spec_counts(child) == {"total": 3, "completed": 3, "failed": 0}
    assert sim.stats()["models"]["sim-chat"]["requests"] - before == 3
    _, parent = call(deps, monkeypatch, "GET", f"/v1/batches/{parent_id}")
    assert parent["retry_batch_ids"] == [child["id"]]
    lines = merged(deps, monkeypatch, child["id"])
    assert [line["custom_id"] for line in lines] == list(FINE) and all(
        line["error"] is None for line in lines
    )


def test_a_batch_failed_before_its_requests_were_stored_retries_from_its_input_file_if_its_copy_is_gone(
    deps: Deps, monkeypatch: pytest.MonkeyPatch
) -> None:
    parent_id, _ = file_batch_failed_reading_its_input(deps, monkeypatch)
    deps.blobs.delete(input_file_key(parent_id))
    status, child = call(deps, monkeypatch, "POST", f"/v1/batches/{parent_id}/retry")
    assert status == 200, child
    _, content = call(deps, monkeypatch, "GET", f"/v1/files/{child['input_file_id']}/content")
    assert [json.loads(line)["custom_id"] for line in content.splitlines()] == list(FINE)

    other_id, other_file = file_batch_failed_reading_its_input(deps, monkeypatch)
    deps.blobs.delete(input_file_key(other_id))
    assert call(deps, monkeypatch, "DELETE", f"/v1/files/{other_file}")[0] == 200
    status, answer = call(deps, monkeypatch, "POST", f"/v1/batches/{other_id}/retry")
    assert status == 409 and answer["error"]["code"] == "retry_input_unavailable", answer
    _, other = call(deps, monkeypatch, "GET", f"/v1/batches/{other_id}")
    assert other["retry_batch_ids"] == []


def test_a_refused_input_file_has_nothing_to_retry(deps: Deps, monkeypatch: pytest.MonkeyPatch) -> None:
    bad = json.dumps({"custom_id": "a", "method": "POST", "url": CHAT_URL, "body": {"model": "sim-chat"}})
    _, batch = file_batch_of(deps, monkeypatch, bad.encode() + b"\n")
    lifecycle.prepare(deps, batch["id"])
    _, batch = call(deps, monkeypatch, "GET", f"/v1/batches/{batch['id']}")
    assert batch["status"] == "failed" and batch["error"]["code"] == "invalid_batch_input"
    _, row = call(deps, monkeypatch, "GET", f"/console/api/batches/{batch['id']}")
    assert row["may"]["retry"] is False
    status, answer = call(deps, monkeypatch, "POST", f"/v1/batches/{batch['id']}/retry")
    assert status == 400 and answer["error"]["code"] == "nothing_to_retry"
    assert "refused" in answer["error"]["message"]
