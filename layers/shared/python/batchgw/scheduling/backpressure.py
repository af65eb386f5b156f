"""What this process's batch answers say of each model's upstream (``Backpressure``): the
model's adaptive limit (``domain.adaptive``) lowered on saturation across many requests or on
rising latency, raised on healthy answers."""

from __future__ import annotations

import math
import threading
from collections import deque
from collections.abc import Callable

from batchgw.domain.adaptive import Adaptive, Answer, Latency, Signal, cooling, decreased, growth, saturated
from batchgw.scheduling import logger
from batchgw.scheduling.share import BatchShares, Live
from batchgw.scheduling.tuning import TUNING, Tuning
from batchgw.storage.adaptive import AdaptiveStore


class Backpressure:
    """What this process's batch answers say of each model's upstream (``domain.adaptive``):
    saturation answers across many of its recent requests (``domain.adaptive.saturated``), or
    latency rising, lower the model's adaptive limit for the whole deployment (at most once
    per cooldown); healthy answers raise it, added up here and written at most once a second
    per model."""

    def __init__(
        self,
        live: Live,
        shares: BatchShares,
        limits: AdaptiveStore,
        running: Callable[[str], int],
        clock: Callable[[], float],
        *,
        tuning: Tuning = TUNING,
    ) -> None:
        self._live = live
        self._tuning = tuning
        self._every = tuning.growth_seconds
        self._shares = shares
        self._limits = limits
        self._running = running  # batch requests a model runs now, across the deployment
        self._clock = clock
        self._lock = threading.Lock()
        self._latency: dict[str, Latency] = {}
        self._healthy: dict[str, int] = {}
        self._grown_at: dict[str, float] = {}
        self._answers: dict[str, deque[Answer]] = {}  # model: its answers of the saturation window

    def note(
        self, model: str, signal: Signal, latency_ms: float, request: str, *, retry: bool = False
    ) -> Signal | None:
        """One batch answer of ``model`` to ``request`` (a batch's id and its index; ``retry``:
        an attempt after its first), its signal and latency; what to ``act`` on (without a read
        or a write here: the chain's loop calls this for every answer). A saturation answer is
        a signal only among others (``domain.adaptive.saturated``)."""
        if not self._live.settings.batch_adaptive_concurrency or signal is Signal.NONE:
            return None
        now = self._clock()
        state = self._shares.adaptive(model, read=False)
        with self._lock:
            if not self._weighed(model, Answer(now, signal is Signal.SATURATED, request, retry)):
                return None  # a request failing on its own: its retry's business
            if signal is Signal.HEALTHY:
                factor = self._live.settings.batch_adaptive_latency_factor
                latency, rising = self._observe(self._latency.get(model, Latency()), latency_ms, factor)
                self._latency[model] = latency
                if rising:
                    signal = Signal.LATENCY
                else:
                    self._healthy[model] = self._healthy.get(model, 0) + 1
                    grow_due = now - self._grown_at.get(model, -math.inf) >= self._every
                    return Signal.HEALTHY if state.limit is not None and grow_due else None
        return None if self._cooling(state, now) else signal

    def act(self, model: str, signal: Signal) -> None:
        """Lower (a saturation signal) or raise (healthy) ``model``'s limit, as ``note`` said.
        Advice, never in the way: a failure here is logged, and the answer that caused it is
        recorded all the same."""
        try:
            if signal is Signal.HEALTHY:
                self._grow(model)
            else:
                self._shrink(model, signal)
        except Exception:
            logger.warning("adaptive limit not changed", extra={"model": model}, exc_info=True)

    def _shrink(self, model: str, signal: Signal) -> None:
        now = self._clock()
        state = self._shares.adaptive(model)
        if self._cooling(state, now):
            return  # lowered lately (as this process last read it)
        ceiling = self._live.model_cap(model)[0]
        tuning = self._tuning
        lower = decreased(
            state,
            running=self._running(model),
            ceiling=ceiling,
            why=signal,
            now=now,
            keep=tuning.decrease_factor,
            floor=tuning.limit_floor,
            cooldown=tuning.cooldown_seconds,
            recovery=tuning.recovery_per_second,
        )
        if lower is None:
            return
        with self._lock:
            self._healthy[model] = 0
        if self._limits.decrease(model, lower, now=now, cooldown=tuning.cooldown_seconds):
            logger.info(
                "adaptive limit lowered",
                extra={"model": model, "limit": round(lower.limit or 0, 2), "why": signal.value},
            )
        self._shares.forget()

    def _grow(self, model: str) -> None:
        now = self._clock()
        state = self._shares.adaptive(model)
        ceiling = self._live.model_cap(model)[0]
        with self._lock:
            if now - self._grown_at.get(model, -math.inf) < self._every or self._cooling(state, now):
                return
            healthy, self._healthy[model] = self._healthy.get(model, 0), 0
            self._grown_at[model] = now
        if state.limit is None:
            return
        tuning = self._tuning
        # Grown back to the cap: the model is free again.
        if state.current(now, ceiling, tuning.recovery_per_second) is None:
            self._limits.lift(model, decreased_at=state.decreased_at)
        else:
            by = growth(
                state,
                healthy=healthy,
                ceiling=ceiling,
                now=now,
                floor=tuning.limit_floor,
                recovery=tuning.recovery_per_second,
            )
            if by <= 0:
                return
            self._limits.increase(model, by, now=now)
        self._shares.forget()

    def _weighed(self, model: str, answer: Answer) -> bool:
        """Keep ``answer`` among the model's answers of the saturation window (the lock held);
        for a saturation answer, whether those say the model is saturated (a healthy one: True)."""
        tuning = self._tuning
        kept = self._answers.setdefault(model, deque())
        kept.append(answer)
        while answer.at - kept[0].at > tuning.saturation_window_seconds:
            kept.popleft()
        if not answer.saturated:
            return True
        judged = saturated(
            kept,
            answer.at,
            window=tuning.saturation_window_seconds,
            min_requests=tuning.saturation_min_requests,
            min_share=tuning.saturation_min_share,
        )
        if judged:
            kept.clear()  # the next decrease needs answers of its own
        return judged

    def _cooling(self, state: Adaptive, now: float) -> bool:
        """Whether ``state``'s last decrease is within the cooldown (``domain.adaptive.cooling``)."""
        return cooling(state, now, self._tuning.cooldown_seconds)

    def _observe(self, latency: Latency, latency_ms: float, factor: float) -> tuple[Latency, bool]:
        """``latency`` after one more healthy answer, and whether it is rising
        (``domain.adaptive.Latency.observe``, with ``factor`` the setting's)."""
        tuning = self._tuning
        return latency.observe(
            latency_ms,
            factor,
            warmup=tuning.latency_warmup,
            weight=tuning.latency_average_weight,
            outlier_factor=tuning.latency_outlier_factor,
            drift=tuning.baseline_drift,
            min_gap_ms=tuning.latency_min_gap_ms,
            sustained=tuning.latency_sustained,
        )
