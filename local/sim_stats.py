"""What the simulator counts: requests per model, ``tag=`` and route (in flight now and the
most ever in flight, for ``/_sim/stats``), and each request's attempts (for ``fail=N``).
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from local.sim_protocol import BACKUP, PRIMARY, Endpoint, JsonObject


@dataclass
class _ModelCounts:
    requests: int = 0
    in_flight: int = 0
    max_in_flight: int = 0


class Stats:
    """Per-model request counts, in flight now and the most ever in flight; thread-safe."""

    def __init__(self, models: Iterable[str]) -> None:
        self._lock = threading.Lock()
        self._counts = {model: _ModelCounts() for model in models}
        self._tags: dict[str, _ModelCounts] = {}
        self._routes: dict[str, int] = {PRIMARY: 0, BACKUP: 0}

    @contextmanager
    def track(self, model: str, tag: str | None = None, route: str = "primary") -> Iterator[None]:
        with self._lock:
            self._routes[route] = self._routes.get(route, 0) + 1
            tracked = [self._counts[model]]
            if tag is not None:
                tracked.append(self._tags.setdefault(tag, _ModelCounts()))
            for counts in tracked:
                counts.requests += 1
                counts.in_flight += 1
                counts.max_in_flight = max(counts.max_in_flight, counts.in_flight)
        try:
            yield
        finally:
            with self._lock:
                for counts in tracked:
                    counts.in_flight -= 1

    def snapshot(self) -> JsonObject:
        with self._lock:
            return {
                "models": {model: _shown(counts) for model, counts in self._counts.items()},
                "tags": {tag: _shown(counts) for tag, counts in self._tags.items()},
                "routes": dict(self._routes),
            }

    def reset(self) -> None:
        with self._lock:
            for counts in (*self._counts.values(), *self._tags.values()):
                counts.requests = 0
                counts.max_in_flight = counts.in_flight
            self._routes = dict.fromkeys(self._routes, 0)


def _shown(counts: _ModelCounts) -> JsonObject:
    return {"requests": counts.requests, "in_flight": counts.in_flight, "max_in_flight": counts.max_in_flight}


class Attempts:
    """How many times each request identity (endpoint + canonical body) has been seen."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._seen: dict[str, int] = {}

    @staticmethod
    def identity(endpoint: Endpoint, body: JsonObject) -> str:
        canonical = json.dumps(body, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(f"{endpoint.value}\n{canonical}".encode()).hexdigest()

    def next(self, identity: str) -> int:
        """Counts one more attempt of ``identity`` and returns its number, starting at 1."""
        with self._lock:
            attempt = self._seen.get(identity, 0) + 1
            self._seen[identity] = attempt
            return attempt

    def clear(self) -> None:
        with self._lock:
            self._seen.clear()
