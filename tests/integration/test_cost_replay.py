"""bench.cost_replay: a recording of DynamoDB requests, replayed on moto, billed by item sizes."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

from bench.cost_replay import Window, read_recording, replay


def _entry(operation: str, body: dict[str, Any]) -> str:
    headers = {
        "X-Amz-Target": f"DynamoDB_20120810.{operation}",
        "Content-Type": "application/x-amz-json-1.0",
        "Authorization": "AWS4-HMAC-SHA256 Credential=testing/20261201/us-east-1/dynamodb/aws4_request",
    }
    return json.dumps(
        {"headers": headers, "method": "POST", "url": "/", "body": json.dumps(body), "body_encoded": False}
    )


def test_replay_bills_each_write_on_the_item_before_and_after(tmp_path: Path) -> None:
    table = f"requests-{uuid.uuid4().hex[:8]}"
    key = {"pk": {"S": "batch_1"}, "idx": {"N": "0"}}
    create = {
        "TableName": table,
        "BillingMode": "PAY_PER_REQUEST",
        "KeySchema": [
            {"AttributeName": "pk", "KeyType": "HASH"},
            {"AttributeName": "idx", "KeyType": "RANGE"},
        ],
        "AttributeDefinitions": [
            {"AttributeName": "pk", "AttributeType": "S"},
            {"AttributeName": "idx", "AttributeType": "N"},
            {"AttributeName": "lease_until", "AttributeType": "N"},
        ],
        "GlobalSecondaryIndexes": [
            {
                "IndexName": "running",
                "KeySchema": [
                    {"AttributeName": "pk", "KeyType": "HASH"},
                    {"AttributeName": "lease_until", "KeyType": "RANGE"},
                ],
                "Projection": {"ProjectionType": "KEYS_ONLY"},
            }
        ],
    }
    small = {**key, "body": {"S": "x" * 400}}
    claim = {  # in a transaction: grows the item to about 2.5 KB and enters the running index
        "TransactItems": [
            {
                "Update": {
                    "TableName": table,
                    "Key": key,
                    "UpdateExpression": "SET lease_until = :u, extra = :p",
                    "ExpressionAttributeValues": {":u": {"N": "100"}, ":p": {"S": "y" * 2100}},
                }
            }
        ]
    }
    shrink = {  # billed on the larger item before it; leaves the index
        "TableName": table,
        "Key": key,
        "UpdateExpression": "REMOVE extra, lease_until",
    }
    refused = {
        "TableName": table,
        "Key": key,
        "UpdateExpression": "SET body = :b",
        "ConditionExpression": "attribute_exists(lease_until)",
        "ExpressionAttributeValues": {":b": {"S": "z"}},
    }
    read = {"TableName": table, "Key": key, "ConsistentRead": True}
    lines = [
        _entry("CreateTable", create),
        _entry("PutItem", {"TableName": table, "Item": small}),
        _entry("TransactWriteItems", claim),
        _entry("UpdateItem", shrink),
        _entry("UpdateItem", refused),
        _entry("GetItem", read),
    ]
    recording = tmp_path / "recording.jsonl"
    recording.write_text("\n".join(lines) + "\n")
    requests, broken = read_recording(recording)
    assert broken == 0

    tally = replay(requests, [Window("run", 2, len(lines))])["run"]

    units = {component: quantity for (_, component, _), quantity in tally.units.items()}
    assert units == {
        f"write {table} batch* Update tx": 6,  # 2 x ceil(~2.5 KB)
        f"index write {table}/running": 2,  # entered the index, then left it
        f"write {table} batch* Update": 3,  # ceil(~2.5 KB before)
        f"write {table} batch* Update (condition failed)": 1,  # still billed, on ~0.4 KB
        f"read {table} batch* GetItem strong": 1,
    }
