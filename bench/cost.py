"""``make cost`` (``python -m bench.cost``): what one million batch requests cost on AWS.

The named workload: chat requests of a 1 KB body each (``body`` of the batch line, padded),
answered with 1 KB (``[[sim bytes=1024]]``) after 2 s (the simulator's base latency,
``--latency-ms``), in batches of ``--n`` (default 500) at the model cap of the benchmark (16):
per-batch costs (the create call, the workflow's transitions, finalizing) are shared by the
batch's requests.

How (a run, not an estimate): a local stack starts with moto's request recorder on and every
invocation's wall duration written down (``local.invocations``). After a warm-up batch, one
batch of the workload runs; the client waits on the simulator's counter (no AWS calls), then
polls the batch's status every 0.5 s until it is final and reads every result page. Then 10
status polls are made alone, so the run's own polls can be subtracted. From the recording,
``bench.cost_replay`` replays DynamoDB to bill each write on the item's size before and after
(transactions twice, each GSI by its projected size) and each read on what it read; SQS, S3,
KMS and Secrets Manager requests are counted as recorded. Step Functions transitions are the
batch's execution history (its states entered) plus the states its success path still has to
enter (it waits out the retention before its purge). Lambda: each function's invocations and
measured durations times its memory in ``infra/constructs/functions.py``; API Gateway: the api
function's invocations (the create call in 512 KB chunks). SQS ReceiveMessage on the polled
queues is one per worker invocation (Lambda's event source mapping polls on AWS; its idle
long polls, about 0.25 a second per queue whatever the load, are left out). CloudWatch Logs:
the JSON lines (Powertools' logs and metrics) the handler processes wrote during the run,
plus Lambda's START/END/REPORT lines; the plain-text lines of the local stack's own loggers
(its pollers, moto, and httpx's request lines, which Lambda's root logger, at WARNING, would
not write) are left out.
X-Ray: each function's invocations sampled by the default rule at the run's throughput.

The same workload runs twice: by the gateway's chains, and on the provider's batch service
(``execution_mode`` provider: the simulator's OpenAI batch API, at sim-chat's batch price),
each batch in its own window of the recording; and a third time by the gateway beside
interactive requests (``gateway_bursts``): the yield benchmark's bursts and quiet phases
(``BURSTS``) through the gateway's interactive path, so its chains yield and wait for room.
That window's usage less the same bursts' alone (run just before, subtracted once) is the
batch's: the workers' time spent waiting, and the scheduling's reads and writes, priced.
All three are printed side by side, each with the model's cost at the price its batch paid
and its workers' GB-s and DynamoDB units per request (``cost_by_mode``). The other keys are
the gateway-run batch's alone.

The tables bill on demand unless the operator provisions them (``infra.capacity``): the same
usage is also priced as provisioned capacity used at the autoscaling target's utilization,
and at the lowest utilization auto scaling lets stand (``provisioned_cost``).

Options: ``--n``, ``--workers``, ``--burst-seconds`` (each phase of the bursts),
``--settle-seconds`` (after each window, for its trailing calls to reach moto), ``--from-json``
(price the usage already in ``--out``, e.g. after a price change, without a run), ``--out``
(default ``bench/last.json``: its other keys are kept). Takes about 5 minutes at N = 500.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import random
import statistics
import string
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import boto3
import httpx
from batchgw.config import resources

from bench import cost_model as m
from bench import cost_replay, prices
from bench.cost_inputs import (
    ASL_PATH,
    PLATFORM_LOG_BYTES_PER_INVOCATION,
    Invocation,
    function_memory_mb,
    log_bytes,
    read_invocations,
    remaining_transitions,
)
from bench.cost_report import (
    print_breakdown,
    print_modes,
    print_provisioned,
    provisioned_cost,
    scheduling_cost,
    units_per_request,
)
from bench.gateway import FINAL_STATUSES, RESULTS_PAGE_LIMIT, api_client
from bench.probes import peak_rss_mb, stack_processes
from bench.workload import MODEL
from bench.yield_run import Cycles, Interactive, Run, Sent
from local.env import queue_name
from local.invocations import INVOCATIONS_DIR_ENV
from local.run import LocalStack

DEFAULT_N = 500
DEFAULT_OUT = Path(__file__).resolve().parent / "last.json"
MODEL_CAP = 16
LATENCY_MS = 2000
REQUEST_BYTES = 1024  # a batch line's body, JSON
RESPONSE_BYTES = 1024  # the upstream answer
WARMUP_REQUESTS = 32
# The third run's interactive load: the yield benchmark's bursts and quiet phases, scaled to this
# workload's 2 s answers (6 a second hold 12 of the model's 16 slots; 1 a second, 2).
BURSTS = Cycles(burst_rps=6, burst_seconds=15, quiet_rps=1, quiet_seconds=15, cycles=2)
BURSTS_MODE = "gateway_bursts"
POLL_SECONDS = 0.5
CALIBRATION_POLLS = 10
SETTLE_SECONDS = 2.0  # for trailing calls (deletes of the last messages) to reach moto


# --- the run -----------------------------------------------------------------------------------


def request_text(index: int) -> str:
    """A request's user text: its directive, then seeded random lowercase words, so that its line's
    body is REQUEST_BYTES. Random words compress about as well as prose (zlib: to about 60%), where
    a run of one letter would shrink to nothing in a compressed item. The simulator echoes the text
    (cut to the answer's 1 KB), so answers are as incompressible."""
    head = f"cost request {index} [[sim bytes={RESPONSE_BYTES}]]"
    room = REQUEST_BYTES - len(json.dumps(_body(head), separators=(",", ":")).encode())
    rng = random.Random(index)
    words: list[str] = []
    while sum(len(w) + 1 for w in words) < room:
        words.append("".join(rng.choices(string.ascii_lowercase, k=rng.randint(2, 9))))
    return f"{head} {' '.join(words)}"[: len(head) + room]


def _body(text: str) -> dict[str, Any]:
    return {"model": MODEL, "messages": [{"role": "user", "content": text}]}


def batch_payload(n: int, prefix: str, mode: str = "gateway") -> bytes:
    lines = [{"custom_id": f"{prefix}-{i}", "body": _body(request_text(i))} for i in range(n)]
    return json.dumps({"requests": lines, "execution_mode": mode}, separators=(",", ":")).encode()


@dataclass
class RunWindow:
    first_line: int
    end_line: int
    start: float  # time.time()
    end: float
    log_bytes: dict[str, int]  # by function


@dataclass
class CostRun:
    n: int
    batch_id: str
    seconds: float  # create to the last result page
    create_payload_bytes: int
    status_polls: int
    run: RunWindow
    polls: RunWindow
    transitions: int  # per batch
    transition_note: str
    problems: list[str]
    peak_rss_mb: dict[str, float] = field(default_factory=dict)  # by role: the largest process's
    mode: str = "gateway"  # where the batch ran (``execution_mode``), or ``gateway_bursts``
    model_cost_usd: float = 0.0  # what its requests cost at the model's price (the batch's usage.cost)
    # ``gateway_bursts``: the same interactive bursts alone, subtracted once from the run's usage
    interactive: RunWindow | None = None
    latency_ms: int = LATENCY_MS  # the simulator's, for every request of the run


def _wait_sim(sim: httpx.Client, n: int, deadline: float) -> None:
    """Until the simulator has answered ``n`` requests (it costs no AWS call to ask)."""
    while time.monotonic() < deadline:
        stats = sim.get("/_sim/stats").raise_for_status().json()["models"].get(MODEL, {})
        if int(stats.get("requests", 0)) >= n and int(stats.get("in_flight", 0)) == 0:
            return
        time.sleep(POLL_SECONDS)
    raise TimeoutError(f"the simulator did not see {n} requests in time")


def _run_batch(
    api: httpx.Client, sim: httpx.Client, n: int, prefix: str, mode: str = "gateway", *, alone: bool = True
) -> tuple[str, int, list[str], float]:
    """One batch to its end and every result read; returns its id, the status polls made,
    what was wrong with it, and what its requests cost at the model's price. A batch run on
    the provider's batch service, or beside interactive requests (not ``alone``: the
    simulator's counts are theirs too), is polled from the start (a provider's lines are
    answered at once, when the provider step first polls it)."""
    if alone:
        sim.post("/_sim/reset").raise_for_status()
    created = api.post(
        "/batches", content=batch_payload(n, prefix, mode), headers={"content-type": "application/json"}
    )
    created.raise_for_status()
    batch_id = str(created.json()["id"])
    deadline = time.monotonic() + 60 + 4 * n * LATENCY_MS / 1000 / MODEL_CAP
    if mode == "gateway" and alone:
        _wait_sim(sim, n, deadline)
    polls = 0
    while True:
        polls += 1
        batch = api.get(f"/batches/{batch_id}").raise_for_status().json()
        if batch["status"] in FINAL_STATUSES:
            break
        if time.monotonic() > deadline:
            raise TimeoutError(f"batch {batch_id} still {batch['status']}")
        time.sleep(POLL_SECONDS)
    results: list[dict[str, Any]] = []
    after: str | None = None
    while True:
        params: dict[str, str | int] = {"limit": RESULTS_PAGE_LIMIT, **({"after": after} if after else {})}
        page = api.get(f"/batches/{batch_id}/results", params=params).raise_for_status().json()
        results.extend(page["data"])
        if not page["has_more"]:
            break
        after = page["last_id"]
    problems = []
    if batch["status"] != "completed" or int(batch["request_counts"]["completed"]) != n:
        problems.append(f"batch {batch['status']}, counts {batch['request_counts']}")
    done = [r for r in results if r.get("status") == "completed"]
    if len(results) != n or len(done) != n:
        problems.append(f"{len(results)} results, {len(done)} completed, expected {n}")
    if batch.get("execution_mode") != mode:
        problems.append(f"batch ran in {batch.get('execution_mode')} mode, not {mode}")
    return batch_id, polls, problems, float(batch["usage"]["cost"])


def _transitions(env: Mapping[str, str], batch_id: str) -> tuple[int, str]:
    """States the batch's execution entered so far, plus those its success path has left."""
    client = boto3.client(  # type: ignore[call-overload]
        "stepfunctions",
        endpoint_url=env["AWS_ENDPOINT_URL"],
        region_name=env["AWS_DEFAULT_REGION"],
        aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"],
    )
    arn = env["BATCHGW_STATE_MACHINE_ARN"].replace(":stateMachine:", ":execution:") + f":{batch_id}"
    entered: list[str] = []
    token: str | None = None
    while True:
        page = client.get_execution_history(
            executionArn=arn, maxResults=1000, **({"nextToken": token} if token else {})
        )
        for event in page["events"]:
            if event["type"].endswith("StateEntered"):
                entered.append(event["stateEnteredEventDetails"]["name"])
        token = page.get("nextToken")
        if not token:
            break
    if not entered:
        raise RuntimeError(f"no execution history for {batch_id}")
    asl = json.loads(ASL_PATH.read_text())
    later = remaining_transitions(asl, entered[-1])
    path = " > ".join(entered)
    return len(entered) + later, f"{path} (+{later} after {entered[-1]}, on its success path)"


@contextmanager
def _window(recording: Path, logs: Path, settle_seconds: float = SETTLE_SECONDS) -> Iterator[RunWindow]:
    """The window of the recording, the clock and the logs the ``with`` block took (its
    trailing calls given ``SETTLE_SECONDS`` to reach moto), filled in when it ends."""
    before = log_bytes(logs)
    window = RunWindow(cost_replay.count_lines(recording), 0, time.time(), 0.0, {})
    yield window
    time.sleep(settle_seconds)
    after = log_bytes(logs)
    window.end_line, window.end = cost_replay.count_lines(recording), time.time()
    window.log_bytes = {k: after[k] - before.get(k, 0) for k in after}


def _bursts(stack: LocalStack, bursts: Cycles, latency_ms: int = LATENCY_MS) -> list[Sent]:
    """Interactive ``bursts`` through the gateway's interactive path, as the yield
    benchmark sends them; what became of each request."""
    sent = Run(BURSTS_MODE)
    asyncio.run(Interactive(stack, latency_ms, "gateway").run(bursts, sent, time.monotonic()))
    return sent.sent


def _failed_interactive(sent: Sequence[Sent], when: str) -> list[str]:
    failed = [one for one in sent if one.status != 200]
    if not sent or len(failed) > len(sent) // 20:
        return [f"{len(failed)} of {len(sent)} interactive requests failed ({when})"]
    return []


def _measured_batch(
    stack: LocalStack,
    api: httpx.Client,
    sim: httpx.Client,
    recorded: tuple[Path, Path],
    n: int,
    mode: str,
    prefix: str,
    bursts: Cycles = BURSTS,
    latency_ms: int = LATENCY_MS,
    settle_seconds: float = SETTLE_SECONDS,
) -> CostRun:
    """One batch of the workload run in ``mode`` and the windows to price it by: its run, then
    status polls alone (subtracted as many times as the run polled); for ``BURSTS_MODE``, first
    the interactive bursts alone, then the batch run by the gateway beside the same bursts."""
    interactive, problems = None, []
    if mode == BURSTS_MODE:
        print(f"  interactive bursts alone ({bursts.seconds:.0f} s)...", flush=True)
        with _window(*recorded, settle_seconds) as interactive:
            problems += _failed_interactive(_bursts(stack, bursts, latency_ms), "alone")
    execution = "gateway" if mode == BURSTS_MODE else mode
    print(f"  batch of {n} ({mode} mode)...", flush=True)
    with ThreadPoolExecutor(1) as beside:
        bursts = beside.submit(_bursts, stack, bursts, latency_ms) if mode == BURSTS_MODE else None
        t0 = time.monotonic()
        with _window(*recorded, settle_seconds) as run:
            batch_id, polls, found, model_cost = _run_batch(
                api, sim, n, prefix, execution, alone=bursts is None
            )
            seconds = time.monotonic() - t0
        problems += found
        if bursts is not None:
            problems += _failed_interactive(bursts.result(), "beside the batch")
    with _window(*recorded, settle_seconds) as calibration:
        for _ in range(CALIBRATION_POLLS):
            api.get(f"/batches/{batch_id}").raise_for_status()
    transitions, note = _transitions(stack.env, batch_id)
    return CostRun(
        n=n,
        batch_id=batch_id,
        seconds=seconds,
        create_payload_bytes=len(batch_payload(n, prefix, execution)),
        status_polls=polls,
        run=run,
        polls=calibration,
        transitions=transitions,
        transition_note=note,
        problems=problems,
        mode=mode,
        model_cost_usd=model_cost,
        interactive=interactive,
        latency_ms=latency_ms,
    )


def run_cost_workload(
    n: int,
    workers: int = 2,
    bursts: Cycles = BURSTS,
    latency_ms: int = LATENCY_MS,
    settle_seconds: float = SETTLE_SECONDS,
) -> tuple[list[CostRun], Path, Path]:
    """Run the workload on a fresh recorded stack: run by the gateway, on the provider's batch
    service (``execution_mode`` provider), and by the gateway beside interactive bursts
    (``BURSTS_MODE``); returns the three runs, the recording and the invocation records'
    directory."""
    work = Path(tempfile.mkdtemp(prefix="batchgw-cost-"))
    recording, invocations, logs = work / "moto-recording.jsonl", work / "invocations", work / "logs"
    invocations.mkdir()
    overrides = {
        "BATCH_MODEL_CONCURRENCY": str(MODEL_CAP),
        "BATCHGW_SIM_LATENCY_MS": str(latency_ms),
        "MOTO_ENABLE_RECORDING": "true",
        "MOTO_RECORDER_FILEPATH": str(recording),
        INVOCATIONS_DIR_ENV: str(invocations),
    }
    print(f"cost run: N={n}, 1 KB requests, 1 KB answers, {latency_ms} ms; work dir {work}", flush=True)
    runs: list[CostRun] = []
    with (
        LocalStack(0, 0, 0, env_overrides=overrides, workers=workers, log_dir=logs) as stack,
        api_client(stack.api_url) as api,
        httpx.Client(base_url=stack.sim_url, timeout=10) as sim,
    ):
        print(f"  warm-up batch of {WARMUP_REQUESTS}...", flush=True)
        warm_problems = _run_batch(api, sim, WARMUP_REQUESTS, "w")[2]
        time.sleep(settle_seconds)
        for mode, prefix in (("gateway", "c"), ("provider", "p"), (BURSTS_MODE, "b")):
            runs.append(
                _measured_batch(
                    stack, api, sim, (recording, logs), n, mode, prefix, bursts, latency_ms, settle_seconds
                )
            )
            runs[-1].problems[:0] = [f"warm-up: {p}" for p in warm_problems]
        peak = _peak_rss_by_role()
        stack.check()
    for cost_run in runs:
        cost_run.peak_rss_mb = peak
    return runs, recording, invocations


def _peak_rss_by_role() -> dict[str, float]:
    """The peak resident memory of the stack's processes, the largest of each role: the
    worker's is what its Lambda needs (its poller adds a little of its own)."""
    roles = {p.pid: p.role for p in stack_processes()}
    peak: dict[str, float] = {}
    for pid, mb in peak_rss_mb(list(roles)).items():
        peak[roles[pid]] = max(peak.get(roles[pid], 0.0), mb)
    return peak


# --- from the run to usage per request ---------------------------------------------------------


def _in(window: RunWindow, invocations: Sequence[Invocation]) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {}
    for invocation in invocations:
        if window.start <= invocation.at < window.end:
            out.setdefault(invocation.function, []).append(invocation.seconds)
    return out


def _less(run: list[m.UsageLine], polls: list[m.UsageLine], times: float) -> list[m.UsageLine]:
    """The run's usage less ``times`` the polls' (by service, component and price; never < 0)."""
    subtract: dict[tuple[str, str, str], float] = {}
    for line in polls:
        key = (line.service, line.component, line.price)
        subtract[key] = subtract.get(key, 0.0) + line.quantity * times
    out = []
    for line in run:
        quantity = max(0.0, line.quantity - subtract.get((line.service, line.component, line.price), 0.0))
        if quantity:
            out.append(m.UsageLine(line.service, line.component, line.price, quantity))
    return out


@dataclass
class Measured:
    usage: list[m.UsageLine]  # per request
    figures: dict[str, Any]


def _window_usage(
    tally: cost_replay.Tally,
    invoked: Mapping[str, list[float]],
    log_bytes: Mapping[str, int],
    memory: Mapping[str, int],
    seconds: float,
    create_payload_bytes: int = 0,
) -> list[m.UsageLine]:
    """A window's whole usage (absolute): the replayed calls plus Lambda, API Gateway, logs, X-Ray."""
    usage = tally.lines()
    for function, durations in sorted(invoked.items()):
        usage.append(m.UsageLine("Lambda", f"{function} invocations", "lambda_request", len(durations)))
        usage.append(
            m.UsageLine(
                "Lambda",
                f"{function} GB-s ({memory.get(function, 0)} MB)",
                "lambda_gb_second",
                m.gb_seconds(durations, memory.get(function, 0)),
            )
        )
        usage.append(
            m.UsageLine("X-Ray", f"{function} traces", "xray_trace", m.xray_traces(len(durations), seconds))
        )
    api_calls = len(invoked.get("api", []))
    if api_calls:
        extra_chunks = (
            m.chunks(create_payload_bytes, prices.APIGW_CHUNK_BYTES) - 1 if create_payload_bytes else 0
        )
        usage.append(
            m.UsageLine("API Gateway", "HTTP API requests", "apigw_request", api_calls + extra_chunks)
        )
    for function, price in (("worker", "sqs_standard"), ("webhooks", "sqs_fifo")):
        receives = len(invoked.get(function, []))
        if receives:
            component = f"ReceiveMessage (one per {function} invocation)"
            usage.append(m.UsageLine("SQS", component, price, receives))
    for function, count in sorted(log_bytes.items()):
        platform = PLATFORM_LOG_BYTES_PER_INVOCATION * len(invoked.get(function, []))
        usage.append(m.UsageLine("CloudWatch Logs", f"{function} logs", "logs_gb", (count + platform) / 1e9))
    return usage


def _windows(cost_run: CostRun) -> list[cost_replay.Window]:
    """The run's windows of the recording: its run, its polls alone, its bursts alone (if any)."""
    windows = [
        cost_replay.Window("run", cost_run.run.first_line, cost_run.run.end_line),
        cost_replay.Window("polls", cost_run.polls.first_line, cost_run.polls.end_line),
    ]
    if cost_run.interactive is not None:
        alone = cost_run.interactive
        windows.append(cost_replay.Window("interactive", alone.first_line, alone.end_line))
    return windows


def replay_runs(
    cost_runs: Sequence[CostRun], recording: Path
) -> tuple[dict[str, dict[str, cost_replay.Tally]], int]:
    """Each run's windows tallied (mode -> window name -> tally) from one replay of the recording,
    and how many of its lines could not be read.

    The runs ran one after another, so their windows never share a line; and a replay in order
    tallies a window the same whichever other windows it tallies too (the DynamoDB state at each
    line is what the lines before it made): one replay to the last window's end, not one per run
    from the recording's first line each."""
    requests, broken = cost_replay.read_recording(recording)
    polled = frozenset(queue_name(queue) for queue in resources.QUEUES)  # each feeds a function
    named = {
        f"{cost_run.mode}/{window.name}": (cost_run.mode, window)
        for cost_run in cost_runs
        for window in _windows(cost_run)
    }
    tallies = cost_replay.replay(
        requests, [replace(window, name=name) for name, (_, window) in named.items()], polled
    )
    by_run: dict[str, dict[str, cost_replay.Tally]] = {cost_run.mode: {} for cost_run in cost_runs}
    for name, (mode, window) in named.items():
        by_run[mode][window.name] = tallies[name]
    return by_run, broken


def measure(
    cost_run: CostRun,
    recording: Path,
    invocations_dir: Path,
    replayed: tuple[dict[str, cost_replay.Tally], int] | None = None,
) -> Measured:
    """``replayed``: the run's tallies (window name -> tally) and the recording's unreadable
    lines, from ``replay_runs``; without it, the recording is replayed for this run alone."""
    if replayed is None:
        by_run, broken = replay_runs([cost_run], recording)
        replayed = by_run[cost_run.mode], broken
    tallies, broken = replayed
    invocations = read_invocations(invocations_dir)
    memory = function_memory_mb()
    run_invoked, poll_invoked = _in(cost_run.run, invocations), _in(cost_run.polls, invocations)
    throughput = cost_run.n / cost_run.seconds
    run_seconds = cost_run.run.end - cost_run.run.start
    run_usage = _window_usage(
        tallies["run"],
        run_invoked,
        cost_run.run.log_bytes,
        memory,
        run_seconds,
        cost_run.create_payload_bytes,
    )
    poll_usage = _window_usage(
        tallies["polls"],
        poll_invoked,
        cost_run.polls.log_bytes,
        memory,
        cost_run.polls.end - cost_run.polls.start,
    )
    per_poll = [
        m.UsageLine(u.service, u.component, u.price, u.quantity / CALIBRATION_POLLS) for u in poll_usage
    ]
    # X-Ray's reservoir depends on time, not on calls: keep the run's own traces.
    per_poll = [u for u in per_poll if u.service != "X-Ray"]
    usage = _less(run_usage, per_poll, cost_run.status_polls)
    if cost_run.interactive is not None:
        # The interactive requests' own calls and invocations are theirs, not the batch's: what
        # the same bursts cost alone is subtracted once (X-Ray kept, as for the polls).
        alone = cost_run.interactive
        interactive_usage = _window_usage(
            tallies["interactive"], _in(alone, invocations), alone.log_bytes, memory, alone.end - alone.start
        )
        usage = _less(usage, [u for u in interactive_usage if u.service != "X-Ray"], 1)
    usage.append(m.UsageLine("Step Functions", "state transitions", "sfn_transition", cost_run.transitions))
    per_request = [m.UsageLine(u.service, u.component, u.price, u.quantity / cost_run.n) for u in usage]

    # The run window's invocations as measured (its few status polls included).
    lambda_figures = {
        function: {
            "invocations_per_request": len(durations) / cost_run.n,
            "mean_seconds": sum(durations) / len(durations),
            "memory_mb": memory.get(function),
            "gb_seconds_per_request": m.gb_seconds(durations, memory.get(function, 0)) / cost_run.n,
        }
        for function, durations in sorted(run_invoked.items())
    }
    figures = {
        "workload": {
            "request_body_bytes": len(json.dumps(_body(request_text(0)), separators=(",", ":"))),
            "response_bytes": RESPONSE_BYTES,
            "upstream_latency_ms": cost_run.latency_ms,
            "batch_size": cost_run.n,
            "model_cap": MODEL_CAP,
        },
        "batch_seconds": cost_run.seconds,
        "throughput_rps": throughput,
        "status_polls_subtracted": cost_run.status_polls,
        "step_functions_transitions_per_batch": cost_run.transitions,
        "step_functions_path": cost_run.transition_note,
        "lambda": lambda_figures,
        "peak_rss_mb_by_role": cost_run.peak_rss_mb,
        "log_bytes_per_request": {k: v / cost_run.n for k, v in cost_run.run.log_bytes.items()},
        # the run's DynamoDB calls (status polls included), with the billed size of their items
        "dynamodb_items": {
            component: {
                "per_request": len(sizes) / cost_run.n,
                "mean_bytes": round(statistics.mean(sizes)),
                "p90_bytes": sorted(sizes)[int(0.9 * (len(sizes) - 1))],
                "max_bytes": max(sizes),
            }
            for component, sizes in sorted(tallies["run"].sizes.items(), key=lambda kv: -len(kv[1]))
        },
        "aws_calls_in_run": dict(sorted(tallies["run"].calls.items(), key=lambda kv: -kv[1])),
        "recording_lines_unreadable": broken,
        "x_ray_window_seconds": run_seconds,
        "problems": cost_run.problems
        + (
            [f"{broken} lines of the recording unreadable: the replay lacks their requests"] if broken else []
        ),
    }
    return Measured(per_request, figures)


def cost_result(measured: Measured) -> dict[str, Any]:
    """The keys ``make cost`` (and ``make bench``) write into bench/last.json."""
    breakdown = m.price(measured.usage)
    provisioned = provisioned_cost(measured.usage)
    return {
        "cost_per_million_usd": breakdown.total,
        "cost_per_million_usd_provisioned": provisioned["usd_per_million_at_target"],
        "cost_provisioned": provisioned,
        "cost_by_service_usd": breakdown.by_service(),
        "cost_breakdown": [
            {
                "service": line.service,
                "component": line.component,
                "units_per_million": line.units_per_million,
                "unit": line.unit,
                "usd_per_million": line.usd_per_million,
            }
            for line in breakdown.lines
        ],
        "cost_usage_per_request": [line.to_json() for line in measured.usage],
        "cost_measurements": measured.figures,
        "cost_prices": {
            "date": prices.PRICES_DATE,
            "region": prices.PRICES_REGION,
            "note": prices.PRICES_NOTE,
        },
    }


def measure_cost(
    n: int = DEFAULT_N,
    workers: int = 2,
    bursts: Cycles = BURSTS,
    latency_ms: int = LATENCY_MS,
    settle_seconds: float = SETTLE_SECONDS,
) -> dict[str, Any]:
    """Run the named workload in every mode and return the cost keys (``cost_result``, of
    the gateway-run batch alone), with the modes side by side (``cost_by_mode``)."""
    cost_runs, recording, invocations = run_cost_workload(n, workers, bursts, latency_ms, settle_seconds)
    print("  replaying the recording...", flush=True)
    tallies, broken = replay_runs(cost_runs, recording)
    measured = {
        run.mode: measure(run, recording, invocations, (tallies[run.mode], broken)) for run in cost_runs
    }
    result = cost_result(measured["gateway"])
    print_breakdown(m.price(measured["gateway"].usage), measured["gateway"].figures)
    print_provisioned(result["cost_provisioned"])
    result["cost_by_mode"] = by_mode = {run.mode: mode_cost(measured[run.mode], run) for run in cost_runs}
    result["cost_measurements"]["problems"] = [
        f"{run.mode}: {problem}" for run in cost_runs for problem in measured[run.mode].figures["problems"]
    ]
    print_modes(by_mode)
    return result


def mode_cost(measured: Measured, run: CostRun) -> dict[str, Any]:
    """One mode's cost per million requests: AWS's, the model's (at the price the batch paid:
    the standard price on the gateway, the batch price on the provider), and both; and per
    request what differs most between the modes: the workers' time (beside interactive bursts,
    the time chains spend waiting for room) and DynamoDB's units (the scheduling's reads and
    writes among them)."""
    aws = m.price(measured.usage).total
    model = run.model_cost_usd * 1_000_000 / run.n
    worker_gb_seconds = sum(
        u.quantity
        for u in measured.usage
        if u.price == "lambda_gb_second" and u.component.startswith("worker")
    )
    return {
        "aws_per_million_usd": round(aws, 4),
        "model_per_million_usd": round(model, 4),
        "total_per_million_usd": round(aws + model, 4),
        "batch_seconds": round(run.seconds, 1),
        "step_functions_transitions_per_batch": run.transitions,
        "worker_gb_seconds_per_request": round(worker_gb_seconds, 6),
        "dynamodb_write_units_per_request": round(units_per_request(measured.usage, "dynamodb_wru"), 3),
        "dynamodb_read_units_per_request": round(units_per_request(measured.usage, "dynamodb_rru"), 3),
        "scheduling_per_million_usd": round(scheduling_cost(measured.usage), 4),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.cost", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--n", type=int, default=DEFAULT_N, help=f"requests in the batch (default {DEFAULT_N})"
    )
    parser.add_argument("--workers", type=int, default=2, help="worker poller processes (default 2)")
    parser.add_argument(
        "--burst-seconds",
        type=float,
        default=BURSTS.burst_seconds,
        help=f"each burst and quiet phase of the interactive load (default {BURSTS.burst_seconds:g})",
    )
    parser.add_argument(
        "--latency-ms", type=int, default=LATENCY_MS, help=f"each request's at the simulator ({LATENCY_MS})"
    )
    parser.add_argument(
        "--settle-seconds",
        type=float,
        default=SETTLE_SECONDS,
        help=f"after each window, for its trailing calls to reach moto (default {SETTLE_SECONDS:g})",
    )
    parser.add_argument("--from-json", action="store_true", help="price the usage already in --out; no run")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    saved: dict[str, Any] = json.loads(args.out.read_text()) if args.out.exists() else {}
    if args.from_json:
        usage = [m.UsageLine.from_json(u) for u in saved.get("cost_usage_per_request", [])]
        if not usage:
            parser.error(f"{args.out} has no cost_usage_per_request: run without --from-json first")
        measured = Measured(usage, saved.get("cost_measurements", {}))
        result = cost_result(measured)
        print_breakdown(m.price(usage), measured.figures)
        print_provisioned(result["cost_provisioned"])
    else:
        phase = args.burst_seconds
        bursts = replace(BURSTS, burst_seconds=phase, quiet_seconds=phase)
        result = measure_cost(args.n, args.workers, bursts, args.latency_ms, args.settle_seconds)
    saved.update(result)
    args.out.write_text(json.dumps(saved, indent=2) + "\n")
    print(f"\nwritten to {args.out}")
    problems = result["cost_measurements"].get("problems", [])
    if problems:
        print("PROBLEMS: " + "; ".join(problems))
        return 1
    return 0 if math.isfinite(result["cost_per_million_usd"]) else 1


if __name__ == "__main__":
    sys.exit(main())
