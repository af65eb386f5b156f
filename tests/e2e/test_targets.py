"""Every target, inline and from a file, through the local stack; translation; 410s."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anthropic
import httpx
import pytest
from openai import OpenAI

from local.run import LocalStack
from tests.e2e.conftest import Api
from tests.support import wait_for

pytestmark = pytest.mark.e2e
FINAL = ("completed", "failed", "expired", "cancelled")
V1, V2 = "2023-06-01", "2026-10-21"


def create(api: Api, requests: list[dict[str, Any]], version: str | None = None) -> httpx.Response:
    headers = {"anthropic-version": version} if version else {}
    return api.http.post("/batches", json={"requests": requests}, headers=headers)


def run(api: Api, requests: list[dict[str, Any]], version: str | None = None) -> list[dict[str, Any]]:
    resp = create(api, requests, version)
    assert resp.status_code == 200, resp.text
    done = api.wait_final(resp.json()["id"])
    assert done["status"] == "completed", done
    return api.results(done["id"])


def message(custom_id: str, text: str, model: str = "sim-claude", **extra: Any) -> dict[str, Any]:
    body = {"model": model, "max_tokens": 64, "messages": [{"role": "user", "content": text}], **extra}
    return {"custom_id": custom_id, "url": "/v1/messages", "body": body}


# --- embeddings -------------------------------------------------------------------------------


def test_embeddings_inline_take_strings_arrays_and_tokens(alice: Api) -> None:
    inputs: list[Any] = ["one text", ["two", "texts"], [1, 2, 3], [[4, 5], [6]]]
    requests = [
        {
            "custom_id": f"e-{i}",
            "url": "/v1/embeddings",
            "body": {"model": "sim-embed", "input": value, "dimensions": 4},
        }
        for i, value in enumerate(inputs)
    ]
    results = run(alice, requests)
    counts = [len(r["response"]["body"]["data"]) for r in results]
    assert counts == [1, 2, 1, 2]
    first = results[0]["response"]["body"]
    assert first["object"] == "list" and len(first["data"][0]["embedding"]) == 4


def test_large_embeddings_come_a_few_to_a_page(alice: Api) -> None:
    requests = [
        {
            "custom_id": f"big-{i}",
            "url": "/v1/embeddings",
            "body": {"model": "sim-embed", "input": f"text {i}", "dimensions": 8192},
        }
        for i in range(40)
    ]
    resp = create(alice, requests)
    alice.wait_final(resp.json()["id"])
    page = alice.http.get(f"/batches/{resp.json()['id']}/results", params={"limit": 100}).json()
    assert 0 < len(page["data"]) < 40 and page["has_more"] is True  # ~170 KB each, 5 MiB a page
    results = alice.results(resp.json()["id"])
    assert [r["custom_id"] for r in results] == [f"big-{i}" for i in range(40)]
    assert all(r["status"] == "completed" for r in results)


def test_embedding_requests_are_checked_as_the_endpoint_would(alice: Api) -> None:
    bad = create(alice, [{"custom_id": "x", "url": "/v1/embeddings", "body": {"model": "sim-embed"}}])
    assert bad.status_code == 400 and "requests[0] (custom_id 'x')" in bad.json()["error"]["message"]
    wrong = create(
        alice, [{"custom_id": "y", "url": "/v1/embeddings", "body": {"model": "sim-chat", "input": "a"}}]
    )
    assert wrong.status_code == 400


# --- responses --------------------------------------------------------------------------------


def test_responses_inline_return_response_objects(alice: Api) -> None:
    requests = [
        {"custom_id": "r-1", "url": "/v1/responses", "body": {"model": "sim-chat", "input": "respond please"}}
    ]
    [result] = run(alice, requests)
    body = result["response"]["body"]
    assert body["object"] == "response" and body["status"] == "completed"
    assert "respond please" in body["output"][0]["content"][0]["text"]


@pytest.mark.parametrize(
    "extra",
    [
        {"store": True},
        {"previous_response_id": "resp_1"},
        {"background": True},
        {"stream": True},
        {"conversation": "conv_1"},
        {"tools": [{"type": "web_search"}]},
        {"prompt_cache_key": "k"},
    ],
)
def test_responses_that_are_not_independent_are_refused(alice: Api, extra: dict[str, Any]) -> None:
    body = {"model": "sim-chat", "input": "x", **extra}
    resp = create(alice, [{"custom_id": "r", "url": "/v1/responses", "body": body}])
    assert resp.status_code == 400, resp.text


# --- messages ---------------------------------------------------------------------------------


def test_a_messages_batch_runs_under_its_version(alice: Api) -> None:
    resp = create(alice, [message("m-1", "hello claude")], V1)
    assert resp.status_code == 200 and resp.json()["anthropic_version"] == V1
    done = alice.wait_final(resp.json()["id"])
    [result] = alice.results(done["id"])
    body = result["response"]["body"]
    assert body["type"] == "message" and body["content"][0]["text"] == "echo: hello claude"
    assert done["anthropic_version"] == V1 and done["cost_usd"] > 0


@pytest.mark.parametrize(
    ("requests", "version", "headers"),
    [
        ([message("a", "no version")], None, {}),
        (
            [
                {
                    "custom_id": "b",
                    "body": {"model": "sim-chat", "messages": [{"role": "user", "content": "x"}]},
                }
            ],
            V1,
            {},
        ),
        ([message("c", "unknown version")], "2020-01-01", {}),
        ([message("d", "sampling", temperature=0.5)], V2, {}),
        ([message("e", "field", anthropic_version=V1)], V1, {}),
        ([message("f", "beta")], V1, {"anthropic-beta": "some-beta"}),
        (
            [message("g", "server tool", tools=[{"type": "web_search_20250305", "name": "web_search"}])],
            V1,
            {},
        ),
        ([message("h", "mcp", mcp_servers=[{"type": "url", "url": "https://x", "name": "x"}])], V1, {}),
        ([message("i", "no max", max_tokens=None)], V1, {}),
        (
            [
                message(
                    "j",
                    "thinking on a chat route",
                    model="sim-chat-only",
                    thinking={"type": "enabled", "budget_tokens": 1024},
                )
            ],
            V1,
            {},
        ),
    ],
)
def test_messages_refusals(
    alice: Api, requests: list[dict[str, Any]], version: str | None, headers: dict[str, str]
) -> None:
    if requests[0]["body"].get("max_tokens", 0) is None:
        del requests[0]["body"]["max_tokens"]
    all_headers = {**headers, **({"anthropic-version": version} if version else {})}
    resp = alice.http.post("/batches", json={"requests": requests}, headers=all_headers)
    assert resp.status_code == 400, resp.text


def test_thinking_is_accepted_where_the_route_speaks_messages(alice: Api) -> None:
    extra = {"thinking": {"type": "enabled", "budget_tokens": 1024}, "max_tokens": 2048}
    assert create(alice, [message("t", "think", **extra)], V1).status_code == 200


def test_a_translated_messages_request_answers_like_the_native_model(alice: Api) -> None:
    shared = {"system": "be brief", "stop_sequences": ["STOP"], "temperature": 0.2}
    native, translated = (
        run(alice, [message("n", "say this then STOP and more", model=model, **shared)], V1)[0]["response"][
            "body"
        ]
        for model in ("sim-claude", "sim-chat-only")
    )
    for field in ("type", "role", "content", "stop_reason", "stop_sequence", "usage"):
        assert translated[field] == native[field], field
    assert translated["model"] == "sim-chat-only" and translated["id"].startswith("msg_")

    tools = [{"name": "lookup", "description": "find", "input_schema": {"type": "object", "properties": {}}}]
    native_tool, translated_tool = (
        run(alice, [message("t", "use it [[sim tool]]", model=model, tools=tools)], V1)[0]["response"]["body"]
        for model in ("sim-claude", "sim-chat-only")
    )
    assert translated_tool["stop_reason"] == native_tool["stop_reason"] == "tool_use"
    strip = [{k: v for k, v in block.items() if k != "id"} for block in native_tool["content"]]
    assert [{k: v for k, v in b.items() if k != "id"} for b in translated_tool["content"]] == strip


def test_reading_a_messages_batch_needs_no_version(alice: Api) -> None:
    resp = create(alice, [message("r", "read me")], V2)
    batch_id = resp.json()["id"]
    alice.wait_final(batch_id)
    for path in (
        f"/batches/{batch_id}",
        f"/batches/{batch_id}/results",
        f"/batches/{batch_id}/output.jsonl",
        "/batches",
    ):
        assert alice.http.get(path).status_code == 200


# --- from files ---------------------------------------------------------------------------------


def test_every_target_runs_from_a_file_through_the_sdk(stack: LocalStack, tmp_path: Path) -> None:
    client = OpenAI(base_url=stack.api_url, api_key="sk-local-alice", max_retries=0)
    cases = [
        ("/v1/embeddings", {"model": "sim-embed", "input": "embed me"}, None, "list"),
        ("/v1/responses", {"model": "sim-chat", "input": "respond"}, None, "response"),
        (
            "/v1/messages",
            {"model": "sim-claude", "max_tokens": 16, "messages": [{"role": "user", "content": "hi"}]},
            V1,
            "message",
        ),
        (
            "/v1/messages",
            {"model": "sim-chat-only", "max_tokens": 16, "messages": [{"role": "user", "content": "hi"}]},
            V2,
            "message",
        ),
    ]
    for endpoint, body, version, kind in cases:
        path = tmp_path / "in.jsonl"
        path.write_text(
            json.dumps({"custom_id": "only", "method": "POST", "url": endpoint, "body": body}) + "\n"
        )
        upload = client.files.create(file=path.open("rb"), purpose="batch")
        extra = {"extra_headers": {"anthropic-version": version}} if version else {}
        batch = client.batches.create(
            input_file_id=upload.id,
            endpoint=endpoint,  # type: ignore[arg-type]
            completion_window="24h",
            **extra,
        )
        done = wait_for(
            lambda b=batch: (x := client.batches.retrieve(b.id)).status in FINAL and x,
            timeout=60,
            what=f"{endpoint} batch",
        )
        assert done.status == "completed", (endpoint, done.errors)
        assert done.output_file_id is not None
        [out] = [json.loads(x) for x in client.files.content(done.output_file_id).text.splitlines()]
        found = out["response"]["body"].get("object") or out["response"]["body"].get("type")
        assert found == kind, (endpoint, out)


# --- the retired Message Batches API -------------------------------------------------------------


def test_the_message_batches_routes_answer_410_to_anyone(stack: LocalStack) -> None:
    base = stack.api_url.removesuffix("/v1")
    for method, path in [
        ("POST", "/v1/messages/batches"),
        ("GET", "/v1/messages/batches"),
        ("GET", "/v1/messages/batches/msgbatch_1"),
        ("POST", "/v1/messages/batches/x/cancel"),
        ("DELETE", "/anthropic/v1/messages/batches/x"),
        ("GET", "/v1/messages/batches/x/results"),
    ]:
        resp = httpx.request(method, base + path)
        assert resp.status_code == 410, (method, path)
        assert "/v1/batches" in resp.json()["error"]["message"]


def test_the_anthropic_sdk_message_batches_call_gets_the_410_note(stack: LocalStack) -> None:
    client = anthropic.Anthropic(
        base_url=stack.api_url.removesuffix("/v1"), api_key="sk-local-alice", max_retries=0
    )
    with pytest.raises(anthropic.APIStatusError) as gone:
        client.messages.batches.create(
            requests=[
                {
                    "custom_id": "a",
                    "params": {
                        "model": "sim-claude",
                        "max_tokens": 10,
                        "messages": [{"role": "user", "content": "hi"}],
                    },
                }
            ]
        )
    assert gone.value.status_code == 410
    assert "/v1/batches" in str(gone.value)
