"""What an AWS call touches, read from its parameters (``batchgw.storage.touches``)."""

from __future__ import annotations

import pytest
from batchgw.storage.touches import Touch, object_kind, partition_kind, touches


@pytest.mark.parametrize(
    ("value", "kind"),
    [
        ({"S": "user#u1"}, "user#*"),
        ("users", "users"),
        ("runtime", "runtime"),
        ({"S": "spend#user#u1"}, "spend#*"),
        ({"S": "keyid#key_1"}, "keyid#*"),
        ({"S": "batch_01H#attempts"}, "batch*"),
        ({"S": "file-0a1b"}, "file*"),
        ({"N": "7"}, "*"),
    ],
)
def test_a_partition_key_is_kept_as_its_kind(value: object, kind: str) -> None:
    assert partition_kind(value) == kind


def test_an_object_key_is_kept_as_its_first_segment() -> None:
    assert object_kind("bodies/batch_1/3.res.json") == "bodies/*"
    assert object_kind("inputs/") == "inputs/*"
    assert object_kind("") == "*"


def test_a_batch_write_and_a_query_touch_each_partition_they_name() -> None:
    written = touches(
        "dynamodb.BatchWriteItem",
        {
            "RequestItems": {
                "control": [
                    {"DeleteRequest": {"Key": {"pk": {"S": "whevents#u1"}, "sk": {"S": "1"}}}},
                    {"PutRequest": {"Item": {"pk": {"S": "idem#u1"}, "sk": {"S": "k"}, "n": {"N": "1"}}}},
                ]
            }
        },
    )
    assert written == [
        Touch("dynamodb.BatchWriteItem", "Delete", "control", "whevents#*"),
        Touch("dynamodb.BatchWriteItem", "Put", "control", "idem#*"),
    ]
    queried = touches(
        "dynamodb.Query",
        {
            "TableName": "batches",
            "IndexName": "by_owner",
            "KeyConditionExpression": "#o = :owner AND created_key < :k",
            "ExpressionAttributeValues": {":owner": {"S": "user-alice"}, ":k": {"S": "x"}},
        },
    )
    assert queried == [Touch("dynamodb.Query", "", "batches/index/by_owner", "user*")]


def test_queues_state_machines_and_multi_deletes_are_named() -> None:
    assert touches("sqs.SendMessageBatch", {"QueueUrl": "http://h:1/123/batchgw-work", "Entries": []}) == [
        Touch("sqs.SendMessageBatch", "", "batchgw-work")
    ]
    stop = touches(
        "sfn.StopExecution", {"executionArn": "arn:aws:states:r:1:execution:batchgw-batch:batch_1"}
    )
    assert stop == [Touch("sfn.StopExecution", "", "batchgw-batch")]
    assert touches("sfn.SendTaskSuccess", {"taskToken": "t", "output": "{}"}) == [
        Touch("sfn.SendTaskSuccess")
    ]
    deleted = touches(
        "s3.DeleteObjects",
        {"Bucket": "data", "Delete": {"Objects": [{"Key": "bodies/b/1"}, {"Key": "bodies/b/2"}]}},
    )
    assert deleted == [Touch("s3.DeleteObjects", "", "data", "bodies/*")]
