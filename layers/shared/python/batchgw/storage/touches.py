"""What an AWS call touches, as a permission check needs it: for each call, the table (and index),
bucket, queue, state machine or key it names, and the partition or key prefix of every item
or object in it (each item of a transaction or a batch, each object of a multi-delete, both
ends of a copy).

Partitions and keys are kept as their *kind*, so that what one process records stays small
whatever it did: the leading lowercase letters of a partition key and the ``#`` after them,
``*`` standing for the rest (``user#u1`` -> ``user#*``, ``users`` -> ``users``,
``batch_01#attempts`` -> ``batch*``); an object key's first segment (``files/file-1`` ->
``files/*``).

Pure: a call's parameters in, ``Touch`` records out (``batchgw.storage.aws.record_calls``
writes them).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

# Every table's partition key attribute (``batchgw.config.resources``).
PARTITION_ATTRIBUTE = "pk"
_KIND = re.compile(r"[a-z]*#?")
_KEY_CONDITION = re.compile(r"^\s*\(?\s*([#\w]+)\s*=\s*(:\w+)")


@dataclass(frozen=True, order=True)
class Touch:
    """One resource one call touched.

    ``operation`` is ``service.Operation``; ``part`` what a transaction's or a batch's item does
    (``Put``, ``Update``, ``Delete``, ``ConditionCheck``, ``Get``), or ``source`` for a copy's
    source, else empty; ``resource`` the table (``<name>`` or ``<name>/index/<index>``), bucket,
    queue (its name), state machine (its name), key or secret as the call named it, empty
    when it names none; ``key`` the partition kind or object key kind, empty when there is none.
    """

    operation: str
    part: str = ""
    resource: str = ""
    key: str = ""

    def to_json(self) -> list[str]:
        return [self.operation, self.part, self.resource, self.key]

    @classmethod
    def from_json(cls, value: list[str]) -> Touch:
        return cls(*value)


def partition_kind(value: Any) -> str:
    """The kind of a partition key value (a DynamoDB typed value or a plain one)."""
    if isinstance(value, Mapping):
        value = next(iter(value.values()), "")
    text = str(value)
    kind = _KIND.match(text)
    head = kind.group(0) if kind else ""
    return head if head == text else f"{head}*"


def object_kind(key: str) -> str:
    """The kind of an S3 object key (or a listed prefix): its first segment and ``*``."""
    head, slash, _ = key.partition("/")
    return f"{head}{slash}*"


def touches(operation: str, params: Mapping[str, Any]) -> list[Touch]:
    """What a call of ``operation`` (``service.Operation``) with ``params`` touches."""
    service, _, name = operation.partition(".")
    found = {
        "dynamodb": _dynamodb,
        "s3": _s3,
        "sqs": _sqs,
        "sfn": _sfn,
        "kms": _kms,
        "secrets-manager": _secrets,
    }.get(service, _nothing)(name, params)
    return sorted({Touch(operation, part, resource, key) for part, resource, key in found})


Found = Iterator[tuple[str, str, str]]  # (part, resource, key)


def _nothing(_: str, __: Mapping[str, Any]) -> Found:
    yield "", "", ""


def _item_key(item: Mapping[str, Any]) -> str:
    if PARTITION_ATTRIBUTE in item:
        return partition_kind(item[PARTITION_ATTRIBUTE])
    return partition_kind(next(iter(item.values()), "")) if item else ""


def _dynamodb(name: str, params: Mapping[str, Any]) -> Found:
    table = str(params.get("TableName", ""))
    if name in ("GetItem", "UpdateItem", "DeleteItem"):
        yield "", table, _item_key(params.get("Key", {}))
    elif name == "PutItem":
        yield "", table, _item_key(params.get("Item", {}))
    elif name == "Query":
        index = params.get("IndexName")
        yield "", f"{table}/index/{index}" if index else table, _query_partition(params)
    elif name in ("TransactWriteItems", "TransactGetItems"):
        for entry in params.get("TransactItems", []):
            for part, item in entry.items():
                yield (
                    part,
                    str(item.get("TableName", "")),
                    _item_key(item.get("Key") or item.get("Item") or {}),
                )
    elif name == "BatchGetItem":
        for table_name, request in params.get("RequestItems", {}).items():
            for key in request.get("Keys", []):
                yield "", table_name, _item_key(key)
    elif name == "BatchWriteItem":
        for table_name, requests in params.get("RequestItems", {}).items():
            for request in requests:
                for part, body in request.items():
                    yield (
                        part.removesuffix("Request"),
                        table_name,
                        _item_key(body.get("Key") or body.get("Item") or {}),
                    )
    else:  # Scan, DescribeTable...: the table, no partition
        yield "", table, ""


def _query_partition(params: Mapping[str, Any]) -> str:
    """The partition a Query reads (its key condition's first equality)."""
    match = _KEY_CONDITION.match(str(params.get("KeyConditionExpression", "")))
    if match is None:
        return ""
    value = params.get("ExpressionAttributeValues", {}).get(match.group(2))
    return "" if value is None else partition_kind(value)


def _s3(name: str, params: Mapping[str, Any]) -> Found:
    bucket = str(params.get("Bucket", ""))
    if name in ("CopyObject", "UploadPartCopy"):
        source = params.get("CopySource", "")
        if isinstance(source, Mapping):
            source_bucket, source_key = str(source.get("Bucket", "")), str(source.get("Key", ""))
        else:
            source_bucket, _, source_key = str(source).lstrip("/").partition("/")
        yield "source", source_bucket, object_kind(source_key)
    if name == "DeleteObjects":
        for entry in params.get("Delete", {}).get("Objects", []):
            yield "", bucket, object_kind(str(entry.get("Key", "")))
    elif "Key" in params:
        yield "", bucket, object_kind(str(params["Key"]))
    elif "Prefix" in params:
        yield "", bucket, object_kind(str(params["Prefix"]))
    else:
        yield "", bucket, ""


def _sqs(_: str, params: Mapping[str, Any]) -> Found:
    yield "", str(params.get("QueueUrl", "")).rstrip("/").rpartition("/")[2], ""


def _sfn(_: str, params: Mapping[str, Any]) -> Found:
    """The state machine, by name, of a start (its ARN) or a stop (its execution's ARN); task
    tokens name none."""
    arn = str(params.get("stateMachineArn") or params.get("executionArn") or "")
    parts = arn.split(":")
    yield "", parts[6] if len(parts) > 6 else "", ""


def _kms(_: str, params: Mapping[str, Any]) -> Found:
    yield "", str(params.get("KeyId", "")), ""


def _secrets(_: str, params: Mapping[str, Any]) -> Found:
    yield "", str(params.get("SecretId", "")), ""
