"""The baseline: a plain asyncio httpx client sending the same requests straight to the simulator.

At most ``concurrency`` requests are in flight (a semaphore held only around the HTTP
call); the client opens at most that many connections. With ``retry`` it retries what the
gateway retries (408, 425, 429, 5xx but 504) after the gateway's own backoff
(``batchgw.domain.decisions.backoff_seconds`` with the same settings, or a longer
``Retry-After``), sleeping outside the semaphore, as the gateway frees the model slot
while a request waits for its retry.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import time
from dataclasses import dataclass, field

import httpx
from batchgw.config.settings import Settings
from batchgw.domain.decisions import backoff_seconds

from bench.workload import ENDPOINT, Workload

RETRYABLE = frozenset({408, 425, 429})
MAX_TRIES = 20


def retryable(status: int) -> bool:
    return status in RETRYABLE or (status >= 500 and status != 504)


@dataclass
class DirectRun:
    seconds: float
    requests_sent: int
    retries: int
    client_cpu_seconds: float  # this process's CPU over the run (the client's own cost)
    failures: list[str] = field(default_factory=list)


async def _run(
    sim_url: str, workload: Workload, concurrency: int, settings: Settings, retry: bool
) -> DirectRun:
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    timeout = httpx.Timeout(settings.batch_upstream_timeout_seconds, connect=10.0)
    rng = random.Random()
    slots = asyncio.Semaphore(concurrency)
    sent = retries = 0
    failures: list[str] = []
    bodies = [json.dumps(workload.body(i), separators=(",", ":")).encode() for i in range(workload.n)]
    headers = {"content-type": "application/json"}

    async with httpx.AsyncClient(base_url=sim_url, limits=limits, timeout=timeout) as client:

        async def one(index: int) -> None:
            nonlocal sent, retries
            for attempt in range(1, MAX_TRIES + 1):
                async with slots:
                    sent += 1
                    resp = await client.post(ENDPOINT, content=bodies[index], headers=headers)
                if resp.status_code == 200:
                    content = resp.json()["choices"][0]["message"]["content"]
                    if content != workload.expected_content(index):
                        failures.append(f"{workload.custom_id(index)}: unexpected content {content!r}")
                    return
                if not (retry and retryable(resp.status_code)):
                    break
                delay = backoff_seconds(attempt, settings, rng)
                retry_after = resp.headers.get("retry-after")
                if retry_after is not None:
                    with contextlib.suppress(ValueError):
                        delay = max(delay, float(retry_after))
                retries += 1
                await asyncio.sleep(delay)
            failures.append(f"{workload.custom_id(index)}: answered {resp.status_code}")

        cpu0 = time.process_time()
        t0 = time.perf_counter()
        await asyncio.gather(*(one(i) for i in range(workload.n)))
        seconds = time.perf_counter() - t0
        cpu = time.process_time() - cpu0
    return DirectRun(seconds, sent, retries, cpu, failures)


def run_direct(
    sim_url: str, workload: Workload, *, concurrency: int, settings: Settings, retry: bool = False
) -> DirectRun:
    """Send every request of ``workload`` to ``sim_url`` with ``concurrency`` in flight at most."""
    return asyncio.run(_run(sim_url, workload, concurrency, settings, retry))
