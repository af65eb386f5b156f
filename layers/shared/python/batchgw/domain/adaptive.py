"""Backpressure from the upstream itself: a model's batch share shrinks when its answers show
saturation and grows back while they stay healthy (additive increase, multiplicative
decrease), never above the share ``domain.interactive`` computes.

Two signals shrink it (``saturated``): saturation answers (429, 503 other than
``model_queued``) across many requests, and latency well above the model's unloaded latency
for many answers in a row (``BATCH_ADAPTIVE_LATENCY_FACTOR``). A decrease takes the limit to
``DECREASE`` at most once per ``COOLDOWN_SECONDS``; healthy answers and time grow it back.

Pure: every decision is a function of the observations and the settings. Why two signals,
and the thresholds: docs/design/scheduling.md, "From the code: domain/adaptive.py".
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum

# The rule's figures: ``scheduling.tuning`` passes them (but ``LATENCY_FACTOR``, which the setting
# BATCH_ADAPTIVE_LATENCY_FACTOR sets); the figures behind them are in docs/design/scheduling.md.
DECREASE = 0.7  # the limit's share kept after a decrease
COOLDOWN_SECONDS = 2.0  # at most one decrease per model this often
FLOOR = 1.0  # a constrained model still runs this many batch requests
RECOVERY_PER_SECOND = 0.5  # the limit grows this much a second since its last decrease
LATENCY_AVERAGE_WEIGHT = 0.1  # of each new answer in the recent latency
LATENCY_OUTLIER_FACTOR = 3.0  # an answer counts as at most this many times the recent latency
BASELINE_DRIFT = 0.002  # how fast the unloaded latency is forgotten, per answer
LATENCY_FACTOR = 3.0  # recent latency past this many times the unloaded one is rising...
LATENCY_MIN_GAP_MS = 500.0  # ...and past it by at least this much...
LATENCY_SUSTAINED = 10  # ...for this many answers in a row
LATENCY_WARMUP = 10  # answers before the latency signal counts at all
RECOVERING = "recovering"  # the why of a limit growing back
SATURATION_WINDOW_SECONDS = 5.0  # a saturation answer is judged among the answers this recent...
SATURATION_MIN_REQUESTS = 4  # ...saturation answers of this many different requests in it at least...
SATURATION_MIN_SHARE = 0.5  # ...making this share of its answers at least


class Signal(StrEnum):
    HEALTHY = "healthy"
    SATURATED = "upstream_saturated"  # a 429, or a 503 that is not model_queued
    LATENCY = "latency_rising"
    NONE = "none"  # an answer that says nothing of the upstream's load


def signal_of(kind: str, status_code: int | None, error_code: str | None) -> Signal:
    """What one answer says of the upstream's load."""
    if kind == "success":
        return Signal.HEALTHY
    if status_code == 429 or (status_code == 503 and error_code != "model_queued"):
        return Signal.SATURATED
    return Signal.NONE


@dataclass(frozen=True, slots=True)
class Answer:
    """One batch answer of a model, as ``saturated`` weighs it."""

    at: float
    saturated: bool  # its signal was ``Signal.SATURATED``
    request: str  # which request it answered (a batch's id and the request's index)
    retry: bool = False  # it answered a retry: that request had failed before


def saturated(
    answers: Iterable[Answer],
    now: float,
    *,
    window: float = SATURATION_WINDOW_SECONDS,
    min_requests: int = SATURATION_MIN_REQUESTS,
    min_share: float = SATURATION_MIN_SHARE,
) -> bool:
    """Whether the answers of the last ``window`` seconds to requests' first tries say the
    model itself is saturated: saturation answers of at least ``min_requests`` different
    requests, at least ``min_share`` of those answers. One request failing again and again,
    or requests failing one by one among healthy answers, are not the model's load. Nor are
    retries refused again: a request that failed before may be failing on its own, while a
    saturated model refuses new requests too. (At a batch's end, when most of what is left
    is retries of requests that fail on their own, their refusals made half the answers.)"""
    recent = [a for a in answers if now - a.at <= window and not a.retry]
    refused = [a for a in recent if a.saturated]
    return len({a.request for a in refused}) >= min_requests and len(refused) >= min_share * len(recent)


@dataclass(frozen=True)
class Latency:
    """One process's view of a model's batch latency."""

    recent_ms: float | None = None  # exponential average of successful answers
    baseline_ms: float | None = None  # the lowest ``recent_ms`` lately: the unloaded latency
    answers: int = 0
    high_in_a_row: int = 0

    def observe(
        self,
        latency_ms: float,
        factor: float = LATENCY_FACTOR,
        *,
        warmup: int = LATENCY_WARMUP,
        weight: float = LATENCY_AVERAGE_WEIGHT,
        outlier_factor: float = LATENCY_OUTLIER_FACTOR,
        drift: float = BASELINE_DRIFT,
        min_gap_ms: float = LATENCY_MIN_GAP_MS,
        sustained: int = LATENCY_SUSTAINED,
    ) -> tuple[Latency, bool]:
        """This view after one more successful answer, and whether the latency is rising
        (past ``factor`` times the unloaded latency and ``min_gap_ms`` more, ``sustained``
        answers in a row, after the first ``warmup``; ``factor`` 0: never)."""
        answers = self.answers + 1
        if self.recent_ms is None or self.baseline_ms is None or answers <= warmup:
            # The first answers: their plain mean is both the recent and the unloaded latency.
            mean = (
                latency_ms
                if self.recent_ms is None
                else self.recent_ms + (latency_ms - self.recent_ms) / answers
            )
            return Latency(mean, mean, answers, 0), False
        # One answer moves the average by at most its weight times twice the average: a lone
        # slow answer (a long request) is not a trend.
        sample = min(latency_ms, outlier_factor * self.recent_ms)
        recent = self.recent_ms + weight * (sample - self.recent_ms)
        baseline = min(self.baseline_ms * (1 + drift), recent)
        high = factor > 0 and recent > factor * baseline and recent - baseline > min_gap_ms
        in_a_row = self.high_in_a_row + 1 if high else 0
        rising = in_a_row >= sustained
        if rising:
            in_a_row = 0  # one signal per sustained rise
        return Latency(recent, baseline, answers, in_a_row), rising


@dataclass(frozen=True)
class Adaptive:
    """A model's adaptive limit as stored for the deployment (None: unconstrained): ``limit``
    as it was set at ``decreased_at`` plus the healthy answers' growth since; it grows with
    time too (``current``)."""

    limit: float | None = None
    decreased_at: float = 0.0
    why: str = Signal.HEALTHY.value

    def current(self, now: float, ceiling: int, recovery: float = RECOVERY_PER_SECOND) -> float | None:
        """The limit now, grown by ``recovery`` a second since its decrease (None:
        unconstrained, or grown back to ``ceiling``)."""
        if self.limit is None:
            return None
        limit = self.limit + recovery * max(0.0, now - self.decreased_at)
        return None if limit >= ceiling else limit


def cooling(state: Adaptive, now: float, cooldown: float = COOLDOWN_SECONDS) -> bool:
    """Whether the last decrease is less than ``cooldown`` ago, too recent for another (its
    overload may still be answering the requests sent before it)."""
    return now - state.decreased_at < cooldown


def decreased(
    state: Adaptive,
    *,
    running: int,
    ceiling: int,
    why: Signal,
    now: float,
    keep: float = DECREASE,
    floor: float = FLOOR,
    cooldown: float = COOLDOWN_SECONDS,
    recovery: float = RECOVERY_PER_SECOND,
) -> Adaptive | None:
    """The limit after a saturation signal: ``keep`` of the batch requests the model has
    running (or of its limit now, if lower), never below ``floor``; None within the
    ``cooldown``, or with no cap to shrink."""
    if cooling(state, now, cooldown) or ceiling <= 0:
        return None
    base = float(min(max(running, 1), ceiling))
    limit = state.current(now, ceiling, recovery)
    if limit is not None:
        base = min(base, limit)
    return Adaptive(max(floor, base * keep), now, why.value)


def growth(
    state: Adaptive,
    *,
    healthy: int,
    ceiling: int,
    now: float,
    floor: float = FLOOR,
    recovery: float = RECOVERY_PER_SECOND,
) -> float:
    """How much ``healthy`` more healthy answers add to the limit: about one request per
    limit's worth of them (0 when unconstrained)."""
    start = state.current(now, ceiling, recovery)
    if start is None or healthy <= 0:
        return 0.0
    limit = start
    for _ in range(min(healthy, 10 * max(ceiling, 1))):
        limit += 1.0 / max(limit, floor)
        if limit >= ceiling:
            break
    return min(limit, float(ceiling)) - start
