"""The simulator's provider batch APIs (OpenAI's files and batches, Anthropic's message
batches): each line answered as the request alone would be, and the controls that advance,
fail, expire or partly complete a batch, or make its submit fail."""

from __future__ import annotations

import json
from typing import Any

import pytest

from local.sim_core import SimulatorCore

BOUNDARY = "simboundary"
CHAT = "/v1/chat/completions"


@pytest.fixture
def core() -> SimulatorCore:
    return SimulatorCore()


def call(core: SimulatorCore, method: str, path: str, body: Any = None, **headers: str) -> tuple[int, Any]:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode() if body is not None else b""
    reply = core.handle(method, path, {k.replace("_", "-"): v for k, v in headers.items()}, raw)
    assert reply is not None
    if reply.content_type == "application/jsonl":
        return reply.status, [json.loads(line) for line in reply.body.splitlines()]
    try:
        return reply.status, json.loads(reply.body)
    except ValueError:
        return reply.status, reply.body


def upload(core: SimulatorCore, lines: list[dict[str, Any]]) -> str:
    data = "".join(json.dumps(line) + "\n" for line in lines).encode()
    body = (
        (
            f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="purpose"\r\n\r\nbatch\r\n'
            f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="file"; filename="b.jsonl"\r\n\r\n'
        ).encode()
        + data
        + f"\r\n--{BOUNDARY}--\r\n".encode()
    )
    status, file = call(
        core, "POST", "/v1/files", body, content_type=f"multipart/form-data; boundary={BOUNDARY}"
    )
    assert status == 200 and file["bytes"] == len(data), file
    return str(file["id"])


def chat_line(custom_id: str, text: str) -> dict[str, Any]:
    body = {"model": "sim-chat", "messages": [{"role": "user", "content": text}]}
    return {"custom_id": custom_id, "method": "POST", "url": CHAT, "body": body}


def openai_batch(core: SimulatorCore, lines: list[dict[str, Any]]) -> dict[str, Any]:
    file_id = upload(core, lines)
    status, batch = call(
        core, "POST", "/v1/batches", {"input_file_id": file_id, "endpoint": CHAT, "completion_window": "24h"}
    )
    assert status == 200, batch
    return dict(batch)


def content(core: SimulatorCore, file_id: str) -> list[dict[str, Any]]:
    status, lines = call(core, "GET", f"/v1/files/{file_id}/content")
    assert status == 200
    return list(lines)


def test_an_openai_batch_answers_each_line_as_the_request_alone_and_splits_successes_from_errors(
    core: SimulatorCore,
) -> None:
    batch = openai_batch(core, [chat_line("a", "hello there"), chat_line("b", "[[sim status=400]] bad")])
    assert batch["status"] == "validating" and batch["request_counts"]["total"] == 2
    status, done = call(core, "GET", f"/v1/batches/{batch['id']}")  # auto_seconds 0: ended on read
    assert status == 200 and done["status"] == "completed"
    assert done["request_counts"] == {"total": 2, "completed": 1, "failed": 1}
    (good,) = content(core, done["output_file_id"])
    (bad,) = content(core, done["error_file_id"])
    alone = core.handle("POST", CHAT, {}, json.dumps(chat_line("a", "hello there")["body"]).encode())
    assert alone is not None
    assert good["custom_id"] == "a" and good["response"]["status_code"] == 200
    assert good["response"]["body"]["choices"] == json.loads(alone.body)["choices"]
    assert bad["custom_id"] == "b" and bad["response"]["status_code"] == 400 and bad["error"] is not None


def test_controls_hold_start_partly_complete_and_expire_a_batch(core: SimulatorCore) -> None:
    assert call(core, "POST", "/_sim/provider-batches", {"auto_seconds": None})[0] == 200
    batch = openai_batch(core, [chat_line(f"r{i}", f"hi {i}") for i in range(3)])
    assert call(core, "GET", f"/v1/batches/{batch['id']}")[1]["status"] == "validating"  # held
    call(core, "POST", f"/_sim/provider-batches/{batch['id']}", {"action": "partial", "lines": 2})
    _, running = call(core, "GET", f"/v1/batches/{batch['id']}")
    assert running["status"] == "in_progress" and running["request_counts"]["completed"] == 2
    call(core, "POST", f"/_sim/provider-batches/{batch['id']}", {"action": "expire"})
    _, expired = call(core, "GET", f"/v1/batches/{batch['id']}")
    assert expired["status"] == "expired"
    assert [line["custom_id"] for line in content(core, expired["output_file_id"])] == ["r0", "r1"]
    (unrun,) = content(core, expired["error_file_id"])
    assert unrun["custom_id"] == "r2" and unrun["error"]["code"] == "batch_expired"


def test_a_cancelled_openai_batch_keeps_what_ran(core: SimulatorCore) -> None:
    call(core, "POST", "/_sim/provider-batches", {"auto_seconds": None})
    batch = openai_batch(core, [chat_line("a", "x"), chat_line("b", "y")])
    call(core, "POST", f"/_sim/provider-batches/{batch['id']}", {"action": "partial", "lines": 1})
    status, cancelled = call(core, "POST", f"/v1/batches/{batch['id']}/cancel")
    assert status == 200 and cancelled["status"] == "cancelled"
    assert [line["custom_id"] for line in content(core, cancelled["output_file_id"])] == ["a"]


def test_submits_fail_as_a_full_queue_or_a_rate_limit_says(core: SimulatorCore) -> None:
    call(core, "POST", "/_sim/provider-batches", {"submit_failure": "queue_full"})
    failed = openai_batch(core, [chat_line("a", "x")])
    assert failed["status"] == "failed" and failed["errors"]["data"][0]["code"] == "batch_queue_full"
    anthropic = {
        "requests": [{"custom_id": "a", "params": {"model": "sim-claude", "max_tokens": 8, "messages": []}}]
    }
    status, error = call(core, "POST", "/v1/messages/batches", anthropic, anthropic_version="2023-06-01")
    assert status == 529 and error["error"]["type"] == "overloaded_error"
    call(core, "POST", "/_sim/provider-batches", {"submit_failure": "rate_limited"})
    file_id = upload(core, [chat_line("a", "x")])
    status, _ = call(
        core, "POST", "/v1/batches", {"input_file_id": file_id, "endpoint": CHAT, "completion_window": "24h"}
    )
    assert status == 429


def test_an_anthropic_message_batch_ends_with_each_lines_result_and_cancel_marks_the_rest(
    core: SimulatorCore,
) -> None:
    call(core, "POST", "/_sim/provider-batches", {"auto_seconds": None})

    def request(custom_id: str, text: str) -> dict[str, Any]:
        params = {"model": "sim-claude", "max_tokens": 16, "messages": [{"role": "user", "content": text}]}
        return {"custom_id": custom_id, "params": params}

    body = {"requests": [request("a", "hello"), request("b", "[[sim status=400]] no"), request("c", "later")]}
    status, batch = call(core, "POST", "/v1/messages/batches", body, anthropic_version="2023-06-01")
    assert (
        status == 200 and batch["processing_status"] == "in_progress" and batch["id"].startswith("msgbatch_")
    )
    call(core, "POST", f"/_sim/provider-batches/{batch['id']}", {"action": "partial", "lines": 2})
    status, _ = call(
        core, "GET", f"/v1/messages/batches/{batch['id']}/results", anthropic_version="2023-06-01"
    )
    assert status == 400  # results only once it ended
    _, cancelled = call(
        core, "POST", f"/v1/messages/batches/{batch['id']}/cancel", anthropic_version="2023-06-01"
    )
    assert cancelled["processing_status"] == "ended"
    assert cancelled["request_counts"] == {
        "processing": 0,
        "succeeded": 1,
        "errored": 1,
        "canceled": 1,
        "expired": 0,
    }
    _, results = call(
        core, "GET", f"/v1/messages/batches/{batch['id']}/results", anthropic_version="2023-06-01"
    )
    assert [(r["custom_id"], r["result"]["type"]) for r in results] == [
        ("a", "succeeded"),
        ("b", "errored"),
        ("c", "canceled"),
    ]
    assert results[0]["result"]["message"]["type"] == "message"


def test_bad_lines_fail_an_openai_batch_and_bad_custom_ids_refuse_an_anthropic_one(
    core: SimulatorCore,
) -> None:
    wrong = {**chat_line("a", "x"), "url": "/v1/embeddings"}
    failed = openai_batch(core, [chat_line("a", "x"), chat_line("a", "again"), wrong])
    assert failed["status"] == "failed"
    assert [(e["code"], e["line"]) for e in failed["errors"]["data"]] == [
        ("duplicate_custom_id", 2),
        ("invalid_request", 3),
    ]
    params = {"model": "sim-claude", "max_tokens": 8, "messages": [{"role": "user", "content": "x"}]}
    body = {"requests": [{"custom_id": "not ok!", "params": params}]}
    status, error = call(core, "POST", "/v1/messages/batches", body, anthropic_version="2023-06-01")
    assert status == 400 and "custom_id" in error["error"]["message"]
    listed = call(core, "GET", "/_sim/provider-batches")[1]
    assert [b["provider"] for b in listed["batches"]] == ["openai"]
    call(core, "POST", "/_sim/reset")
    assert call(core, "GET", "/_sim/provider-batches")[1] == {
        "batches": [],
        "files": [],
        "deleted_files": [],
        "lines": 0,
    }


def test_the_provider_counts_the_lines_it_takes_and_forgets_a_batch_it_loses(core: SimulatorCore) -> None:
    call(core, "POST", "/_sim/provider-batches", {"auto_seconds": None})
    batch = openai_batch(core, [chat_line("a", "x"), chat_line("b", "y")])
    messages = {
        "requests": [{"custom_id": "m", "params": {"model": "sim-claude", "max_tokens": 8, "messages": []}}]
    }
    _, message_batch = call(core, "POST", "/v1/messages/batches", messages, anthropic_version="2023-06-01")
    assert call(core, "GET", "/_sim/provider-batches")[1]["lines"] == 3
    _, lost = call(core, "POST", f"/_sim/provider-batches/{batch['id']}", {"action": "lose"})
    assert lost == {"id": batch["id"], "status": "lost"}
    assert call(core, "GET", f"/v1/batches/{batch['id']}")[0] == 404
    assert call(core, "GET", f"/v1/files/{batch['input_file_id']}")[0] == 404  # its files with it
    call(core, "POST", f"/_sim/provider-batches/{message_batch['id']}", {"action": "lose"})
    path = f"/v1/messages/batches/{message_batch['id']}"
    assert call(core, "GET", path, anthropic_version="2023-06-01")[0] == 404
    listed = call(core, "GET", "/_sim/provider-batches")[1]
    assert listed["batches"] == [] and listed["lines"] == 3  # what it took stays counted
    call(core, "POST", "/_sim/reset")
    assert call(core, "GET", "/_sim/provider-batches")[1]["lines"] == 0


def test_a_refused_submit_says_when_to_try_again_when_told_to(core: SimulatorCore) -> None:
    call(core, "POST", "/_sim/provider-batches", {"submit_failure": "rate_limited", "retry_after": 2})
    file_id = upload(core, [chat_line("a", "x")])
    body = json.dumps({"input_file_id": file_id, "endpoint": CHAT, "completion_window": "24h"}).encode()
    reply = core.handle("POST", "/v1/batches", {}, body)
    assert reply is not None and reply.status == 429 and ("Retry-After", "2") in reply.headers
    assert call(core, "GET", "/_sim/provider-batches")[1]["lines"] == 0
