"""Logs, metrics and traces, one of each per process.

- ``logger``: every module logs through it, structured (``logger.info("...", extra={...})``).
- ``metrics``: CloudWatch metrics in the embedded metric format (Powertools), counted in
  the process and written as log lines when ``flush`` is called (at the end of each
  invocation, and at least every ``FLUSH_SECONDS`` during a long one), one line per set of
  dimensions: the Lambda log stream is what CloudWatch reads them from, at no API cost.
- traces: the worker and lifecycle handlers run under Powertools Tracer (``new_tracer``;
  off outside Lambda). The api handler does not: importing the X-Ray SDK costs its cold
  start (docs/design/cold-start.md, "From the code: observability.py"), and Lambda's active
  tracing records its invocations anyway.
"""

from __future__ import annotations

import json
import threading
import time
from collections import defaultdict
from typing import Any

from aws_lambda_powertools import Logger
from aws_lambda_powertools.metrics import EphemeralMetrics, MetricUnit

SERVICE = "batchgw"
NAMESPACE = "batchgw"
FLUSH_SECONDS = 60.0
# EMF takes at most 100 values of one metric per line, and Powertools writes (and empties)
# its set by itself when a metric reaches 100: each line takes 99 at most.
MAX_VALUES = 99

logger = Logger(service=SERVICE)

# The metrics, with the unit each is written in. Per model: requests started (an upstream
# call), ended succeeded / failed / cancelled (failed includes expired), retried; upstream
# latency; the time from a chain's answer to its next call (its slot idle meanwhile); queue
# wait (created to first attempt); slots in use. Started, latency, queue wait and retried are
# also written per source across models (``source``: batch, background or flex). Per final
# status: batches.
# Per model, the interactive path's requests and their latency.
COUNT, MS, SECONDS = MetricUnit.Count, MetricUnit.Milliseconds, MetricUnit.Seconds
UNITS: dict[str, MetricUnit] = {
    "RequestsStarted": COUNT,
    "RequestsSucceeded": COUNT,
    "RequestsFailed": COUNT,
    "RequestsCancelled": COUNT,
    "RequestsExpired": COUNT,
    "RequestsRetried": COUNT,
    "UpstreamLatency": MS,
    "AnswerToNextCall": MS,
    "QueueWait": SECONDS,
    "SlotsInUse": COUNT,
    "BatchesEnded": COUNT,
    "ModelWaitingForCapacity": COUNT,
    "InteractiveRequests": COUNT,
    "InteractiveLatency": MS,
    "ProviderBatchesSubmitted": COUNT,
    "ProviderOrphansCancelled": COUNT,
    "ProviderCleanupFailed": COUNT,
    "ProviderBatchesLost": COUNT,
}


def _known(name: str) -> bool:
    """Whether ``name`` is a metric with a unit; one without is left out, and said (a metric
    never stops the work it measures)."""
    if name in UNITS:
        return True
    logger.warning("a metric without a unit is not written", extra={"metric": name})
    return False


# A request's end, as each RequestStatus value counts it.
ENDED = {
    "succeeded": ["RequestsSucceeded"],
    "failed": ["RequestsFailed"],
    "expired": ["RequestsFailed", "RequestsExpired"],
    "cancelled": ["RequestsCancelled"],
}

Dimensions = tuple[tuple[str, str], ...]


class MetricsBuffer:
    """Counts summed, and values kept, per set of dimensions until ``flush``."""

    def __init__(self, emit: Any = print) -> None:
        self._lock = threading.Lock()
        self._counts: dict[Dimensions, dict[str, float]] = defaultdict(lambda: defaultdict(float))
        self._values: dict[Dimensions, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
        self._flushed_at = time.monotonic()
        self._emit = emit

    def count(self, name: str, value: float = 1, **dimensions: str) -> None:
        with self._lock:
            self._counts[_key(dimensions)][name] += value

    def value(self, name: str, value: float, **dimensions: str) -> None:
        with self._lock:
            self._values[_key(dimensions)][name].append(value)

    def ended(self, status: str, count: int = 1, **dimensions: str) -> None:
        """Count ``count`` requests that ended with ``status`` (a RequestStatus value)."""
        for name in ENDED.get(status, []):
            self.count(name, count, **dimensions)

    def due(self) -> bool:
        return time.monotonic() - self._flushed_at >= FLUSH_SECONDS

    def flush(self) -> list[dict[str, Any]]:
        """Write what was counted as EMF lines (and return them); nothing when nothing was."""
        with self._lock:
            counts, values = self._counts, self._values
            self._counts = defaultdict(lambda: defaultdict(float))
            self._values = defaultdict(lambda: defaultdict(list))
            self._flushed_at = time.monotonic()
        documents: list[dict[str, Any]] = []
        for dims in sorted(set(counts) | set(values)):
            series = values.get(dims, {})
            longest = max((len(v) for v in series.values()), default=1)
            for start in range(0, max(longest, 1), MAX_VALUES):
                emf = EphemeralMetrics(namespace=NAMESPACE, service=SERVICE)
                for name, dim_value in dims:
                    emf.add_dimension(name, dim_value)
                if start == 0:
                    for name, total in counts.get(dims, {}).items():
                        if _known(name):
                            emf.add_metric(name, UNITS[name], total)
                for name, items in series.items():
                    for item in items[start : start + MAX_VALUES] if _known(name) else ():
                        emf.add_metric(name, UNITS[name], item)
                try:
                    document = dict(emf.serialize_metric_set())
                except Exception:  # a metric never stops the work it measures
                    logger.warning("metrics not written", exc_info=True)
                    continue
                documents.append(document)
                self._emit(json.dumps(document, separators=(",", ":")))
        return documents


def _key(dimensions: dict[str, str]) -> Dimensions:
    return tuple(sorted(dimensions.items()))


metrics = MetricsBuffer()


def new_tracer() -> Any:
    """Powertools Tracer for a handler module (imports the X-Ray SDK: workers only)."""
    from aws_lambda_powertools import Tracer

    return Tracer(service=SERVICE)
