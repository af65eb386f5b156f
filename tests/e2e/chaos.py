"""A seeded chaos run on a local stack: many concurrent batches while worker processes
crash at random moments, the workflow's tasks die at random AWS calls (``local.crashes``:
before a call is sent, or after it was made and its answer lost), the simulator answers
random retryable errors, timeouts and ``model_queued``, chain messages are delivered
again, random batches are cancelled, interactive load reporters (``--reporters``) report
load on the batches' model and die mid-run, and (``--throttle-rate``) DynamoDB refuses random
calls for throughput (``local.throttling``), as a provisioned table past its capacity does.

Afterwards, for every batch: a final status; ``request_counts`` equal to its terminal
requests; every request exactly one terminal outcome. Overall: the upstream requests the
simulator saw lie between the calls whose outcome was recorded and those plus the
attempts lost with their workers; no live model slot; no message left on the work queue;
nothing in its dead-letter queue; no dead reporter's load still counting.

It also measures how fast batches end, with goals the run fails on (``LATENCY_GOAL_SECONDS``):

- **cancel to cancelled**, for every batch a cancel ended: from the moment the cancel's
  answer came back to the batch's end. A batch whose
  cancel raced a deliberate worker kill is measured apart, from the later of its cancel and
  the kill, its goal the lease plus the same margin: a kill came from one lease before its
  cancel until it ended, and one of its requests lost an attempt with its worker (``lost``
  as stored), so a request may have been left leased by a dead worker, which only the
  reconciler ends once the lease runs out (its requests may have run on until the kill:
  the time from the cancel is printed beside it);
- **last request's end to final status**, for every batch: from the latest ``ended_at``
  of its requests to the batch's end.

Both are measured less the time the batch's workflow lost to deliberate task deaths in
that span (each printed beside it): a workflow task that died is tried again after its
Retry's interval (1, 2, 4 s...: the workflow's design, as on AWS), so from when the dead
attempt was scheduled to when its retry was is the fault's own cost, read from the
execution's history, not the gateway's slowness.

Both read the stack's tables, as the checks below do (the API shows neither when each
request ended nor its batch's end to the millisecond): a batch's end is its record's
``ended_at``, the clock reading of the finalize that gave it its final status, taken just
before its result files are written (for these batches, a fraction of a second before the
status reads final). An observer thread polls every unfinished batch in turn, from the
first create on, to know when all have ended; when it first saw each final is reported
too, as an upper bound (its round, also reported, is slow on a loaded machine, whose API
answers slowly). The whole run has one time
budget (``--timeout``, the drain included): whatever is not done by then, or whatever the
harness itself hit (an HTTP error, a timeout), is a violation in the report, which is always
printed.

``make chaos`` runs it long and prints the totals (``python -m tests.e2e.chaos --help``);
``tests/e2e/test_chaos.py`` runs a short form in ``make test``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import sys
import tempfile
import threading
import time
import traceback
from collections import Counter
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

import boto3
import httpx
from batchgw.config import resources
from batchgw.domain.batch import RECORD_SK
from batchgw.domain.chains import ChainMessage

from local import crashes, throttling
from local import env as local_env
from local.run import LocalStack
from tests.support import wait_for

CHAOS_ENV = {
    "BATCH_MODEL_CONCURRENCY": "6",
    "BATCH_LEASE_SECONDS": "3",
    "BATCH_PREPARE_LEASE_SECONDS": "4",
    "BATCH_UPSTREAM_TIMEOUT_SECONDS": "2",
    "BATCH_RETRY_BASE_SECONDS": "0.2",
    "BATCH_RETRY_MAX_SECONDS": "1",
    "BATCH_MODEL_PAUSE_AFTER_FAILURES": "25",
    "BATCH_MODEL_PAUSE_SECONDS": "1",
    "BATCH_MODEL_QUEUED_PAUSE_MAX_SECONDS": "1",
    "BATCH_MAX_ACTIVE_PER_USER": "1000",
    # A provider-run batch learns of a cancel at its next poll: polled every 2 s at most here.
    "BATCH_PROVIDER_POLL_MAX_SECONDS": "2",
}
FINAL = ("completed", "failed", "expired", "cancelled")
TERMINAL = ("completed", "failed", "cancelled", "expired")
# p99 of both latencies; for a cancel that raced a worker kill, the lease plus this.
LATENCY_GOAL_SECONDS = 10.0
# What the drain check keeps of the budget at least (a queue drains within a visibility).
DRAIN_SHARE = 0.3
# How long the stack may take to start, apart from the run's budget.
STARTUP_SECONDS = 180.0
# What a request may ask of the simulator, with its weight.
FAULTS = [
    ("", 10),
    ("[[sim status=503 fail=1]]", 3),
    ("[[sim status=429 fail=2]]", 2),
    ("[[sim status=500 fail=1]]", 2),
    ("[[sim queued fail=1 retry_after=1]]", 2),
    ("[[sim status=400]]", 1),
    ("[[sim hang fail=1]]", 1),
]


@dataclass
class ChaosConfig:
    seed: int = 7
    batches: int = 8
    requests: int = 30  # per batch
    kills: int = 4
    duplicates: int = 6
    cancels: int = 2
    workers: int = 3
    window_seconds: float = 0  # 0: no window
    timeout: float = 240  # the whole run's budget, from the first create to the last check
    reconcile_seconds: float = 2
    worker_timeout_seconds: float = 12
    task_crash_rate: float = 0.0  # per AWS call of a workflow task: it dies there
    throttle_rate: float = 0.0  # per DynamoDB item call: refused for throughput (local.throttling)
    # Interactive load reporters: each reports 0-3 requests in flight on sim-chat every half
    # second (a 2 s ttl) until it dies at a random moment, never saying so.
    reporters: int = 0
    # Of the batches, this many run on the provider's batch service (``execution_mode``
    # provider, the simulator's OpenAI batch API): their workflow's provider step dies at
    # AWS calls like any task, and duplicated chain messages reach them too.
    provider_batches: int = 0
    # Of the provider-run batches, this many run under a key of their own (alice's) that an
    # administrator revokes mid-run: each must end (owner_unauthorized, or as it was) with
    # every request's one outcome, sending the provider nothing more.
    revocations: int = 0


@dataclass
class ChaosReport:
    batches: int = 0
    requests: int = 0
    kills: int = 0
    duplicates: int = 0
    cancels: int = 0
    faults: int = 0
    task_deaths: int = 0
    throttled: int = 0
    reporters: int = 0  # interactive load reporters, every one of which died mid-run
    reports: int = 0  # the load reports they made
    provider_batches: int = 0  # batches run on the provider's batch service
    revoked: dict[str, str] = field(default_factory=dict)  # by batch whose key was revoked: how it ended
    statuses: Counter[str] = field(default_factory=Counter)
    outcomes: Counter[str] = field(default_factory=Counter)
    upstream_seen: int = 0
    calls_recorded: int = 0
    lost_attempts: int = 0
    seconds: float = 0.0
    violations: list[str] = field(default_factory=list)
    timelines: list[str] = field(default_factory=list)  # of the batches that missed a goal
    failed_batches: list[str] = field(default_factory=list)  # each with its error's message
    cancel_latency: dict[str, float] = field(default_factory=dict)  # by batch: cancel -> cancelled
    cancel_latency_killed: dict[str, float] = field(default_factory=dict)  # racing a kill: from it
    cancel_to_end_killed: dict[str, float] = field(default_factory=dict)  # the same, from the cancel
    final_latency: dict[str, float] = field(default_factory=dict)  # by batch: last end -> final
    # by batch: what its workflow lost to task deaths, within each measured span above
    cancel_lost: dict[str, float] = field(default_factory=dict)
    final_lost: dict[str, float] = field(default_factory=dict)
    poll_rounds: list[float] = field(default_factory=list)  # the observer's rounds, seconds
    seen_late: dict[str, float] = field(default_factory=dict)  # by batch: end -> seen final
    load: list[float] = field(default_factory=list)  # the machine's 1-minute load, at start and end
    lease_seconds: float = 0.0

    def latency_lines(self) -> list[str]:
        rounds = sorted(self.poll_rounds)
        resolution = (
            f"observer round p50 {percentile(rounds, 50):.2f} s, max {rounds[-1]:.2f} s"
            if rounds
            else "no rounds"
        )
        return [
            f"cancel -> cancelled: {spread(self.cancel_latency)} (goal p99 <= {LATENCY_GOAL_SECONDS:.0f} s)",
            "cancel (or the kill, if later) -> cancelled, racing a worker kill: "
            f"{spread(self.cancel_latency_killed)} "
            f"(goal p99 <= lease {self.lease_seconds:.0f} s + {LATENCY_GOAL_SECONDS:.0f} s)",
            *(
                f"  cancelled {b}: {v:.2f} s{lost_to_deaths(self.cancel_lost.get(b, 0.0))}"
                for b, v in sorted(self.cancel_latency.items())
            ),
            *(
                f"  cancelled {b}: {v:.2f} s after the kill, racing a kill "
                f"({self.cancel_to_end_killed.get(b, 0.0):.2f} s after the cancel)"
                for b, v in sorted(self.cancel_latency_killed.items())
            ),
            f"last request's end -> final status: {spread(self.final_latency)} "
            f"(goal p99 <= {LATENCY_GOAL_SECONDS:.0f} s)",
            *(
                f"  ended {b}: {self.final_latency[b]:.2f} s{lost_to_deaths(v)}"
                for b, v in sorted(self.final_lost.items())
                if v > 0 and b in self.final_latency
            ),
            f"  first seen final by the observer after the end: {spread(self.seen_late)}; {resolution}",
        ]

    def lines(self) -> list[str]:
        return [
            f"batches {self.batches} ({dict(self.statuses)}; {self.provider_batches} on the provider)",
            f"keys revoked mid-run {len(self.revoked)} "
            f"(their batches ended {dict(Counter(self.revoked.values()))})",
            f"requests {self.requests} ({dict(self.outcomes)})",
            f"kills {self.kills}, duplicated chain messages {self.duplicates}, cancels {self.cancels}, "
            f"requests with faults {self.faults}, workflow task deaths {self.task_deaths}, "
            f"dynamodb calls refused for throughput {self.throttled}, "
            f"interactive load reporters that died {self.reporters} (after {self.reports} reports)",
            f"upstream requests seen {self.upstream_seen}: calls recorded {self.calls_recorded}, "
            f"attempts lost with their worker {self.lost_attempts}",
            *(f"  failed batch {failed}" for failed in self.failed_batches),
            *self.latency_lines(),
            f"load average {' -> '.join(f'{x:.1f}' for x in self.load)} (goals set for a quiet one)",
            f"seconds {self.seconds:.1f}, violations {len(self.violations)}",
            *(f"  VIOLATION: {v}" for v in self.violations),
            *(f"  TIMELINE: {t}" for t in self.timelines),
        ]


def percentile(values: list[float], p: float) -> float:
    """The nearest-rank percentile of sorted ``values`` (not empty)."""
    return values[max(0, math.ceil(p / 100 * len(values)) - 1)]


def lost_to_deaths(seconds: float) -> str:
    return f" (less {seconds:.2f} s its workflow lost to task deaths)" if seconds > 0 else ""


def workflow_lost(events: list[dict[str, Any]], since: float, until: float) -> float:
    """Seconds within [since, until] that an execution lost to tasks that failed: from each
    failed attempt's scheduling to the next task's (its retry, after the Retry's interval,
    or the Catch's next task). ``events`` are the execution's history, in order."""
    lost = 0.0
    scheduled: float | None = None  # the running attempt's
    failed_from: float | None = None  # a failed attempt's, until the next is scheduled
    for event in events:
        at = event["timestamp"].timestamp()
        if event["type"] == "TaskScheduled":
            if failed_from is not None:
                lost += max(0.0, min(at, until) - max(failed_from, since))
                failed_from = None
            scheduled = at
        elif event["type"] == "TaskFailed" and scheduled is not None:
            failed_from = scheduled
    return lost


def spread(latencies: dict[str, float]) -> str:
    values = sorted(latencies.values())
    if not values:
        return "no batches"
    return (
        f"{len(values)} batches, p50 {percentile(values, 50):.2f} s, p99 {percentile(values, 99):.2f} s, "
        f"max {values[-1]:.2f} s"
    )


class Observer:
    """Polls every batch not yet seen final, in turn, from its create on; notes when each
    was first seen final (time.time(), as the stack's processes stamp their records)."""

    def __init__(self, api_url: str) -> None:
        self.api = httpx.Client(
            base_url=api_url, headers={"Authorization": "Bearer sk-local-alice"}, timeout=30
        )
        self.watched: list[str] = []
        self.final: dict[str, dict[str, Any]] = {}  # by batch: the batch as first seen final
        self.final_at: dict[str, float] = {}
        self.rounds: list[float] = []
        self.errors = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="chaos-observer", daemon=True)

    def watch(self, batch_id: str) -> None:
        with self._lock:
            self.watched.append(batch_id)
        if not self._thread.is_alive():
            self._thread.start()

    def unfinished(self) -> list[str]:
        with self._lock:
            return [b for b in self.watched if b not in self.final]

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=40)

    def _run(self) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            polled = self.unfinished()
            for batch_id in polled:
                try:
                    batch = self.api.get(f"/batches/{batch_id}").json()
                except (httpx.HTTPError, ValueError):
                    self.errors += 1  # a loaded stack: asked again next round
                    continue
                if batch.get("status") in FINAL:
                    with self._lock:
                        self.final[batch_id], self.final_at[batch_id] = batch, time.time()
            if polled:
                self.rounds.append(time.monotonic() - started)
            self._stop.wait(0.05)


class Reporter:
    """A gateway process reporting its interactive load on sim-chat (``PUT
    /admin/interactive-load/{id}``) every half second, until ``die``: then it stops, as a
    killed process does, without removing its report (its ttl makes it vanish)."""

    TTL_SECONDS = 2

    def __init__(self, api_url: str, name: str, seed: int) -> None:
        self.name = name
        self.reports = 0
        self.errors = 0
        self._rng = random.Random(seed)
        self._admin = httpx.Client(
            base_url=api_url.removesuffix("/v1"),
            headers={"Authorization": "Bearer sk-local-admin"},
            timeout=10,
        )
        self._dead = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"chaos-{name}", daemon=True)
        self._thread.start()

    def die(self) -> None:
        self._dead.set()
        self._thread.join(timeout=15)

    def _run(self) -> None:
        while not self._dead.is_set():
            load = {"models": {"sim-chat": self._rng.randint(0, 3)}, "ttl_seconds": self.TTL_SECONDS}
            try:
                self._admin.put(f"/admin/interactive-load/{self.name}", json=load).raise_for_status()
                self.reports += 1
            except httpx.HTTPError:
                self.errors += 1  # a loaded stack: reported again in a moment
            self._dead.wait(0.5)


class Chaos:
    def __init__(self, stack: LocalStack, config: ChaosConfig) -> None:
        self.stack = stack
        self.config = config
        self.rng = random.Random(config.seed)
        self.report = ChaosReport()
        self.api = httpx.Client(
            base_url=stack.api_url, headers={"Authorization": "Bearer sk-local-alice"}, timeout=30
        )
        self.sim = httpx.Client(base_url=stack.sim_url, timeout=10)
        session = boto3.session.Session(
            aws_access_key_id="testing", aws_secret_access_key="testing", region_name=local_env.REGION
        )
        endpoint = stack.env["AWS_ENDPOINT_URL"]
        self.sqs = session.client("sqs", endpoint_url=endpoint)  # type: ignore[call-overload]
        self.dynamodb = session.client("dynamodb", endpoint_url=endpoint)  # type: ignore[call-overload]
        self.sfn = session.client("stepfunctions", endpoint_url=endpoint)  # type: ignore[call-overload]
        self.queue = stack.env[resources.WORK_QUEUE.env_var]
        self.dlq = self.sqs.get_queue_url(QueueName=local_env.dead_letter_queue_name(resources.WORK_QUEUE))[
            "QueueUrl"
        ]
        self.observer = Observer(stack.api_url)
        self.cancelled_at: dict[str, float] = {}  # by batch: when its cancel's answer came
        self.created_at: dict[str, float] = {}  # by batch: when its create's answer came
        self.kills_at: list[float] = []
        self.reporters: list[Reporter] = []
        self.admin = httpx.Client(
            base_url=stack.api_url.removesuffix("/v1"),
            headers={"Authorization": "Bearer sk-local-admin"},
            timeout=30,
        )
        self.revocable: dict[str, str] = {}  # by provider-run batch with a key of its own: the key's id
        self.deadline = math.inf
        self.report.lease_seconds = float(CHAOS_ENV["BATCH_LEASE_SECONDS"])

    # --- the run ------------------------------------------------------------------------------

    def run(self) -> ChaosReport:
        """Run, within the budget (``ChaosConfig.timeout``); the report always comes back:
        what the harness could not do in time, or hit on its way, is a violation in it."""
        started = time.monotonic()
        self.deadline = started + self.config.timeout
        self.report.load = [os.getloadavg()[0]]
        batch_ids: list[str] = []
        try:
            self.sim.post("/_sim/reset").raise_for_status()
            for i in range(self.config.batches):
                batch_ids.append(self._create(i))
                self.observer.watch(batch_ids[-1])
            self.report.batches = len(batch_ids)
            self.reporters = [
                Reporter(self.stack.api_url, f"chaos-gateway-{i}", self.config.seed + i)
                for i in range(self.config.reporters)
            ]
            self._disturb(batch_ids)
            self._wait_final(batch_ids)
            for batch_id, batch in dict(self.observer.final).items():
                self._check_batch(batch_id, batch)
            self._measure(batch_ids)
            self._check_upstream(batch_ids)
            self._check_drained()
        except Exception as exc:  # the harness's own trouble: reported, not lost
            self.report.violations.append(f"the harness stopped: {type(exc).__name__}: {exc}")
            traceback.print_exc()
        finally:
            for reporter in self.reporters:
                reporter.die()  # (each died already, unless the harness stopped early)
            self.report.reports = sum(r.reports for r in self.reporters)
            self.observer.stop()
            self.report.poll_rounds = list(self.observer.rounds)
            self.report.task_deaths = self._logged(crashes.DIED)
            self.report.throttled = self._logged(throttling.THROTTLED)
            self.report.seconds = time.monotonic() - started
            self.report.load.append(os.getloadavg()[0])
        return self.report

    def _left(self) -> float:
        return max(0.0, self.deadline - time.monotonic())

    def _create(self, number: int) -> str:
        requests = []
        for i in range(self.config.requests):
            fault = self.rng.choices([f for f, _ in FAULTS], weights=[w for _, w in FAULTS])[0]
            self.report.faults += bool(fault)
            latency = self.rng.randint(20, 400)
            text = f"chaos {number}.{i} {fault} [[sim latency_ms={latency}]]"
            requests.append(
                {
                    "custom_id": f"c-{number}-{i}",
                    "body": {"model": "sim-chat", "messages": [{"role": "user", "content": text}]},
                }
            )
        self.report.requests += len(requests)
        on_provider = number < self.config.provider_batches
        self.report.provider_batches += on_provider
        mode = {"execution_mode": "provider"} if on_provider else {}
        key = None
        if on_provider and number < self.config.revocations:
            key = self.admin.post("/admin/users/user-alice/keys", json={"name": f"chaos {number}"})
            key.raise_for_status()
        headers = {"Authorization": f"Bearer {key.json()['key']}"} if key is not None else {}
        resp = self.api.post("/batches", json={"requests": requests, **mode}, headers=headers)
        resp.raise_for_status()
        batch_id = str(resp.json()["id"])
        if key is not None:
            self.revocable[batch_id] = str(key.json()["id"])
        self.created_at[batch_id] = time.time()
        return batch_id

    def _disturb(self, batch_ids: list[str]) -> None:
        """Kills, duplicate deliveries and cancels, in a seeded random order and rhythm."""
        actions = (
            ["kill"] * self.config.kills
            + ["duplicate"] * self.config.duplicates
            + ["cancel"] * self.config.cancels
            + ["reporter dies"] * len(self.reporters)
        )
        self.rng.shuffle(actions)
        # The revocations come first, while the provider still runs those batches (its
        # simulated batches end within seconds).
        actions = ["revoke"] * len(self.revocable) + actions
        cancellable = list(batch_ids)
        living = list(self.reporters)
        revocable = list(self.revocable)
        for action in actions:
            time.sleep(self.rng.uniform(0.3, 1.5))
            if action == "revoke":
                batch_id = revocable.pop(self.rng.randrange(len(revocable)))
                self.admin.post(f"/admin/keys/{self.revocable[batch_id]}/revoke").raise_for_status()
            elif action == "reporter dies":
                living.pop(self.rng.randrange(len(living))).die()
                self.report.reporters += 1
            elif action == "kill":
                self.stack.crash(f"worker-{self.rng.randrange(self.config.workers)}")
                self.kills_at.append(time.time())
                self.report.kills += 1
            elif action == "duplicate":
                batch_id = self.rng.choice(batch_ids)
                chains = int(CHAOS_ENV["BATCH_MODEL_CONCURRENCY"])
                chain = self.rng.randrange(chains)
                self.sqs.send_message(
                    QueueUrl=self.queue, MessageBody=ChainMessage(batch_id, chain, chain, chains).encode()
                )
                self.report.duplicates += 1
            elif cancellable:
                batch_id = cancellable.pop(self.rng.randrange(len(cancellable)))
                self.api.post(f"/batches/{batch_id}/cancel").raise_for_status()
                self.cancelled_at[batch_id] = time.time()
                self.report.cancels += 1

    def _logged(self, event: str) -> int:
        """How many times moto's process logged ``event`` (a task's death, a refusal)."""
        log = self.stack.log_dir / "moto.log" if self.stack.log_dir else None
        if log is None or not log.exists():
            return 0
        return sum(event in line for line in log.read_text(errors="replace").splitlines())

    def _wait_final(self, batch_ids: list[str]) -> None:
        """Wait until the observer has seen every batch final, within the budget but for the
        share the drain check keeps."""
        keep = DRAIN_SHARE * self.config.timeout
        try:
            wait_for(
                lambda: not self.observer.unfinished(),
                timeout=max(1.0, self._left() - keep),
                interval=0.2,
                what="every batch to end",
            )
        except AssertionError:
            for batch_id in self.observer.unfinished():
                try:
                    status = self.api.get(f"/batches/{batch_id}").json().get("status")
                except (httpx.HTTPError, ValueError) as exc:
                    status = f"unknown: {type(exc).__name__}"
                self.report.violations.append(f"{batch_id} did not end within the budget (still {status})")

    def _measure(self, batch_ids: list[str]) -> None:
        """Each batch's latencies (see the module's docstring), checked against the goals."""
        lease = self.report.lease_seconds
        for batch_id in batch_ids:
            batch = self.observer.final.get(batch_id)
            final_at = self._ended_at(batch_id)
            seen_at = self.observer.final_at.get(batch_id)
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

    def _check_batch(self, batch_id: str, batch: dict[str, Any]) -> None:
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

    def _check_upstream(self, batch_ids: list[str]) -> None:
        calls = lost = 0
        table = self.stack.env[resources.REQUESTS.env_var]
        for batch_id in batch_ids:
            kwargs: dict[str, Any] = {
                "TableName": table,
                "KeyConditionExpression": "pk = :pk",
                "ExpressionAttributeValues": {":pk": {"S": batch_id}},
                "ProjectionExpression": "calls, lost",
            }
            while True:
                page = self.dynamodb.query(**kwargs)
                for item in page["Items"]:
                    calls += int(item.get("calls", {"N": "0"})["N"])
                    lost += int(item.get("lost", {"N": "0"})["N"])
                if "LastEvaluatedKey" not in page:
                    break
                kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]
        seen = int(self.sim.get("/_sim/stats").json()["models"]["sim-chat"]["requests"])
        self.report.upstream_seen, self.report.calls_recorded, self.report.lost_attempts = seen, calls, lost
        if not calls <= seen <= calls + lost:
            self.report.violations.append(
                f"the simulator saw {seen} requests; recorded calls {calls}, lost attempts {lost}"
            )

    def _check_drained(self) -> None:
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
        if self.reporters:  # every reporter died without a word: its load vanished with its ttl
            admin = httpx.Client(
                base_url=self.stack.api_url.removesuffix("/v1"),
                headers={"Authorization": "Bearer sk-local-admin"},
                timeout=10,
            )
            try:
                wait_for(
                    lambda: admin.get("/admin/interactive-load").json()["data"] == [],
                    timeout=Reporter.TTL_SECONDS + 5,
                    what="the dead reporters' load to vanish",
                )
            except AssertionError:
                self.report.violations.append("a dead reporter's interactive load still counts")
        dead = queue_depth(self.dlq)
        if dead:
            self.report.violations.append(f"{dead} messages in the dead-letter queue")


def chaos_stack(log_dir: Path, config: ChaosConfig) -> LocalStack:
    env = {
        **CHAOS_ENV,
        "BATCH_COMPLETION_WINDOW_HOURS": str(config.window_seconds / 3600),
        "BATCH_RECONCILE_SECONDS": str(config.reconcile_seconds),
        "BATCH_WORKER_TIMEOUT_SECONDS": str(config.worker_timeout_seconds),
    }
    if config.task_crash_rate:
        tasks = ",".join(
            f"{local_env.function_name(s)}={config.task_crash_rate}" for s in resources.WORKFLOW_SUBSTITUTIONS
        )
        env.update({crashes.CRASHES_ENV: tasks, crashes.CRASH_SEED_ENV: str(config.seed)})
    if config.throttle_rate:
        env.update(
            {
                throttling.THROTTLE_RATE_ENV: str(config.throttle_rate),
                throttling.THROTTLE_SEED_ENV: str(config.seed),
            }
        )
    # A loaded machine starts moto and the handlers slowly: the start has a budget of its own.
    return LocalStack(
        api_port=0,
        sim_port=0,
        moto_port=0,
        env_overrides=env,
        workers=config.workers,
        log_dir=log_dir,
        startup_timeout=STARTUP_SECONDS,
    )


def main(argv: list[str] | None = None) -> int:
    defaults = ChaosConfig()
    parser = argparse.ArgumentParser(description="A seeded chaos run on a local stack; prints the totals.")
    names = ("seed", "batches", "requests", "kills", "duplicates", "cancels", "workers", "reporters")
    for name in (*names, "provider_batches", "revocations"):
        parser.add_argument(f"--{name.replace('_', '-')}", type=int, default=getattr(defaults, name))
    parser.add_argument("--window-seconds", type=float, default=defaults.window_seconds)
    parser.add_argument("--reconcile-seconds", type=float, default=defaults.reconcile_seconds)
    parser.add_argument("--worker-timeout-seconds", type=float, default=defaults.worker_timeout_seconds)
    parser.add_argument(
        "--task-crash-rate",
        type=float,
        default=defaults.task_crash_rate,
        help="per AWS call of a workflow task",
    )
    parser.add_argument(
        "--throttle-rate",
        type=float,
        default=defaults.throttle_rate,
        help="per DynamoDB item call (moto refuses it for throughput)",
    )
    # The run's budget: a loaded machine needs it (the messages a killed poller had received
    # are hidden for a visibility timeout, which the drain check waits out).
    parser.add_argument("--timeout", type=float, default=900, help="the whole run's budget, in seconds")
    args = parser.parse_args(argv)
    config = ChaosConfig(**{k: v for k, v in vars(args).items()})
    log_dir = Path(tempfile.mkdtemp(prefix="batchgw-chaos-"))
    print(f"chaos: {json.dumps(vars(args))}; stack logs in {log_dir}", flush=True)
    try:
        with chaos_stack(log_dir, config) as stack:
            report = Chaos(stack, config).run()
            replaced = len(stack.replaced)
    except Exception as exc:  # the stack did not start (or stop): say so, do not die silently
        print(f"chaos: the local stack failed: {type(exc).__name__}: {exc}", flush=True)
        return 2
    print("\n".join(report.lines()))
    print(f"processes replaced after a crash {replaced}")
    return 1 if report.violations else 0


if __name__ == "__main__":
    sys.exit(main())
