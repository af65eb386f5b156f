"""The file check's report through the official OpenAI SDK (issue 50): a file with several
problems fails validation once, listing every one at its line, and nothing runs."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
from openai import OpenAI

from local.run import LocalStack
from tests.support import wait_for

pytestmark = pytest.mark.e2e
CHAT = "/v1/chat/completions"


@pytest.fixture(scope="module")
def client(stack: LocalStack) -> OpenAI:
    return OpenAI(base_url=stack.api_url, api_key="sk-local-alice", max_retries=0)


def line(custom_id: str, model: str = "sim-chat", **fields: object) -> str:
    body = {"model": model, "messages": [{"role": "user", "content": "hi"}], **fields}
    return json.dumps({"custom_id": custom_id, "method": "POST", "url": CHAT, "body": body})


def failed_batch(client: OpenAI, tmp_path: Path, lines: list[str]):  # type: ignore[no-untyped-def]
    path = tmp_path / "requests.jsonl"
    path.write_text("\n".join(lines) + "\n")
    upload = client.files.create(file=path.open("rb"), purpose="batch")
    batch = client.batches.create(input_file_id=upload.id, endpoint=CHAT, completion_window="24h")
    done = wait_for(
        lambda: (b := client.batches.retrieve(batch.id)).status not in ("validating", "in_progress") and b,
        timeout=60,
        interval=0.2,
        what=f"{batch.id} to leave validating",
    )
    assert done.status == "failed", done
    return done


def test_four_problems_on_four_lines_are_four_errors_in_one_round(
    client: OpenAI, stack: LocalStack, tmp_path: Path
) -> None:
    httpx.post(f"{stack.sim_url}/_sim/reset")
    lines = [line(f"q-{i}") for i in range(1, 7)]
    lines[1] = '{"custom_id": "q-2", "method": "POST",'  # line 2: not JSON
    lines[2] = line("q-1")  # line 3: the custom_id of line 1
    lines[3] = line("q-4", model="sim-chat-only")  # line 4: another model
    lines[4] = line("q-5", temperature=9)  # line 5: a body the endpoint refuses
    done = failed_batch(client, tmp_path, lines)
    assert done.errors is not None and done.errors.object == "list"
    found = [(e.line, e.code, e.param) for e in done.errors.data or []]
    assert found == [
        (2, "invalid_json", None),
        (3, "duplicate_custom_id", None),
        (4, "invalid_body", "body.model"),
        (5, "invalid_body", "body.temperature"),
    ]
    assert all(e.message for e in done.errors.data or [])
    assert "4 problems, listed in 'errors'" in (done.model_extra or {})["error"]["message"]
    stats = httpx.get(f"{stack.sim_url}/_sim/stats").json()["models"]
    assert sum(m["requests"] for m in stats.values()) == 0  # nothing ran


def test_problems_past_the_first_hundred_are_counted_in_the_message(client: OpenAI, tmp_path: Path) -> None:
    done = failed_batch(client, tmp_path, ["[]"] * 130 + [line("q-1")])
    assert [e.line for e in done.errors.data or []] == list(range(1, 101))  # type: ignore[union-attr]
    message = (done.model_extra or {})["error"]["message"]
    assert "130 problems" in message and "the first 100" in message and "30 more" in message
