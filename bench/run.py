"""``make bench`` (``python -m bench.run``): the gateway against a direct client, in one run.

See ``bench/__init__.py`` for what is measured and how. Options: ``--n`` (env
``BENCH_N``, default 2000), ``--retry-n`` (default: N), ``--skip-retry``, ``--retry-base-seconds``
(the backoff's base, default the stack's 5 s),
``--skip-validation`` (the 50,000-line file check of ``bench.validation``), ``--skip-cost`` (the
cost run of ``bench.cost``, on a recorded stack of its own), ``--workers``,
``--no-warmup``, ``--import-runs`` (fresh interpreters per cold-start figure, default 5),
``--out`` (default ``bench/last.json``). ``BATCHGW_WORKER_ENVIRONMENTS`` sets
the worker's execution environments, recorded as ``worker_environments``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from batchgw.config.catalog import load_catalog
from batchgw.config.settings import Settings
from batchgw.storage.aws import CALLS_DIR_ENV

from bench import cost, imports, validation
from bench.gateway import Stalled, api_client
from bench.measure import (
    MODEL_CAP,
    THROUGHPUT_BUCKET_SECONDS,
    DirectFigures,
    GatewayFigures,
    measure_direct,
    measure_gateway,
    warm_up,
)
from bench.probes import (
    stack_processes,
)
from bench.workload import MODEL, Workload, dispatch_workload, retry_workload
from local.env import REPO_ROOT
from local.run import LocalStack

DEFAULT_N = 2000
SIM_LATENCY_MS = 500
RATIO_BUDGET = 1.3


@dataclass(frozen=True)
class Scale:
    """A run on a stack of its own: N requests at ``latency_ms`` under a model cap of ``cap``."""

    name: str
    n: int
    latency_ms: int
    cap: int
    budget: float | None = None  # of the gateway / direct ratio


# Issue 15's second dispatch point: more in flight, longer calls.
CAP64 = Scale("cap64", n=4000, latency_ms=2000, cap=64, budget=1.2)
# The local stack's ceiling: the simulator answers at once, so the stack's own work is the time.
THROUGHPUT = Scale("throughput", n=2000, latency_ms=0, cap=64)
THROUGHPUT_GOAL_RPS = 60
CALLS_PER_ITEM_BUDGET = 6.0
WARMUP_REQUESTS = 2 * MODEL_CAP
IMPORT_RUNS = 5
VALIDATION_LINES = 50_000
DEFAULT_OUT = Path(__file__).resolve().parent / "last.json"


# --- the report ------------------------------------------------------------------------------------


def _verdict(ok: bool) -> str:
    return "PASS" if ok else "FAIL"


def _s(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f} s"


def _rel(value: float | None, t0: float) -> float | None:
    return None if value is None else value - t0


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f} ms"


def _idle_ms(busy_fraction: float) -> float | None:
    return SIM_LATENCY_MS * (1 / busy_fraction - 1) if busy_fraction > 0 else None


def _throughput_line(counts: list[int]) -> str:
    return " ".join(str(c) for c in counts)


def _calls_note(calls: Counter[str]) -> str:
    pollers = (
        "the pollers' SQS ReceiveMessage\n"
        "   (idle slots long-poll 20 s: a cost per second, not per item) and DeleteMessageBatch"
        if "sqs.ReceiveMessage" in calls
        else "not the pollers' SQS ReceiveMessage\n"
        "   and DeleteMessageBatch (their boto3 client is their own)"
    )
    return (
        "  (a botocore before-call hook in every process that uses batchgw.storage.aws.get_clients():\n"
        "   the api handler (create, status polls, result pages), the lifecycle function (run in the moto\n"
        f"   process), the workers; {pollers};\n"
        "   never moto's Step Functions interpreter's internal calls. The headline figure subtracts\n"
        "   the benchmark's own status polls.)"
    )


def print_dispatch(result: dict[str, Any], gw: GatewayFigures, direct: DirectFigures, n: int) -> None:
    run = gw.run
    timeline = result["gateway_timeline_seconds"]
    print(f"\n=== dispatch: {n} requests, simulator latency {SIM_LATENCY_MS} ms, model cap {MODEL_CAP} ===")
    ratio, calls = result["dispatch_ratio"], result["aws_calls_per_item"]
    rows = [
        ("gateway, create to last result page", _s(run.total_seconds)),
        ("direct asyncio httpx client, same requests", _s(direct.run.seconds)),
        ("ideal, ceil(N / cap) x latency", _s(result["ideal_seconds"])),
        (
            f"dispatch ratio gateway / direct (budget <= {RATIO_BUDGET})",
            f"{ratio:.3f}  {_verdict(ratio <= RATIO_BUDGET)}",
        ),
        (
            f"AWS calls per item (budget <= {CALLS_PER_ITEM_BUDGET:g})",
            f"{calls:.2f}  {_verdict(calls <= CALLS_PER_ITEM_BUDGET)}",
        ),
        ("time to first result", _s(run.first_result_seconds)),
        ("gateway timeline after create:", ""),
        ("  create call answered", _s(timeline["create_call"])),
        ("  status in_progress first seen", _s(timeline["in_progress_seen"])),
        ("  first upstream request (100 ms samples)", _s(timeline["first_upstream_request"])),
        ("  first result counted", _s(timeline["first_result"])),
        ("  last upstream request in flight", _s(timeline["last_upstream_in_flight"])),
        ("  final status first seen", _s(timeline["final_seen"])),
        (f"  last of {run.result_pages} result pages read", _s(timeline["last_result_page"])),
        (
            "slot occupancy (mean in flight / 16), gateway: run / busy",
            f"{gw.occupancy.fraction(MODEL_CAP):.1%} / {gw.occupancy.busy_fraction(MODEL_CAP):.1%}",
        ),
        (
            "slot occupancy (mean in flight / 16), direct:  run / busy",
            f"{direct.occupancy.fraction(MODEL_CAP):.1%} / {direct.occupancy.busy_fraction(MODEL_CAP):.1%}",
        ),
        (
            "slot idle time per upstream request, gateway (busy window)",
            "-"
            if result["slot_idle_ms_per_request"] is None
            else f"{result['slot_idle_ms_per_request']:.0f} ms",
        ),
        (
            "moto GetItem latency p50 / p90, idle",
            f"{_ms(gw.moto_ms['idle_p50'])} / {_ms(gw.moto_ms['idle_p90'])}",
        ),
        (
            "moto GetItem latency p50 / p90, during the gateway run",
            f"{_ms(gw.moto_ms['loaded_p50'])} / {_ms(gw.moto_ms['loaded_p90'])}",
        ),
        ("max in flight, gateway / direct", f"{gw.sim['max_in_flight']} / {direct.sim['max_in_flight']}"),
        ("upstream requests, gateway / direct", f"{gw.sim['requests']} / {direct.sim['requests']}"),
        (
            f"AWS calls per item with the {run.status_polls} status polls",
            f"{result['aws_calls_per_item_with_polls']:.2f} ({gw.calls_per_status_poll:.2f} calls per poll)",
        ),
        ("direct client CPU per request (this process)", f"{result['direct_cpu_ms_per_request']:.2f} ms"),
    ]
    _table(rows)
    per_bucket = MODEL_CAP / (SIM_LATENCY_MS / 1000) * THROUGHPUT_BUCKET_SECONDS
    print(f"upstream requests per {THROUGHPUT_BUCKET_SECONDS:g} s (at most {per_bucket:.0f}):")
    print(f"  gateway: {_throughput_line(gw.throughput)}\n  direct:  {_throughput_line(direct.throughput)}")

    print("AWS calls during the gateway run, by operation (total, per item):")
    for op, count in gw.calls.total.most_common():
        print(f"  {op:<40} {count:>8}  {count / n:6.3f}")
    print("by process:")
    for role, by_op in sorted(result["calls_by_role"].items()):
        print(f"  {role:<40} {sum(by_op.values()):>8}  {sum(by_op.values()) / n:6.3f}")
    print(_calls_note(gw.calls.total))
    print("CPU used during the gateway run, by process (2 cores in all):")
    for role, seconds in sorted(gw.cpu_by_role.items()):
        print(f"  {role:<40} {seconds:8.1f} s  {seconds / run.total_seconds:4.0%} of a core")


def print_retry(
    result: dict[str, Any], gw: GatewayFigures, direct: DirectFigures, workload: Workload
) -> None:
    print(
        f"\n=== retries: {workload.n} requests, {workload.failing} fail twice with 503 "
        f"(backoff base {result['retry_base_seconds']:g} s, doubling, up to 20 % jitter on top) ==="
    )
    _table(
        [
            ("gateway, create to last result page", _s(gw.run.total_seconds)),
            ("direct client, same requests and retry policy", _s(direct.run.seconds)),
            ("retry ratio gateway / direct", f"{result['retry_ratio']:.3f}"),
            ("time to first result", _s(gw.run.first_result_seconds)),
            ("final status first seen", _s(gw.run.final_seconds)),
            ("last upstream request in flight", _s(_rel(gw.occupancy.last_busy_at, gw.run.t0))),
            (
                "upstream requests, gateway / direct / expected",
                f"{gw.sim['requests']} / {direct.sim['requests']} / {workload.expected_upstream_requests}",
            ),
            ("AWS calls per item", f"{gw.calls_per_item(workload.n):.2f}"),
            (
                "slot occupancy, gateway / direct (whole run)",
                f"{gw.occupancy.fraction(MODEL_CAP):.1%} / {direct.occupancy.fraction(MODEL_CAP):.1%}",
            ),
        ]
    )
    print(f"upstream requests per {THROUGHPUT_BUCKET_SECONDS:g} s:")
    print(f"  gateway: {_throughput_line(gw.throughput)}\n  direct:  {_throughput_line(direct.throughput)}")


def _table(rows: list[tuple[str, str]]) -> None:
    width = max(len(label) for label, _ in rows)
    for label, value in rows:
        print(f"  {label:<{width}}  {value}".rstrip())


def counter_thread_failures(logs: Path) -> list[str]:
    """Stack logs showing that a process's AWS call counter died (its counts are then short)."""
    return sorted(
        path.name
        for path in logs.glob("*.log")
        if "Exception in thread aws-call-counter" in path.read_text(errors="replace")
    )


# --- main ------------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.run", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--n", type=int, default=int(os.environ.get("BENCH_N", DEFAULT_N)), help="requests (env BENCH_N)"
    )
    parser.add_argument("--retry-n", type=int, default=None, help="requests of the retry run (default: N)")
    parser.add_argument("--skip-retry", action="store_true", help="skip the retry run")
    parser.add_argument(
        "--retry-base-seconds",
        type=float,
        default=None,
        help="the stack's BATCH_RETRY_BASE_SECONDS, for both clients' backoff (default: its own, 5)",
    )
    parser.add_argument("--workers", type=int, default=2, help="worker poller processes (default 2)")
    parser.add_argument("--no-warmup", action="store_true", help="measure the stack's very first batch")
    parser.add_argument(
        "--import-runs",
        type=int,
        default=IMPORT_RUNS,
        help=f"fresh interpreters per cold-start figure (default {IMPORT_RUNS})",
    )
    parser.add_argument(
        "--skip-validation", action="store_true", help="skip the file validation run (bench.validation)"
    )
    parser.add_argument("--skip-cost", action="store_true", help="skip the cost run (bench.cost, ~3 min)")
    parser.add_argument(
        "--skip-moto-cpu",
        action="store_true",
        help="skip moto's CPU per request, patched or not (bench.moto_cpu)",
    )
    parser.add_argument(
        "--skip-scale",
        action="store_true",
        help="skip the cap-64 dispatch run and the throughput run (their own stacks, ~7 min)",
    )
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="where to write the figures")
    args = parser.parse_args(argv)
    if args.n < 1 or (args.retry_n is not None and args.retry_n < 1) or args.import_runs < 1:
        parser.error("--n, --retry-n and --import-runs must be at least 1")
    return args


@contextmanager
def bench_stack(
    overrides: dict[str, str], workers: int, log_dir: Path
) -> Iterator[tuple[LocalStack, httpx.Client, httpx.Client]]:
    """A local stack on free ports with ``overrides``, and clients of its API and simulator."""
    with (
        LocalStack(
            api_port=0, sim_port=0, moto_port=0, env_overrides=overrides, workers=workers, log_dir=log_dir
        ) as stack,
        api_client(stack.api_url) as api,
        httpx.Client(base_url=stack.sim_url, timeout=10) as sim,
    ):
        yield stack, api, sim


class Bench:
    """One benchmark run: the stack, the figures so far, and the problems found."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.n: int = args.n
        self.retry_n: int = args.retry_n or args.n
        work = Path(tempfile.mkdtemp(prefix="batchgw-bench-"))
        self.calls_dir, self.logs = work / "aws-calls", work / "logs"
        self.result: dict[str, Any] = {
            "n": self.n,
            "stack_logs": str(self.logs),
            "retry_ratio": None,
            "retry_gateway_seconds": None,
            "retry_direct_seconds": None,
            "api_import_seconds": None,
            "api_import_over_boto3": None,
            "api_import_own_over_boto3": None,
        }
        self.problems: list[str] = []  # correctness: the exit code is 1 when there are any
        self.warnings: list[str] = []  # the measurement itself is doubtful

    def save(self) -> None:
        self.result["problems"] = self.problems
        self.result["warnings"] = self.warnings
        self.args.out.write_text(json.dumps(self.result, indent=2) + "\n")

    def run(self) -> int:
        overrides = {
            "BATCH_MODEL_CONCURRENCY": str(MODEL_CAP),
            "BATCHGW_SIM_LATENCY_MS": str(SIM_LATENCY_MS),
            CALLS_DIR_ENV: str(self.calls_dir),
        }
        if self.args.retry_base_seconds is not None:
            overrides["BATCH_RETRY_BASE_SECONDS"] = str(self.args.retry_base_seconds)
        retry_label = "skipped" if self.args.skip_retry else str(self.retry_n)
        print(f"batchgw benchmark: N={self.n}, retry N={retry_label}, code from {REPO_ROOT}")
        print(f"stack logs: {self.logs}\nAWS call counts: {self.calls_dir}", flush=True)
        try:
            with bench_stack(overrides, self.args.workers, self.logs) as (stack, api, sim):
                self._run(stack, api, sim)
        except Stalled as exc:
            self.problems.append(str(exc))
        if not self.args.skip_scale:
            for scale in (CAP64, THROUGHPUT):
                try:
                    self._scale(scale)
                except Stalled as exc:
                    self.problems.append(f"{scale.name}: {exc}")
        if not self.args.skip_validation:
            self._validation()
        if not self.args.skip_moto_cpu:
            self._moto_cpu()
        if not self.args.skip_cost:
            self._cost()
        broken = counter_thread_failures(self.logs)
        if broken:
            self.warnings.append(
                f"an AWS call counter thread died (calls are undercounted): {', '.join(broken)}"
            )
        self.save()
        print(f"\nwritten to {self.args.out}")
        if self.warnings:
            print("\nWARNINGS (measurement):\n  " + "\n  ".join(self.warnings))
        if self.problems:
            print("\nCORRECTNESS PROBLEMS:\n  " + "\n  ".join(self.problems))
            return 1
        print("correctness: every result completed exactly once with the expected answer")
        return 0

    def _run(self, stack: LocalStack, api: httpx.Client, sim: httpx.Client) -> None:
        n, result = self.n, self.result
        settings = Settings.from_env(stack.env)
        catalog = load_catalog(settings.models_config_path, stack.env)
        cap = catalog.concurrency(catalog.models[MODEL], settings.batch_model_concurrency)
        if cap != MODEL_CAP:
            raise RuntimeError(f"the stack's cap for {MODEL} is {cap}, not {MODEL_CAP}")
        result["worker_environments"] = stack.worker_environments
        if not self.args.no_warmup:
            print(f"warm-up batch of {WARMUP_REQUESTS} requests...", flush=True)
            warm_up(api, WARMUP_REQUESTS)
        # After the warm-up: the execution environments it started are the run's (more may start).
        alive = sorted((p.pid, p.role) for p in stack_processes())
        print("stack processes: " + ", ".join(f"{r}={p}" for p, r in alive), flush=True)

        # The gateway first, then the direct client on the same simulator: the direct client
        # touches nothing but the simulator, so neither run leaves work behind for the other,
        # and the gateway's run is not preceded by a minute of load on the same 2 cores.
        dispatch = dispatch_workload(n)
        print(f"gateway: batch of {n}...", flush=True)
        gw = measure_gateway(stack, api, sim, dispatch, self.calls_dir)
        self.problems += [f"dispatch: {p}" for p in gw.problems]
        print(f"  {gw.run.total_seconds:.2f} s; direct client, same requests...", flush=True)
        direct = measure_direct(stack, sim, dispatch, settings, retry=False)
        self.problems += [f"direct: {p}" for p in direct.run.failures[:5]]
        result.update(
            {
                "dispatch_ratio": gw.run.total_seconds / direct.run.seconds,
                "aws_calls_per_item": gw.calls_per_item(n),
                "first_result_seconds": gw.run.first_result_seconds,
                "gateway_seconds": gw.run.total_seconds,
                "direct_seconds": direct.run.seconds,
                "ideal_seconds": math.ceil(n / MODEL_CAP) * SIM_LATENCY_MS / 1000,
                "aws_calls_per_item_with_polls": gw.calls_per_item_with_polls(n),
                "aws_calls_per_status_poll": gw.calls_per_status_poll,
                "status_polls": gw.run.status_polls,
                "calls_by_operation": dict(gw.calls.total.most_common()),
                "calls_by_role": {r: dict(c) for r, c in gw.calls.by_role(gw.roles).items()},
                "gateway_timeline_seconds": {
                    "create_call": gw.run.create_seconds,
                    "in_progress_seen": gw.run.in_progress_seconds,
                    "first_upstream_request": _rel(gw.occupancy.first_request_at, gw.run.t0),
                    "first_result": gw.run.first_result_seconds,
                    "last_upstream_in_flight": _rel(gw.occupancy.last_busy_at, gw.run.t0),
                    "final_seen": gw.run.final_seconds,
                    "last_result_page": gw.run.total_seconds,
                },
                "slot_occupancy": {
                    "gateway": gw.occupancy.fraction(MODEL_CAP),
                    "gateway_busy_window": gw.occupancy.busy_fraction(MODEL_CAP),
                    "direct": direct.occupancy.fraction(MODEL_CAP),
                    "direct_busy_window": direct.occupancy.busy_fraction(MODEL_CAP),
                },
                f"upstream_requests_per_{THROUGHPUT_BUCKET_SECONDS:g}s": {
                    "gateway": gw.throughput,
                    "direct": direct.throughput,
                },
                # A slot is busy for the latency per request, so a mean occupancy f in the busy
                # window means each request also leaves its slot idle latency * (1/f - 1).
                "slot_idle_ms_per_request": _idle_ms(gw.occupancy.busy_fraction(MODEL_CAP)),
                "moto_get_item_ms": gw.moto_ms,
                "sim_stats": {"gateway": gw.sim, "direct": direct.sim},
                "cpu_seconds_by_role": gw.cpu_by_role,
                "direct_cpu_ms_per_request": 1000 * direct.run.client_cpu_seconds / direct.run.requests_sent,
            }
        )
        print_dispatch(result, gw, direct, n)
        self.save()

        if not self.args.skip_retry:
            self._retry(stack, api, sim, settings)

        print("\ncold start: the api handler's import against boto3's...", flush=True)
        runs = self.args.import_runs
        times = imports.import_ratio(stack.env, runs=runs)
        result.update(times.as_dict())
        result["api_import_detail"] = {"with_import": times.handler_seconds + times.bare_seconds}
        print(
            f"  api handler import {times.handler_seconds:.3f} s, boto3 alone {times.boto3_seconds:.3f} s "
            f"(medians of {runs}, less a bare interpreter's {times.bare_seconds:.3f} s): "
            f"ratio {times.ratio:.2f} (budget <= {imports.RATIO_BUDGET}) "
            + _verdict(times.ratio <= imports.RATIO_BUDGET)
        )
        print(f"  {imports.floor_line(times)}")
        first = imports.first_request(stack.env, runs=runs)
        result["api_first_request_seconds"] = first
        print(f"  api handler import + its first request (GET /v1/batches, on this stack): {first:.3f} s")
        stack.check()

    def _scale(self, scale: Scale) -> None:
        """``scale``'s batch on a stack of its own (its cap and the simulator's latency are the
        stack's settings), then the direct client with the same requests and cap."""
        calls_dir = self.calls_dir.parent / f"aws-calls-{scale.name}"
        overrides = {
            "BATCH_MODEL_CONCURRENCY": str(scale.cap),
            "BATCHGW_SIM_LATENCY_MS": str(scale.latency_ms),
            CALLS_DIR_ENV: str(calls_dir),
        }
        print(
            f"\n{scale.name}: {scale.n} requests, simulator latency {scale.latency_ms} ms, "
            f"model cap {scale.cap}...",
            flush=True,
        )
        logs = self.logs.parent / f"logs-{scale.name}"
        with bench_stack(overrides, self.args.workers, logs) as (stack, api, sim):
            settings = Settings.from_env(stack.env)
            if not self.args.no_warmup:
                warm_up(api, 2 * scale.cap)
            workload = dispatch_workload(scale.n)
            gw = measure_gateway(stack, api, sim, workload, calls_dir, cap=scale.cap)
            self.problems += [f"{scale.name}: {p}" for p in gw.problems]
            print(f"  {gw.run.total_seconds:.2f} s; direct client, same requests...", flush=True)
            direct = measure_direct(stack, sim, workload, settings, retry=False, cap=scale.cap)
            self.problems += [f"{scale.name} direct: {p}" for p in direct.run.failures[:5]]
        ratio = gw.run.total_seconds / direct.run.seconds
        figures: dict[str, Any] = {
            "n": scale.n,
            "latency_ms": scale.latency_ms,
            "cap": scale.cap,
            "worker_environments": stack.worker_environments,
            "gateway_seconds": gw.run.total_seconds,
            "direct_seconds": direct.run.seconds,
            "ratio": ratio,
            "first_result_seconds": gw.run.first_result_seconds,
            "requests_per_second": scale.n / gw.run.total_seconds,
            "aws_calls_per_item": gw.calls_per_item(scale.n),
            "slot_occupancy": gw.occupancy.fraction(scale.cap),
            "slot_occupancy_busy_window": gw.occupancy.busy_fraction(scale.cap),
            "cpu_ms_per_request_by_role": {
                role: 1000 * seconds / scale.n for role, seconds in sorted(gw.cpu_by_role.items())
            },
            "calls_by_operation": dict(gw.calls.total.most_common()),
        }
        self.result[scale.name] = figures
        rows = [
            ("gateway, create to last result page", f"{gw.run.total_seconds:.2f} s"),
            ("direct asyncio httpx client, same requests", f"{direct.run.seconds:.2f} s"),
        ]
        if scale is CAP64:
            self.result["dispatch_ratio_cap64"] = ratio
            rows.append(
                (
                    f"dispatch ratio gateway / direct (budget <= {scale.budget})",
                    f"{ratio:.3f}  " + _verdict(scale.budget is not None and ratio <= scale.budget),
                )
            )
        if scale is THROUGHPUT:
            self.result["throughput_rps"] = figures["requests_per_second"]
            rows.append(
                (
                    f"requests per second through the stack (goal >= {THROUGHPUT_GOAL_RPS})",
                    f"{figures['requests_per_second']:.1f}  "
                    + _verdict(figures["requests_per_second"] >= THROUGHPUT_GOAL_RPS),
                )
            )
        rows += [
            ("AWS calls per item", f"{figures['aws_calls_per_item']:.2f}"),
            ("time to first result", _s(gw.run.first_result_seconds)),
            (
                f"slot occupancy (mean in flight / {scale.cap}): run / busy",
                f"{figures['slot_occupancy']:.1%} / {figures['slot_occupancy_busy_window']:.1%}",
            ),
        ]
        rows += [
            (f"  CPU per request, {role}", f"{ms:.1f} ms")
            for role, ms in figures["cpu_ms_per_request_by_role"].items()
        ]
        _table(rows)
        self.save()

    def _cost(self) -> None:
        """Issue 15's figure (``bench.cost``): the named workload on a recorded stack of its own,
        after this one has stopped."""
        print("\ncost: the named workload (1 KB in, 1 KB out, 2 s) on a recorded stack...", flush=True)
        try:
            figures = cost.measure_cost(cost.DEFAULT_N, self.args.workers)
        except (TimeoutError, RuntimeError, httpx.HTTPError) as exc:
            self.warnings.append(f"the cost run failed, no cost_per_million_usd: {exc}")
            return
        self.result.update(figures)
        self.problems += [f"cost: {p}" for p in figures["cost_measurements"]["problems"]]

    def _moto_cpu(self) -> None:
        """moto's CPU per request with and without the local patches it toggles (``bench.moto_cpu``),
        in a child process: it patches moto where it runs."""
        print("\nmoto's CPU per request, the local patches 5, 7, 9, 10, 11 and 12 off and on...", flush=True)
        done = subprocess.run(
            [sys.executable, "-m", "bench.moto_cpu", "--json"], cwd=REPO_ROOT, capture_output=True, text=True
        )
        if done.returncode != 0:
            self.warnings.append(f"bench.moto_cpu failed: {done.stderr[-500:]}")
            return
        figures = json.loads(done.stdout.strip().splitlines()[-1])
        self.result.update(figures)
        _table(
            [
                (
                    "moto handler CPU per request, without / with",
                    f"{figures['moto_cpu_ms_per_request_unpatched']:.2f} ms / "
                    f"{figures['moto_cpu_ms_per_request']:.2f} ms",
                ),
                ("  ratio", f"{figures['moto_patch_cpu_ratio']:.3f}"),
            ]
        )

    def _validation(self) -> None:
        """Issue 4's figure (``bench.validation``), after the stack has stopped: in this process."""
        print(f"\nvalidation: a {VALIDATION_LINES}-line file against one json.loads per line...", flush=True)
        figures = validation.measure(VALIDATION_LINES)
        self.result.update(figures)
        _table(
            [
                ("validator / json.loads per line", f"{figures['validation_ratio']:.2f}"),
                (
                    "  seconds",
                    f"{figures['validation_seconds']:.2f} s / {figures['json_loads_seconds']:.2f} s",
                ),
                (
                    "peak traced memory (share of the file)",
                    f"{figures['validation_peak_bytes'] / 1e6:.1f} MB "
                    f"({figures['validation_peak_over_file']:.1%} of "
                    f"{figures['validation_file_bytes'] / 1e6:.1f} MB)",
                ),
            ]
        )

    def _retry(
        self,
        stack: LocalStack,
        api: httpx.Client,
        sim: httpx.Client,
        settings: Settings,
    ) -> None:
        retrying = retry_workload(self.retry_n)
        print(f"\ngateway: batch of {self.retry_n}, {retrying.failing} failing twice...", flush=True)
        gw = measure_gateway(stack, api, sim, retrying, self.calls_dir)
        self.problems += [f"retry: {p}" for p in gw.problems]
        print(f"  {gw.run.total_seconds:.2f} s; direct client with retries...", flush=True)
        direct = measure_direct(stack, sim, retrying, settings, retry=True)
        self.problems += [f"retry direct: {p}" for p in direct.run.failures[:5]]
        if direct.sim["requests"] != retrying.expected_upstream_requests:
            self.problems.append(
                f"retry direct: the simulator saw {direct.sim['requests']} requests, "
                f"expected {retrying.expected_upstream_requests}"
            )
        self.result.update(
            {
                "retry_n": self.retry_n,
                "retry_ratio": gw.run.total_seconds / direct.run.seconds,
                "retry_gateway_seconds": gw.run.total_seconds,
                "retry_direct_seconds": direct.run.seconds,
                "retry_first_result_seconds": gw.run.first_result_seconds,
                "retry_aws_calls_per_item": gw.calls_per_item(self.retry_n),
                "retry_calls_by_operation": dict(gw.calls.total.most_common()),
                "retry_sim_requests": {
                    "gateway": gw.sim["requests"],
                    "direct": direct.sim["requests"],
                    "expected": retrying.expected_upstream_requests,
                },
                "retry_base_seconds": settings.batch_retry_base_seconds,
                f"retry_upstream_requests_per_{THROUGHPUT_BUCKET_SECONDS:g}s": {
                    "gateway": gw.throughput,
                    "direct": direct.throughput,
                },
            }
        )
        print_retry(self.result, gw, direct, retrying)
        self.save()


def main(argv: list[str] | None = None) -> int:
    return Bench(parse_args(argv)).run()


if __name__ == "__main__":
    sys.exit(main())
