"""``batchgw watch``'s rules (``batchgw_cli.watching``): the exit code of each end, the
outcomes it shows, and reads that slow down while nothing changes."""

from __future__ import annotations

import io
from typing import Any

import pytest
from batchgw_cli import watching
from rich.console import Console


def batch(status: str, total: int = 10, completed: int = 0, failed: int = 0, **counts: int) -> dict[str, Any]:
    return {
        "id": "batch_x",
        "status": status,
        "request_counts": {"total": total, "completed": completed, "failed": failed, **counts},
    }


@pytest.mark.parametrize(
    ("ended", "code"),
    [
        (batch("completed", completed=10), 0),
        (batch("completed", completed=9, failed=1), 3),
        (batch("failed"), 4),
        (batch("expired", completed=4, failed=6, expired=6), 5),
        (batch("cancelled", completed=2, cancelled=8), 6),
    ],
)
def test_each_end_has_its_exit_code(ended: dict[str, Any], code: int) -> None:
    assert watching.exit_code(ended) == code


def test_outcomes_split_the_failed_from_the_expired_and_count_the_rest_as_not_ended() -> None:
    shown = watching.outcomes(batch("in_progress", total=20, completed=5, failed=4, expired=3, cancelled=2))
    assert shown == {"succeeded": 5, "failed": 1, "expired": 3, "cancelled": 2, "running or queued": 9}


def test_reads_slow_down_while_nothing_changes_and_stop_at_the_end() -> None:
    reads = iter(
        [batch("in_progress", completed=1)] * 4
        + [batch("in_progress", completed=5), batch("completed", completed=10)]
    )
    waits: list[float] = []
    ended = watching.watch(
        lambda: next(reads), Console(file=io.StringIO()), interval=1, most=4, sleep=waits.append
    )
    assert ended["status"] == "completed"
    assert waits == [1, 2, 4, 4, 1]  # doubling while the same, back to the start on progress


def test_a_window_closing_first_and_a_pause_are_noted() -> None:
    running = batch("in_progress")
    running["eta"] = {"window_closes_first": True, "warning": "the window closes first"}
    running["paused"] = {"reason": "daily_quota", "until": 1700000000}
    assert watching.notes(running) == [
        "warning: the window closes first",
        "paused: daily_quota until 1700000000",
    ]


# --- priority and complete_by (issue 56) ------------------------------------------------------------


def test_the_scheduling_line_shows_what_the_batch_object_has_and_nothing_for_a_missing_field() -> None:
    assert watching.scheduling(batch("in_progress")) == ""
    shown = {**batch("in_progress"), "priority": 5, "complete_by": 1_767_225_600}
    assert watching.scheduling(shown) == "priority 5 · complete by 2026-01-01 00:00 UTC"
    assert watching.scheduling({**shown, "complete_by": None}) == "priority 5"
    later = {**shown, "estimated_completion_at": 1_767_229_200}
    assert watching.scheduling(later).endswith("estimated done 2026-01-01 01:00 UTC")


def test_watch_prints_the_scheduling_again_when_it_changes() -> None:
    reads = iter(
        [
            {**batch("in_progress", completed=1), "priority": 0},
            {**batch("in_progress", completed=2), "priority": 7},
            {**batch("completed", completed=10), "priority": 7},
        ]
    )
    screen = io.StringIO()
    watching.watch(lambda: next(reads), Console(file=screen, width=120), sleep=lambda _: None)
    lines = [line.strip() for line in screen.getvalue().splitlines()]
    assert "priority 0" in lines and "priority 7" in lines


def test_watch_does_not_print_the_scheduling_again_when_only_the_estimate_moves() -> None:
    reads = iter(
        [
            {**batch("in_progress", completed=1), "priority": 2, "estimated_completion_at": 1_767_229_200},
            {**batch("in_progress", completed=2), "priority": 2, "estimated_completion_at": 1_767_232_800},
            {**batch("completed", completed=10), "priority": 2, "estimated_completion_at": None},
        ]
    )
    screen = io.StringIO()
    watching.watch(lambda: next(reads), Console(file=screen, width=120), sleep=lambda _: None)
    printed = [line for line in screen.getvalue().splitlines() if line.strip().startswith("priority")]
    assert printed == ["priority 2 · estimated done 2026-01-01 01:00 UTC"]
