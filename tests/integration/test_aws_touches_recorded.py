"""What each AWS call touched is recorded per function (``batchgw.storage.aws.record_calls``): the
table and every item's partition kind, the bucket and every object's key prefix, presigned URLs
included, as the e2e permission check reads them; moto in process answers the calls."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import boto3
import pytest
from batchgw.config import resources
from batchgw.domain.accounts import KeyRecord, UserRecord
from batchgw.storage import aws
from batchgw.storage.accounts import AccountStore
from batchgw.storage.blobs import BlobStore
from batchgw.storage.runtime import RuntimeStore
from batchgw.storage.touches import Touch
from moto import mock_aws

from local.bootstrap import create_bucket, create_table

CONTROL, DATA = "control", "data"


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
        session = boto3.session.Session()
        create_table(session.client("dynamodb"), resources.CONTROL, CONTROL)
        create_bucket(session.client("s3"), resources.DATA_BUCKET, DATA)
        yield session


def test_each_item_of_a_transaction_and_each_object_of_a_copy_is_recorded_with_its_kind(
    session: boto3.session.Session, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(aws.FUNCTION_NAME_ENV, "batchgw-api")
    aws.record_calls(session, tmp_path)
    dynamodb, s3 = session.client("dynamodb"), session.client("s3")
    user = UserRecord("u1", "Ann", "ann@example.com", "internal")
    key = KeyRecord(id="key_1", user_id="u1", key_hash="ab12", prefix="sk-ab")

    with aws.calls_made_for("batchgw-admin"):
        AccountStore(dynamodb, CONTROL).create(user, [key])
        RuntimeStore(dynamodb, CONTROL).set_setting("BATCH_MIN_ROLE", "free", by="u1", now=0)
    blobs = BlobStore(s3, DATA)
    blobs.put("incoming/file-1", b"{}")
    blobs.copy("incoming/file-1", "files/file-1")
    blobs.presigned_get("exports/batch_1/output.jsonl")  # no call, but a grant the URL uses
    AccountStore(dynamodb, CONTROL).by_hash("ab12")

    touched = aws.read_recorded_touches_by_function(tmp_path)
    assert touched["batchgw-admin"] == {
        *(
            Touch("dynamodb.TransactWriteItems", "Put", CONTROL, kind)
            for kind in ("user#*", "users", "key#*", "keyid#*")
        ),
        Touch("dynamodb.PutItem", "", CONTROL, "runtime"),
    }
    assert touched["batchgw-api"] == {
        Touch("s3.PutObject", "", DATA, "incoming/*"),
        Touch("s3.CopyObject", "source", DATA, "incoming/*"),
        Touch("s3.CopyObject", "", DATA, "files/*"),
        Touch("s3.GetObject", "", DATA, "exports/*"),
        Touch("dynamodb.GetItem", "", CONTROL, "key#*"),
    }
    # the counts are as before: operations actually sent, per function
    assert aws.read_recorded_calls_by_function(tmp_path)["batchgw-api"] == {
        "s3.PutObject": 1,
        "s3.CopyObject": 1,
        "dynamodb.GetItem": 1,
    }


def test_how_often_each_partition_kind_is_touched_is_recorded_per_function(
    session: boto3.session.Session, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(aws.FUNCTION_NAME_ENV, "batchgw-worker")
    aws.record_calls(session, tmp_path)
    runtime = RuntimeStore(session.client("dynamodb"), CONTROL)
    for value in ("free", "internal", "free"):
        runtime.set_setting("BATCH_MIN_ROLE", value, by="u1", now=0)
    AccountStore(session.client("dynamodb"), CONTROL).by_hash("ab12")
    expected = {
        Touch("dynamodb.PutItem", "", CONTROL, "runtime"): 3,
        Touch("dynamodb.GetItem", "", CONTROL, "key#*"): 1,
    }

    # A touch seen before is counted on disk at the next flush (every half second).
    deadline = time.monotonic() + 10
    while (counts := aws.read_recorded_touch_counts(tmp_path).get("batchgw-worker")) != expected:
        assert time.monotonic() < deadline, counts
        time.sleep(0.05)
