"""Upstream calls started in one worker process, spread over part of the recent call length.

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

So calls started in one process are spaced apart: by ``SPREAD_SHARE`` of the recent call
length shared among the chains running, so that a group spreads over half a call's length and
the ends that follow come one after another. The ends are not the process's alone: locally,
every worker process's ends are written to one moto, which runs one call at a time, and a
group of ends spread over 10 ms (the spacing this replaced, about one end's own CPU) still
queued there, in each of its processes, behind the other's. In two-cycle yield runs of the
same hour, the time from an answer to the next call fell from 18.4 ms to 16.3 (mean; p50 13.5
to 10.3) and the batch's use of the first quiet phase rose from 0.904 to 0.916 (0.920 and
0.927 at three quarters; a whole call length, where the chains' own pace needs every start,
measured 0.908 and 22.3 ms: too tight, calls waited their turn).

The spacing never slows a process below its chains' own pace. The recent call length is
the mean length of the calls as they come, so the chains running over it is the rate of starts
they need (chains of several lengths included: the short ones' calls come more often); the
spacing allows twice that, and calls that answer at once are not spaced at all. One call far
longer than the rest lengthens the recent length for a few calls after it: the spacing is at
most ``SPACING_MAX_SECONDS`` meanwhile.
"""

from __future__ import annotations

import asyncio
import math
import threading
import time
from collections.abc import Awaitable, Callable

# The share of the recent call length over which one process's chains' starts spread.
SPREAD_SHARE = 0.5
# The longest spacing, whatever the recent call length (one long call lengthens it).
SPACING_MAX_SECONDS = 0.1
# How much the latest call's length moves the recent call length.
LENGTH_WEIGHT = 0.2


class CallPacer:
    """The call starts of one process (one in its ``Deps``): each ``turn`` waits until the
    spacing after the last one has passed."""

    def __init__(
        self,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[object]] = asyncio.sleep,
        spread: float = SPREAD_SHARE,
        most: float = SPACING_MAX_SECONDS,
    ) -> None:
        self._clock = clock
        self._sleep = sleep
        self._spread = spread
        self._most = most
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
                self._length += LENGTH_WEIGHT * (seconds - self._length)
