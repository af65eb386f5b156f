"""The primary spec's rules where the gateway once differed from it, one test per rule,
through the public interface (HTTP and the SDKs) on the local stack."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from openai import OpenAI

from local.run import LocalStack
from tests.e2e.conftest import Api, chat
from tests.support import wait_for

pytestmark = pytest.mark.e2e


@pytest.fixture
def client(stack: LocalStack) -> OpenAI:
    return OpenAI(base_url=stack.api_url, api_key="sk-local-alice", max_retries=0)


def ended(api: Api, n: int, text: str = "paged") -> list[str]:
    ids = [api.create([chat(f"p-{i}", f"{text} {i}")]).json()["id"] for i in range(n)]
    for batch_id in ids:
        api.wait_final(batch_id)
    return ids


# 3. List paging survives deletion.
def test_rule_3_list_paging_goes_on_after_the_batch_named_by_after_was_deleted(admin: Api) -> None:
    ids = ended(admin, 3)  # the admin key keeps this listing to itself
    newest_first = list(reversed(ids))
    first = admin.http.get("/batches", params={"limit": 1}).json()
    assert [b["id"] for b in first["data"]] == newest_first[:1]
    assert admin.http.delete(f"/batches/{newest_first[0]}").status_code == 200
    wait_for(lambda: admin.http.get(f"/batches/{newest_first[0]}").status_code == 404, timeout=20)
    after = admin.http.get("/batches", params={"limit": 2, "after": newest_first[0]})
    assert after.status_code == 200
    assert [b["id"] for b in after.json()["data"]] == newest_first[1:3]


def test_rule_3_file_list_paging_goes_on_after_the_file_named_by_after_was_deleted(
    client: OpenAI, tmp_path: Path
) -> None:
    path = tmp_path / "f.jsonl"
    path.write_text(
        json.dumps(
            {
                "custom_id": "f",
                "method": "POST",
                "url": "/v1/chat/completions",
                "body": {"model": "sim-chat", "messages": [{"role": "user", "content": "x"}]},
            }
        )
        + "\n"
    )
    made = [client.files.create(file=path.open("rb"), purpose="batch").id for _ in range(3)]
    client.files.delete(made[1])
    page = client.files.list(after=made[1], order="asc")
    assert made[2] in [f.id for f in page.data] and made[0] not in [f.id for f in page.data]


# 7. A byte-order mark at the start of a create body or an input file is accepted.
def test_rule_7_a_byte_order_mark_opening_a_create_body_or_a_file_is_accepted(
    alice: Api, client: OpenAI, tmp_path: Path
) -> None:
    body = b"\xef\xbb\xbf" + json.dumps({"requests": [chat("bom", "hello")]}).encode()
    created = alice.http.post("/batches", content=body, headers={"content-type": "application/json"})
    assert created.status_code == 200
    assert alice.wait_final(created.json()["id"])["request_counts"]["completed"] == 1
    path = tmp_path / "bom.jsonl"
    line = {
        "custom_id": "b",
        "method": "POST",
        "url": "/v1/chat/completions",
        "body": {"model": "sim-chat", "messages": [{"role": "user", "content": "x"}]},
    }
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps(line).encode() + b"\n")
    upload = client.files.create(file=path.open("rb"), purpose="batch")
    batch = client.batches.create(
        input_file_id=upload.id, endpoint="/v1/chat/completions", completion_window="24h"
    )
    done = wait_for(
        lambda: (b := client.batches.retrieve(batch.id)).status in ("completed", "failed") and b, timeout=60
    )
    assert (
        done.status == "completed" and done.request_counts is not None and done.request_counts.completed == 1
    )


# 8. Inline batches take the same windows as file batches.
@pytest.mark.parametrize(("window", "hours"), [("48h", 48), ("72h", 72), ("168h", 168)])
def test_rule_8_an_inline_batch_takes_the_file_batches_windows(alice: Api, window: str, hours: int) -> None:
    created = alice.create([chat("w", "windowed")], completion_window=window).json()
    assert created["completion_window"] == window
    assert created["expires_at"] - created["created_at"] == hours * 3600
    assert alice.create([chat("w", "x")], completion_window="12h").status_code == 400
