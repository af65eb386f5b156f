"""How much of a model's batch cap batch work may use beside interactive traffic.

The interactive side of a gateway (another service, or any process that serves models
directly) reports how many interactive requests each of its processes has in flight on
each model: absolute counts, each report expiring on its own, so that a reporter that
dies takes its load with it (``storage.interactive``). The worker sums the live reports
and gives way: a model's batch slots are its cap less the interactive requests in flight
and less the larger of ``BATCH_INTERACTIVE_RESERVE`` and the headroom busy interactive
traffic needs to grow into (``HEADROOM_SHARE`` of it), never below 0 (``batch_share``).

Pure: no AWS, no clock of its own.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum

# A reporter's id: the process (or service) whose in-flight requests its report counts.
REPORTER_ID = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")
MAX_REPORT_MODELS = 500  # models in one report
MAX_IN_FLIGHT = 1_000_000  # interactive requests one report may count on a model
MIN_TTL_SECONDS = 1
MAX_TTL_SECONDS = 3600
DEFAULT_TTL_SECONDS = 10
# The figures of the rules below (``scheduling.tuning`` passes them; the figures behind them
# are in docs/design/scheduling.md).
# How long the most interactive requests seen in flight on a model keeps counting (``peak``).
PEAK_HOLD_SECONDS = 1.5
# ... unless every read of the last this many seconds saw at most ``QUIET_IN_FLIGHT`` on it:
# busy traffic's dips do not last that long, its end does (``peak``).
QUIET_SECONDS = 0.5
QUIET_IN_FLIGHT = 1
# Of the interactive requests in flight on a model, the share (rounded down) left free on
# top of them as headroom. A batch request, once started, holds its slot for its whole
# length, and batch work learns of new interactive requests only at its next look (a read
# every quarter second, at the next request of each chain): interactive traffic that grows
# meanwhile must find slots free, or it queues at the model behind batch requests. Busy
# traffic grows by more, so the headroom is a share of it, past the first request in flight:
# one or two leave none, three leave one, nine leave four.
HEADROOM_SHARE = 0.5
# Where a report comes from: any gateway process (counted while BATCH_SHARED_INTERACTIVE_LOAD
# is on), or this deployment's own interactive routes (counted whatever that setting says).
SHARED, OWN = "shared", "own"


@dataclass(frozen=True)
class LoadReport:
    """One reporter's interactive requests in flight, by model, until ``expires_at``."""

    reporter: str
    models: Mapping[str, int]
    expires_at: float
    reported_at: float
    source: str = SHARED

    def live(self, now: float) -> bool:
        return self.expires_at > now


@dataclass(frozen=True)
class InteractiveLoad:
    """The summed live reports: in flight per model, from every reporter and from this
    deployment's own routes alone."""

    shared: Mapping[str, int] = field(default_factory=dict)
    own: Mapping[str, int] = field(default_factory=dict)
    reporters: int = 0

    @classmethod
    def of(cls, reports: Iterable[LoadReport], now: float) -> InteractiveLoad:
        shared: dict[str, int] = {}
        own: dict[str, int] = {}
        count = 0
        for report in reports:
            if not report.live(now):
                continue  # its reporter stopped reporting: its load is gone
            count += 1
            for model, n in report.models.items():
                shared[model] = shared.get(model, 0) + n
                if report.source == OWN:
                    own[model] = own.get(model, 0) + n
        return cls(shared, own, count)


def peak(
    loads: Iterable[tuple[float, InteractiveLoad]],
    now: float,
    hold: float = PEAK_HOLD_SECONDS,
    quiet: float = QUIET_SECONDS,
    quiet_in_flight: int = QUIET_IN_FLIGHT,
) -> InteractiveLoad:
    """The most interactive requests in flight on each model among the loads read in the
    last ``hold`` seconds (each ``(read at, load)``); on a model whose reads saw it quiet (at
    most ``quiet_in_flight`` in flight) for ``quiet`` seconds (two reads or more), the most
    among the reads since that quiet began only.

    Batch requests are not taken back once started, so a slot interactive traffic needs
    must be free before it arrives. Interactive load that keeps a model busy comes and goes
    by a request or two from one second to the next; counted at its recent most, it finds
    the slots it comes back to still free, instead of queueing behind batch requests that
    took them in the moment it dipped. Busy traffic does not fall quiet for ``quiet``
    seconds without ending (at 15 requests a second of half a second each, the chance that
    none is in flight at one moment is one in two thousand), so once it has, batch work
    takes the slots back then, not ``hold`` seconds after its last request ended: a second
    of the model's idle capacity at each burst's end. Reads after the quiet count as ever:
    two requests in flight a moment later hold two slots, not the ended burst's peak again.
    """
    recent = sorted(((at, load) for at, load in loads if now - at <= hold), key=lambda read: read[0])
    shared: dict[str, int] = {}
    own: dict[str, int] = {}
    for model in {model for _, load in recent for model in (*load.shared, *load.own)}:
        since = _quiet_since(recent, model, now, quiet, quiet_in_flight)
        counting = [load for at, load in recent if since is None or at >= since]
        for into, sides in (
            (shared, [read.shared for read in counting]),
            (own, [read.own for read in counting]),
        ):
            seen = [counts[model] for counts in sides if model in counts]
            if seen:
                into[model] = max(seen)
    return InteractiveLoad(shared, own, max((load.reporters for _, load in recent), default=0))


def _quiet_since(
    recent: list[tuple[float, InteractiveLoad]], model: str, now: float, quiet: float, quiet_in_flight: int
) -> float | None:
    """When the latest run of quiet reads of ``model`` (at most ``quiet_in_flight`` in flight,
    shared and own) that lasted ``quiet`` seconds began: two reads or more, from its first
    to its last (to ``now``, for a run the latest read ends). ``recent`` oldest first; None
    when no run did. What came before such a run had ended; what came after it counts."""
    found = start = None
    count = 0
    for i, (at, load) in enumerate(recent):
        if max(load.shared.get(model, 0), load.own.get(model, 0)) > quiet_in_flight:
            start, count = None, 0
            continue
        start, count = (at if start is None else start), count + 1
        end = now if i == len(recent) - 1 else at
        if count >= 2 and end - start >= quiet:
            found = start
    return found


class ShareWhy(StrEnum):
    """Why a model's batch share is what it is (``GET /admin/batch/models``)."""

    CAP = "cap"  # nothing interactive in the way: the whole cap
    YIELD_OFF = "yield_off"  # BATCH_YIELD_TO_INTERACTIVE off: the whole cap, whatever runs
    YIELDING = "yielding"  # interactive requests in flight, or the reserve, take part of it
    LOAD_UNKNOWN = "interactive_load_unknown"  # the shared reports cannot be read: nothing new
    ADAPTIVE = "adaptive"  # the upstream's own backpressure holds it lower (``domain.adaptive``)


@dataclass(frozen=True)
class BatchShare:
    slots: int  # batch requests the model may run now, across the deployment
    cap: int  # its batch cap (an administrator's, the models config's, or the default)
    interactive: int | None  # interactive requests in flight counted against it (None: unknown)
    reserve: int  # slots kept free for interactive requests on top
    why: ShareWhy
    adaptive_limit: float | None = None  # the upstream's backpressure (None: none)
    headroom: int = 0  # slots left free for interactive traffic to grow into (HEADROOM_SHARE)

    @property
    def yielding(self) -> bool:
        """Whether interactive traffic (in flight, reserved or unknown) or the upstream's
        backpressure takes part of the cap."""
        return self.slots < self.cap and self.why is not ShareWhy.CAP


def limited(share: BatchShare, adaptive_limit: float | None) -> BatchShare:
    """``share`` held to the adaptive limit as well, never above what it was."""
    if adaptive_limit is None:
        return share
    slots = max(0, math.floor(adaptive_limit))
    if slots >= share.slots:
        return replace(share, adaptive_limit=adaptive_limit)
    return replace(share, slots=slots, why=ShareWhy.ADAPTIVE, adaptive_limit=adaptive_limit)


def batch_share(
    model: str,
    cap: int,
    load: InteractiveLoad | None,
    *,
    yield_on: bool,
    shared_on: bool,
    reserve: int,
    headroom_share: float = HEADROOM_SHARE,
) -> BatchShare:
    """The batch slots ``model`` has now: its cap less the interactive requests in flight on
    it (every reporter's, or with ``shared_on`` off this deployment's own) less the larger of
    ``reserve`` and their headroom (``headroom_share`` of them past the first), never below
    0. ``load`` None: the reports could not be read, which stops new batch requests while the
    shared load counts (fail closed) and counts as none otherwise."""
    if not yield_on:
        return BatchShare(cap, cap, None, 0, ShareWhy.YIELD_OFF)
    if load is None:
        if shared_on:
            return BatchShare(0, cap, None, reserve, ShareWhy.LOAD_UNKNOWN)
        load = InteractiveLoad()
    interactive = (load.shared if shared_on else load.own).get(model, 0)
    headroom = math.floor(max(0, interactive - 1) * headroom_share)
    slots = max(0, cap - interactive - max(reserve, headroom))
    why = ShareWhy.CAP if slots == cap else ShareWhy.YIELDING
    return BatchShare(slots, cap, interactive, reserve, why, headroom=headroom)
