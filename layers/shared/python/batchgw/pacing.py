"""Upstream calls started in one worker process, a few milliseconds apart.

The chains a worker process runs share its CPU (one invocation's event loop and threads on
Lambda; locally, the invocations the poller runs in threads of one process share its one
interpreter lock): what a chain does between one call's answer and its next call (recording
the end, checking the owner, claiming ahead) runs beside every other chain's steps. Requests
of one length that start together end together, and their ends then share the process in
turns, each finishing about as late as the last. Nothing pulls such a group apart again, so
its slots stand idle that much longer on every request. In a yield run (``make
bench-yield``'s batch at its share, 500-ms requests), a chain whose answer came alone in its
process started its next call 8.5 ms after it (mean); with one to three others ending within
20 ms, 20-28 ms; with four or more, 36 ms; over all, 29.8 ms (p50 18.5, p90 50).

So calls started in one process are spaced ``CALL_SPACING_SECONDS`` apart at the least: a
group is spread once, and the ends that follow come one after another. With the spacing, the
same runs measured 18.5 and 20.5 ms from an answer to the next call (p50 12-13, p90 27-29),
the pacing's own waits included.

The spacing never slows a process below its chains' own pace: it is at most the recent call
length shared among the chains running (calls that answer at once are not spaced at all).
"""

from __future__ import annotations

import asyncio
import math
import threading
import time
from collections.abc import Awaitable, Callable

# About what one request's end costs the process it runs in (a lone end: 8.5 ms, and the
# steps of the end and the next start around it). At 5 ms, groups stayed together.
CALL_SPACING_SECONDS = 0.01
# How much the latest call's length moves the recent call length.
LENGTH_WEIGHT = 0.2


class CallPacer:
    """The call starts of one process (one in its ``Deps``): each ``turn`` waits until the
    spacing after the last one has passed."""

    def __init__(
        self,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[object]] = asyncio.sleep,
        spacing: float = CALL_SPACING_SECONDS,
    ) -> None:
        self._clock = clock
        self._sleep = sleep
        self._spacing = spacing
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
        """The least time between two call starts now."""
        return min(self._spacing, self._length / max(1, self._chains))

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
                self._length += LENGTH_WEIGHT * (seconds - self._length)
