"""``make bench-promise`` (``python -m bench.promise``): how close a batch's estimate at create
(``estimated_completion_at``, issue 56) comes to when it really ends.

One local stack, shaped as the yield benchmark's (``bench.yield_run``): the simulator serves
``sim-chat`` with ``--capacity`` sequences (8), the batch's requests take ``--latency-ms``
(400). A warm-up batch gives the model a pace. Then, under each of two interactive loads
sent through the gateway's interactive path the whole time, batches of each ``--sizes`` (200,
800, 1600 requests) are created one after another, each once the one before ended:

- **steady**: ``--steady-rps`` interactive requests a second (2), evenly, in cycles of twice
  ``--steady-seconds`` (10);
- **bursty**: ``--burst-rps`` (8) for ``--burst-seconds`` (20), then ``--quiet-rps`` (1)
  for as long, over and over.

For each batch: the estimate's duration (``estimated_completion_at`` of the create answer,
less the create's time), the real one (its ``completed_at``, less the same), and their
relative error, ``real / estimated - 1`` (positive: later than promised). Both are whole
seconds, so the sizes keep the durations well above one.

Keys in ``bench/last.json``: ``promise_error_steady`` and ``promise_error_bursty`` (the largest
absolute error over the sizes; goal on the steady load: at most 0.15) and ``promise`` (every
batch's figures).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import httpx

from bench.yield_run import MIN_ENVIRONMENTS, MODEL, Cycles, Interactive, Run, yield_stack
from local.run import LocalStack

DEFAULT_OUT = Path(__file__).resolve().parent / "last.json"
ERROR_GOAL = 0.15  # the steady load's largest error, as issue 56 asks
WARM_UP_REQUESTS = 32  # the warm-up batch: answers enough for a pace


@dataclass
class Promised:
    load: str
    requests: int
    estimated_seconds: float | None
    real_seconds: float
    error: float | None  # real / estimated - 1


def batch_lines(n: int, latency_ms: int, tag: str) -> list[dict[str, Any]]:
    return [
        {
            "custom_id": f"{tag}-{i}",
            "body": {
                "model": MODEL,
                "messages": [{"role": "user", "content": f"{tag} {i} [[sim latency_ms={latency_ms}]]"}],
            },
        }
        for i in range(n)
    ]


def run_batch(api: httpx.Client, n: int, latency_ms: int, tag: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """Create a batch of ``n`` requests and wait for its end: (the create answer, the ended batch)."""
    created = (
        api.post("/batches", json={"requests": batch_lines(n, latency_ms, tag)}).raise_for_status().json()
    )
    while True:
        batch = api.get(f"/batches/{created['id']}").raise_for_status().json()
        if batch["status"] in ("completed", "failed", "expired", "cancelled"):
            return created, batch
        time.sleep(0.2)


def measure(api: httpx.Client, load: str, n: int, latency_ms: int) -> Promised:
    created, ended = run_batch(api, n, latency_ms, f"{load}-{n}")
    if ended["status"] != "completed":
        raise RuntimeError(f"the {load} batch of {n} ended {ended['status']}")
    start = created["created_at"]
    estimated = created.get("estimated_completion_at")
    real = float(ended["completed_at"] - start)
    span = None if estimated is None else float(estimated - start)
    error = None if not span else round(real / span - 1, 3)
    print(f"    {n:>5} requests: estimated {span} s, took {real:.0f} s, error {error}", flush=True)
    return Promised(load, n, span, real, error)


def under_load(stack: LocalStack, cycles: Cycles, latency_ms: int, stop: threading.Event) -> threading.Thread:
    """Interactive requests through the gateway, cycle after cycle, until ``stop``."""

    def send() -> None:
        while not stop.is_set():  # a cycle stops sending at ``stop``, not at its end
            interactive = Interactive(stack, latency_ms, "gateway")  # its events are its loop's
            asyncio.run(interactive.run(cycles, Run("load"), time.monotonic(), stop))

    thread = threading.Thread(target=send, daemon=True)
    thread.start()
    return thread


def worst(figures: list[Promised], load: str) -> float | None:
    errors = [abs(f.error) for f in figures if f.load == load and f.error is not None]
    return max(errors) if len(errors) == len([f for f in figures if f.load == load]) and errors else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[200, 800, 1600])
    parser.add_argument("--capacity", type=int, default=8)
    parser.add_argument("--latency-ms", type=int, default=400)
    parser.add_argument("--steady-rps", type=float, default=2.0)
    parser.add_argument("--steady-seconds", type=float, default=10.0, help="each half of a steady cycle")
    parser.add_argument("--burst-rps", type=float, default=8.0)
    parser.add_argument("--quiet-rps", type=float, default=1.0)
    parser.add_argument("--burst-seconds", type=float, default=20.0)
    parser.add_argument("--environments", type=int, default=MIN_ENVIRONMENTS)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    loads = {
        "steady": Cycles(args.steady_rps, args.steady_seconds, args.steady_rps, args.steady_seconds, 1),
        "bursty": Cycles(args.burst_rps, args.burst_seconds, args.quiet_rps, args.burst_seconds, 1),
    }
    print(f"promise bench: sizes {args.sizes}, capacity {args.capacity}, {args.latency_ms} ms", flush=True)
    figures: list[Promised] = []
    with yield_stack(args.capacity, 2, args.environments) as stack:
        environments = stack.worker_environments
        api = httpx.Client(
            base_url=stack.api_url, headers={"Authorization": "Bearer sk-local-alice"}, timeout=60
        )
        run_batch(api, WARM_UP_REQUESTS, args.latency_ms, "warm")
        for load, cycles in loads.items():
            print(f"  {load} interactive load:", flush=True)
            stop = threading.Event()
            sender = under_load(stack, cycles, args.latency_ms, stop)
            time.sleep(cycles.burst_seconds)  # the load is on before the first create
            try:
                figures += [measure(api, load, n, args.latency_ms) for n in args.sizes]
            finally:
                stop.set()
                sender.join(timeout=cycles.seconds + 60)
    steady, bursty = worst(figures, "steady"), worst(figures, "bursty")
    print(f"estimate's largest error, steady load: {steady} (goal <= {ERROR_GOAL}); bursty load: {bursty}")
    result = json.loads(args.out.read_text()) if args.out.exists() else {}
    result.update(
        {
            "promise_error_steady": steady,
            "promise_error_bursty": bursty,
            "promise": {
                "batches": [asdict(f) for f in figures],
                "shape": {k: v for k, v in vars(args).items() if k != "out"},
                "worker_environments": environments,
            },
        }
    )
    args.out.write_text(json.dumps(result, indent=2, default=str) + "\n")
    print(f"written to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
