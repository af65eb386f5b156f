"""AWS calls recorded per function (``batchgw.storage.aws.record_calls``), as the e2e permission
check and the benchmark read them; moto in process answers the calls."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Iterator
from pathlib import Path

import boto3
import pytest
from batchgw.storage import aws
from moto import mock_aws


@pytest.fixture
def session(monkeypatch: pytest.MonkeyPatch) -> Iterator[boto3.session.Session]:
    for name, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
    }.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    with mock_aws():
        yield boto3.session.Session()


def test_calls_are_written_per_function_and_process_before_their_first_call_goes_out(
    session: boto3.session.Session, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(aws.FUNCTION_NAME_ENV, "batchgw-worker")
    aws.record_calls(session, tmp_path)
    sqs, s3 = session.client("sqs"), session.client("s3")

    sqs.list_queues()
    with aws.calls_made_for("batchgw-lifecycle"):
        s3.create_bucket(Bucket="calls")

        async def in_a_thread() -> None:  # asyncio.to_thread carries the context along
            await asyncio.to_thread(s3.list_objects_v2, Bucket="calls")

        asyncio.run(in_a_thread())

    pid = os.getpid()
    # first calls are on disk at once, without waiting for the periodic flush
    worker = json.loads((tmp_path / f"batchgw-worker.{pid}.json").read_text())
    lifecycle = json.loads((tmp_path / f"batchgw-lifecycle.{pid}.json").read_text())
    assert worker == {"sqs.ListQueues": 1}
    assert lifecycle == {"s3.CreateBucket": 1, "s3.ListObjectsV2": 1}
    assert aws.read_recorded_calls(tmp_path) == worker | lifecycle


def test_calls_outside_any_function_are_recorded_as_unattributed(
    session: boto3.session.Session, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(aws.FUNCTION_NAME_ENV, raising=False)
    aws.record_calls(session, tmp_path / "stack")
    session.client("dynamodb").list_tables()

    assert aws.read_recorded_calls_by_function(tmp_path) == {aws.UNATTRIBUTED: {"dynamodb.ListTables": 1}}
