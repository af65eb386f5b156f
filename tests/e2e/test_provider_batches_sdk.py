"""Provider-native batches through the unmodified OpenAI SDK on the local stack: a file batch
in ``provider`` mode runs on the simulator's OpenAI and Anthropic batch APIs and ends with
the same result lines as the same file run by the gateway, at the batch price, without a
provider id in any answer or result file."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from openai import OpenAI

from local.run import LocalStack
from tests.e2e.test_files import wait_batch, write
from tests.support import wait_for

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def client(stack: LocalStack) -> OpenAI:
    return OpenAI(base_url=stack.api_url, api_key="sk-local-alice", max_retries=0)


def run_file(
    client: OpenAI, path: Path, endpoint: str, mode: str
) -> tuple[Any, list[dict[str, Any]], list[str]]:
    upload = client.files.create(file=path.open("rb"), purpose="batch")
    batch = client.batches.create(
        input_file_id=upload.id,
        endpoint=endpoint,  # type: ignore[arg-type]
        completion_window="24h",
        extra_body={"execution_mode": mode},
    )
    done = wait_batch(client, batch.id)
    assert done.status == "completed"
    files = [client.files.content(f).text for f in (done.output_file_id, done.error_file_id) if f]
    lines = [json.loads(x) for text in files for x in text.splitlines()]
    return done, sorted(lines, key=lambda x: x["custom_id"]), files


def comparable(line: dict[str, Any]) -> Any:
    """A result line without what differs from run to run (ids, timestamps)."""
    response = line["response"]
    body = (
        None
        if response is None
        else {k: v for k, v in response["body"].items() if k not in ("id", "created")}
    )
    return (
        line["custom_id"],
        None if response is None else response["status_code"],
        body,
        line["error"] and line["error"]["code"],
    )


@pytest.mark.parametrize(
    ("endpoint", "model"), [("/v1/chat/completions", "sim-chat"), ("/v1/messages", "sim-claude")]
)
def test_a_provider_mode_file_batch_ends_with_the_gateways_results_at_the_batch_price(
    client: OpenAI, stack: LocalStack, tmp_path: Path, endpoint: str, model: str
) -> None:
    httpx.post(f"{stack.sim_url}/_sim/reset").raise_for_status()
    extra = {"max_tokens": 40} if endpoint == "/v1/messages" else {}
    lines = []
    for i in range(5):
        text = f"question {i}" + (" [[sim status=400]]" if i == 3 else "")
        body = {"model": model, "messages": [{"role": "user", "content": text}], **extra}
        lines.append(json.dumps({"custom_id": f"p-{i}", "method": "POST", "url": endpoint, "body": body}))
    path = write(tmp_path, lines)
    sdk = (
        client
        if endpoint != "/v1/messages"
        else client.with_options(default_headers={"anthropic-version": "2023-06-01"})
    )
    on_provider, provider_lines, raw = run_file(sdk, path, endpoint, "provider")
    here, gateway_lines, _ = run_file(sdk, path, endpoint, "gateway")
    assert [comparable(x) for x in provider_lines] == [comparable(x) for x in gateway_lines]
    shown = on_provider.model_dump()
    assert shown["execution_mode"] == "provider" and here.model_dump()["execution_mode"] == "gateway"
    assert shown["usage"]["input_tokens"] == here.model_dump()["usage"]["input_tokens"]
    assert shown["usage"]["cost"] * 2 == pytest.approx(here.model_dump()["usage"]["cost"])
    listed = httpx.get(f"{stack.sim_url}/_sim/provider-batches").json()
    provider_ids = [b["id"] for b in listed["batches"]] + listed["files"] + listed["deleted_files"]
    assert provider_ids
    # What the provider batch left at the provider was deleted once its lines were recorded.
    if endpoint == "/v1/messages":
        assert [b["deleted"] for b in listed["batches"]] == [True]
    else:
        assert listed["files"] == [] and len(listed["deleted_files"]) == 3  # input, output, errors
    seen = json.dumps(shown) + "".join(raw)
    assert not [pid for pid in provider_ids if pid in seen]
    assert not re.search(r'"r\d+"', "".join(raw))  # the provider-side custom ids stay there too


def test_a_cancel_reaches_the_provider_batch_at_once_not_at_its_next_poll(
    client: OpenAI, stack: LocalStack, tmp_path: Path
) -> None:
    sim = httpx.Client(base_url=stack.sim_url)
    sim.post("/_sim/reset").raise_for_status()
    sim.post("/_sim/provider-batches", json={"auto_seconds": None}).raise_for_status()  # held until told
    body = {"model": "sim-chat", "messages": [{"role": "user", "content": "hi"}]}
    lines = [
        json.dumps({"custom_id": f"c-{i}", "method": "POST", "url": "/v1/chat/completions", "body": body})
        for i in range(4)
    ]
    upload = client.files.create(file=write(tmp_path, lines).open("rb"), purpose="batch")
    batch = client.batches.create(
        input_file_id=upload.id,
        endpoint="/v1/chat/completions",
        completion_window="24h",
        extra_body={"execution_mode": "provider"},
    )

    def held(polls: int) -> dict[str, Any] | None:
        listed = sim.get("/_sim/provider-batches").json()["batches"]
        return listed[0] if listed and listed[0]["polls"] >= polls else None

    # Polled 1, 1, 2, 4 and 8 s apart: after the fifth poll the next is 16 s away.
    provider_batch = wait_for(lambda: held(5), timeout=90, interval=0.2, what="the fifth poll")
    sim.post(f"/_sim/provider-batches/{provider_batch['id']}", json={"action": "partial", "lines": 2})
    asked = time.monotonic()
    client.batches.cancel(batch.id)
    wait_for(
        lambda: "cancelling_at" in sim.get("/_sim/provider-batches").json()["batches"][0]["times"],
        timeout=30,
        interval=0.1,
        what="the provider batch's cancel",
    )
    took = time.monotonic() - asked
    print(f"the cancel reached the provider {took:.2f} s after it was asked")  # shown with -s
    assert took < 8, f"the cancel reached the provider {took:.1f} s after it was asked: at a poll"
    done = wait_batch(client, batch.id)
    assert done.status == "cancelled"
    assert done.request_counts is not None
    assert (done.request_counts.completed, done.request_counts.total) == (2, 4)
    sim.post("/_sim/provider-batches", json={"auto_seconds": 0}).raise_for_status()


def test_auto_runs_a_file_batch_on_the_provider_where_that_is_cheaper_and_says_why(
    client: OpenAI, stack: LocalStack, tmp_path: Path
) -> None:
    httpx.post(f"{stack.sim_url}/_sim/reset").raise_for_status()
    ran = {}
    for model in ("sim-chat", "sim-chat-only"):  # a route with a batch price; none
        body = {"model": model, "messages": [{"role": "user", "content": "hi"}]}
        line = json.dumps({"custom_id": "a-0", "method": "POST", "url": "/v1/chat/completions", "body": body})
        path = write(tmp_path, [line], f"{model}.jsonl")
        upload = client.files.create(file=path.open("rb"), purpose="batch")
        batch = client.batches.create(
            input_file_id=upload.id,
            endpoint="/v1/chat/completions",
            completion_window="24h",
            extra_body={"execution_mode": "auto"},
        )
        done = wait_batch(client, batch.id).model_dump()
        assert done["status"] == "completed"
        ran[model] = (done["execution_mode"], done["execution_mode_reason"])
    assert ran == {
        "sim-chat": ("provider", "provider_batch_price_cheaper"),
        "sim-chat-only": ("gateway", "no_provider_batch_route"),
    }
    assert len(httpx.get(f"{stack.sim_url}/_sim/provider-batches").json()["batches"]) == 1
