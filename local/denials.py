"""Control-table partitions nobody may reach, for tests of the local stack.

``BATCHGW_DYNAMODB_DENY_PARTITIONS`` (``pk`` values, comma-separated, e.g. ``interactive``)
makes the moto process answer ``AccessDeniedException`` to every DynamoDB item call and
query that names one of them as its partition key, as IAM answers a function whose role
does not reach that partition, or a table another service broke: what the gateway does when
it cannot read something (the interactive load reports: no new batch request starts) is
tested over the whole stack. Each denial is logged (``dynamodb denied``).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Mapping
from typing import Any

from moto.dynamodb.exceptions import DynamodbException
from moto.dynamodb.responses import DynamoHandler

DENY_PARTITIONS_ENV = "BATCHGW_DYNAMODB_DENY_PARTITIONS"
DENIED = "dynamodb denied"
_CALLS = ("get_item", "put_item", "update_item", "delete_item", "query")
_ACCESS_DENIED = "com.amazonaws.dynamodb.v20120810#AccessDeniedException"

log = logging.getLogger("local.denials")


def denied_partitions(env: Mapping[str, str]) -> frozenset[str]:
    return frozenset(p.strip() for p in env.get(DENY_PARTITIONS_ENV, "").split(",") if p.strip())


def partition_of(body: Mapping[str, Any]) -> str | None:
    """The partition key a call's body names: its item's or key's ``pk``, or the value a
    query's key condition compares ``pk`` with."""
    for field in ("Key", "Item"):
        pk = (body.get(field) or {}).get("pk", {})
        if "S" in pk:
            return str(pk["S"])
    condition = str(body.get("KeyConditionExpression", ""))
    names = {v: k for k, v in (body.get("ExpressionAttributeNames") or {}).items()}
    for token in condition.replace("(", " ").replace(")", " ").split(" AND "):
        left, _, right = (part.strip() for part in token.partition("="))
        if (left == "pk" or names.get("pk") == left) and right.startswith(":"):
            value = (body.get("ExpressionAttributeValues") or {}).get(right, {})
            return str(value["S"]) if "S" in value else None
    return None


def install(env: Mapping[str, str]) -> Callable[[], None] | None:
    """Deny what ``env`` asks; the undoing (None if it asks nothing)."""
    denied = denied_partitions(env)
    if not denied:
        return None
    originals = {name: getattr(DynamoHandler, name) for name in _CALLS}

    def wrapped(name: str, original: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(original)
        def call(handler: DynamoHandler) -> Any:
            partition = partition_of(handler.body)
            if partition in denied:
                log.warning(DENIED, extra={"call": name, "partition": partition})
                raise DynamodbException(_ACCESS_DENIED, f"not authorized to reach partition {partition}")
            return original(handler)

        return call

    for name, original in originals.items():
        setattr(DynamoHandler, name, wrapped(name, original))
    log.info("dynamodb partitions denied", extra={"partitions": sorted(denied)})

    def uninstall() -> None:
        for name, original in originals.items():
            setattr(DynamoHandler, name, original)

    return uninstall
