"""Files over 8 MiB through the Uploads API run (issue 50), and bodies over the API's limit get
a 413 that says where to go: the real OpenAI SDK and the ``batchgw`` CLI against the local stack.

Above 8 MiB, S3 writes a file in parts (a composite checksum) and a batch's copy of it used to
fail every read (``FlexibleChecksumError``): ``tests/integration/test_large_objects.py`` holds
the adapter to S3's checksums; here the whole way runs. Requests are few and large (a 200 KB
line echoed whole by ``sim-chat`` at no latency), so the results, in a result file over 8 MiB
too, come back in seconds and every line's answer is checked.

The 100 MB runs are slow (minutes on a shared 2-core machine) and run only when asked:
``BATCHGW_LARGE_FILE_CHECKS=1 .venv/bin/python -m pytest tests/e2e/test_large_files.py -k 100mb``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from openai import OpenAI

from local.run import LocalStack
from tests.e2e.conftest import FINAL
from tests.support import wait_for

pytestmark = pytest.mark.e2e
MiB = 1024 * 1024
PART = 4 * MiB  # BATCH_MAX_BODY_MB of the e2e stack: the part size the README gives
LINE_BYTES = 200_000
CLI = str(Path(sys.executable).parent / "batchgw")
SLOW = pytest.mark.skipif(
    os.environ.get("BATCHGW_LARGE_FILE_CHECKS") != "1", reason="100 MB runs: BATCHGW_LARGE_FILE_CHECKS=1"
)


@pytest.fixture(scope="module")
def client(stack: LocalStack) -> OpenAI:
    return OpenAI(base_url=stack.api_url, api_key="sk-local-alice", max_retries=0, timeout=120)


def text_of(i: int) -> str:
    """Line ``i``'s content: three words, so ``sim-chat`` echoes it whole whatever its length."""
    return f"line {i} " + "abcdefghij"[i % 10] * LINE_BYTES


def write_file(path: Path, total_bytes: int) -> int:
    """A JSONL file of about ``total_bytes``; its line count."""
    n = max(1, total_bytes // (LINE_BYTES + 150))
    with path.open("w") as out:
        for i in range(n):
            body = {"model": "sim-chat", "messages": [{"role": "user", "content": text_of(i)}]}
            out.write(
                json.dumps(
                    {"custom_id": f"r{i}", "method": "POST", "url": "/v1/chat/completions", "body": body}
                )
                + "\n"
            )
    return n


def retrieve(client: OpenAI, batch_id: str) -> Any:
    return client.batches.retrieve(batch_id)


def wait_final(client: OpenAI, batch_id: str, timeout: float) -> Any:
    return wait_for(
        lambda: (b := retrieve(client, batch_id)).status in FINAL and b,
        timeout=timeout,
        interval=0.5,
        what=f"{batch_id} to end",
    )


def assert_every_line_answered(client: OpenAI, batch: Any, n: int) -> None:
    assert batch.status == "completed", batch
    assert (batch.request_counts.total, batch.request_counts.completed) == (n, n)
    assert batch.error_file_id is None or client.files.content(batch.error_file_id).content == b""
    output = client.files.content(batch.output_file_id).content  # 302 to a presigned GET
    assert len(output) > 8 * MiB  # a result file written in parts, read back whole
    lines = [json.loads(line) for line in output.splitlines()]
    assert sorted(line["custom_id"] for line in lines) == sorted(f"r{i}" for i in range(n))
    for line in lines:
        i = int(line["custom_id"][1:])
        response = line["response"]
        assert response["status_code"] == 200, line["custom_id"]
        assert response["body"]["choices"][0]["message"]["content"] == f"echo: {text_of(i)}"


def cli(stack: LocalStack, state: Path, *args: str, timeout: float) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "BATCHGW_BASE_URL": stack.api_url,
        "BATCHGW_API_KEY": "sk-local-alice",
        "BATCHGW_CLI_STATE_DIR": str(state),
        "NO_COLOR": "1",
    }
    return subprocess.run([CLI, *args], env=env, capture_output=True, text=True, timeout=timeout, check=False)


# --- files over 8 MiB run ------------------------------------------------------------------------


def test_a_12_mb_file_sent_in_4_mib_parts_by_the_openai_sdk_runs_to_completed(
    client: OpenAI, tmp_path: Path
) -> None:
    path = tmp_path / "12mb.jsonl"
    n = write_file(path, 12_000_000)
    upload = client.uploads.upload_file_chunked(
        file=path, mime_type="application/jsonl", purpose="batch", part_size=PART
    )
    assert upload.status == "completed" and upload.file is not None
    assert upload.file.bytes == path.stat().st_size > 8 * MiB
    assert client.files.content(upload.file.id).content == path.read_bytes()

    batch = client.batches.create(
        input_file_id=upload.file.id, endpoint="/v1/chat/completions", completion_window="24h"
    )
    assert_every_line_answered(client, wait_final(client, batch.id, timeout=180), n)


def test_a_12_mb_file_submitted_by_the_cli_runs_to_completed(
    client: OpenAI, stack: LocalStack, tmp_path: Path
) -> None:
    path = tmp_path / "12mb.jsonl"
    n = write_file(path, 12_000_000)
    made = cli(stack, tmp_path / "state", "submit", str(path), "--name", "twelve", timeout=180)
    assert made.returncode == 0, made.stderr
    batch_id = made.stdout.strip()
    assert_every_line_answered(client, wait_final(client, batch_id, timeout=180), n)

    got = cli(stack, tmp_path / "state", "download", batch_id, "-o", str(tmp_path / "out"), timeout=120)
    assert got.returncode == 0, got.stderr
    assert len((tmp_path / "out" / f"{batch_id}.output.jsonl").read_text().splitlines()) == n


def started_with_every_line_counted(client: OpenAI, batch_id: str, n: int) -> Any:
    """Wait until the batch was validated, counted ``n`` requests and ran its first."""
    batch = wait_for(
        lambda: (
            (b := retrieve(client, batch_id)).status in ("in_progress", *FINAL)
            and (b.request_counts.completed or b.status in FINAL)
            and b
        ),
        timeout=900,
        interval=2,
        what=f"{batch_id} to start running",
    )
    assert batch.status in ("in_progress", "completed"), batch
    assert batch.request_counts.total == n and batch.request_counts.completed >= 1
    client.batches.cancel(batch_id)  # the rest would only take time
    return batch


@SLOW
def test_a_100mb_file_sent_in_4_mib_parts_is_validated_counted_and_runs(
    client: OpenAI, tmp_path: Path
) -> None:
    path = tmp_path / "100mb.jsonl"
    n = write_file(path, 100_000_000)
    upload = client.uploads.upload_file_chunked(
        file=path, mime_type="application/jsonl", purpose="batch", part_size=PART
    )
    assert upload.file is not None and upload.file.bytes == path.stat().st_size
    batch = client.batches.create(
        input_file_id=upload.file.id, endpoint="/v1/chat/completions", completion_window="24h"
    )
    started_with_every_line_counted(client, batch.id, n)


@SLOW
def test_a_100mb_file_submitted_by_the_cli_is_validated_counted_and_runs(
    client: OpenAI, stack: LocalStack, tmp_path: Path
) -> None:
    path = tmp_path / "100mb.jsonl"
    n = write_file(path, 100_000_000)
    made = cli(stack, tmp_path / "state", "submit", str(path), timeout=900)
    assert made.returncode == 0, made.stderr
    started_with_every_line_counted(client, made.stdout.strip(), n)


# --- bodies over the limit: a 413 that says where to go ----------------------------------------


@pytest.mark.parametrize("size", [5 * MiB, 12 * MiB])
def test_a_body_over_the_limit_is_a_413_in_the_api_shape_naming_the_limit_and_the_ways_in(
    stack: LocalStack, size: int
) -> None:
    headers = {"Authorization": "Bearer sk-local-alice"}
    with httpx.Client(base_url=stack.api_url, headers=headers, timeout=60) as http:
        created = http.post("/batches", content=b"x" * size, headers={"Content-Type": "application/json"})
        files = http.post("/files", files={"file": ("big.jsonl", b"y" * size)}, data={"purpose": "batch"})
    for refused in (created, files):
        assert refused.status_code == 413
        error = refused.json()["error"]
        assert set(error) == {"message", "type", "param", "code"}
        assert error["type"] == "request_too_large" and error["code"] == 413
        assert f"{PART} bytes" in error["message"]  # the limit, in bytes
        assert "/v1/uploads" in error["message"] and "/v1/files/presigned" in error["message"]
        assert "part_size=4 * 1024 * 1024" in error["message"]


@pytest.mark.parametrize("size", [5 * MiB, 12 * MiB])
def test_the_sdks_default_part_size_is_refused_saying_to_pass_part_size_4_mib(
    client: OpenAI, tmp_path: Path, size: int
) -> None:
    path = tmp_path / "default-parts.jsonl"
    path.write_bytes(b"z" * size)
    with pytest.raises(openai.APIStatusError) as refused:
        client.uploads.upload_file_chunked(file=path, mime_type="application/jsonl", purpose="batch")
    assert refused.value.status_code == 413
    error = refused.value.response.json()["error"]
    assert error["type"] == "request_too_large"
    assert "An upload's part holds at most 4 MiB (4194304 bytes" in error["message"]
    assert "part_size=4 * 1024 * 1024" in error["message"]
