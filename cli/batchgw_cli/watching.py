"""``batchgw watch``: a batch's progress, live, until it ends; and the exit code its end
means (``exit_code``)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

FINAL = ("completed", "failed", "expired", "cancelled")
# What each end exits with (documented in ``batchgw watch --help`` and the README).
EXIT_COMPLETED = 0  # completed, every request succeeded
EXIT_SOME_FAILED = 3  # completed, some requests failed
EXIT_FAILED = 4
EXIT_EXPIRED = 5
EXIT_CANCELLED = 6
EXIT_INTERRUPTED = 130


def exit_code(batch: dict[str, Any]) -> int:
    """The exit code of an ended batch."""
    status = batch["status"]
    if status == "completed":
        return EXIT_COMPLETED if batch["request_counts"]["failed"] == 0 else EXIT_SOME_FAILED
    return {"failed": EXIT_FAILED, "expired": EXIT_EXPIRED, "cancelled": EXIT_CANCELLED}[status]


def outcomes(batch: dict[str, Any]) -> dict[str, int]:
    """Its requests by outcome: succeeded, failed, expired, cancelled, and those not ended
    (running or queued: the API counts them together)."""
    counts = batch["request_counts"]
    expired = int(counts.get("expired", 0))  # among the failed
    cancelled = int(counts.get("cancelled", 0))  # apart from them
    return {
        "succeeded": int(counts["completed"]),
        "failed": int(counts["failed"]) - expired,
        "expired": expired,
        "cancelled": cancelled,
        "running or queued": max(0, int(counts["total"]) - ended_of(batch)),
    }


def ended_of(batch: dict[str, Any]) -> int:
    counts = batch["request_counts"]
    return int(counts["completed"]) + int(counts["failed"]) + int(counts.get("cancelled", 0))


def summary(batch: dict[str, Any]) -> str:
    """One line: its outcomes, throughput and ETA."""
    parts = [f"{n:,} {name}" for name, n in outcomes(batch).items() if n or name == "succeeded"]
    eta = batch.get("eta") or {}
    if eta.get("requests_per_minute"):
        parts.append(f"{eta['requests_per_minute'] / 60:.1f} req/s")
    if eta.get("estimated_completion_at"):
        left = max(0, int(eta["estimated_completion_at"] - time.time()))
        parts.append(f"ETA {_duration(left)}")
    return " · ".join(parts)


def scheduling(batch: dict[str, Any]) -> str:
    """One line: its priority, when it is wanted done by and when it is estimated done (each
    only when the batch object has it), or nothing."""
    parts = []
    if batch.get("priority") is not None:
        parts.append(f"priority {batch['priority']}")
    if batch.get("complete_by") is not None:
        parts.append(f"complete by {_utc(batch['complete_by'])}")
    if batch.get("estimated_completion_at") is not None:
        parts.append(f"estimated done {_utc(batch['estimated_completion_at'])}")
    return " · ".join(parts)


def _asked(batch: dict[str, Any]) -> tuple[Any, Any]:
    """What its owner asked of its scheduling (what a PATCH changes)."""
    return batch.get("priority"), batch.get("complete_by")


def _utc(seconds: int) -> str:
    return time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(seconds))


def _duration(seconds: int) -> str:
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


def notes(batch: dict[str, Any]) -> list[str]:
    """What the user should know beside the counts: the window closing first, a pause."""
    found = []
    eta = batch.get("eta") or {}
    if eta.get("window_closes_first"):
        found.append(f"warning: {eta.get('warning') or 'the window closes before the batch is done'}")
    paused = batch.get("paused")
    if paused:
        found.append(
            f"paused: {paused.get('reason')}" + (f" until {paused['until']}" if paused.get("until") else "")
        )
    return found


def watch(
    read: Callable[[], dict[str, Any]],
    console: Console,
    *,
    interval: float = 1.0,
    most: float = 5.0,
    sleep: Callable[[float], None] = time.sleep,
) -> dict[str, Any]:
    """Poll ``read`` until the batch ends, showing its progress; the ended batch. The pause
    between reads grows (to ``most``) while nothing changes."""
    batch = read()
    shown: set[str] = set()
    wait = interval
    with Progress(
        TextColumn("[bold]{task.fields[status]:<11}"),
        BarColumn(bar_width=30),
        MofNCompleteColumn(),
        TextColumn("{task.fields[summary]}"),
        console=console,
        transient=False,
    ) as progress:
        total = int(batch["request_counts"]["total"]) or None
        task = progress.add_task("batch", total=total, status=batch["status"], summary="")
        planned, asked = scheduling(batch), _asked(batch)
        if planned:
            progress.console.print(planned)
        while True:
            done = ended_of(batch)
            progress.update(
                task,
                total=int(batch["request_counts"]["total"]) or None,
                completed=done,
                status=batch["status"],
                summary=summary(batch),
            )
            if _asked(batch) != asked:  # changed while it runs (PATCH); the estimate moves on its own
                asked = _asked(batch)
                progress.console.print(scheduling(batch))
            for note in notes(batch):
                if note not in shown:
                    shown.add(note)
                    progress.console.print(f"[yellow]{note}")
            if batch["status"] in FINAL:
                progress.refresh()
                return batch
            sleep(wait)
            before = (batch["status"], done)
            batch = read()
            after = (batch["status"], ended_of(batch))
            wait = interval if after != before else min(most, wait * 2)
