"""The work messages whose chains run on one event loop, kept invisible together."""

from __future__ import annotations

import asyncio
import math
import weakref

from batchgw.deps import Deps
from batchgw.observability import logger
from batchgw.run.aio import renewal


class Invisible:
    """The work messages whose chains run on this event loop (one invocation on Lambda),
    kept invisible for one lease together: one call per ten messages every third of a
    lease, not one per message.

    A received message is invisible for the queue's long visibility; its first hold here
    shortens that to one lease, so a dead worker's chains come back about a lease later. An
    invocation starts all its messages' chains at once, so its first tick holds them all.
    """

    _loops: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Invisible] = weakref.WeakKeyDictionary()

    def __init__(self, deps: Deps) -> None:
        self.deps = deps
        self.receipts: dict[str, asyncio.Event] = {}  # each set when its message is taken over
        self.sources: dict[str, str | None] = {}  # each message's queue (its record's ARN)
        self.task: asyncio.Task[None] | None = None

    @classmethod
    def of_this_loop(cls, deps: Deps) -> Invisible:
        loop = asyncio.get_running_loop()
        found = cls._loops.get(loop)
        if found is None or found.deps is not deps:
            found = cls._loops[loop] = cls(deps)
        return found

    def add(self, receipt: str, source: str | None = None) -> asyncio.Event:
        """Hold the message of ``receipt`` (from the queue ``source``) from now on; the event
        is set if another run took it over (``_keep``)."""
        taken_over = self.receipts[receipt] = asyncio.Event()
        self.sources[receipt] = source
        if self.task is None or self.task.done():
            self.task = asyncio.get_running_loop().create_task(self._keep())
        return taken_over

    def discard(self, receipt: str) -> None:
        self.receipts.pop(receipt, None)
        self.sources.pop(receipt, None)
        if not self.receipts and self.task is not None:
            self.task.cancel()  # nothing left to hold: no task outlives the invocation's chains
            self.task = None

    async def _keep(self) -> None:
        lease = self.deps.settings.batch_lease_seconds
        while self.receipts:
            lost: list[str] = []
            by_source: dict[str | None, list[str]] = {}
            for receipt in self.receipts:
                by_source.setdefault(self.sources.get(receipt), []).append(receipt)
            for source, receipts in by_source.items():
                try:
                    lost += await renewal(self.deps.queue.hold_many, receipts, math.ceil(lease), source)
                except Exception:  # tried again next tick: a message held late only comes back early
                    logger.warning("could not extend the messages' visibility", exc_info=True)
            for receipt in lost:
                # Only a run that received the message again (its visibility ran out while
                # this one was held up) deletes it, once that run ended or handed the chain
                # on: this run must not hand it on as well, or the chain would run twice.
                logger.warning("the message was taken over by another run: its receipt is gone")
                taken_over = self.receipts.get(receipt)
                if taken_over is not None:
                    taken_over.set()
                self.discard(receipt)
            await asyncio.sleep(lease / 3)
