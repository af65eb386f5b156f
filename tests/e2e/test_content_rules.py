"""Over real HTTP on the local stack: an administrator's read of another user's file content
is audited as the Prompts view's is (``batch.requests.read`` against the owner), and refused
with 403 once DB_STORE_FULL_CONTENT is off; a free user (``sk-local-free``) is refused on the
console's routes that make a file or a batch with the error the public routes give."""

from __future__ import annotations

import json
from collections.abc import Iterator

import httpx
import pytest

from local.run import LocalStack
from tests.e2e.conftest import Account, Api, chat, root
from tests.support import wait_for

FREE = "sk-local-free"


def upload(api: Api, data: bytes) -> httpx.Response:
    return api.http.post("/files", files={"file": ("in.jsonl", data)}, data={"purpose": "batch"})


def jsonl(*custom_ids: str) -> bytes:
    lines = (
        {"method": "POST", "url": "/v1/chat/completions", **chat(custom_id, "my secret")}
        for custom_id in custom_ids
    )
    return b"".join(json.dumps(line).encode() + b"\n" for line in lines)


@pytest.fixture
def admin_root(stack: LocalStack) -> Iterator[httpx.Client]:
    client = root(stack, "sk-local-admin")
    yield client
    client.close()


def set_prompts_kept(admin_root: httpx.Client, file_id: str, kept: bool) -> None:
    """DB_STORE_FULL_CONTENT at runtime, waited for until the api answers by it."""
    admin_root.patch("/admin/config/DB_STORE_FULL_CONTENT", json={"value": kept}).raise_for_status()
    wanted = 200 if kept else 403
    wait_for(
        lambda: admin_root.get(f"/v1/files/{file_id}/content").status_code == wanted,
        timeout=30,
        interval=0.5,
        what=f"DB_STORE_FULL_CONTENT={kept} to apply",
    )


def test_an_admins_read_of_another_users_file_is_audited_and_refused_where_prompts_are_not_kept(
    alice: Api, admin_root: httpx.Client
) -> None:
    made = upload(alice, jsonl("s-1", "s-2"))
    assert made.status_code == 200, made.text
    file_id = made.json()["id"]
    read = admin_root.get(f"/v1/files/{file_id}/content")
    assert read.status_code == 200 and b"my secret" in read.content
    entries = admin_root.get("/admin/audit", params={"user": "user-alice", "limit": 100}).json()["data"]
    [entry] = [e for e in entries if e["target"] == file_id]
    assert (entry["action"], entry["actor"]) == ("batch.requests.read", "user-admin")

    try:
        set_prompts_kept(admin_root, file_id, False)
        refused = admin_root.get(f"/v1/files/{file_id}/content")
        assert (refused.status_code, refused.json()["error"]["code"]) == (403, "prompts_not_stored")
        own = alice.http.get(f"/files/{file_id}/content")
        assert own.status_code == 200 and b"my secret" in own.content
    finally:
        set_prompts_kept(admin_root, file_id, True)


def test_a_free_user_is_refused_on_the_consoles_file_and_batch_routes_as_on_the_public_ones(
    stack: LocalStack,
) -> None:
    free = Api(stack, FREE)
    free_root = root(stack, FREE)
    public = upload(free, jsonl("a"))
    assert public.status_code == 403, public.text
    # The role is checked first: any batch id, the free user's or not, is refused alike.
    exported = free_root.post("/console/api/batches/batch_none/export-unfinished")
    assert (exported.status_code, exported.json()) == (403, public.json())

    public = free.create([chat("a", "hi")])
    assert public.status_code == 403, public.text
    body = {"input_file_id": "file-none", "name": "n", "check": "c"}
    submitted = free_root.post("/console/api/batches", json=body, headers={"Idempotency-Key": "free-1"})
    assert (submitted.status_code, submitted.json()) == (403, public.json())

    # A user who made a batch while their role allowed it, and is free now: its unfinished
    # requests are not exported, as they could not be uploaded.
    account = Account(stack)
    made = account.api.create([chat("a", "[[sim status=400]]")])
    assert made.status_code == 200, made.text
    assert account.api.wait_final(made.json()["id"])["request_counts"]["failed"] == 1
    account.update(role="free")
    key = account.api.http.headers["Authorization"].removeprefix("Bearer ")
    refused = root(stack, key).post(f"/console/api/batches/{made.json()['id']}/export-unfinished")
    assert (refused.status_code, refused.json()) == (403, upload(account.api, jsonl("a")).json())
    assert account.api.http.get("/files").json()["data"] == []
