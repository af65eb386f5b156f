"""What a checkpoint of the local stack's state costs (``local.state``), by the number of items.

``python -m bench.checkpoint [--items 10000] [--rounds 5]`` fills an in-process moto with a
batch's worth of request items (the shape the requests table holds: about 20 attributes,
a packed body inline) plus one object per 100 items, then takes checkpoints and prints, as
medians: how long requests are held back (the gate closed, the state copied), the whole
checkpoint (written and fsynced), the file's size, and a restore of it into an empty moto.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from decimal import Decimal
from pathlib import Path

import boto3
from moto import mock_aws

from local import moto_patches, state


def _fill(items: int) -> None:
    dynamodb = boto3.client("dynamodb", region_name="us-east-1")
    dynamodb.create_table(
        TableName="batchgw-requests",
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "idx", "KeyType": "RANGE"}],
        AttributeDefinitions=[
            {"AttributeName": "pk", "AttributeType": "S"},
            {"AttributeName": "idx", "AttributeType": "N"},
        ],
        BillingMode="PAY_PER_REQUEST",
    )
    table = boto3.resource("dynamodb", region_name="us-east-1").Table("batchgw-requests")
    with table.batch_writer() as writer:
        for index in range(items):
            writer.put_item(
                Item={
                    "pk": f"batch_{index // 1000:04d}",
                    "idx": index % 1000,
                    "cid": f"request-{index}",
                    "model": "sim-chat",
                    "status": "succeeded",
                    "epoch": 1,
                    "attempts": 1,
                    "body": b"\x1f\x8b" + b"x" * 300,
                    "result": b"\x1f\x8b" + b"y" * 500,
                    "usage": {"prompt_tokens": 12, "completion_tokens": 40, "total_tokens": 52},
                    "cost": "0.000123",
                    "ended_at": Decimal("1796279818.894"),
                    "ttl": 1796379818,
                    **{f"extra_{n}": f"value {n}" for n in range(8)},
                }
            )
    s3 = boto3.client("s3", region_name="us-east-1")
    s3.create_bucket(Bucket="batchgw-data")
    for n in range(max(1, items // 100)):
        s3.put_object(Bucket="batchgw-data", Key=f"files/file-{n}", Body=b"{}\n" * 2000)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    moto_patches.apply()
    with tempfile.TemporaryDirectory() as temp, mock_aws():
        _fill(args.items)
        path = Path(temp) / "moto-state.pickle"
        checkpoints = state.Checkpointer(path, interval=60, gate=state.Gate())
        taken = [checkpoints.checkpoint(force=True) for _ in range(args.rounds)]
        done = [t for t in taken if t is not None]
        saved = state.read(path)
        assert saved is not None
    restores = []
    for _ in range(args.rounds):
        with mock_aws():
            started = time.perf_counter()
            state.apply(saved)
            restores.append(time.perf_counter() - started)
    print(
        f"checkpoint of {args.items} items and {max(1, args.items // 100)} objects, median of {args.rounds}: "
        f"requests held {statistics.median(t.seconds_closed for t in done) * 1000:.0f} ms, "
        f"whole checkpoint {statistics.median(t.seconds for t in done) * 1000:.0f} ms, "
        f"file {done[-1].bytes / 2**20:.1f} MiB, restore {statistics.median(restores) * 1000:.0f} ms"
    )


if __name__ == "__main__":
    main()
