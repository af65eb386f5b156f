"""The worker's memory at its worst, against the memory its Lambda function is given.

One worker process runs as many chains at once as one invocation receives (the event source
mapping's batch size, ``WORKER_BATCH_SIZE`` in ``infra/constructs/functions.py``): first
with 1 KB answers, then with every answer near the largest the gateway reads
(``BATCH_MAX_RESULT_KB``, 4 MiB by default): embeddings of 60 inputs at 3,072 dimensions as
JSON floats, about 3.9 MB each, the costliest answer to parse. After each batch it reads the
worker process's peak resident memory (``VmHWM``) and prints it beside the worker's
configured memory. The local worker process also holds its poller, so the figure is a little
above what the function itself needs.

``python -m bench.worker_memory [--requests N]`` (about a minute).
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
import time
from typing import Any

import httpx

from bench.cost import FUNCTIONS_SOURCE, function_memory_mb
from bench.gateway import FINAL_STATUSES, api_client
from bench.probes import peak_rss_mb, stack_processes
from local.run import LocalStack

LATENCY_MS = 500
INPUTS = 60
DIMENSIONS = 3072


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


def _worker_peak_mb() -> float:
    pids = [p.pid for p in stack_processes() if p.role == "worker"]
    return max(peak_rss_mb(pids).values())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--requests", type=int, default=40, help="requests per batch (default 40)")
    args = parser.parse_args(argv)
    chains = worker_batch_size()
    configured = function_memory_mb()["worker"]
    overrides = {"BATCH_MODEL_CONCURRENCY": str(chains), "BATCHGW_SIM_LATENCY_MS": str(LATENCY_MS)}
    with LocalStack(0, 0, 0, env_overrides=overrides, workers=1) as stack, api_client(stack.api_url) as api:
        api.headers["content-type"] = "application/json"
        _run(api, [_chat(i) for i in range(args.requests)])
        small = _worker_peak_mb()
        _run(api, [_embeddings(i) for i in range(args.requests)])
        large = _worker_peak_mb()
    print(
        f"worker peak resident memory, {chains} chains in one process (batches of {args.requests}): "
        f"{small:.0f} MB with 1 KB answers, {large:.0f} MB with ~3.9 MB answers "
        f"(embeddings, {INPUTS} x {DIMENSIONS} floats); the worker function has {configured} MB"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
