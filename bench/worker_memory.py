"""The worker's memory: steady over many invocations, and at its worst against the memory its
Lambda function is given.

1. **Growth.** One worker process serves ``--batches`` small batches (default 150, a few at a
   time, 1 KB answers), hundreds of invocations. After the first ``--warmup`` batches (the
   process's imports, pools and caches filled) and then every tenth of the run, it reads the
   process's resident memory (``VmRSS``) and counts the worker's invocations (``local.
   invocations``); it prints the growth from the warm-up to the end, per invocation too. A
   process that keeps something per invocation (a loop, a client, a TLS context) grows
   without bound; Lambda reuses its process for as long as it likes, so the figure must stay
   within a few tens of MB.
2. **Peak.** The same process then runs as many chains at once as one invocation receives
   (the event source mapping's batch size, ``WORKER_BATCH_SIZE`` in
   ``infra/constructs/functions.py``): with 1 KB answers, then with every answer near the
   largest the gateway reads (``BATCH_MAX_RESULT_KB``, 4 MiB by default): embeddings of 60
   inputs at 3,072 dimensions as JSON floats, about 3.9 MB each, the costliest answer to
   parse. It prints the process's peak resident memory (``VmHWM``) beside the worker's
   configured memory. The process is the worker's one execution environment
   (``BATCHGW_WORKER_ENVIRONMENTS=1``); its poller is a process of its own.

``python -m bench.worker_memory [--batches N] [--requests N]`` (about five minutes);
``--smoke``: a few batches, to check that it runs (seconds).
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from bench.cost_inputs import FUNCTIONS_SOURCE, function_memory_mb
from bench.gateway import FINAL_STATUSES, api_client
from bench.probes import peak_rss_mb, stack_processes
from local.env import PREFIX, WORKER_ENVIRONMENTS_ENV
from local.invocations import INVOCATIONS_DIR_ENV
from local.run import LocalStack

LATENCY_MS = 500  # each upstream answer's latency: the peak phase's chains all run at once
INPUTS = 60
DIMENSIONS = 3072
GROWTH_BATCHES = 150  # small batches of the growth phase: hundreds of invocations
GROWTH_REQUESTS = 4  # requests per small batch (each batch: a few chains, a few invocations)
GROWTH_AT_ONCE = 4  # small batches running at once, so the phase takes minutes, not ten
WARMUP_BATCHES = 10  # batches before the first reading: imports, pools and caches filled
READINGS = 10  # readings of the growth phase after the warm-up (one every tenth of the run)
WORKER_FUNCTION = f"{PREFIX}-worker"


def worker_batch_size() -> int:
    """``WORKER_BATCH_SIZE`` as the CDK construct declares it (read without importing CDK)."""
    for node in ast.parse(FUNCTIONS_SOURCE.read_text()).body:
        if not isinstance(node, ast.Assign) or not isinstance(node.value, ast.Constant):
            continue
        names = [target.id for target in node.targets if isinstance(target, ast.Name)]
        if "WORKER_BATCH_SIZE" in names and isinstance(node.value.value, int):
            return node.value.value
    raise RuntimeError(f"no WORKER_BATCH_SIZE in {FUNCTIONS_SOURCE}")


def _chat(i: int) -> dict[str, Any]:
    text = f"memory {i} [[sim bytes=1024]]"
    return {
        "custom_id": f"c-{i}",
        "body": {"model": "sim-chat", "messages": [{"role": "user", "content": text}]},
    }


def _embeddings(i: int) -> dict[str, Any]:
    body = {"model": "sim-embed", "dimensions": DIMENSIONS, "input": [f"text {i} {j}" for j in range(INPUTS)]}
    return {"custom_id": f"e-{i}", "method": "POST", "url": "/v1/embeddings", "body": body}


def _run(api: httpx.Client, lines: list[dict[str, Any]], timeout: float = 300) -> str:
    created = api.post("/batches", content=json.dumps({"requests": lines}).encode())
    created.raise_for_status()
    batch_id = str(created.json()["id"])
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        batch = api.get(f"/batches/{batch_id}").raise_for_status().json()
        if batch["status"] in FINAL_STATUSES:
            counts = batch["request_counts"]
            if batch["status"] != "completed" or counts["completed"] != len(lines):
                raise RuntimeError(f"{batch_id} ended {batch['status']} with {counts}")
            return batch_id
        time.sleep(0.5)
    raise TimeoutError(f"{batch_id} did not end within {timeout:.0f} s")


def _worker_pid() -> int:
    (pid,) = [p.pid for p in stack_processes() if p.role == "worker"]
    return pid


def _worker_peak_mb() -> float:
    return max(peak_rss_mb([_worker_pid()]).values())


def _resident_mb(pid: int) -> float:
    """The process's resident memory now (``VmRSS``), in MB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024  # kB
    raise RuntimeError(f"no VmRSS for {pid}")


def _invocations(directory: Path, pid: int) -> int:
    """The worker function's invocations so far in process ``pid`` (``local.invocations``)."""
    path = directory / f"invocations.{pid}.jsonl"
    if not path.exists():
        return 0
    lines = path.read_text().splitlines()
    return sum(1 for line in lines if json.loads(line)["function"] == WORKER_FUNCTION)


@dataclass(frozen=True)
class Reading:
    batches: int
    invocations: int
    resident_mb: float


def _growth(
    api: httpx.Client, batches: int, requests: int, warmup: int, invocations_dir: Path
) -> list[Reading]:
    """Run ``batches`` small batches, ``GROWTH_AT_ONCE`` at a time; the worker's readings
    after the warm-up and at every tenth of the rest."""
    pid = _worker_pid()
    marks = {warmup, batches} | {warmup + (batches - warmup) * k // READINGS for k in range(1, READINGS)}
    readings: list[Reading] = []
    done = 0
    with ThreadPoolExecutor(GROWTH_AT_ONCE) as pool:
        for start in range(0, batches, GROWTH_AT_ONCE):
            wave = range(start, min(batches, start + GROWTH_AT_ONCE))
            lines = [[_chat(b * requests + i) for i in range(requests)] for b in wave]
            list(pool.map(lambda batch: _run(api, batch), lines))
            done += len(wave)
            if any(start < mark <= done for mark in marks):
                readings.append(Reading(done, _invocations(invocations_dir, pid), _resident_mb(pid)))
    return readings


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--requests", type=int, default=40, help="requests per batch of the peak phase (40)")
    parser.add_argument(
        "--batches", type=int, default=GROWTH_BATCHES, help="small batches of the growth phase"
    )
    parser.add_argument("--warmup", type=int, default=WARMUP_BATCHES, help="batches before the first reading")
    parser.add_argument(
        "--smoke", action="store_true", help="a few batches of each phase: checks that it runs"
    )
    args = parser.parse_args(argv)
    if args.smoke:
        args.batches, args.warmup, args.requests = 2 * GROWTH_AT_ONCE, GROWTH_AT_ONCE, 4
    if not 0 < args.warmup < args.batches:
        parser.error("--warmup must be at least 1 and below --batches")
    chains = worker_batch_size()
    configured = function_memory_mb()["worker"]
    with tempfile.TemporaryDirectory(prefix="worker-memory-") as invocations_dir:
        overrides = {
            "BATCH_MODEL_CONCURRENCY": str(chains),
            "BATCHGW_SIM_LATENCY_MS": str(LATENCY_MS),
            INVOCATIONS_DIR_ENV: invocations_dir,
            # One execution environment, the process measured: every invocation is its own.
            WORKER_ENVIRONMENTS_ENV: "1",
        }
        with (
            LocalStack(0, 0, 0, env_overrides=overrides, workers=1) as stack,
            api_client(stack.api_url) as api,
        ):
            api.headers["content-type"] = "application/json"
            started = time.monotonic()
            readings = _growth(api, args.batches, GROWTH_REQUESTS, args.warmup, Path(invocations_dir))
            growth_seconds = time.monotonic() - started
            _run(api, [_chat(i) for i in range(args.requests)])
            small = _worker_peak_mb()
            _run(api, [_embeddings(i) for i in range(args.requests)])
            large = _worker_peak_mb()
    first, last = readings[0], readings[-1]
    invocations = last.invocations - first.invocations
    grown = last.resident_mb - first.resident_mb
    print(f"worker process ({os.cpu_count()} CPUs), {args.batches} batches of {GROWTH_REQUESTS} requests:")
    for reading in readings:
        print(
            f"  after {reading.batches:4d} batches, {reading.invocations:5d} invocations: "
            f"{reading.resident_mb:6.1f} MB"
        )
    per_invocation = f"{grown * 1024 / invocations:.0f} KB" if invocations else "n/a"
    print(
        f"worker resident memory grew {grown:+.1f} MB over {invocations} invocations after the warm-up "
        f"({first.resident_mb:.0f} -> {last.resident_mb:.0f} MB, {per_invocation} per invocation; "
        f"{growth_seconds:.0f} s)"
    )
    print(
        f"worker peak resident memory, {chains} chains in one process (batches of {args.requests}): "
        f"{small:.0f} MB with 1 KB answers, {large:.0f} MB with ~3.9 MB answers "
        f"(embeddings, {INPUTS} x {DIMENSIONS} floats); the worker function has {configured} MB"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
