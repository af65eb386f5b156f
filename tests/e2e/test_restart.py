"""The local stack keeps its state across a restart (``local.state``, ``local.resume``).

Each test runs two stacks, one after the other, on one state directory of its own (never the
default one ``make run`` uses): the second restores what the first left, and every batch the
first was running ends, each request counted once. A clean stop saves everything; a stack
killed outright (SIGKILL of every process, moto included) restarts from its last checkpoint.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import boto3
import pytest
from moto import mock_aws

from local.env import snapshot_path
from local.run import LocalStack
from local.state import apply, read
from tests.e2e.conftest import FINAL, Api, chat, root, stack_for
from tests.support import wait_for

# Short leases and reconciles: the requests the first stack's dead workers held are taken
# over soon after the restart.
ENV = {
    "BATCH_MODEL_CONCURRENCY": "2",
    "BATCH_LEASE_SECONDS": "8",
    "BATCH_UPSTREAM_TIMEOUT_SECONDS": "5",
    "BATCH_WORKER_TIMEOUT_SECONDS": "30",
    "BATCH_RETRY_BASE_SECONDS": "0.2",
    "BATCH_RETRY_MAX_SECONDS": "1",
    "BATCH_RECONCILE_SECONDS": "2",
    "BATCH_SLOT_WAIT_SECONDS": "0.5",
    "BATCH_PREPARE_LEASE_SECONDS": "4",
    "BATCH_MODEL_PAUSE_AFTER_FAILURES": "1000",
}
CHECKPOINT_SECONDS = 1.0
SLOW = "[[sim latency_ms=2500]]"  # 2 at a time: a batch of 8 runs for 10 s
# Two batches running at once each get a model of their own (each model runs 2 requests at a
# time): on one model, one batch could take every slot and end before the other has begun.
MODELS = ("sim-chat", "sim-chat-only")
END_TIMEOUT = 150.0


def stack_on(tmp_path_factory: pytest.TempPathFactory, state_dir: Path, name: str) -> LocalStack:
    return stack_for(
        tmp_path_factory,
        f"restart-{name}",
        ENV,
        workers=2,
        state_dir=state_dir,
        checkpoint_seconds=CHECKPOINT_SECONDS,
    )


def new_account(stack: LocalStack) -> tuple[str, str, str]:
    """A user made through /admin, and a key of theirs: (user id, key id, key)."""
    admin = root(stack, "sk-local-admin")
    user = admin.post(
        "/admin/users", json={"name": "restart", "email": "restart@example.com", "role": "internal"}
    )
    assert user.status_code == 200, user.text
    key = admin.post(f"/admin/users/{user.json()['id']}/keys", json={"name": "laptop"})
    assert key.status_code == 200, key.text
    return user.json()["id"], key.json()["id"], key.json()["key"]


def upload(api: Api, lines: list[str]) -> str:
    body = ("\n".join(lines) + "\n").encode()
    made = api.http.post("/files", files={"file": ("input.jsonl", body)}, data={"purpose": "batch"})
    assert made.status_code == 200, made.text
    return str(made.json()["id"])


def file_line(custom_id: str, text: str, model: str = "sim-chat") -> str:
    line = {
        "custom_id": custom_id,
        "method": "POST",
        "url": "/v1/chat/completions",
        **chat(custom_id, text, model),
    }
    return json.dumps(line)


def file_batch(api: Api, input_file: str) -> str:
    created = api.http.post(
        "/batches",
        json={"input_file_id": input_file, "endpoint": "/v1/chat/completions", "completion_window": "24h"},
    )
    assert created.status_code == 200, created.text
    return str(created.json()["id"])


def content(api: Api, file_id: str) -> str:
    answer = api.http.get(f"/files/{file_id}/content", follow_redirects=True)
    assert answer.status_code == 200, answer.text
    return answer.text


def mid_run(api: Api, batch_id: str) -> dict[str, Any]:
    """Wait until the batch has ended some of its requests, not all."""
    return wait_for(
        lambda: (b := api.batch(batch_id))["request_counts"]["completed"] >= 1 and b,
        timeout=60,
        interval=0.1,
        what=f"{batch_id} to be mid-run",
    )


def assert_counted_once(api: Api, batch_id: str, custom_ids: list[str]) -> dict[str, Any]:
    """The batch ended with each of its requests counted, and its result present, exactly once."""
    ended = api.wait_final(batch_id, timeout=END_TIMEOUT)
    counts = ended["request_counts"]
    assert counts["total"] == len(custom_ids)
    assert counts["completed"] + counts["failed"] == counts["total"], counts
    results = api.results(batch_id)
    assert sorted(r["custom_id"] for r in results) == sorted(custom_ids)
    return ended


def test_a_clean_restart_keeps_users_keys_settings_files_and_results_and_running_batches_end_counted_once(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    state_dir = tmp_path_factory.mktemp("restart-clean-state")
    slow_ids = [f"slow-{i}" for i in range(8)]
    file_ids = [f"line-{i}" for i in range(8)]
    with stack_on(tmp_path_factory, state_dir, "clean-first") as first:
        assert not first.restored
        user_id, key_id, key = new_account(first)
        admin = root(first, "sk-local-admin")
        assert admin.patch("/admin/config/BATCH_MIN_ROLE", json={"value": "free"}).status_code == 200
        api = Api(first, key)
        quick = [file_line("done-0", "quick one"), file_line("done-1", "quick two")]
        finished = file_batch(api, upload(api, quick))
        done = api.wait_final(finished)
        assert done["status"] == "completed"
        output_before = content(api, done["output_file_id"])
        lines = [file_line(c, f"file {c} {SLOW}", MODELS[1]) for c in file_ids]
        input_file = upload(api, lines)
        from_file = file_batch(api, input_file)
        inline = api.create([chat(c, f"{c} {SLOW}", MODELS[0]) for c in slow_ids]).json()["id"]
        mid_run(api, inline)
        mid_run(api, from_file)
        assert api.batch(from_file)["status"] not in FINAL
        assert api.batch(inline)["status"] not in FINAL
    assert snapshot_path(state_dir).exists()  # saved at the clean stop

    with stack_on(tmp_path_factory, state_dir, "clean-second") as second:
        assert second.restored
        admin = root(second, "sk-local-admin")
        users = admin.get(f"/admin/users/{user_id}")
        assert users.status_code == 200, users.text
        keys = admin.get(f"/admin/users/{user_id}/keys").json()["data"]
        assert [k["id"] for k in keys] == [key_id]  # kept, and not doubled
        seeded = admin.get("/admin/users/user-alice/keys").json()["data"]
        assert [k["id"] for k in seeded] == ["key_local_alice"]  # not seeded twice
        settings = {s["name"]: s for s in admin.get("/admin/config").json()["data"]}
        assert settings["BATCH_MIN_ROLE"]["value"] == "free"
        api = Api(second, key)  # the new key still authenticates
        assert api.http.get(f"/files/{input_file}").status_code == 200
        assert content(api, input_file).splitlines() == lines

        assert assert_counted_once(api, inline, slow_ids)["status"] == "completed"
        assert assert_counted_once(api, from_file, file_ids)["status"] == "completed"
        assert sorted(r["custom_id"] for r in api.results(finished)) == ["done-0", "done-1"]
        assert content(api, done["output_file_id"]) == output_before
        second.check()


def test_a_killed_stack_restarts_from_its_last_checkpoint_and_every_batch_ends_counted_once(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    state_dir = tmp_path_factory.mktemp("restart-killed-state")
    slow_ids = [f"slow-{i}" for i in range(12)]
    with stack_on(tmp_path_factory, state_dir, "killed-first") as first:
        api = Api(first, "sk-local-bob")
        batches = [
            api.create([chat(c, f"{c} {SLOW}", model) for c in slow_ids]).json()["id"] for model in MODELS
        ]
        for batch_id in batches:
            mid_run(api, batch_id)
        seen = time.time()
        # A checkpoint taken after the batches were seen running (one a second while they run).
        wait_for(
            lambda: snapshot_path(state_dir).stat().st_mtime > seen + 0.1,
            timeout=30,
            interval=0.1,
            what="a checkpoint after the batches ran",
        )
        first.kill()  # every process at once: no state saved at the end
        saved = statuses_in_snapshot(state_dir, batches)
        assert all(status not in FINAL for status in saved), saved

    with stack_on(tmp_path_factory, state_dir, "killed-second") as second:
        assert second.restored
        api = Api(second, "sk-local-bob")
        for batch_id in batches:
            assert_counted_once(api, batch_id, slow_ids)
        second.check()


def statuses_in_snapshot(state_dir: Path, batch_ids: list[str]) -> list[str]:
    """The batches' statuses as the last checkpoint saved them (read through a stack-less
    moto: the snapshot restored into an in-process one)."""
    saved = read(snapshot_path(state_dir))
    assert saved is not None
    with mock_aws():
        apply(saved)
        table = boto3.resource("dynamodb", region_name="us-east-1").Table("batchgw-batches")
        return [str(table.get_item(Key={"pk": b, "sk": "meta"})["Item"]["status"]) for b in batch_ids]
