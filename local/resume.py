"""After a restored start (``local.state``): queue again what the lost queues held, and start
every batch's workflow again.

The queues are not snapshotted (on AWS, SQS keeps its messages across anything; the local
stack's moto starts with empty queues), so what they held is made again from the records:

- a webhook event whose delivery waits for its first or next attempt (its delivery record
  names it, written before the event is queued: ``storage.webhooks.waiting_delivery``) is
  queued again, each user's in their order; it waits for that attempt as the lost message
  did (``run.webhooks.deliver`` holds an early arrival), so it is delivered as if nothing
  had happened;
- a running batch's chains (the work queue's messages) are sent again by its workflow, below.

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

A finished batch whose end was announced (no webhook event pending) has nothing left to
do but wait out its retention: its execution would run Prepare and Finalize only to park
in ``KeepResults``. Most saved batches are such (in a stack used for a while, nearly all),
and starting an execution for each was most of a restart's time (1,000 batches: 139 s of
154 s before the API answered) and kept a parked thread each in moto. So they get no
execution: ``PurgeSchedule`` starts their purge when their retention ends, as
``KeepResults`` would have (``local.run`` checks it every few seconds).
"""

from __future__ import annotations

import heapq
import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import boto3
from batchgw.config import resources
from batchgw.domain.batch import RECORD_SK, BatchRecord
from batchgw.domain.webhooks import EventMessage
from batchgw.storage.dynamo import from_item
from batchgw.storage.queue import EventQueue
from batchgw.storage.webhooks import DELIVERIES_PREFIX, waiting_delivery
from batchgw.storage.workflow import Workflow

from local.env import CLOCK_OFFSET_ENV

log = logging.getLogger("local.resume")


@dataclass
class Saved:
    """What a restored batches table asks of the workflow, batch by batch."""

    to_start: list[str] = field(default_factory=list)  # unfinished, or an end to announce
    to_purge: list[str] = field(default_factory=list)  # deleted, the purge unfinished
    kept: list[tuple[float, str]] = field(default_factory=list)  # (purge at, batch id): waiting out retention


def saved_batches(dynamodb: Any, table: str) -> Saved:
    """Read the batches table once: which batches need their workflow started again, which
    their purge, and which only wait for the end of their retention."""
    records: dict[str, BatchRecord] = {}
    leftovers: set[str] = set()
    for page in dynamodb.get_paginator("scan").paginate(TableName=table, ConsistentRead=True):
        for raw in page["Items"]:
            item = from_item(raw)
            if item["sk"] == RECORD_SK:
                records[str(item["pk"])] = BatchRecord.from_item(item)
            else:
                leftovers.add(str(item["pk"]))
    saved = Saved(to_purge=sorted(leftovers - records.keys()))
    for batch_id, record in sorted(records.items()):
        if record.status.is_final and not record.event_pending:
            # finalize's own rule: no retention end recorded, purge now
            saved.kept.append((float(record.results_expires_at or 0), batch_id))
        else:
            saved.to_start.append(batch_id)
    return saved


def waiting_events(dynamodb: Any, table: str) -> list[EventMessage]:
    """The webhook events whose delivery waits for its next attempt, read from the control
    table's delivery records; each user's in the order of their events (the FIFO order the
    lost queue kept them in)."""
    events = []
    for page in dynamodb.get_paginator("scan").paginate(
        TableName=table,
        ConsistentRead=True,
        FilterExpression="begins_with(pk, :deliveries)",
        ExpressionAttributeValues={":deliveries": {"S": DELIVERIES_PREFIX}},
    ):
        for raw in page["Items"]:
            waiting = waiting_delivery(from_item(raw))
            if waiting is not None:
                user_id, delivery = waiting
                events.append(
                    EventMessage(
                        delivery.event_id, user_id, delivery.batch_id, delivery.type, delivery.created_ms
                    )
                )
    return sorted(events, key=lambda event: (event.user_id, event.created_at, event.event_id))


class PurgeSchedule:
    """The purges of finished batches that got no execution, each due at its retention end."""

    def __init__(self, workflow: Workflow, kept: list[tuple[float, str]], clock: Callable[[], float]) -> None:
        self._workflow = workflow
        self._clock = clock
        self._heap = list(kept)
        heapq.heapify(self._heap)
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._heap)

    def run_due(self) -> int:
        """Start the purge of every batch whose retention has ended; how many were started."""
        now = self._clock()
        started = 0
        while True:
            with self._lock:
                if not self._heap or self._heap[0][0] > now:
                    return started
                due = heapq.heappop(self._heap)
            try:
                # a batch deleted meanwhile: its purge ran already (its name is taken), or finds nothing
                self._workflow.start_purge(due[1])
            except Exception:
                with self._lock:
                    heapq.heappush(self._heap, due)  # the next check tries again
                raise
            started += 1


def _clients(env: Mapping[str, str]) -> tuple[Workflow, Any, EventQueue]:
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
    sqs = session.client("sqs", endpoint_url=endpoint)  # type: ignore[call-overload]
    return workflow, dynamodb, EventQueue(sqs, env[resources.WEBHOOK_QUEUE.env_var])


class StackStopping(Exception):
    """The stack stopped while its workflows were being started again."""


def _check(keep_going: Callable[[], bool]) -> None:
    if not keep_going():
        raise StackStopping


def stack_clock(env: Mapping[str, str]) -> Callable[[], float]:
    """The stack's clock (``BATCHGW_FAKE_NOW`` runs it ahead or behind): retention ends by it."""
    offset = float(env.get(CLOCK_OFFSET_ENV) or 0)
    return lambda: time.time() + offset


def resume_workflows(
    env: Mapping[str, str],
    keep_going: Callable[[], bool] = lambda: True,
    starting: Callable[[list[str]], None] | None = None,
) -> tuple[dict[str, int], PurgeSchedule]:
    """Queue again every webhook event waiting for its next attempt, and start the workflow
    of every batch found in the stack's tables that has work left; what was queued and
    started, and the schedule of the other batches' purges (its due ones started).
    ``starting`` hears which batches are about to be started again (before any is). Stops
    early (StackStopping) once ``keep_going`` says no (the stack is stopping)."""
    workflow, dynamodb, events = _clients(env)
    waiting = waiting_events(dynamodb, env[resources.CONTROL.env_var])
    for event in waiting:
        _check(keep_going)
        events.send(event)
    saved = saved_batches(dynamodb, env[resources.BATCHES.env_var])
    if starting is not None:
        starting(saved.to_start)
    for batch_id in saved.to_start:
        _check(keep_going)
        workflow.start(batch_id)
    for batch_id in saved.to_purge:
        _check(keep_going)
        workflow.start_purge(batch_id)
    schedule = PurgeSchedule(workflow, saved.kept, stack_clock(env))
    due = schedule.run_due()
    started = {
        "events": len(waiting),
        "batches": len(saved.to_start),
        "purges": len(saved.to_purge) + due,
        "kept": len(schedule),
    }
    log.info("workflows started again", extra=started)
    return started, schedule
