"""Each model's batch share now, as this process reads it (``BatchShares``).

A model's share is its cap, less the interactive requests in flight that the reports say,
less the reserve (``domain.interactive.batch_share``), held to its adaptive limit
(``domain.adaptive``). Reports and limits are read at most every
``BATCH_SHARE_READ_SECONDS`` and ``Tuning.limits_max_age_seconds``.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from typing import Protocol

from batchgw.config.settings import Settings
from batchgw.domain.adaptive import Adaptive
from batchgw.domain.errors import StorageError
from batchgw.domain.interactive import (
    BatchShare,
    InteractiveLoad,
    batch_share,
    limited,
    peak,
)
from batchgw.scheduling import logger
from batchgw.scheduling.tuning import TUNING, Tuning
from batchgw.storage.adaptive import AdaptiveStore
from batchgw.storage.interactive import InteractiveLoadStore


class Live(Protocol):
    """What scheduling reads of the live configuration (``live_config.LiveConfig``)."""

    @property
    def settings(self) -> Settings: ...

    def model_cap(self, model: str) -> tuple[int, str]: ...


class BatchShares:
    """Each model's batch share now (``domain.interactive.batch_share``): its cap, less the
    interactive requests in flight that the reports say, less the reserve, held to the
    model's adaptive limit (``domain.adaptive``): the reports read at most every
    ``BATCH_SHARE_READ_SECONDS``, the limits every ``Tuning.limits_max_age_seconds``. While the reports
    cannot be read the load is unknown (no new batch request starts while the shared load
    counts); while the limits cannot be read, none holds (they only ever lower it)."""

    def __init__(
        self,
        live: Live,
        store: InteractiveLoadStore,
        limits: AdaptiveStore,
        clock: Callable[[], float],
        *,
        tuning: Tuning = TUNING,
    ) -> None:
        self._live = live
        self._tuning = tuning
        self._store = store
        self._limits = limits
        self._clock = clock
        self._load: InteractiveLoad | None = None
        self._recent: list[tuple[float, InteractiveLoad]] = []  # the loads read lately, for ``peak``
        self._adaptive: dict[str, Adaptive] = {}
        self._read_at = -math.inf
        self._limits_read_at = -math.inf
        self._read_ok_at = -math.inf
        self._warned_unreadable = False
        self._reading = threading.Lock()

    def share(self, model: str, *, read: bool = True) -> BatchShare:
        """``model``'s batch share, the reports and limits read again first if that is due
        (never with ``read`` False: as last read)."""
        settings = self._live.settings
        cap = self._live.model_cap(model)[0]
        load = self.held(read=read) if settings.batch_yield_to_interactive else None
        share = batch_share(
            model,
            cap,
            load,
            yield_on=settings.batch_yield_to_interactive,
            shared_on=settings.batch_shared_interactive_load,
            reserve=settings.batch_interactive_reserve,
            headroom_share=self._tuning.headroom_share,
        )
        if not settings.batch_adaptive_concurrency:
            return share
        limit = self.adaptive(model, read=read).current(self._clock(), cap, self._tuning.recovery_per_second)
        return limited(share, limit)

    def adaptive(self, model: str, *, read: bool = True) -> Adaptive:
        """``model``'s adaptive limit (unconstrained: no limit), read again if it is due
        (never with ``read`` False: as last read)."""
        if read:
            self.refresh()
        return self._adaptive.get(model, Adaptive())

    @property
    def _max_age(self) -> float:
        """How old the reports read may grow (``BATCH_SHARE_READ_SECONDS``, as it is now)."""
        return self._live.settings.batch_share_read_seconds

    def fresh(self) -> bool:
        """Whether ``share`` answers now without reading the table."""
        return self._clock() - self._read_at < self._max_age

    def recent(self) -> bool:
        """Whether the last read is recent enough to go by while the next one is made
        (within twice ``max_age``: ``run.slot.share_of``)."""
        return self._clock() - self._read_at < 2 * self._max_age

    def load(self) -> InteractiveLoad | None:
        """The summed live reports, at most ``max_age`` old; None while unreadable."""
        self.refresh()
        return self._load

    def held(self, *, read: bool = True) -> InteractiveLoad | None:
        """The load batch work gives way to: each model's most in flight in the loads read
        over the last ``Tuning.peak_hold_seconds`` (``domain.interactive.peak``); None while unreadable."""
        if read:
            self.refresh()
        return (
            None
            if self._load is None
            else peak(
                self._recent,
                self._clock(),
                self._tuning.peak_hold_seconds,
                self._tuning.quiet_seconds,
                self._tuning.quiet_in_flight,
            )
        )

    def refresh(self) -> None:
        """Read the reports (and the limits) again if that is due."""
        if self._clock() - self._read_at < self._max_age:
            return
        # One read at a time: a chain that finds a read under way waits for it, instead of
        # going by a load not read yet (None: unknown, and no batch request would start).
        with self._reading:
            now = self._clock()
            if now - self._read_at < self._max_age:
                return
            self._read(now)

    def _read(self, now: float) -> None:
        try:
            reports = self._store.reports()
        except StorageError:
            # One failed read keeps what was read last, for a moment; unreadable for longer
            # (or never read), the load is unknown.
            if now - self._read_ok_at > self._tuning.unreadable_grace_seconds:
                if self._load is not None or not self._warned_unreadable:
                    logger.warning("interactive load unreadable: no new batch request starts", exc_info=True)
                    self._warned_unreadable = True
                self._load = None
        else:
            self._load = InteractiveLoad.of(reports, now)
            self._recent = [
                (at, load) for at, load in self._recent if now - at <= self._tuning.peak_hold_seconds
            ]
            self._recent.append((now, self._load))
            self._read_ok_at = now
            self._warned_unreadable = False
        if self._live.settings.batch_adaptive_concurrency and now - self._limits_read_at >= max(
            self._max_age, self._tuning.limits_max_age_seconds
        ):
            try:
                self._adaptive = self._limits.read()
            except StorageError:
                logger.warning("adaptive limits unreadable: none holds", exc_info=True)
                self._adaptive = {}
            self._limits_read_at = now
        self._read_at = now  # fresh once read: a chain looking meanwhile waits for it above

    def forget(self) -> None:
        """Read everything again at the next look (this process just changed something)."""
        self._read_at = self._limits_read_at = -math.inf
