"""The simulator's model of a real inference server's capacity, and what it measures.

A served model runs a fixed number of sequences at once (vLLM's ``max_num_seqs``, say):
past that, a request waits in the server's queue, first come first served, and its
latency is its wait plus its own time. ``Capacity`` keeps that queue per model (no limit
unless one is set: ``--capacity``, ``BATCHGW_SIM_CAPACITY``, or ``POST /_sim/capacity``).

``Latencies`` keeps each model's recent latencies (arrival to answer) by source: a request
the gateway's batch worker sends says so in ``x-batchgw-source: batch``; any other is
interactive. ``/_sim/stats`` shows their percentiles, and ``GET /metrics`` the queue as
vLLM's Prometheus gauges (``vllm:num_requests_running``, ``vllm:num_requests_waiting``).
"""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from dataclasses import field as dataclass_field
from typing import Any

SOURCE_HEADER = "x-batchgw-source"
BATCH, INTERACTIVE = "batch", "interactive"
SOURCES = (INTERACTIVE, BATCH)
WAIT_POLL_SECONDS = 0.1  # how often a queued request looks for the server stopping or its client gone
KEPT_LATENCIES = 20_000  # per model and source: the most recent
ADMITTED = 200  # what ``Capacity.enter`` answers a request it admits


def source_of(headers: Mapping[str, str]) -> str:
    """Who sent a request (``headers`` with lower-case names)."""
    return BATCH if headers.get(SOURCE_HEADER, "").strip().lower() == BATCH else INTERACTIVE


@dataclass
class _Queue:
    limit: int = 0  # sequences at once; 0: no limit
    overflow: int | None = None  # past the limit, answer this status at once (None: wait in the queue)
    running: int = 0
    # Of those running, how many each source sent.
    by_source: dict[str, int] = dataclass_field(default_factory=lambda: dict.fromkeys(SOURCES, 0))
    next_ticket: int = 0  # the ticket the next request to arrive gets
    serving: int = 0  # tickets below this one have been admitted (or gave up)
    gave_up: frozenset[int] = frozenset()

    @property
    def waiting(self) -> int:
        return self.next_ticket - self.serving - len(self.gave_up)


class Capacity:
    """Each model's sequences: a request is admitted while fewer than the limit run, in the
    order requests arrived; thread-safe."""

    def __init__(self, models: Iterable[str], limit: int = 0) -> None:
        self._cond = threading.Condition()
        self._queues = {model: _Queue(limit=limit) for model in models}

    def set_limits(self, limits: Mapping[str, int]) -> None:
        with self._cond:
            for model, limit in limits.items():
                self._queues[model].limit = limit
            self._cond.notify_all()

    def limits(self) -> dict[str, int]:
        with self._cond:
            return {model: q.limit for model, q in self._queues.items()}

    def set_overflows(self, statuses: Mapping[str, int | None]) -> None:
        """Past its limit, each model answers its status at once (a server that refuses what
        it has no room for: 429, 503), or waits in its queue (None)."""
        with self._cond:
            for model, status in statuses.items():
                self._queues[model].overflow = status

    def overflows(self) -> dict[str, int | None]:
        with self._cond:
            return {model: q.overflow for model, q in self._queues.items()}

    def admit(self, model: str, give_up: Callable[[], bool], source: str = INTERACTIVE) -> bool:
        """Wait for a sequence of ``model`` (True: admitted, ``release`` it with the same
        ``source``), or until ``give_up()`` says the server stops or the client went away (False)."""
        return self.enter(model, give_up, source) == ADMITTED

    def enter(self, model: str, give_up: Callable[[], bool], source: str = INTERACTIVE) -> int | None:
        """``admit``, for a model that may refuse (``set_overflows``): ``ADMITTED`` (``release``
        it with the same ``source``), the status it refuses with at once when it has no room,
        or None when ``give_up()`` said to stop waiting."""
        with self._cond:
            queue = self._queues[model]
            busy = queue.limit > 0 and (queue.running >= queue.limit or queue.waiting > 0)
            if queue.overflow is not None and busy:
                return queue.overflow
            ticket = queue.next_ticket
            queue.next_ticket += 1
            while not (ticket == queue.serving and (queue.limit <= 0 or queue.running < queue.limit)):
                if give_up():
                    queue.gave_up = queue.gave_up | {ticket}
                    self._skip(queue)
                    self._cond.notify_all()
                    return None
                self._cond.wait(WAIT_POLL_SECONDS)
            queue.serving += 1
            queue.running += 1
            queue.by_source[source] += 1
            self._skip(queue)
            self._cond.notify_all()
            return ADMITTED

    def release(self, model: str, source: str = INTERACTIVE) -> None:
        with self._cond:
            self._queues[model].running -= 1
            self._queues[model].by_source[source] -= 1
            self._cond.notify_all()

    @staticmethod
    def _skip(queue: _Queue) -> None:
        """Move past the tickets at the head whose requests gave up."""
        while queue.serving in queue.gave_up:
            queue.gave_up = queue.gave_up - {queue.serving}
            queue.serving += 1

    def snapshot(self) -> dict[str, dict[str, Any]]:
        """Per model: its ``capacity``, the sequences ``running`` (and of them, by source in
        ``running_by_source``), and the requests ``waiting``."""
        with self._cond:
            return {
                model: {
                    "capacity": q.limit,
                    "running": q.running,
                    "running_by_source": dict(q.by_source),
                    "waiting": q.waiting,
                }
                for model, q in self._queues.items()
            }


class Latencies:
    """The most recent latencies of each model's requests, by source; thread-safe."""

    def __init__(self, models: Iterable[str], clock: Callable[[], float] = time.monotonic) -> None:
        self._lock = threading.Lock()
        self._kept = {(m, s): deque[float](maxlen=KEPT_LATENCIES) for m in models for s in SOURCES}
        self._answered = dict.fromkeys(self._kept, 0)  # every answer since the last clear
        self.clock = clock

    def add(self, model: str, source: str, seconds: float) -> None:
        with self._lock:
            self._kept[(model, source)].append(seconds * 1000)
            self._answered[(model, source)] += 1

    def clear(self) -> None:
        with self._lock:
            for kept in self._kept.values():
                kept.clear()
            self._answered = dict.fromkeys(self._answered, 0)

    def snapshot(self, model: str) -> dict[str, Any]:
        """Per source: how many were kept and their p50, p90 and p99, in ms (null: none), and
        how many were answered since the last clear (``answered``: all of them, where the
        kept ones are the most recent ``KEPT_LATENCIES``)."""
        with self._lock:
            kept = {source: sorted(self._kept[(model, source)]) for source in SOURCES}
            answered = {source: self._answered[(model, source)] for source in SOURCES}
        return {
            source: {
                "count": len(values),
                "answered": answered[source],
                "p50_ms": percentile(values, 50),
                "p90_ms": percentile(values, 90),
                "p99_ms": percentile(values, 99),
            }
            for source, values in kept.items()
        }


def percentile(values: list[float], p: float) -> float | None:
    """The nearest-rank percentile of sorted ``values``, to the 0.1 ms (None when empty)."""
    if not values:
        return None
    return round(values[max(0, math.ceil(p / 100 * len(values)) - 1)], 1)


def prometheus(queues: Mapping[str, Mapping[str, Any]]) -> bytes:
    """The queues as vLLM's gauges, in Prometheus's text format."""
    lines = []
    for name, field, help_text in (
        ("vllm:num_requests_running", "running", "Number of requests currently running."),
        ("vllm:num_requests_waiting", "waiting", "Number of requests waiting to be processed."),
    ):
        lines += [f"# HELP {name} {help_text}", f"# TYPE {name} gauge"]
        lines += [f'{name}{{model_name="{model}"}} {q[field]}' for model, q in sorted(queues.items())]
    return ("\n".join(lines) + "\n").encode()
