"""Finalize at any allowed size: result objects written to S3 part by part (multipart
uploads), resumed where a finalize that died or ran out of time stopped."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import moto.s3.models
import pytest
from batchgw.api import batches, files
from batchgw.deps import Deps
from batchgw.domain.chains import decode
from batchgw.domain.files import file_key
from batchgw.domain.principal import Principal
from batchgw.run import ending, lifecycle
from batchgw.run.chain import run_message
from batchgw.storage import aws
from batchgw.storage.blobs import export_key

from functions.api import handler as api
from local.simulator import Simulator
from tests.integration.conftest import chat_request, make_deps, receive_all
from tests.support import FakeClock, LambdaContext, http_event

pytestmark = pytest.mark.usefixtures("aws_env")

ALICE = Principal(user_id="user-alice", role="internal", key_id="key_local_alice")
BOUNDARY = "pArTbOuNdArY"
PART_BYTES = 2048


@pytest.fixture
def small_parts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(moto.s3.models, "S3_UPLOAD_PART_MIN_SIZE", 1)


def line(i: int) -> bytes:
    fault = " [[sim status=400]]" if i % 5 == 0 else ""
    body = {"model": "sim-chat", "messages": [{"role": "user", "content": f"request {i} {'x' * 300}{fault}"}]}
    return json.dumps(
        {"custom_id": f"r-{i}", "method": "POST", "url": "/v1/chat/completions", "body": body}
    ).encode()


def file_batch(deps: Deps, n: int) -> str:
    data = b"\n".join(line(i) for i in range(n)) + b"\n"
    body = (
        (
            f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="purpose"\r\n\r\nbatch\r\n'
            f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="file"; filename="in.jsonl"\r\n\r\n'
        ).encode()
        + data
        + f"\r\n--{BOUNDARY}--\r\n".encode()
    )
    upload = files.upload_file(deps, ALICE, f"multipart/form-data; boundary={BOUNDARY}", body)
    raw = json.dumps(
        {"input_file_id": upload["id"], "endpoint": "/v1/chat/completions", "completion_window": "24h"}
    )
    batch = batches.create_batch(deps, ALICE, raw.encode())
    lifecycle.prepare(deps, batch["id"])
    for message in receive_all(deps):
        asyncio.run(run_message(deps, decode(message["Body"]), owner="w", deadline=deps.clock() + 900))
    lifecycle.park(deps, batch["id"], "t")
    return str(batch["id"])


def read(deps: Deps, key: str) -> list[dict[str, Any]]:
    return [json.loads(x) for x in deps.blobs.get(key).splitlines()]


def check_result_objects(deps: Deps, batch_id: str, n: int) -> dict[str, Any]:
    batch = batches.get_batch(deps, ALICE, batch_id)
    assert batch["status"] == "completed"
    failed = [f"r-{i}" for i in range(n) if i % 5 == 0]
    succeeded = [f"r-{i}" for i in range(n) if i % 5]
    assert [r["custom_id"] for r in read(deps, file_key(batch["output_file_id"]))] == succeeded
    assert [r["custom_id"] for r in read(deps, file_key(batch["error_file_id"]))] == failed
    assert [r["custom_id"] for r in read(deps, export_key(batch_id))] == [f"r-{i}" for i in range(n)]
    return batch


def test_result_files_are_written_in_many_parts(sim: Simulator, small_parts: None) -> None:
    deps = make_deps(sim, FakeClock(), BATCH_RESULT_PART_BYTES=str(PART_BYTES))
    batch_id = file_batch(deps, 40)
    assert ending.finalize(deps, batch_id)["status"] == "completed"
    batch = check_result_objects(deps, batch_id, 40)
    output = files.get_file(deps, ALICE, batch["output_file_id"])
    content = files.file_content(deps, ALICE, batch["output_file_id"])
    parts = int(str(content.sha256).rsplit("-", 1)[1])
    assert 5 <= parts <= output["bytes"] // PART_BYTES + 1  # a part per 2 KB or so
    head = aws.get_clients().s3.head_object(Bucket=deps.settings.data_bucket, Key=export_key(batch_id))
    assert "-" in head["ETag"]  # S3's ETag of an object joined from parts


def test_a_finalize_that_dies_mid_way_resumes_where_it_stopped(
    sim: Simulator, small_parts: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    deps = make_deps(sim, FakeClock(), BATCH_RESULT_PART_BYTES=str(PART_BYTES))
    batch_id = file_batch(deps, 40)
    real_upload = deps.blobs.upload_part
    uploads = 0

    def dies_on_the_seventh(*args: Any, **kwargs: Any) -> None:
        nonlocal uploads
        uploads += 1
        if uploads == 7:
            raise RuntimeError("the finalize's Lambda was killed")
        real_upload(*args, **kwargs)

    monkeypatch.setattr(deps.blobs, "upload_part", dies_on_the_seventh)
    with pytest.raises(RuntimeError):
        ending.finalize(deps, batch_id)
    record = deps.batches.get_record(batch_id)
    assert record is not None and record.status == "finalizing" and record.finalize_cursor
    written = sum(target["parts"] for target in record.finalize_cursor.values())
    assert written == 6
    assert ending.finalize(deps, batch_id)["status"] == "completed"  # the workflow's retry
    check_result_objects(deps, batch_id, 40)
    assert uploads > 7


def test_a_finalize_out_of_time_saves_its_cursor_and_the_next_one_goes_on(
    sim: Simulator, small_parts: None
) -> None:
    clock = FakeClock()
    deps = make_deps(sim, clock, BATCH_RESULT_PART_BYTES=str(PART_BYTES))
    batch_id = file_batch(deps, 40)
    assert ending.finalize(deps, batch_id, deadline=clock() - 1) == {
        "status": "finalizing",
        "purge_at": None,
    }
    assert batches.get_batch(deps, ALICE, batch_id)["status"] == "finalizing"
    assert ending.finalize(deps, batch_id, deadline=clock() + 600)["status"] == "completed"
    check_result_objects(deps, batch_id, 40)


def test_an_inline_batch_also_reads_finalizing_while_its_output_is_written(
    sim: Simulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Spec 000 names ``finalizing`` for file batches; here an inline batch shows it too, while
    its output.jsonl is written (README, deliberate differences)."""
    clock = FakeClock()
    deps = make_deps(sim, clock)
    monkeypatch.setattr(api, "get_deps", lambda: deps)

    def status_over_http(batch_id: str) -> dict[str, Any]:
        answer = api.handler(http_event("GET", f"/v1/batches/{batch_id}"), LambdaContext())  # type: ignore[arg-type]
        assert answer["statusCode"] == 200
        return dict(json.loads(answer["body"]))

    requests = [chat_request(f"q-{i}", f"hello {i}") for i in range(3)]
    created = api.handler(http_event("POST", "/v1/batches", body={"requests": requests}), LambdaContext())  # type: ignore[arg-type]
    batch_id = json.loads(created["body"])["id"]
    lifecycle.prepare(deps, batch_id)
    for message in receive_all(deps):
        asyncio.run(run_message(deps, decode(message["Body"]), owner="w", deadline=clock() + 900))
    lifecycle.park(deps, batch_id, "t")
    seen = [status_over_http(batch_id)["status"]]
    ending.finalize(deps, batch_id, deadline=clock() - 1)  # the output is still being written
    finalizing = status_over_http(batch_id)
    seen.append(finalizing["status"])
    ending.finalize(deps, batch_id)
    done = status_over_http(batch_id)
    seen.append(done["status"])
    assert seen == ["in_progress", "finalizing", "completed"]
    assert finalizing["finalizing_at"] is not None and done["finalizing_at"] == finalizing["finalizing_at"]
    assert done["input_file_id"] is None and done["output_file_id"] is None  # an inline batch
