"""Scheduling's reads and writes per second, per model, as the yield benchmark makes them.

Whatever the chains of different execution environments must agree on goes through the
control table, under four partitions (``SCHEDULING_KINDS``): the interactive load reports
(``interactive``: each interactive request's lease, read by the workers' share), the adaptive
limits and model health (``adaptive``), the slot map of each model (``slots#*``: slots held,
batches waiting) and the live configuration (``runtime``: caps and settings). Every process
of the stack records how many of its calls touched each partition kind
(``batchgw.storage.aws.record_calls``); ``RateSampler`` reads those counts once a second,
with how many worker environments are busy (serving an invocation) at that moment, and
``rates`` turns them into calls per second in each phase of the interactive load (burst,
quiet) while the batch ran: per function, per kind, reads and writes apart, and per busy
environment, the figure that says how the rate grows with the environments.

What the calls cost is priced by ``make cost`` (``bench.cost``), which replays the recorded
calls against each item's size: its ``gateway_bursts`` mode runs the yield benchmark's bursts.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from batchgw.storage.aws import read_recorded_touch_counts

from local.adapter import ADMIN_FUNCTION_NAME
from local.environments import BUSY_NAME

SCHEDULING_KINDS = ("interactive", "adaptive", "slots#*", "runtime")
# The benchmark's own looks at the share (GET /admin/batch/models, once a second) are not the
# gateway's scheduling: the admin function's calls are left out.
OBSERVER = ADMIN_FUNCTION_NAME
READS = frozenset({"GetItem", "BatchGetItem", "Query", "Scan", "TransactGetItems"})
WRITES = frozenset({"PutItem", "UpdateItem", "DeleteItem", "BatchWriteItem", "TransactWriteItems"})

# (function, "read" or "write", partition kind) -> calls
Key = tuple[str, str, str]


@dataclass(frozen=True)
class Look:
    offset: float  # seconds from the run's start
    calls: Counter[Key]  # scheduling's calls so far, every process of the stack
    busy: int  # worker environments serving an invocation at that moment


def scheduling_calls(calls_dir: Path) -> Counter[Key]:
    """Every process's calls so far that touched a scheduling partition, by function, by
    read or write, by partition kind."""
    out: Counter[Key] = Counter()
    for function, counts in read_recorded_touch_counts(calls_dir).items():
        if function == OBSERVER:
            continue
        for touch, n in counts.items():
            if not touch.operation.startswith("dynamodb.") or touch.key not in SCHEDULING_KINDS:
                continue
            operation = touch.operation.removeprefix("dynamodb.")
            way = "read" if operation in READS else "write" if operation in WRITES else None
            if way is not None:
                out[(function, way, touch.key)] += n
    return out


def busy_environments(pids: Sequence[int]) -> int:
    """How many of these environments serve an invocation now (their process name says so)."""
    busy = 0
    for pid in pids:
        try:
            busy += Path(f"/proc/{pid}/comm").read_text().strip() == BUSY_NAME
        except OSError:  # ended since it was listed
            continue
    return busy


class RateSampler:
    """Looks at the recorded calls and the busy environments (``look``, once a second)."""

    def __init__(self, calls_dir: Path, environment_pids: Callable[[], list[int]]) -> None:
        self.calls_dir = calls_dir
        self.environment_pids = environment_pids
        self.looks: list[Look] = []

    def look(self, offset: float) -> None:
        busy = busy_environments(self.environment_pids())
        self.looks.append(Look(offset, scheduling_calls(self.calls_dir), busy))


def rates(
    looks: Sequence[Look], phase_at: Callable[[float], str], window: tuple[float, float]
) -> dict[str, Any]:
    """Calls per second in each phase (``phase_at`` of an offset) within ``window``: from each
    look to the next, both in the window and in the same phase; with the busy environments'
    mean over those stretches and the calls per second per busy environment."""
    seconds: dict[str, float] = {}
    busy_seconds: dict[str, float] = {}
    calls: dict[str, Counter[Key]] = {}
    for before, after in itertools.pairwise(looks):
        if before.offset < window[0] or after.offset > window[1]:
            continue
        phase = phase_at(before.offset)
        if phase_at(after.offset) != phase:
            continue
        span = after.offset - before.offset
        seconds[phase] = seconds.get(phase, 0.0) + span
        busy_seconds[phase] = busy_seconds.get(phase, 0.0) + span * (before.busy + after.busy) / 2
        calls.setdefault(phase, Counter()).update(after.calls - before.calls)
    out: dict[str, Any] = {}
    for phase, span in sorted(seconds.items()):
        busy = busy_seconds[phase] / span
        per_second = {
            f"{function} {way} {kind}": round(n / span, 2)
            for (function, way, kind), n in sorted(calls[phase].items())
        }
        total = sum(calls[phase].values()) / span
        out[phase] = {
            "seconds": round(span, 1),
            "busy_environments": round(busy, 1),
            "calls_per_second": round(total, 1),
            "calls_per_second_per_busy_environment": round(total / busy, 2) if busy else None,
            "by_kind": per_second,
        }
    return out


def print_rates(figures: dict[str, Any], environments: int) -> None:
    for phase, f in figures.items():
        print(
            f"scheduling calls, {phase} phases ({environments} environments,"
            f" {f['busy_environments']} busy on average): {f['calls_per_second']}/s,"
            f" {f['calls_per_second_per_busy_environment']}/s per busy one"
        )
        for what, n in f["by_kind"].items():
            print(f"    {what:<48} {n:8.2f}/s")
