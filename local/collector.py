"""moto's process without long garbage-collection pauses (``local.moto_server`` installs it).

moto holds the local stack's whole state (DynamoDB items, S3 objects, SQS messages) as
Python objects in one process, and every AWS call of every process of the stack is served
there. CPython's full collection walks every object it tracks, and nothing else in the
process runs meanwhile: in a yield run (``make bench-yield``) moto's heap grew to 1.2
million objects and its full collections from 150 to 490 ms each, longer as the heap grew;
each stalled every AWS call of the stack at once (every chain's end, claim and slot write),
and the model's batch slots stood idle for as long. DynamoDB, SQS and S3 do not stop every
client for their own housekeeping.

So after each full collection the objects that survived it are frozen (``gc.freeze``): the
next one walks only what came since (4 to 8 ms each in the same run, about every 5 s). A
frozen object is still freed as soon as nothing refers to it; only one that dies inside a
reference cycle waits, for the first full collection after each ``THAW_SECONDS``, which
walks everything again (one long pause in that time) and collects it.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable
from typing import Any

# How often a full collection walks every object again (and frees the cycles that died frozen).
THAW_SECONDS = 600.0


class ShortPauses:
    """A ``gc.callbacks`` entry: freezes what each full collection left, and thaws it all
    once ``thaw_seconds`` have passed since the last thaw."""

    def __init__(
        self, clock: Callable[[], float] = time.monotonic, thaw_seconds: float = THAW_SECONDS
    ) -> None:
        self._clock = clock
        self._thaw_seconds = thaw_seconds
        self._thawed_at = clock()

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if phase != "stop" or info["generation"] != 2:
            return
        now = self._clock()
        if now - self._thawed_at >= self._thaw_seconds:
            gc.unfreeze()  # the next full collection walks everything
            self._thawed_at = now
        else:
            gc.freeze()


def install(pauses: ShortPauses | None = None) -> ShortPauses:
    """Keep this process's full collections short from now on (``uninstall`` undoes it)."""
    pauses = pauses or ShortPauses()
    gc.callbacks.append(pauses)
    return pauses


def uninstall(pauses: ShortPauses) -> None:
    gc.callbacks.remove(pauses)
    gc.unfreeze()
