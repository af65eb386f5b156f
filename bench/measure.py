"""One run of ``bench.run``'s workloads with its probes: the gateway's batch (its time, the model's
occupancy, the AWS calls and CPU of every process of the stack by role) and the direct
client's same requests."""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from batchgw.config.settings import Settings

from bench.direct import DirectRun, run_direct
from bench.gateway import GatewayRun, run_batch
from bench.probes import (
    CallSnapshot,
    MotoProbe,
    Occupancy,
    SimSampler,
    cpu_seconds,
    percentile,
    settled_calls,
    sim_reset,
    sim_stats,
    stack_processes,
)
from bench.workload import MODEL, Workload
from local.run import LocalStack

MODEL_CAP = 16
POLL_CALIBRATION = 20  # status polls made after a run to learn what one poll costs in AWS calls
THROUGHPUT_BUCKET_SECONDS = 10.0


@dataclass
class GatewayFigures:
    run: GatewayRun
    occupancy: Occupancy
    sim: dict[str, int]  # /_sim/stats for the model after the run (counted from a reset)
    calls: CallSnapshot  # AWS calls during the run (create to last result page), every process
    calls_per_status_poll: float
    cpu_by_role: dict[str, float]  # CPU seconds each kind of process used during the run
    roles: dict[int, str]  # the role of each process the run saw, by pid
    throughput: list[int]  # upstream requests per THROUGHPUT_BUCKET_SECONDS
    moto_ms: dict[str, float | None]  # GetItem latency on moto: p50/p90, idle and under load
    problems: list[str] = field(default_factory=list)

    @property
    def total_calls(self) -> int:
        return sum(self.calls.total.values())

    @property
    def status_poll_calls(self) -> float:
        return self.run.status_polls * self.calls_per_status_poll

    def calls_per_item(self, n: int) -> float:
        """Every process's AWS calls, less those the benchmark's own status polls caused."""
        return (self.total_calls - self.status_poll_calls) / n

    def calls_per_item_with_polls(self, n: int) -> float:
        return self.total_calls / n


def _cpu_by_role(
    roles: dict[int, str], before: dict[int, float], after: dict[int, float]
) -> dict[str, float]:
    out: dict[str, float] = {}
    for pid, seconds in after.items():
        role = roles.get(pid, "other")
        out[role] = out.get(role, 0.0) + seconds - before.get(pid, 0.0)
    return out


def measure_gateway(
    stack: LocalStack,
    api: httpx.Client,
    sim: httpx.Client,
    workload: Workload,
    calls_dir: Path,
    cap: int = MODEL_CAP,
) -> GatewayFigures:
    """The workload run as one batch, with the stack's CPU and AWS calls by the role of each
    process: those alive at the start, and the execution environments started during the run
    (their whole CPU counts: their start is the run's)."""
    sim_reset(sim)
    roles = {p.pid: p.role for p in stack_processes()}
    calls_before = settled_calls(calls_dir)
    probe = MotoProbe(stack.env)
    idle = probe.idle_latencies()
    cpu_before = cpu_seconds(list(roles))
    with SimSampler(stack.sim_url, MODEL) as sampler, probe:
        run = run_batch(api, workload)
        roles |= {p.pid: p.role for p in stack_processes()}
        cpu_after = cpu_seconds(list(roles))
        end = run.t0 + run.total_seconds
        occupancy = sampler.occupancy(run.t0, end)
        throughput = sampler.throughput(run.t0, end, THROUGHPUT_BUCKET_SECONDS)
        loaded = probe.latencies(run.t0, end)
    moto_ms = {
        f"{label}_{name}": None if value is None else 1000 * value
        for label, values in (("idle", idle), ("loaded", loaded))
        for name, value in (("p50", percentile(values, 0.5)), ("p90", percentile(values, 0.9)))
    }
    stats = sim_stats(sim, MODEL)
    calls = settled_calls(calls_dir) - calls_before

    # What one status poll costs (the benchmark polls every 50 ms: not part of an item's path).
    api_pids = [pid for pid, role in roles.items() if role == "api"]
    before = settled_calls(calls_dir)
    for _ in range(POLL_CALIBRATION):
        api.get(f"/batches/{run.batch_id}").raise_for_status()
    polled = settled_calls(calls_dir) - before
    per_poll = sum(sum(polled.by_pid.get(pid, Counter()).values()) for pid in api_pids) / POLL_CALIBRATION

    problems = list(run.problems)
    if stats["requests"] != workload.expected_upstream_requests:
        problems.append(
            f"the simulator saw {stats['requests']} requests, expected {workload.expected_upstream_requests}"
        )
    if stats["max_in_flight"] > cap:
        problems.append(f"{stats['max_in_flight']} requests were in flight at once (cap {cap})")
    stack.check()
    cpu = _cpu_by_role(roles, cpu_before, cpu_after)
    return GatewayFigures(run, occupancy, stats, calls, per_poll, cpu, roles, throughput, moto_ms, problems)


@dataclass
class DirectFigures:
    run: DirectRun
    occupancy: Occupancy
    sim: dict[str, int]
    throughput: list[int]


def measure_direct(
    stack: LocalStack,
    sim: httpx.Client,
    workload: Workload,
    settings: Settings,
    retry: bool,
    cap: int = MODEL_CAP,
) -> DirectFigures:
    sim_reset(sim)
    with SimSampler(stack.sim_url, MODEL) as sampler:
        start = time.monotonic()
        run = run_direct(stack.sim_url, workload, concurrency=cap, settings=settings, retry=retry)
        end = time.monotonic()
        occupancy = sampler.occupancy(start, end)
        throughput = sampler.throughput(start, end, THROUGHPUT_BUCKET_SECONDS)
    return DirectFigures(run, occupancy, sim_stats(sim, MODEL), throughput)


def warm_up(api: httpx.Client, n: int) -> None:
    """A small batch first, so the measured run does not pay the workers' first invocations."""
    run = run_batch(api, Workload("warmup", tuple(f"warm-up {i}" for i in range(n)), "w"))
    if run.problems:
        raise RuntimeError(f"the warm-up batch went wrong: {run.problems}")
