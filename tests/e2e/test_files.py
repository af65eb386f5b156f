"""File batches through the official OpenAI SDK, unmodified, against the local stack."""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import boto3
import httpx
import openai
import pytest
from batchgw.config import resources
from openai import OpenAI

from local.run import LocalStack
from tests.support import wait_for

pytestmark = pytest.mark.e2e
FINAL = ("completed", "failed", "expired", "cancelled")


@pytest.fixture(scope="module")
def client(stack: LocalStack) -> OpenAI:
    return OpenAI(base_url=stack.api_url, api_key="sk-local-alice", max_retries=0)


def line(custom_id: str, text: str, model: str = "sim-chat", url: str = "/v1/chat/completions") -> str:
    body = {"model": model, "messages": [{"role": "user", "content": text}]}
    return json.dumps({"custom_id": custom_id, "method": "POST", "url": url, "body": body})


def write(tmp_path: Path, lines: list[str], name: str = "requests.jsonl") -> Path:
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n")
    return path


def wait_batch(client: OpenAI, batch_id: str, timeout: float = 60):  # type: ignore[no-untyped-def]
    return wait_for(
        lambda: (b := client.batches.retrieve(batch_id)).status in FINAL and b,
        timeout=timeout,
        interval=0.2,
        what=f"{batch_id} to end",
    )


def test_the_sdk_file_flow_runs_a_batch_and_downloads_both_result_files(
    client: OpenAI, tmp_path: Path
) -> None:
    lines = [line(f"f-{i}", f"file question {i}") for i in range(6)] + [line("bad", "no [[sim status=400]]")]
    upload = client.files.create(file=write(tmp_path, lines).open("rb"), purpose="batch")
    assert upload.id.startswith("file-") and upload.purpose == "batch" and upload.bytes > 0
    batch = client.batches.create(
        input_file_id=upload.id,
        endpoint="/v1/chat/completions",
        completion_window="24h",
        metadata={"run": "sdk"},
    )
    assert batch.status == "validating" and batch.input_file_id == upload.id
    done = wait_batch(client, batch.id)
    assert done.status == "completed"
    assert done.request_counts is not None
    assert (done.request_counts.total, done.request_counts.completed, done.request_counts.failed) == (7, 6, 1)
    assert done.finalizing_at is not None and done.output_file_id and done.error_file_id

    output = [json.loads(x) for x in client.files.content(done.output_file_id).text.splitlines()]
    assert [o["custom_id"] for o in output] == [f"f-{i}" for i in range(6)]
    assert output[3]["response"]["body"]["choices"][0]["message"]["content"] == "echo: file question 3"
    assert set(output[0]) == {"id", "custom_id", "response", "error"}
    errors = [json.loads(x) for x in client.files.content(done.error_file_id).text.splitlines()]
    assert [(e["custom_id"], e["error"]["code"]) for e in errors] == [("bad", "invalid_request")]
    assert client.files.retrieve(done.output_file_id).purpose == "batch_output"
    listed = client.batches.list(limit=5)
    assert batch.id in [b.id for b in listed.data]


def test_a_result_file_is_the_same_bytes_and_etag_on_every_download(
    client: OpenAI, stack: LocalStack, tmp_path: Path
) -> None:
    upload = client.files.create(
        file=write(tmp_path, [line("e-1", "same bytes")]).open("rb"), purpose="batch"
    )
    batch = client.batches.create(
        input_file_id=upload.id, endpoint="/v1/chat/completions", completion_window="24h"
    )
    done = wait_batch(client, batch.id)
    assert done.output_file_id is not None and done.error_file_id is None
    url = f"{stack.api_url}/files/{done.output_file_id}/content"
    headers = {"Authorization": "Bearer sk-local-alice"}
    first, second = httpx.get(url, headers=headers), httpx.get(url, headers=headers)
    assert first.content == second.content
    assert first.headers["etag"] == second.headers["etag"] == f'"{hashlib.sha256(first.content).hexdigest()}"'


def test_a_file_with_bad_lines_fails_with_their_line_numbers_and_nothing_runs(
    client: OpenAI, stack: LocalStack, tmp_path: Path
) -> None:
    httpx.post(f"{stack.sim_url}/_sim/reset")
    lines = [line(f"v-{i}", f"fine {i}") for i in range(10)]
    lines[1] = "{not json"
    lines[4] = line("v-0", "duplicate id")
    lines[8] = line("v-8", "wrong url", url="/v1/embeddings")
    upload = client.files.create(file=write(tmp_path, lines).open("rb"), purpose="batch")
    batch = client.batches.create(
        input_file_id=upload.id, endpoint="/v1/chat/completions", completion_window="24h"
    )
    done = wait_batch(client, batch.id)
    assert done.status == "failed" and done.failed_at is not None
    assert done.errors is not None and done.errors.data is not None
    found = [(e.line, e.code) for e in done.errors.data]
    assert found == [(2, "invalid_json"), (5, "duplicate_custom_id"), (9, "invalid_url")]
    stats = httpx.get(f"{stack.sim_url}/_sim/stats").json()["models"]
    assert sum(m["requests"] for m in stats.values()) == 0


def test_a_large_file_arrives_through_the_uploads_api_in_parts(client: OpenAI, tmp_path: Path) -> None:
    padding = "x" * 2000
    lines = [line(f"big-{i}", f"{padding} {i}") for i in range(1500)]  # about 3.2 MB
    path = write(tmp_path, lines, "big.jsonl")
    upload = client.uploads.upload_file_chunked(
        file=path, mime_type="application/jsonl", purpose="batch", part_size=1024 * 1024
    )
    assert upload.status == "completed" and upload.file is not None
    assert upload.file.bytes == path.stat().st_size
    assert client.files.content(upload.file.id).content == path.read_bytes()


PART_LIMIT = 4 * 1024 * 1024  # BATCH_MAX_BODY_MB of the e2e stack, as the README says to keep part_size


def test_a_part_of_exactly_the_documented_size_is_accepted_and_the_file_round_trips(
    client: OpenAI, tmp_path: Path
) -> None:
    # The SDK wraps each part in multipart framing: the body is larger than the part.
    data = (line("p-0", "part") + "\n").encode()
    data += b"y" * (PART_LIMIT + 1000 - len(data))  # a first part of exactly 4 MiB, then 1,000 bytes
    path = tmp_path / "parts.jsonl"
    path.write_bytes(data)
    upload = client.uploads.upload_file_chunked(
        file=path, mime_type="application/jsonl", purpose="batch", part_size=PART_LIMIT
    )
    assert upload.status == "completed" and upload.file is not None and upload.file.bytes == len(data)
    assert client.files.content(upload.file.id).content == data


def test_a_part_one_byte_over_the_limit_is_413_naming_the_part_limit(client: OpenAI) -> None:
    upload = client.uploads.create(
        bytes=PART_LIMIT + 1, filename="over.jsonl", mime_type="application/jsonl", purpose="batch"
    )
    with pytest.raises(openai.APIStatusError) as refused:
        client.uploads.parts.create(upload.id, data=b"z" * (PART_LIMIT + 1))
    assert refused.value.status_code == 413
    message = refused.value.response.json()["error"]["message"]
    assert "An upload's part holds at most 4 MiB (4194304 bytes, BATCH_MAX_BODY_MB)" in message
    assert f"this one has {PART_LIMIT + 1} bytes" in message
    client.uploads.cancel(upload.id)


def test_a_filename_past_512_characters_is_refused_400_on_every_way_in(
    client: OpenAI, stack: LocalStack
) -> None:
    # A name of a few MB passed every body limit and failed its record's 400 KB in DynamoDB: a 500.
    name = "🙂" * 100_000
    with pytest.raises(openai.BadRequestError, match="at most 512"):
        client.files.create(file=(name, b"{}\n"), purpose="batch")
    for route, extra in (("files/presigned", {}), ("uploads", {"mime_type": "application/jsonl"})):
        refused = httpx.post(
            f"{stack.api_url}/{route}",
            json={"filename": "a" * 500_000, "purpose": "batch", "bytes": 10, **extra},
            headers={"Authorization": "Bearer sk-local-alice"},
        )
        assert (refused.status_code, refused.json()["error"]["param"]) == (400, "filename")
    kept = client.files.create(file=("中" * 512, b"{}\n"), purpose="batch")
    assert kept.filename == "中" * 512


def test_deleting_the_input_file_does_not_affect_its_batch(client: OpenAI, tmp_path: Path) -> None:
    upload = client.files.create(file=write(tmp_path, [line("d-1", "kept")]).open("rb"), purpose="batch")
    batch = client.batches.create(
        input_file_id=upload.id, endpoint="/v1/chat/completions", completion_window="24h"
    )
    assert client.files.delete(upload.id).deleted is True
    with pytest.raises(openai.NotFoundError):
        client.files.retrieve(upload.id)
    assert wait_batch(client, batch.id).request_counts.completed == 1  # type: ignore[union-attr]


def test_bad_create_calls_are_refused(client: OpenAI, tmp_path: Path) -> None:
    upload = client.files.create(file=write(tmp_path, [line("x", "y")]).open("rb"), purpose="batch")
    with pytest.raises(openai.BadRequestError):
        client.batches.create(
            input_file_id=upload.id, endpoint="/v1/chat/completions", completion_window="12h"
        )  # type: ignore[arg-type]
    with pytest.raises(openai.BadRequestError) as refused:
        client.batches.create(
            input_file_id=upload.id,
            endpoint="/v1/chat/completions",
            completion_window="24h",
            extra_body={"output_expires_after": {"anchor": "created_at", "seconds": 3600}},
        )
    assert refused.value.code == "unsupported_capability"
    longer = client.batches.create(
        input_file_id=upload.id, endpoint="/v1/chat/completions", completion_window="48h"
    )  # type: ignore[arg-type]
    assert longer.expires_at is not None and longer.expires_at - longer.created_at == 48 * 3600


def test_another_users_files_read_as_not_found(client: OpenAI, stack: LocalStack, tmp_path: Path) -> None:
    upload = client.files.create(file=write(tmp_path, [line("o", "mine")]).open("rb"), purpose="batch")
    bob = OpenAI(base_url=stack.api_url, api_key="sk-local-bob", max_retries=0)
    for call in (
        lambda: bob.files.retrieve(upload.id),
        lambda: bob.files.content(upload.id),
        lambda: bob.files.delete(upload.id),
    ):
        with pytest.raises(openai.NotFoundError):
            call()
    assert upload.id not in [f.id for f in bob.files.list().data]
    # On create, a file the caller cannot use is a bad request (404 there would mean that
    # batch inference is not available).
    with pytest.raises(openai.BadRequestError) as refused:
        bob.batches.create(input_file_id=upload.id, endpoint="/v1/chat/completions", completion_window="24h")
    assert refused.value.param == "input_file_id"


@pytest.mark.parametrize("file_id", ["file-00000000000000000000000000000000", "nonsense"])
def test_a_missing_input_file_is_a_bad_request_naming_it(client: OpenAI, file_id: str) -> None:
    with pytest.raises(openai.BadRequestError) as refused:
        client.batches.create(input_file_id=file_id, endpoint="/v1/chat/completions", completion_window="24h")
    assert refused.value.param == "input_file_id" and refused.value.code == "invalid_input_file"


def test_cancel_through_the_sdk(client: OpenAI, tmp_path: Path) -> None:
    lines = [line(f"c-{i}", f"slow [[sim latency_ms=700]] {i}") for i in range(20)]
    upload = client.files.create(file=write(tmp_path, lines).open("rb"), purpose="batch")
    batch = client.batches.create(
        input_file_id=upload.id, endpoint="/v1/chat/completions", completion_window="24h"
    )
    wait_for(lambda: client.batches.retrieve(batch.id).status == "in_progress", timeout=30, what="running")
    time.sleep(0.3)
    assert client.batches.cancel(batch.id).status in ("cancelling", "cancelled")
    done = wait_batch(client, batch.id)
    assert done.status == "cancelled"
    assert done.error_file_id is not None  # the cancelled requests are listed there
    codes = {
        json.loads(x)["error"]["code"] for x in client.files.content(done.error_file_id).text.splitlines()
    }
    assert "batch_cancelled" in codes


def test_a_file_can_go_straight_to_s3_by_presigned_url(
    client: OpenAI, stack: LocalStack, tmp_path: Path
) -> None:
    data = (write(tmp_path, [line(f"p-{i}", f"presigned {i}") for i in range(3)])).read_bytes()
    api = httpx.Client(base_url=stack.api_url, headers={"Authorization": "Bearer sk-local-alice"})
    ticket = api.post(
        "/files/presigned", json={"filename": "p.jsonl", "purpose": "batch", "bytes": len(data)}
    ).json()
    file_id = ticket["file"]["id"]
    assert api.get(f"/files/{file_id}").status_code == 404  # not usable before it is complete
    assert api.post(f"/files/{file_id}/complete").status_code == 400  # nothing uploaded yet
    assert httpx.put(ticket["upload_url"], content=data).status_code == 200
    done = api.post(f"/files/{file_id}/complete").json()
    assert done["id"] == file_id and done["bytes"] == len(data)
    assert client.files.content(file_id).content == data
    batch = client.batches.create(
        input_file_id=file_id, endpoint="/v1/chat/completions", completion_window="24h"
    )
    assert wait_batch(client, batch.id).request_counts.completed == 3  # type: ignore[union-attr]


def test_a_presigned_url_binds_the_declared_size_and_cannot_change_a_completed_file(
    client: OpenAI, stack: LocalStack, tmp_path: Path
) -> None:
    data = (write(tmp_path, [line("b-0", "bound")])).read_bytes()
    api = httpx.Client(base_url=stack.api_url, headers={"Authorization": "Bearer sk-local-alice"})
    ticket = api.post(
        "/files/presigned", json={"filename": "b.jsonl", "purpose": "batch", "bytes": len(data)}
    ).json()
    signed = parse_qs(urlparse(ticket["upload_url"]).query)["X-Amz-SignedHeaders"][0].split(";")
    assert "content-length" in signed  # S3 refuses a body of any other size
    assert httpx.put(ticket["upload_url"], content=data).status_code == 200
    file_id = api.post(f"/files/{ticket['file']['id']}/complete").json()["id"]
    # The URL is still valid for its hour, but what it writes is no longer the file.
    tampered = data.replace(b"bound", b"BOUND")
    assert httpx.put(ticket["upload_url"], content=tampered).status_code == 200
    assert client.files.content(file_id).content == data


def test_deleting_a_batch_deletes_its_result_files_at_once_and_their_bytes_soon(
    client: OpenAI, stack: LocalStack, tmp_path: Path
) -> None:
    lines = [line("d-1", "gone soon"), line("d-2", "gone too [[sim status=400]]")]
    upload = client.files.create(file=write(tmp_path, lines).open("rb"), purpose="batch")
    batch = client.batches.create(
        input_file_id=upload.id, endpoint="/v1/chat/completions", completion_window="24h"
    )
    done = wait_batch(client, batch.id)
    result_files = [done.output_file_id, done.error_file_id]
    assert None not in result_files
    api = httpx.Client(base_url=stack.api_url, headers={"Authorization": "Bearer sk-local-alice"})
    assert all(api.get(f"/files/{file_id}/content").status_code == 200 for file_id in result_files)

    assert api.delete(f"/batches/{batch.id}").status_code == 200

    # From the moment delete answers: gone on every route and from the list.
    for file_id in result_files:
        assert api.get(f"/files/{file_id}").status_code == 404
        assert api.get(f"/files/{file_id}/content").status_code == 404
        assert api.delete(f"/files/{file_id}").status_code == 404
    listed = {f.id for f in client.files.list()}
    assert listed.isdisjoint(result_files)
    # ... and the purge removes their bytes from the bucket.
    s3 = boto3.client(
        "s3",
        endpoint_url=stack.moto_url,
        region_name="us-east-1",
        aws_access_key_id="local",
        aws_secret_access_key="local",
    )
    bucket = stack.env[resources.DATA_BUCKET.env_var]

    def stored(file_id: str | None) -> bool:
        return bool(s3.list_objects_v2(Bucket=bucket, Prefix=f"files/{file_id}").get("KeyCount"))

    wait_for(lambda: not any(stored(f) for f in result_files), timeout=60, what="the result files' bytes")
    assert stored(upload.id)  # the input file is the user's own, kept


def test_an_empty_file_is_taken_and_its_batch_fails_validation_with_empty_file(
    client: OpenAI, tmp_path: Path
) -> None:
    path = tmp_path / "empty.jsonl"
    path.write_bytes(b"")
    upload = client.files.create(file=path.open("rb"), purpose="batch")
    assert upload.bytes == 0
    batch = client.batches.create(
        input_file_id=upload.id, endpoint="/v1/chat/completions", completion_window="24h"
    )
    done = wait_batch(client, batch.id)
    assert done.status == "failed"
    assert done.errors is not None and [e.code for e in done.errors.data] == ["empty_file"]


def test_a_batchs_priority_and_complete_by_are_set_with_extra_body_and_changed_with_patch(
    client: OpenAI, tmp_path: Path
) -> None:
    """Issue 56 through the SDK: create with ``extra_body``, ``client.patch`` with
    ``cast_to=Batch``, the fields echoed; a batch that has ended refuses a change (409)."""
    uploaded = client.files.create(file=write(tmp_path, [line("p1", "hi")]).open("rb"), purpose="batch")
    due = int(time.time()) + 3600
    batch = client.batches.create(
        input_file_id=uploaded.id,
        endpoint="/v1/chat/completions",
        completion_window="24h",
        extra_body={"priority": 5, "complete_by": due},
    )
    assert (batch.model_extra or {}).get("priority") == 5 and (batch.model_extra or {})["complete_by"] == due
    patched = client.patch(
        f"/batches/{batch.id}", body={"priority": -3, "complete_by": None}, cast_to=openai.types.Batch
    )
    assert isinstance(patched, openai.types.Batch) and patched.id == batch.id
    assert (patched.model_extra or {}).get("priority") == -3 and (patched.model_extra or {})[
        "complete_by"
    ] is None
    assert (client.batches.retrieve(batch.id).model_extra or {}).get("priority") == -3
    with pytest.raises(openai.BadRequestError) as refused:
        client.patch(f"/batches/{batch.id}", body={"priority": 11}, cast_to=openai.types.Batch)
    assert refused.value.param == "priority"  # type: ignore[attr-defined]
    assert wait_batch(client, batch.id).status == "completed"
    with pytest.raises(openai.ConflictError) as ended:
        client.patch(f"/batches/{batch.id}", body={"priority": 1}, cast_to=openai.types.Batch)
    assert ended.value.code == "batch_finalized"
