"""What one process knows of each model's health: pauses, and retryable failures in a row.

A pause is also written to the model's slot record (``SlotStore.pause``) so every process
stops starting that model's requests; this object lets the chains of this process stop
without asking DynamoDB first.
"""

from __future__ import annotations

import threading


class ModelHealth:
    def __init__(self, failures_to_pause: int, pause_seconds: float) -> None:
        self.failures_to_pause = failures_to_pause
        self.pause_seconds = pause_seconds
        self._lock = threading.Lock()
        self._paused: dict[str, float] = {}
        self._failures: dict[str, int] = {}

    def paused_until(self, model: str) -> float:
        with self._lock:
            return self._paused.get(model, 0.0)

    def note_pause(self, model: str, until: float) -> None:
        with self._lock:
            self._paused[model] = max(until, self._paused.get(model, 0.0))

    def failure(self, model: str) -> bool:
        """Count a retryable failure; True when it completes a run that pauses the model."""
        with self._lock:
            count = self._failures.get(model, 0) + 1
            tripped = count >= self.failures_to_pause
            self._failures[model] = 0 if tripped else count
            return tripped

    def success(self, model: str) -> None:
        with self._lock:
            self._failures[model] = 0


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
