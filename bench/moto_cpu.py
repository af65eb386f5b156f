"""moto's own CPU per request, with the local patches that copy update trees by their shape,
answer item operations in plain JSON, size an item once, walk update trees with their
types known, keep an update's expression-only checks and keep parsed conditions
(``local.moto_patches`` 5, 7, 9, 10, 11 and 12) against without.

Everything runs in one process on moto's in-memory backend (no server): a request's calls
shaped as the gateway makes them (a put, a claim returning the item, an end transaction of
the request, its counter shard and an attempt log entry, a consistent read), the handler's
thread CPU time summed (``DynamoHandler.call_action``). Rounds of ``per_round`` requests
alternate those patches off and on, so the machine's busy moments weigh on both alike;
the figure is the median per request of each, and ``moto_patch_cpu_ratio`` = on / off.
The other patches (one lock, cheap transactions, plain parsing, kept update trees, a
transaction's conditions checked once, projections by name) stay on in both.

``python -m bench.moto_cpu [--rounds N] [--per-round N] [--json]``; ``make bench`` runs it
in a child process (it patches moto in the process it runs in).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from collections.abc import Callable
from typing import Any

BODY = {"S": "x" * 700}  # about the 1 KB request the cost workload names, stored
_END = "SET #st = :done, resp = :resp ADD calls :one REMOVE lease_owner, lease_until, req"
_CLAIM = (
    "SET #st = :running, lease_owner = :me, lease_until = :until, "
    "epoch = if_not_exists(epoch, :zero) + :one, attempts = if_not_exists(attempts, :zero) + :one"
)


def _table(client: Any, name: str) -> None:
    client.create_table(
        TableName=name,
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}],
        AttributeDefinitions=[
            {"AttributeName": "pk", "AttributeType": "S"},
            {"AttributeName": "sk", "AttributeType": "N"},
        ],
        BillingMode="PAY_PER_REQUEST",
    )


def _request(client: Any, index: int) -> None:
    """One request's calls: written, claimed, ended and counted, its shard read."""
    key = {"pk": {"S": "batch_1"}, "sk": {"N": str(index)}}
    shard = {"pk": {"S": "batch_1"}, "sk": {"N": "-1"}}
    client.put_item(TableName="requests", Item={**key, "st": {"S": "queued"}, "req": BODY})
    client.update_item(
        TableName="requests",
        Key=key,
        UpdateExpression=_CLAIM,
        ConditionExpression="#st = :queued",
        ExpressionAttributeNames={"#st": "st"},
        ExpressionAttributeValues={
            ":running": {"S": "running"},
            ":me": {"S": "worker-1"},
            ":until": {"N": "1700000000"},
            ":zero": {"N": "0"},
            ":one": {"N": "1"},
            ":queued": {"S": "queued"},
        },
        ReturnValues="ALL_NEW",
    )
    ended = {
        "TableName": "requests",
        "Key": key,
        "UpdateExpression": _END,
        "ConditionExpression": "#st = :running AND lease_owner = :me AND epoch = :epoch",
        "ExpressionAttributeNames": {"#st": "st"},
        "ExpressionAttributeValues": {
            ":done": {"S": "succeeded"},
            ":resp": BODY,
            ":one": {"N": "1"},
            ":running": {"S": "running"},
            ":me": {"S": "worker-1"},
            ":epoch": {"N": "1"},
        },
    }
    counted = {
        "TableName": "batches",
        "Key": shard,
        "UpdateExpression": "ADD #left :minus, ok :one",
        "ConditionExpression": "#left > :one",
        "ExpressionAttributeNames": {"#left": "left"},
        "ExpressionAttributeValues": {":minus": {"N": "-1"}, ":one": {"N": "1"}},
    }
    logged = {"pk": {"S": "attempts#batch_1"}, "sk": {"N": str(index)}, "outcome": {"S": "success"}}
    client.transact_write_items(
        TransactItems=[
            {"Update": ended},
            {"Update": counted},
            {"Put": {"TableName": "requests", "Item": logged}},
        ]
    )
    client.get_item(TableName="batches", Key=shard, ConsistentRead=True)


def measure(rounds: int = 8, per_round: int = 150) -> dict[str, float]:
    """The medians of alternating rounds: moto's handler CPU ms per request, patches 5, 7, 9,
    10, 11 and 12 off and on."""
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        os.environ.setdefault(name, "bench")
    os.environ.pop("AWS_ENDPOINT_URL", None)
    import boto3
    from moto import mock_aws
    from moto.dynamodb.comparisons import ConditionExpressionParser
    from moto.dynamodb.models.dynamo_type import Item
    from moto.dynamodb.parsing import validators
    from moto.dynamodb.parsing.ast_nodes import DepthFirstTraverser, Node  # type: ignore[attr-defined]
    from moto.dynamodb.parsing.validators import UpdateExpressionValidator
    from moto.dynamodb.responses import DynamoHandler, DynamoResult

    from local import moto_patches

    toggled = [
        (ConditionExpressionParser, "parse"),
        (validators, "deepcopy"),
        (DynamoResult, "execute_result"),
        (Item, "__init__"),
        (DepthFirstTraverser, "traverse"),
        (Node, "find_clauses"),
        (UpdateExpressionValidator, "__init__"),
        (UpdateExpressionValidator, "validate"),
    ]
    motos = [getattr(owner, name) for owner, name in toggled]
    moto_patches.apply()
    ours = [getattr(owner, name) for owner, name in toggled]

    def switch(versions: list[Any]) -> None:
        for (owner, name), version in zip(toggled, versions, strict=True):
            setattr(owner, name, version)

    spent = [0.0]
    handle: Callable[[Any], Any] = DynamoHandler.call_action

    def timed(self: Any) -> Any:
        start = time.thread_time()
        try:
            return handle(self)
        finally:
            spent[0] += time.thread_time() - start

    DynamoHandler.call_action = timed  # type: ignore[method-assign]
    samples: dict[bool, list[float]] = {False: [], True: []}
    try:
        with mock_aws():
            client = boto3.client("dynamodb", region_name="us-east-1")
            _table(client, "requests")
            _table(client, "batches")
            shard = {"pk": {"S": "batch_1"}, "sk": {"N": "-1"}, "left": {"N": str(10**9)}}
            client.put_item(TableName="batches", Item=shard)
            index = 0
            for _ in range(rounds):
                for patched in (False, True):
                    switch(ours if patched else motos)
                    spent[0] = 0.0
                    for _ in range(per_round):
                        _request(client, index)
                        index += 1
                    samples[patched].append(1000 * spent[0] / per_round)
    finally:
        DynamoHandler.call_action = handle  # type: ignore[method-assign]
        switch(ours)
    without, with_ = statistics.median(samples[False]), statistics.median(samples[True])
    return {
        "moto_cpu_ms_per_request_unpatched": without,
        "moto_cpu_ms_per_request": with_,
        "moto_patch_cpu_ratio": with_ / without,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--rounds", type=int, default=8, help="rounds of each (default 8)")
    parser.add_argument("--per-round", type=int, default=150, help="requests per round (default 150)")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args(argv)
    figures = measure(args.rounds, args.per_round)
    if args.json:
        print(json.dumps(figures))
    else:
        print(
            f"moto's CPU per request: {figures['moto_cpu_ms_per_request_unpatched']:.2f} ms without "
            f"patches 5, 7, 9, 10, 11 and 12, {figures['moto_cpu_ms_per_request']:.2f} ms with them: "
            f"ratio {figures['moto_patch_cpu_ratio']:.3f}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
