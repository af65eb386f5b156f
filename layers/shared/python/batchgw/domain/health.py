"""What one process knows of each model's health: pauses, and retryable failures in a row.

A pause is also written to the model's slot record (``SlotStore.pause``) so every process
stops starting that model's requests; this object lets the chains of this process stop
without asking DynamoDB first.
"""

from __future__ import annotations

import threading


class ModelHealth:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._paused: dict[str, float] = {}
        self._failures: dict[str, set[str]] = {}

    def paused_until(self, model: str) -> float:
        with self._lock:
            return self._paused.get(model, 0.0)

    def note_pause(self, model: str, until: float) -> None:
        with self._lock:
            self._paused[model] = max(until, self._paused.get(model, 0.0))

    def failure(self, model: str, request: str, *, pause_after: int) -> bool:
        """Count a retryable failure of ``request``; True when it completes a run of
        failures, of that many different requests with no success between, that pauses the
        model (``pause_after`` of them: BATCH_MODEL_PAUSE_AFTER_FAILURES as it is now). One
        request failing again and again is that request's trouble, not the model's: it
        counts once."""
        with self._lock:
            run = self._failures.setdefault(model, set())
            run.add(request)
            tripped = len(run) >= pause_after
            if tripped:
                run.clear()
            return tripped

    def success(self, model: str) -> None:
        with self._lock:
            self._failures.pop(model, None)


class StoredResults:
    """Bytes of responses each batch has stored, as this process knows them.

    Raised to the batch's shard totals when a chain starts, and added to as this process
    records results (BATCH_MAX_RESULTS_MB_PER_BATCH is counted per process, as the spec
    says, from what it records and what the batch had stored).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._bytes: dict[str, int] = {}

    def known(self, batch_id: str) -> int:
        with self._lock:
            return self._bytes.get(batch_id, 0)

    def raise_to(self, batch_id: str, stored: int) -> None:
        with self._lock:
            self._bytes[batch_id] = max(stored, self._bytes.get(batch_id, 0))

    def add(self, batch_id: str, size: int) -> None:
        with self._lock:
            self._bytes[batch_id] = self._bytes.get(batch_id, 0) + size


class RouteHealth:
    """Routes this process found refusing connections, and until when it leaves them be (an
    open circuit): batch work fails over to the model's other batch-allowed routes, and waits
    when none is left."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._down: dict[tuple[str, str], float] = {}

    def down_until(self, model: str, route: str) -> float:
        with self._lock:
            return self._down.get((model, route), 0.0)

    def refused(self, model: str, route: str, until: float) -> None:
        with self._lock:
            self._down[(model, route)] = until

    def answered(self, model: str, route: str) -> None:
        with self._lock:
            self._down.pop((model, route), None)
