"""What a chaos run (``tests/e2e/chaos.py``) is asked to do, what it found, and the arithmetic of
its latencies: percentiles, and the time a batch's workflow lost to deliberate task deaths.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

# p99 of both latencies; for a cancel that raced a worker kill, the lease plus this.
LATENCY_GOAL_SECONDS = 10.0


@dataclass
class ChaosConfig:
    seed: int = 7
    batches: int = 8
    requests: int = 30  # per batch
    kills: int = 4
    duplicates: int = 6
    cancels: int = 2
    reprioritizations: int = 3  # PATCHes of a running batch's priority
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
    # Background responses (``POST /v1/responses`` with background, alice's) made beside the
    # batches, one faulted request each like a batch's; cancels and duplicated chain
    # messages reach them too. Each must end once, charged once.
    responses: int = 0


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
    # Priorities and deadlines in the mix: batches made with a complete_by, those whose create
    # was refused as infeasible (made again without one), and priorities changed mid-run.
    deadlines: int = 0
    deadlines_refused: int = 0
    reprioritized: int = 0
    revoked: dict[str, str] = field(default_factory=dict)  # by batch whose key was revoked: how it ended
    statuses: Counter[str] = field(default_factory=Counter)
    outcomes: Counter[str] = field(default_factory=Counter)
    responses: int = 0  # background responses made
    response_statuses: Counter[str] = field(default_factory=Counter)  # how they ended
    response_cancels: int = 0
    upstream_seen: int = 0
    calls_recorded: int = 0
    lost_attempts: int = 0
    # by "user <id>" and "key <id>": nano-dollars charged of known cost, recorded by the
    # attempts, and charged of unknown cost (at the attempts' most)
    money: dict[str, list[int]] = field(default_factory=dict)
    unknown_cost_attempts: int = 0  # recorded without a known cost
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
            f"background responses {self.responses} ({dict(self.response_statuses)}; "
            f"cancelled mid-run {self.response_cancels})",
            f"batches made with a complete_by {self.deadlines} (refused as infeasible and made "
            f"without one {self.deadlines_refused}), priorities changed mid-run {self.reprioritized}",
            f"kills {self.kills}, duplicated chain messages {self.duplicates}, cancels {self.cancels}, "
            f"requests with faults {self.faults}, workflow task deaths {self.task_deaths}, "
            f"dynamodb calls refused for throughput {self.throttled}, "
            f"interactive load reporters that died {self.reporters} (after {self.reports} reports)",
            f"upstream requests seen {self.upstream_seen}: calls recorded {self.calls_recorded}, "
            f"attempts lost with their worker {self.lost_attempts}",
            *(f"  failed batch {failed}" for failed in self.failed_batches),
            "money, nano-dollars of known cost charged / recorded by the attempts "
            f"(and of unknown cost charged, for {self.unknown_cost_attempts} attempts recorded "
            "without one and those lost with their worker):",
            *(
                f"  {who}: {charged} / {recorded}{'' if charged == recorded else ' MISMATCH'} ({unknown})"
                for who, (charged, recorded, unknown) in sorted(self.money.items())
            ),
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
