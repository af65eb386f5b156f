"""DynamoDB refusing for throughput (``local.throttling``, what chaos runs turn on) answers as
DynamoDB does, writes nothing, and the gateway's storage tries again until the write is made."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from batchgw.storage import aws, dynamo
from batchgw.storage.dynamo import Table
from botocore.config import Config
from botocore.exceptions import ClientError

from local import throttling
from local.throttling import Throttling
from tests.support import bare_table

pytestmark = pytest.mark.usefixtures("aws_env")


@pytest.fixture
def table() -> Iterator[str]:
    bare_table(aws.get_clients().dynamodb, "t")
    yield "t"


@pytest.fixture
def refusing() -> Iterator[Throttling]:
    refusals = Throttling(rate=1.0)
    refusals.install()
    yield refusals
    refusals.uninstall()


def _once() -> Any:
    """A client that does not try again, to see DynamoDB's answer itself."""
    return boto3.client("dynamodb", config=Config(retries={"mode": "standard", "max_attempts": 1}))


def _put(key: str) -> dict[str, Any]:
    return {"Put": {"TableName": "t", "Item": {"pk": {"S": key}}}}


def test_a_refused_call_answers_throughput_exceeded_and_writes_nothing(
    table: str, refusing: Throttling
) -> None:
    client = _once()
    with pytest.raises(ClientError) as refused:
        client.put_item(TableName=table, Item={"pk": {"S": "a"}})
    assert refused.value.response["Error"]["Code"] == "ProvisionedThroughputExceededException"
    refusing.uninstall()
    assert "Item" not in client.get_item(TableName=table, Key={"pk": {"S": "a"}})


def test_a_refused_transaction_names_throttling_for_one_action(table: str, refusing: Throttling) -> None:
    client = _once()
    with pytest.raises(ClientError) as refused:
        client.transact_write_items(TransactItems=[_put("a"), _put("b"), _put("c")])
    assert refused.value.response["Error"]["Code"] == "TransactionCanceledException"
    reasons = [reason["Code"] for reason in refused.value.response["CancellationReasons"]]
    assert sorted(reasons) == ["None", "None", "ThrottlingError"]
    refusing.uninstall()
    assert client.scan(TableName=table)["Count"] == 0


def test_a_refused_batch_write_writes_some_items_and_hands_the_rest_back(
    table: str, refusing: Throttling
) -> None:
    client = _once()
    sent = [{"PutRequest": {"Item": {"pk": {"S": f"k{i}"}}}} for i in range(6)]
    left = None
    for _ in range(20):  # until one is answered in part: all six left is refused as a whole
        try:
            left = client.batch_write_item(RequestItems={table: sent})["UnprocessedItems"][table]
            break
        except ClientError as refused:
            assert refused.response["Error"]["Code"] == "ProvisionedThroughputExceededException"
    assert left is not None and 1 <= len(left) < len(sent)
    refusing.uninstall()
    written = {item["pk"]["S"] for item in client.scan(TableName=table)["Items"]}
    handed_back = {request["PutRequest"]["Item"]["pk"]["S"] for request in left}
    assert written == {f"k{i}" for i in range(6)} - handed_back


def test_the_gateways_writes_are_made_through_refusals(table: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(dynamo, "_sleep", lambda _: None)
    refusals = Throttling(rate=0.3, seed=3)
    refusals.install()
    try:
        store = Table(aws.get_clients().dynamodb, table)
        for i in range(10):
            assert store.transact([_put(f"tx{i}"), _put(f"tx{i}-2")], failure="could not write") is None
        store.put_many([{"pk": f"batch{i}"} for i in range(30)])
    finally:
        refusals.uninstall()
    assert refusals.refused > 0  # the draws did refuse (seeded: the same ones each run)
    assert aws.get_clients().dynamodb.scan(TableName=table)["Count"] == 50


def test_the_rate_comes_from_the_environment() -> None:
    assert throttling.throttle_rate({}) == 0.0
    assert throttling.install({}) is None
    assert throttling.throttle_rate({throttling.THROTTLE_RATE_ENV: "0.05"}) == 0.05
    with pytest.raises(ValueError):
        throttling.throttle_rate({throttling.THROTTLE_RATE_ENV: "2"})
