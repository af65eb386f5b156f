"""Upstream calls started in one worker process, spread over part of the recent call length.

The chains of one process share its CPU, so calls of one length started together end
together and their ends queue behind each other. ``CallPacer`` spaces the starts apart by
``Tuning.spread_share`` of the recent call length, shared among the chains running (at most
``Tuning.spacing_max_seconds``), never below the chains' own pace. With ``BATCH_CALL_PACING``
off, calls start at once.

Why and the measurements: docs/design/scheduling.md, "Pacing and the claim ahead" and
"From the code: scheduling/pacing.py".
"""

from __future__ import annotations

import asyncio
import math
import threading
import time
from collections.abc import Awaitable, Callable

from batchgw.scheduling.tuning import TUNING, Tuning


class CallPacer:
    """The call starts of one process (one in its ``Deps``): each ``turn`` waits until the
    spacing after the last one has passed."""

    def __init__(
        self,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[object]] = asyncio.sleep,
        *,
        tuning: Tuning = TUNING,
        enabled: Callable[[], bool] = lambda: True,
    ) -> None:
        self._clock = clock
        self._sleep = sleep
        self._enabled = enabled  # BATCH_CALL_PACING, as it is now
        self._spread = tuning.spread_share
        self._most = tuning.spacing_max_seconds
        self._weight = tuning.length_weight
        self._lock = threading.Lock()  # the poller's invocations run in threads of one process
        self._next = -math.inf  # when the next call may start
        self._length = 0.0  # the recent call length, seconds (0: none seen)
        self._chains = 0  # chains running

    def joined(self) -> None:
        """A chain starts running here."""
        with self._lock:
            self._chains += 1

    def left(self) -> None:
        """A chain stopped running here."""
        with self._lock:
            self._chains -= 1

    def recent_length(self) -> float:
        """The recent call length, seconds (0: none seen yet)."""
        return self._length

    def spacing(self) -> float:
        """The least time between two call starts now (none while pacing is off)."""
        if not self._enabled():
            return 0.0
        return min(self._most, self._spread * self._length / max(1, self._chains))

    async def turn(self) -> float:
        """Wait for this call's turn to start (at once when none started lately): when it
        starts, for ``answered``."""
        with self._lock:
            now = self._clock()
            start = max(now, self._next)
            self._next = start + self.spacing()
        if start > now:
            await self._sleep(start - now)
        return start

    def answered(self, started: float) -> None:
        """The call that started at ``started`` (``turn``) has answered."""
        seconds = max(0.0, self._clock() - started)
        with self._lock:
            if self._length == 0.0:
                self._length = seconds
            else:
                self._length += self._weight * (seconds - self._length)
