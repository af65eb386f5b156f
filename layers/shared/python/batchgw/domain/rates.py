"""A request rate per API key, as a token bucket kept in one number.

The bucket holds ``burst`` tokens and gains ``per_second`` of them a second; a request takes
one. Stored as the generic cell rate algorithm does it, by its *theoretical arrival time*
(``tat``): when the bucket would be full again. A request at ``now`` is taken when
``max(tat, now) <= now + tolerance`` (``tolerance`` is the time ``burst - 1`` tokens take
to come back), and moves ``tat`` on by one ``interval``:

    now ──────────── tat ───────────── now + tolerance
         taken: the bucket still holds a token           refused past here

So one number, compared against a value computed before the write, is the whole bucket:
a conditional update can take a token without reading it first (``storage.ratelimit``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class RateRule:
    """``per_second`` requests a second, in bursts of up to twice that (at least one)."""

    per_second: float

    @property
    def interval(self) -> float:
        """Seconds one token takes to come back."""
        return 1 / self.per_second

    @property
    def burst(self) -> int:
        return max(1, math.floor(2 * self.per_second))

    @property
    def tolerance(self) -> float:
        """How far ahead of ``now`` the bucket's ``tat`` may stand for a request to be taken."""
        return (self.burst - 1) * self.interval

    def taken(self, tat: float | None, now: float) -> bool:
        """Whether a request at ``now`` is taken by a bucket standing at ``tat`` (None: new)."""
        return tat is None or tat <= now + self.tolerance

    def next_tat(self, tat: float | None, now: float) -> float:
        """Where the bucket stands once a request at ``now`` took a token."""
        return max(tat if tat is not None else now, now) + self.interval

    def retry_after(self, tat: float, now: float) -> int:
        """Whole seconds (at least one) until a bucket standing at ``tat`` takes a request."""
        return max(1, math.ceil(tat - self.tolerance - now))
