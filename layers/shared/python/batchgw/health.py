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
