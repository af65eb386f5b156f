"""After a restored start (``local.state``): start every batch's workflow again.

A snapshot keeps the batches' records, not the Step Functions executions that ran them
nor the queue messages their chains were made of. So, once the stack's resources exist,
each batch gets a new execution of the same state machine, started the way the api
starts one (``Workflow.start``: named after the batch, which no execution of this moto
bears yet). It enters at ``Prepare``, as a retried Prepare task would, and every step
from there is idempotent for that reason:

- a batch still being validated or written is validated or written on from its
  ``written`` frontier, once the dead prepare's lease has run out (``PrepareBusy``);
- a running batch gets its chains sent again, then parks; its reconcile takes over the
  requests whose workers died with the old stack once their leases run out, and re-sends
  lost work (a new generation of chains) once the batch has stalled;
- a cancelling batch is swept again and parks until its running requests are ended;
- a finalizing batch finalizes on from its cursor (its multipart uploads were kept);
- a finished batch finds its end again (its webhook event, if still pending, is sent) and
  waits out its retention, then is purged, as its lost execution would have done.

A deleted batch whose purge had not finished (its counter shards are left, not its
record) gets its purge started again (``Workflow.start_purge``).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import boto3
from batchgw.config import resources
from batchgw.domain.batch import RECORD_SK
from batchgw.storage.workflow import Workflow

log = logging.getLogger("local.resume")


def batch_ids(dynamodb: Any, table: str) -> tuple[list[str], list[str]]:
    """The batches table's batch ids: (those with a record, those with only leftovers)."""
    with_record: set[str] = set()
    leftovers: set[str] = set()
    for page in dynamodb.get_paginator("scan").paginate(
        TableName=table, ProjectionExpression="pk, sk", ConsistentRead=True
    ):
        for item in page["Items"]:
            batch_id = item["pk"]["S"]
            (with_record if item["sk"]["S"] == RECORD_SK else leftovers).add(batch_id)
    return sorted(with_record), sorted(leftovers - with_record)


def resume_workflows(env: Mapping[str, str]) -> dict[str, int]:
    """Start the workflow of every batch found in the stack's tables; what was started."""
    session = boto3.session.Session(
        region_name=env["AWS_DEFAULT_REGION"],
        aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"],
    )
    endpoint = env["AWS_ENDPOINT_URL"]
    dynamodb = session.client("dynamodb", endpoint_url=endpoint)  # type: ignore[call-overload]
    workflow = Workflow(
        session.client("stepfunctions", endpoint_url=endpoint),  # type: ignore[call-overload]
        env["BATCHGW_STATE_MACHINE_ARN"],
    )
    batches, deleted = batch_ids(dynamodb, env[resources.BATCHES.env_var])
    for batch_id in batches:
        workflow.start(batch_id)
    for batch_id in deleted:
        workflow.start_purge(batch_id)
    started = {"batches": len(batches), "purges": len(deleted)}
    log.info("workflows started again", extra=started)
    return started
