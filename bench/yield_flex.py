"""The yield benchmark's flex line (``bench.yield_run``'s ``flex`` run): flex requests
(``service_tier: "flex"``) sent in the quiet phases while the batch runs, yielding, beside the
same interactive load.

Each flex request is paired with a batch of one request sent at the same moment (the same
body, bob's, as the flex request is): both wait for a batch slot of the model the large batch
fills. What each waited before its request started at the model is its time to its answer
(the flex request's, as its caller saw it; the batch's, its create to its one result read
back, polled every ``POLL_SECONDS``) less the simulated work (``--latency-ms``). The goal: a
flex request starts no later than a batch request sent with it (``flex_start_ratio``, flex
over batch at p50, goal <= 1), and the interactive p99 at the model stays within its goal
with flex traffic running (the run's ``p99_ratio_at_model``, beside the yield run's).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

import httpx

from bench.probes import percentile

MODEL = "sim-chat"
POLL_SECONDS = 0.1  # how often a paired batch's result is looked for
FLEX_KEY = {"Authorization": "Bearer sk-local-bob"}
FLEX_START_RATIO_GOAL = 1.0


@dataclass
class FlexSent:
    offset: float  # seconds from the run's start
    flex_seconds: float | None = None  # to its answer; None: not answered 200
    flex_status: int | None = None
    batch_seconds: float | None = None  # the paired batch: its create to its one result


@dataclass
class FlexLine:
    rps: float
    latency_ms: int
    sent: list[FlexSent] = field(default_factory=list)

    def offsets(self, cycles: Any) -> list[float]:
        """When each flex request (and its paired batch) is sent: evenly in each quiet phase."""
        offsets: list[float] = []
        if self.rps <= 0:
            return offsets
        for cycle in range(cycles.cycles):
            start = cycle * (cycles.burst_seconds + cycles.quiet_seconds) + cycles.burst_seconds
            count = int(cycles.quiet_seconds * self.rps)
            offsets += [start + (i + 0.5) / self.rps for i in range(count)]
        return offsets

    async def run(self, api_url: str, cycles: Any, t0: float) -> None:
        """Send every flex request and its paired batch from ``t0``; wait for every answer."""
        async with httpx.AsyncClient(base_url=api_url, headers=FLEX_KEY, timeout=60) as api:
            tasks = []
            for i, offset in enumerate(self.offsets(cycles)):
                delay = t0 + offset - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)
                sent = FlexSent(offset)
                self.sent.append(sent)
                tasks.append(asyncio.create_task(self._flex(api, sent, i)))
                tasks.append(asyncio.create_task(self._paired_batch(api, sent, i)))
            await asyncio.gather(*tasks)

    def _body(self, what: str, i: int) -> dict[str, Any]:
        text = f"{what} {i} [[sim latency_ms={self.latency_ms}]]"
        return {"model": MODEL, "messages": [{"role": "user", "content": text}]}

    async def _flex(self, api: httpx.AsyncClient, sent: FlexSent, i: int) -> None:
        started = time.monotonic()
        try:
            answer = await api.post(
                "/chat/completions", json={**self._body("flex", i), "service_tier": "flex"}
            )
        except httpx.HTTPError:
            return
        sent.flex_status = answer.status_code
        if answer.status_code == 200:
            sent.flex_seconds = time.monotonic() - started

    async def _paired_batch(self, api: httpx.AsyncClient, sent: FlexSent, i: int) -> None:
        started = time.monotonic()
        try:
            made = await api.post(
                "/batches", json={"requests": [{"custom_id": "p", "body": self._body("paired", i)}]}
            )
            batch_id = made.raise_for_status().json()["id"]
            while time.monotonic() - started < 60:
                page = (await api.get(f"/batches/{batch_id}/results")).json()
                if page.get("data") and page["data"][0]["status"] in ("completed", "failed"):
                    sent.batch_seconds = time.monotonic() - started
                    break
                await asyncio.sleep(POLL_SECONDS)
            await api.post(f"/batches/{batch_id}/cancel")
        except httpx.HTTPError:
            return

    def figures(self) -> dict[str, Any]:
        """What the flex requests and their paired batches waited before their start, in ms."""
        work = self.latency_ms / 1000
        flex = [s.flex_seconds - work for s in self.sent if s.flex_seconds is not None]
        paired = [s.batch_seconds - work for s in self.sent if s.batch_seconds is not None]

        def ms(values: list[float], q: float) -> float | None:
            return None if not values else round(1000 * max(0.0, percentile(values, q) or 0.0), 1)

        flex_p50, batch_p50 = ms(flex, 0.5), ms(paired, 0.5)
        return {
            "sent": len(self.sent),
            "flex_answered": len(flex),
            "flex_refused": sum(s.flex_status == 429 for s in self.sent),
            "flex_start_p50_ms": flex_p50,
            "flex_start_p99_ms": ms(flex, 0.99),
            "batch_start_p50_ms": batch_p50,
            "batch_start_p99_ms": ms(paired, 0.99),
            "flex_start_ratio": None if flex_p50 is None or not batch_p50 else round(flex_p50 / batch_p50, 3),
        }
