"""The checks of a chaos run (``tests/e2e/chaos.py``) once its batches have ended, and its
latencies measured against their goals (see that module's docstring): for every batch, its
results and ``request_counts``; overall, the upstream requests the simulator saw against the
calls recorded and the attempts lost, no live model slot, no message left on the work queue,
nothing in its dead-letter queue, no dead reporter's load still counting.

They read the stack's tables, queues and workflow histories directly: the API shows neither
when each request ended nor its batch's end to the millisecond.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

import boto3
import httpx
from batchgw.config import resources
from batchgw.domain.batch import RECORD_SK
from batchgw.storage.dynamo import from_item
from batchgw.storage.reqlog import attempts_pk
from batchgw.storage.spend import MONTH, NO_KEY, UNKNOWN

from local import env as local_env
from local.run import LocalStack
from tests.e2e.chaos_report import LATENCY_GOAL_SECONDS, ChaosConfig, ChaosReport, percentile, workflow_lost
from tests.support import wait_for

TERMINAL = ("completed", "failed", "cancelled", "expired")
# A background response's status, by its request's end (its batch not cancelled).
RESPONSE_OF = {
    "succeeded": "completed",
    "failed": "failed",
    "cancelled": "cancelled",
    "expired": "incomplete",
}


@dataclass
class Checks:
    """What a run did and saw, and the stack's clients to check it with; each check adds what
    it finds to ``report`` (a broken invariant, a missed goal: a violation)."""

    stack: LocalStack
    config: ChaosConfig
    report: ChaosReport
    api: httpx.Client  # alice's, for the batches' results
    sim: httpx.Client
    sqs: Any
    queue: str  # the work queue's url
    deadline: float  # the end of the run's budget (time.monotonic())
    final: dict[str, dict[str, Any]]  # by batch: the batch as the observer first saw it final
    final_at: dict[str, float]  # by batch: when it did (time.time())
    created_at: dict[str, float]  # by batch: when its create's answer came
    cancelled_at: dict[str, float]  # by batch: when its cancel's answer came
    kills_at: list[float]  # when each worker was killed
    revocable: dict[str, str]  # by provider-run batch with a key of its own: the key's id
    reporter_ttl: float | None  # the interactive load reporters' ttl, if any ran (each died)
    dynamodb: Any = field(init=False)
    sfn: Any = field(init=False)
    dlq: str = field(init=False)

    def __post_init__(self) -> None:
        session = boto3.session.Session(
            aws_access_key_id="testing", aws_secret_access_key="testing", region_name=local_env.REGION
        )
        endpoint = self.stack.env["AWS_ENDPOINT_URL"]
        self.dynamodb = session.client("dynamodb", endpoint_url=endpoint)  # type: ignore[call-overload]
        self.sfn = session.client("stepfunctions", endpoint_url=endpoint)  # type: ignore[call-overload]
        self.dlq = self.sqs.get_queue_url(QueueName=local_env.dead_letter_queue_name(resources.WORK_QUEUE))[
            "QueueUrl"
        ]

    def _left(self) -> float:
        return max(0.0, self.deadline - time.monotonic())

    # --- the latencies ------------------------------------------------------------------------

    def measure(self, batch_ids: list[str]) -> None:
        """Each batch's latencies (see ``chaos.py``'s docstring), checked against the goals."""
        lease = self.report.lease_seconds
        for batch_id in batch_ids:
            batch = self.final.get(batch_id)
            final_at = self._ended_at(batch_id)
            seen_at = self.final_at.get(batch_id)
            if final_at is None or batch is None or seen_at is None:
                continue
            self.report.seen_late[batch_id] = max(0.0, seen_at - final_at)
            ends, lost = self._request_ends(batch_id)
            history = self._history(batch_id)
            if ends:
                died = workflow_lost(history, max(ends), final_at)
                self.report.final_lost[batch_id] = died
                self.report.final_latency[batch_id] = max(0.0, final_at - max(ends) - died)
            cancelled_at = self.cancelled_at.get(batch_id)
            if cancelled_at is None or batch["status"] != "cancelled":
                continue  # not cancelled, or its cancel came after it had ended
            # A kill before (cancel - lease) left nothing leased at the cancel; one after the
            # batch ended changed nothing; and a kill that held none of its requests lost none.
            kills = [kill for kill in self.kills_at if cancelled_at - lease <= kill <= final_at]
            if kills and lost:
                # Its running requests ran on until the kill: from the later of the two.
                self.report.cancel_latency_killed[batch_id] = max(
                    0.0, final_at - max(cancelled_at, kills[-1])
                )
                self.report.cancel_to_end_killed[batch_id] = max(0.0, final_at - cancelled_at)
            else:
                died = workflow_lost(history, cancelled_at, final_at)
                self.report.cancel_lost[batch_id] = died
                self.report.cancel_latency[batch_id] = max(0.0, final_at - cancelled_at - died)
        goals = [
            ("cancel -> cancelled", self.report.cancel_latency, LATENCY_GOAL_SECONDS),
            (
                "cancel (or the kill, if later) -> cancelled racing a worker kill",
                self.report.cancel_latency_killed,
                lease + LATENCY_GOAL_SECONDS,
            ),
            ("last request's end -> final status", self.report.final_latency, LATENCY_GOAL_SECONDS),
        ]
        for what, latencies, goal in goals:
            values = sorted(latencies.values())
            if values and percentile(values, 99) > goal:
                slowest = max(latencies, key=lambda b: latencies[b])
                self.report.violations.append(
                    f"{what}: p99 {percentile(values, 99):.2f} s over the goal of {goal:.0f} s "
                    f"(slowest {slowest}, {latencies[slowest]:.2f} s)"
                )
                self.report.timelines.append(self._timeline(slowest))

    def _timeline(self, batch_id: str) -> str:
        """What the batch's workflow did, and when its requests ended, from its cancel (or
        its create) on: the story of a batch that missed a goal."""
        start = self.cancelled_at.get(batch_id) or self.created_at.get(batch_id, 0.0)
        marks: list[tuple[float, str]] = []
        for event in self._history(batch_id):
            at = event["timestamp"].timestamp()
            if event["type"].endswith("StateEntered"):
                marks.append((at, event["stateEnteredEventDetails"]["name"]))
            elif event["type"] in ("TaskFailed", "TaskTimedOut", "TaskSucceeded"):
                marks.append((at, event["type"].removeprefix("Task").lower()))
        ends, _ = self._request_ends(batch_id)
        marks += [(at, "a request ended") for at in ends]
        ended_at = self._ended_at(batch_id)
        if ended_at is not None:
            marks.append((ended_at, "the batch ended"))
        shown = [f"{at - start:+.2f} {what}" for at, what in sorted(marks) if at >= start - 5]
        return f"{batch_id}, seconds from its {'cancel' if batch_id in self.cancelled_at else 'create'}: " + (
            ", ".join(shown)
        )

    def _ended_at(self, batch_id: str) -> float | None:
        """The batch's end as its record has it (to the millisecond)."""
        item = self.dynamodb.get_item(
            TableName=self.stack.env[resources.BATCHES.env_var],
            Key={"pk": {"S": batch_id}, "sk": {"S": RECORD_SK}},
            ProjectionExpression="ended_at",
            ConsistentRead=True,
        ).get("Item", {})
        return float(Decimal(item["ended_at"]["N"])) if "ended_at" in item else None

    def _history(self, batch_id: str) -> list[dict[str, Any]]:
        """The events of the batch's workflow execution, oldest first."""
        arn = self.stack.env["BATCHGW_STATE_MACHINE_ARN"].replace(":stateMachine:", ":execution:")
        events: list[dict[str, Any]] = []
        kwargs: dict[str, Any] = {"executionArn": f"{arn}:{batch_id}", "maxResults": 1000}
        while True:
            page = self.sfn.get_execution_history(**kwargs)
            events.extend(page["events"])
            if not page.get("nextToken"):
                return events
            kwargs["nextToken"] = page["nextToken"]

    def _request_ends(self, batch_id: str) -> tuple[list[float], bool]:
        """When each of the batch's requests ended, as stored (to the millisecond), and
        whether any of them lost an attempt with its worker."""
        ends: list[float] = []
        lost = False
        kwargs: dict[str, Any] = {
            "TableName": self.stack.env[resources.REQUESTS.env_var],
            "KeyConditionExpression": "pk = :pk",
            "ExpressionAttributeValues": {":pk": {"S": batch_id}},
            "ProjectionExpression": "ended_at, lost",
        }
        while True:
            page = self.dynamodb.query(**kwargs)
            for item in page["Items"]:
                if "ended_at" in item:
                    ends.append(float(Decimal(item["ended_at"]["N"])))
                lost = lost or int(item.get("lost", {"N": "0"})["N"]) > 0
            if "LastEvaluatedKey" not in page:
                return ends, lost
            kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]

    # --- the checks ---------------------------------------------------------------------------

    def _results(self, batch_id: str) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        after = None
        while True:
            params = {"limit": 1000, **({"after": after} if after else {})}
            page = self.api.get(f"/batches/{batch_id}/results", params=params).raise_for_status().json()
            out.extend(page["data"])
            if not page["has_more"]:
                return out
            after = page["last_id"]

    def check_batch(self, batch_id: str, batch: dict[str, Any]) -> None:
        violations = self.report.violations
        self.report.statuses[batch["status"]] += 1
        if batch_id in self.revocable:
            self.report.revoked[batch_id] = str((batch.get("error") or {}).get("code") or batch["status"])
        if batch["status"] == "failed":
            self.report.failed_batches.append(f"{batch_id}: {(batch.get('error') or {}).get('message')}")
        results = self._results(batch_id)
        ids = [r["custom_id"] for r in results]
        if len(ids) != self.config.requests or len(set(ids)) != len(ids):
            violations.append(f"{batch_id}: {len(ids)} results, {len(set(ids))} distinct")
        statuses = Counter(r["status"] for r in results)
        self.report.outcomes.update(statuses)
        unfinished = {s: n for s, n in statuses.items() if s not in TERMINAL}
        if unfinished:
            violations.append(f"{batch_id} ended {batch['status']} with requests not ended: {unfinished}")
        counts = batch["request_counts"]
        expected = {
            "total": self.config.requests,
            "completed": statuses["completed"],
            "failed": statuses["failed"] + statuses["expired"],
            "expired": statuses["expired"],
            "cancelled": statuses["cancelled"],
        }
        if counts != expected:
            violations.append(f"{batch_id}: request_counts {counts}, results say {expected}")

    def check_response(self, response_id: str) -> None:
        """A background response: its batch of one ended (its record final), its request has
        one terminal outcome, and what the API shows of it follows from the two."""
        violations = self.report.violations
        key = {"pk": {"S": response_id}, "sk": {"S": RECORD_SK}}
        table = self.stack.env[resources.BATCHES.env_var]

        def ended() -> dict[str, Any] | None:
            item = self.dynamodb.get_item(TableName=table, Key=key, ConsistentRead=True).get("Item")
            record = None if item is None else from_item(item)
            return record if record is not None and record.get("ended_at") is not None else None

        try:
            record = wait_for(
                ended, timeout=max(1.0, self._left()), interval=0.2, what=f"{response_id} to end"
            )
        except AssertionError:
            violations.append(f"{response_id}: its batch of one did not end within the budget")
            return
        requests_table = self.stack.env[resources.REQUESTS.env_var]
        requests = [item for item in self._items(requests_table, response_id) if "custom_id" in item]
        if len(requests) != 1 or requests[0]["status"] not in RESPONSE_OF:
            violations.append(f"{response_id}: requests {[r.get('status') for r in requests]}, not one ended")
            return
        expected = "cancelled" if record["status"] == "cancelled" else RESPONSE_OF[requests[0]["status"]]
        shown = self.api.get(f"/responses/{response_id}").raise_for_status().json()
        self.report.response_statuses[shown["status"]] += 1
        if shown["status"] != expected or (expected == "completed" and not shown["output"]):
            violations.append(
                f"{response_id} shows {shown['status']} ({len(shown['output'])} outputs); its batch "
                f"ended {record['status']}, its request {requests[0]['status']}"
            )

    def check_upstream(self, batch_ids: list[str]) -> None:
        calls = lost = 0
        table = self.stack.env[resources.REQUESTS.env_var]
        for batch_id in batch_ids:
            for item in self._items(table, batch_id, "calls, lost"):
                calls += int(item.get("calls", 0))
                lost += int(item.get("lost", 0))
        seen = int(self.sim.get("/_sim/stats").json()["models"]["sim-chat"]["requests"])
        self.report.upstream_seen, self.report.calls_recorded, self.report.lost_attempts = seen, calls, lost
        if not calls <= seen <= calls + lost:
            self.report.violations.append(
                f"the simulator saw {seen} requests; recorded calls {calls}, lost attempts {lost}"
            )

    def check_money(self, batch_ids: list[str]) -> None:
        """What the spend counters charged each user and key for known cost, against the
        attempts the request log recorded (each in the write that charged it): equal to the
        nano-dollar. Attempts of unknown cost (answers lost, workers killed mid-call) are
        charged at their most, apart: reported, not matched."""
        control = self.stack.env[resources.CONTROL.env_var]
        requests = self.stack.env[resources.REQUESTS.env_var]
        payers = {b: self._payer(b) for b in batch_ids}
        money = self.report.money
        for batch_id, payer in payers.items():
            for entry in self._items(requests, attempts_pk(batch_id)):
                if entry.get("cost_nano") is None:
                    self.report.unknown_cost_attempts += 1
                    continue
                for who in (f"user {payer[0]}", f"key {payer[1]}"):
                    money.setdefault(who, [0, 0, 0])[1] += int(entry["cost_nano"])
        for user in sorted({user for user, _ in payers.values()}):
            for item in self._items(control, f"spend#user#{user}"):
                unknown = int(item.get(UNKNOWN + MONTH, 0))
                known = int(item.get(MONTH, 0)) - unknown
                for who in (f"user {user}", f"key {str(item['sk']).split('#')[1]}"):
                    totals = money.setdefault(who, [0, 0, 0])
                    totals[0] += known
                    totals[2] += unknown
        for who, (charged, recorded, _) in sorted(money.items()):
            if charged != recorded:
                self.report.violations.append(
                    f"{who}: charged {charged} nano-dollars of known cost, its attempts recorded {recorded}"
                )

    def _payer(self, batch_id: str) -> tuple[str, str]:
        """The batch's owner and the key it runs under, from its record."""
        item = self.dynamodb.get_item(
            TableName=self.stack.env[resources.BATCHES.env_var],
            Key={"pk": {"S": batch_id}, "sk": {"S": RECORD_SK}},
        )["Item"]
        record = from_item(item)
        return str(record["owner"]), str(record.get("key_id") or NO_KEY)

    def _items(self, table: str, pk: str, projection: str | None = None) -> Iterator[dict[str, Any]]:
        """Every item of partition ``pk`` (its ``projection`` only, when given), as Python values."""
        kwargs: dict[str, Any] = {
            "TableName": table,
            "KeyConditionExpression": "pk = :pk",
            "ExpressionAttributeValues": {":pk": {"S": pk}},
        }
        if projection:
            kwargs["ProjectionExpression"] = projection
        while True:
            page = self.dynamodb.query(**kwargs)
            yield from (from_item(item) for item in page["Items"])
            if "LastEvaluatedKey" not in page:
                return
            kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]

    def check_drained(self) -> None:
        def live_slots() -> list[float]:
            item = self.dynamodb.get_item(
                TableName=self.stack.env[resources.CONTROL.env_var],
                Key={"pk": {"S": "slots#sim-chat"}, "sk": {"S": "slots"}},
            ).get("Item", {})
            now = time.time()
            return [
                float(Decimal(v["N"]))
                for v in item.get("s", {}).get("M", {}).values()
                if float(Decimal(v["N"])) > now
            ]

        def queue_depth(url: str) -> int:
            names = [
                "ApproximateNumberOfMessages",
                "ApproximateNumberOfMessagesNotVisible",
                "ApproximateNumberOfMessagesDelayed",
            ]
            attributes = self.sqs.get_queue_attributes(QueueUrl=url, AttributeNames=names)["Attributes"]
            return sum(int(attributes[n]) for n in names)

        # A message a crashed worker had received but not yet started comes back only after
        # the queue's visibility timeout (six worker timeouts), to be dropped: wait that long,
        # within what is left of the budget.
        drain = min(6 * self.config.worker_timeout_seconds + 40, self._left())
        for what, check in (
            ("a live model slot", lambda: not live_slots()),
            ("messages on the work queue", lambda: queue_depth(self.queue) == 0),
        ):
            try:
                wait_for(check, timeout=max(1.0, drain), interval=0.5, what=what)
            except AssertionError:
                self.report.violations.append(f"still {what} after every batch ended")
        # Every reporter died without a word: its load vanished with its ttl.
        if self.reporter_ttl is not None:
            admin = httpx.Client(
                base_url=self.stack.api_url.removesuffix("/v1"),
                headers={"Authorization": "Bearer sk-local-admin"},
                timeout=10,
            )
            try:
                wait_for(
                    lambda: admin.get("/admin/interactive-load").json()["data"] == [],
                    timeout=self.reporter_ttl + 5,
                    what="the dead reporters' load to vanish",
                )
            except AssertionError:
                self.report.violations.append("a dead reporter's interactive load still counts")
        dead = queue_depth(self.dlq)
        if dead:
            self.report.violations.append(f"{dead} messages in the dead-letter queue")
