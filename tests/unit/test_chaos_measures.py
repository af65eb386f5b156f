"""The chaos report's arithmetic: what a batch's workflow lost to task deaths is read from
its execution's history and taken out of the latencies it judges."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from tests.e2e.chaos_report import percentile, workflow_lost

T0 = 1_800_000_000.0


def event(kind: str, at: float) -> dict[str, Any]:
    return {"type": kind, "timestamp": datetime.fromtimestamp(T0 + at, UTC)}


def test_a_task_that_died_loses_the_time_from_its_scheduling_to_its_retry() -> None:
    history = [
        event("TaskScheduled", 0.0),
        event("TaskFailed", 0.3),  # died 0.3 s in; the Retry waits 1 s
        event("TaskScheduled", 1.4),
        event("TaskFailed", 1.6),  # died again; the Retry waits 2 s
        event("TaskScheduled", 3.7),
        event("TaskSucceeded", 4.0),
    ]
    assert abs(workflow_lost(history, T0 - 10, T0 + 10) - 3.7) < 1e-6


def test_only_the_part_within_the_measured_span_counts() -> None:
    history = [event("TaskScheduled", 0.0), event("TaskFailed", 0.5), event("TaskScheduled", 2.0)]
    assert abs(workflow_lost(history, T0 + 1.0, T0 + 10) - 1.0) < 1e-6
    assert abs(workflow_lost(history, T0 - 5, T0 + 1.5) - 1.5) < 1e-6
    assert workflow_lost(history, T0 + 3.0, T0 + 10) == 0.0


def test_tasks_that_succeed_or_time_out_lose_nothing() -> None:
    history = [
        event("TaskScheduled", 0.0),
        event("TaskSucceeded", 0.5),
        event("TaskScheduled", 0.6),  # a park, woken by its timeout: not a death
        event("TaskTimedOut", 5.6),
        event("TaskScheduled", 5.7),
        event("TaskSucceeded", 6.0),
    ]
    assert workflow_lost(history, T0 - 10, T0 + 10) == 0.0


def test_a_death_whose_retry_has_not_come_loses_nothing_yet() -> None:
    history = [event("TaskScheduled", 0.0), event("TaskFailed", 0.5)]
    assert workflow_lost(history, T0 - 10, T0 + 10) == 0.0


def test_percentile_is_the_nearest_rank() -> None:
    values = [float(v) for v in range(1, 101)]
    assert percentile(values, 99) == 99.0
    assert percentile(values, 50) == 50.0
    assert percentile([3.0], 99) == 3.0
