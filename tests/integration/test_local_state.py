"""The local stack's snapshots (``local.state``): what they keep, how they are written, and
that they are taken between requests."""

from __future__ import annotations

import pickle
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from batchgw.config import resources
from moto import mock_aws
from moto.dynamodb.models.table import Table
from moto.moto_server.werkzeug_app import DomainDispatcherApplication
from moto.server import ThreadedMotoServer

from local import bootstrap, moto_patches, resume, state
from local.env import (
    HOST,
    STATE_ROOT,
    StateDirInUse,
    free_port,
    lock_state_dir,
    snapshot_path,
    state_dir_from_env,
)
from local.run import LocalStack

REGION = "us-east-1"
ITEM = {
    "pk": {"S": "batch_1"},
    "sk": {"S": "meta"},
    "owner": {"S": "user-alice"},
    "n": {"N": "1.5"},
    "blob": {"B": b"\x00\x01"},
    "nested": {"M": {"list": {"L": [{"S": "a"}, {"N": "2"}, {"B": b"zz"}]}, "none": {"NULL": True}}},
    "tags": {"SS": ["a", "b"]},
    "flag": {"BOOL": False},
}


def make_table(dynamodb: Any, name: str = "batchgw-batches") -> None:
    dynamodb.create_table(
        TableName=name,
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}],
        AttributeDefinitions=[
            {"AttributeName": "pk", "AttributeType": "S"},
            {"AttributeName": "sk", "AttributeType": "S"},
            {"AttributeName": "owner", "AttributeType": "S"},
        ],
        BillingMode="PAY_PER_REQUEST",
        GlobalSecondaryIndexes=[
            {
                "IndexName": "by_owner",
                "KeySchema": [{"AttributeName": "owner", "KeyType": "HASH"}],
                "Projection": {"ProjectionType": "ALL"},
            }
        ],
    )
    dynamodb.update_time_to_live(
        TableName=name, TimeToLiveSpecification={"Enabled": True, "AttributeName": "ttl"}
    )


def test_a_snapshot_restores_tables_objects_unfinished_uploads_and_keys_as_they_were() -> None:
    with mock_aws():
        dynamodb = boto3.client("dynamodb", region_name=REGION)
        make_table(dynamodb)
        dynamodb.put_item(TableName="batchgw-batches", Item=ITEM)
        s3 = boto3.client("s3", region_name=REGION)
        s3.create_bucket(Bucket="batchgw-data")
        s3.put_object(Bucket="batchgw-data", Key="files/f1", Body=b"line\n", ContentType="application/jsonl")
        before = s3.head_object(Bucket="batchgw-data", Key="files/f1")
        upload = s3.create_multipart_upload(
            Bucket="batchgw-data", Key="files/out", ContentType="application/jsonl"
        )
        s3.upload_part(
            Bucket="batchgw-data",
            Key="files/out",
            UploadId=upload["UploadId"],
            PartNumber=1,
            Body=b"x" * 5 * 2**20,
        )
        kms = boto3.client("kms", region_name=REGION)
        key_arn = kms.create_key(Description="batchgw webhook secrets")["KeyMetadata"]["Arn"]
        sealed = kms.encrypt(KeyId=key_arn, Plaintext=b"whsec_1")["CiphertextBlob"]
        saved = pickle.dumps(state.capture())

    with mock_aws():  # a new moto: empty, as a restarted one is
        state.apply(pickle.loads(saved))
        dynamodb = boto3.client("dynamodb", region_name=REGION)
        key = {"pk": ITEM["pk"], "sk": ITEM["sk"]}
        assert dynamodb.get_item(TableName="batchgw-batches", Key=key)["Item"] == ITEM
        by_owner = dynamodb.query(
            TableName="batchgw-batches",
            IndexName="by_owner",
            KeyConditionExpression="#o = :o",
            ExpressionAttributeNames={"#o": "owner"},
            ExpressionAttributeValues={":o": {"S": "user-alice"}},
        )
        assert by_owner["Count"] == 1
        ttl = dynamodb.describe_time_to_live(TableName="batchgw-batches")["TimeToLiveDescription"]
        assert ttl == {"TimeToLiveStatus": "ENABLED", "AttributeName": "ttl"}
        s3 = boto3.client("s3", region_name=REGION)
        after = s3.get_object(Bucket="batchgw-data", Key="files/f1")
        assert after["Body"].read() == b"line\n"
        assert (after["ETag"], after["LastModified"], after["ContentType"]) == (
            before["ETag"],
            before["LastModified"],
            "application/jsonl",
        )
        # The upload goes on where it was: its first part kept, under its id.
        s3.upload_part(
            Bucket="batchgw-data", Key="files/out", UploadId=upload["UploadId"], PartNumber=2, Body=b"y"
        )
        parts = s3.list_parts(Bucket="batchgw-data", Key="files/out", UploadId=upload["UploadId"])["Parts"]
        s3.complete_multipart_upload(
            Bucket="batchgw-data",
            Key="files/out",
            UploadId=upload["UploadId"],
            MultipartUpload={"Parts": [{"PartNumber": p["PartNumber"], "ETag": p["ETag"]} for p in parts]},
        )
        assert s3.head_object(Bucket="batchgw-data", Key="files/out")["ContentLength"] == 5 * 2**20 + 1
        kms = boto3.client("kms", region_name=REGION)
        assert kms.decrypt(CiphertextBlob=sealed)["Plaintext"] == b"whsec_1"
        assert kms.describe_key(KeyId=key_arn)["KeyMetadata"]["Description"] == "batchgw webhook secrets"


def test_a_write_that_dies_midway_leaves_the_previous_snapshot_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "moto-state.pickle"
    state.write_atomic(path, {"format": 1, "generation": "first"})

    def dies_midway(obj: Any, out: Any, protocol: int) -> None:
        out.write(b"\x80\x05half a snapshot")
        raise OSError("killed mid-write")

    monkeypatch.setattr(pickle, "dump", dies_midway)
    with pytest.raises(OSError, match="killed mid-write"):
        state.write_atomic(path, {"format": 1, "generation": "second"})
    monkeypatch.undo()
    assert state.read(path) == {"format": 1, "generation": "first"}
    assert [p.name for p in tmp_path.iterdir()] == ["moto-state.pickle"]  # no half file left about


def test_no_snapshot_reads_as_none(tmp_path: Path) -> None:
    assert state.read(tmp_path / "moto-state.pickle") is None


def test_a_closing_gate_waits_for_the_requests_in_flight_and_holds_back_those_that_come_after() -> None:
    gate = state.Gate()
    in_flight, release = threading.Event(), threading.Event()
    closed, later_passed = threading.Event(), threading.Event()

    def request() -> None:
        with gate.request():
            in_flight.set()
            release.wait(5)

    def checkpoint() -> None:
        with gate.closed():
            closed.set()
            release.wait(5)

    def later_request() -> None:
        with gate.request():
            later_passed.set()

    threading.Thread(target=request, daemon=True).start()
    assert in_flight.wait(5)
    threading.Thread(target=checkpoint, daemon=True).start()
    assert not closed.wait(0.2)  # the request in flight holds it open
    threading.Thread(target=later_request, daemon=True).start()
    assert not later_passed.wait(0.2)  # a checkpoint waits: requests that come after wait behind it
    release.set()
    assert closed.wait(5)
    assert later_passed.wait(5)
    assert gate.passed == 2


@pytest.fixture
def gated_moto(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Any, state.Gate]]:
    """A moto server on a free port whose DynamoDB requests pass a gate (undone after)."""
    monkeypatch.setattr(DomainDispatcherApplication, "__call__", DomainDispatcherApplication.__call__)
    moto_patches.apply()
    gate = state.Gate()
    state.install_gate(gate)
    port = free_port()
    server = ThreadedMotoServer(ip_address=HOST, port=port, verbose=False)
    server.start()
    try:
        client = boto3.client(
            "dynamodb",
            region_name=REGION,
            endpoint_url=f"http://{HOST}:{port}",
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
        )
        yield client, gate
    finally:
        server.stop()


def test_a_checkpoint_never_holds_half_a_transaction(
    gated_moto: tuple[Any, state.Gate], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    dynamodb, gate = gated_moto
    make_table(dynamodb, "pairs")
    put = Table.put_item

    def slow_put(self: Table, *args: Any, **kwargs: Any) -> Any:
        time.sleep(0.002)  # a wide gap between a transaction's two writes, for a checkpoint to fall in
        return put(self, *args, **kwargs)

    monkeypatch.setattr(Table, "put_item", slow_put)
    stop = threading.Event()

    def write_pairs() -> None:  # two items moved on together, in one TransactWriteItems each
        n = 0
        while not stop.is_set():
            n += 1
            dynamodb.transact_write_items(
                TransactItems=[
                    {
                        "Put": {
                            "TableName": "pairs",
                            "Item": {"pk": {"S": side}, "sk": {"S": "x"}, "n": {"N": str(n)}},
                        }
                    }
                    for side in ("a", "b")
                ]
            )

    writer = threading.Thread(target=write_pairs, daemon=True)
    writer.start()
    checkpoints = state.Checkpointer(tmp_path / "moto-state.pickle", interval=60, gate=gate)
    try:
        seen = []
        for _ in range(30):
            taken = checkpoints.checkpoint(force=True)
            assert taken is not None
            saved = state.read(checkpoints.path)
            assert saved is not None
            (table,) = [t for t in saved["dynamodb"] if t["name"] == "pairs"]
            pairs = {item["pk"]["S"]: item["n"]["N"] for item in table["items"]}
            assert pairs.get("a") == pairs.get("b"), pairs
            seen.append(pairs.get("a"))
    finally:
        stop.set()
        writer.join(10)
    assert len(set(seen)) > 1  # the writes went on between the checkpoints


def test_a_checkpoint_with_no_request_since_the_last_one_is_skipped(tmp_path: Path) -> None:
    gate = state.Gate()
    with mock_aws():
        checkpoints = state.Checkpointer(tmp_path / "moto-state.pickle", interval=60, gate=gate)
        assert checkpoints.checkpoint() is not None
        assert checkpoints.checkpoint() is None
        with gate.request():
            pass
        assert checkpoints.checkpoint() is not None


def test_make_run_keeps_its_state_in_the_default_dir_of_its_port_unless_told_otherwise_or_off() -> None:
    assert state_dir_from_env({}) == STATE_ROOT / "8080"
    assert state_dir_from_env({"BATCHGW_PORT": "9090"}) == STATE_ROOT / "9090"  # side by side, apart
    assert state_dir_from_env({"BATCHGW_STATE_DIR": "/tmp/mine"}) == Path("/tmp/mine")
    assert state_dir_from_env({"BATCHGW_PERSIST": "0"}) is None
    assert state_dir_from_env({"BATCHGW_PERSIST": "false", "BATCHGW_STATE_DIR": "/tmp/mine"}) is None
    assert snapshot_path("/tmp/mine") == Path("/tmp/mine/moto-state.pickle")


def test_a_stack_built_in_code_keeps_nothing_unless_given_a_state_dir(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("BATCHGW_STATE_DIR", "/tmp/someone-elses")  # what make run would read
    assert LocalStack(api_port=0, sim_port=0, moto_port=0).state_dir is None
    assert LocalStack(api_port=0, sim_port=0, moto_port=0, state_dir="/tmp/mine").state_dir == Path(
        "/tmp/mine"
    )


@pytest.mark.parametrize(
    ("service", "environ", "changes"),
    [
        ("dynamodb", {"HTTP_X_AMZ_TARGET": "DynamoDB_20120810.TransactWriteItems"}, True),
        ("dynamodb", {"HTTP_X_AMZ_TARGET": "DynamoDB_20120810.UpdateItem"}, True),
        ("dynamodb", {"HTTP_X_AMZ_TARGET": "DynamoDB_20120810.BatchWriteItem"}, True),
        ("dynamodb", {"HTTP_X_AMZ_TARGET": "DynamoDB_20120810.Query"}, False),
        ("dynamodb", {"HTTP_X_AMZ_TARGET": "DynamoDB_20120810.BatchGetItem"}, False),
        ("s3", {"REQUEST_METHOD": "PUT"}, True),
        ("s3", {"REQUEST_METHOD": "POST"}, True),  # a presigned POST upload, a DeleteObjects
        ("s3", {"REQUEST_METHOD": "DELETE"}, True),
        ("s3", {"REQUEST_METHOD": "GET"}, False),
        ("kms", {"HTTP_X_AMZ_TARGET": "TrentService.CreateKey"}, True),
        ("kms", {"HTTP_X_AMZ_TARGET": "TrentService.Decrypt"}, False),
        ("sqs", {"REQUEST_METHOD": "POST"}, False),  # not snapshotted
        ("lambda", {"REQUEST_METHOD": "POST"}, False),  # an invoke runs a handler that calls moto again
    ],
)
def test_only_writes_to_the_snapshotted_services_pass_the_gate(
    service: str, environ: dict[str, str], changes: bool
) -> None:
    assert state.changes_state(service, environ) is changes


def _record(pk: str, status: str, **extra: dict[str, str]) -> dict[str, Any]:
    item = {"S": pk}
    fields = {"owner": "user-alice", "status": status, "endpoint": "/v1/chat/completions", "created_key": "k"}
    return {
        "pk": item,
        "sk": {"S": "meta"},
        "created_at": {"N": "1"},
        **{name: {"S": value} for name, value in fields.items()},
        **extra,
    }


def test_a_restore_resumes_batches_with_work_left_purges_those_deleted_midway_and_keeps_the_rest() -> None:
    with mock_aws():
        dynamodb = boto3.client("dynamodb", region_name=REGION)
        make_table(dynamodb)
        items = [
            _record("batch_running", "in_progress"),
            {"pk": {"S": "batch_running"}, "sk": {"S": "ctr#0"}},
            _record(
                "batch_announcing", "completed", event_pending={"BOOL": True}, results_expires_at={"N": "50"}
            ),
            _record("batch_ended", "completed", results_expires_at={"N": "100"}),
            _record("batch_ended_early", "failed", results_expires_at={"N": "20"}),
            {"pk": {"S": "batch_deleted"}, "sk": {"S": "ctr#0"}},  # its record deleted, its purge not done
            {"pk": {"S": "batch_deleted"}, "sk": {"S": "ctr#1"}},
        ]
        for item in items:
            dynamodb.put_item(TableName="batchgw-batches", Item=item)
        saved = resume.saved_batches(dynamodb, "batchgw-batches")
        assert saved.to_start == ["batch_announcing", "batch_running"]
        assert saved.to_purge == ["batch_deleted"]
        assert sorted(saved.kept) == [(20.0, "batch_ended_early"), (100.0, "batch_ended")]


class _Workflow:
    def __init__(self) -> None:
        self.purges: list[str] = []

    def start_purge(self, batch_id: str) -> None:
        self.purges.append(batch_id)


def test_a_finished_batch_without_an_execution_is_purged_when_its_retention_ends() -> None:
    workflow, now = _Workflow(), [10.0]
    schedule = resume.PurgeSchedule(workflow, [(100.0, "b_late"), (20.0, "b_early")], lambda: now[0])  # type: ignore[arg-type]
    assert schedule.run_due() == 0
    now[0] = 50.0
    assert schedule.run_due() == 1
    assert workflow.purges == ["b_early"]
    now[0] = 100.0
    assert schedule.run_due() == 1
    assert workflow.purges == ["b_early", "b_late"] and len(schedule) == 0


def test_checkpoints_of_a_big_state_come_less_often_so_writes_wait_at_most_a_tenth_of_the_time(
    tmp_path: Path,
) -> None:
    checkpoints = state.Checkpointer(tmp_path / "moto-state.pickle", interval=5, gate=state.Gate())
    assert checkpoints.next_wait(None) == 5
    assert checkpoints.next_wait(state.Checkpoint(taken_at=0, seconds_closed=0.2, seconds=0.4, bytes=1)) == 5
    assert checkpoints.next_wait(state.Checkpoint(taken_at=0, seconds_closed=1.5, seconds=2, bytes=1)) == 15


def test_a_state_dir_is_held_by_one_stack_at_a_time(tmp_path: Path) -> None:
    held = lock_state_dir(tmp_path / "state")
    with pytest.raises(StateDirInUse, match="stack that is running"):
        lock_state_dir(tmp_path / "state")
    lock_state_dir(tmp_path / "other").close()  # another folder is another stack's
    held.close()  # stopped (or dead: the kernel lets go of its lock)
    lock_state_dir(tmp_path / "state").close()


def test_a_restored_table_gains_the_indexes_its_definition_added_since_and_they_list_new_items() -> None:
    with mock_aws():
        dynamodb = boto3.client("dynamodb", region_name=REGION)
        name = "batchgw-requests"
        dynamodb.create_table(  # the requests table as saved before it had an index
            TableName=name,
            KeySchema=[
                {"AttributeName": "pk", "KeyType": "HASH"},
                {"AttributeName": "idx", "KeyType": "RANGE"},
            ],
            AttributeDefinitions=[
                {"AttributeName": "pk", "AttributeType": "S"},
                {"AttributeName": "idx", "AttributeType": "N"},
            ],
            BillingMode="PAY_PER_REQUEST",
        )
        bootstrap.add_missing_indexes(dynamodb, resources.REQUESTS, name)
        bootstrap.add_missing_indexes(dynamodb, resources.REQUESTS, name)  # once only

        indexes = dynamodb.describe_table(TableName=name)["Table"]["GlobalSecondaryIndexes"]
        assert [index["IndexName"] for index in indexes] == [
            index.name for index in resources.REQUESTS.indexes
        ]
        dynamodb.put_item(
            TableName=name,
            Item={
                "pk": {"S": "b#attempts"},
                "idx": {"N": "1"},
                "rlk": {"S": "rlog#batch#0"},
                "rls": {"S": "1#b"},
            },
        )
        found = dynamodb.query(
            TableName=name,
            IndexName="request_log",
            KeyConditionExpression="rlk = :k",
            ExpressionAttributeValues={":k": {"S": "rlog#batch#0"}},
        )["Items"]
        assert [item["rls"]["S"] for item in found] == ["1#b"]
