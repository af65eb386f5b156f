"""What an attempt's outcome means for its request: end it, or try again later.

Pure rules (no AWS, no clock of their own), so each one is tested directly:

- 408, 425, 429 and 5xx other than 504 are retried with exponential backoff (base
  doubling to the cap, with jitter), honouring a longer ``Retry-After``, while the
  window is open; a try that would start after the window closes fails the request with
  the last error it got. Without a window a request is tried at most 2,000 times.
- 503 ``model_queued`` uses no attempt: the request waits for the deployment's
  ``Retry-After`` (default 120 s; a negative or non-finite one is the default; capped at
  168 h) and the model takes no new batch requests for that long, at most the pause cap.
- Any other 4xx, a 504 or the call's own timeout ends the request at once.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from typing import Any

from batchgw.settings import Settings
from batchgw.upstream import Outcome

MAX_TRIES_WITHOUT_WINDOW = 2000
MAX_QUEUED_WAIT_SECONDS = 168 * 3600


@dataclass(frozen=True)
class Retry:
    """Try again at ``next_at``; ``uses_attempt`` is False for model_queued waits."""

    next_at: float
    error: dict[str, Any]
    uses_attempt: bool = True
    pause_model_until: float | None = None


@dataclass(frozen=True)
class End:
    """The request's final state, and what it adds to the batch's counters."""

    status: str  # succeeded | failed
    error: dict[str, Any] | None = None
    counters: dict[str, Any] = field(default_factory=dict)


def backoff_seconds(attempt: int, settings: Settings, rng: random.Random | None = None) -> float:
    """Delay before try ``attempt + 1``: base * 2^(attempt-1) up to the cap, half of it jittered."""
    rng = rng or random.Random()
    exponent = min(max(attempt - 1, 0), 60)
    delay = min(settings.batch_retry_max_seconds, settings.batch_retry_base_seconds * (2**exponent))
    return delay / 2 + rng.random() * delay / 2


def queued_wait_seconds(retry_after: float | None, settings: Settings) -> float:
    if retry_after is None or not math.isfinite(retry_after) or retry_after < 0:
        return settings.batch_model_queued_default_seconds
    return min(retry_after, MAX_QUEUED_WAIT_SECONDS)


def next_step(
    outcome: Outcome,
    *,
    attempts: int,
    now: float,
    expires_at: float | None,
    settings: Settings,
    rng: random.Random | None = None,
) -> Retry | End | None:
    """For an outcome that may pass (``retry``/``queued``): when to try again, or the end.

    Returns None for outcomes that are not retried (success and permanent failures).
    ``attempts`` counts the tries made so far, this one included.
    """
    error = outcome.error or {"code": "upstream_error", "message": "upstream failed", "status": None}
    if outcome.kind == "queued":
        wait = queued_wait_seconds(outcome.retry_after, settings)
        pause = min(wait, settings.batch_model_queued_pause_max_seconds)
        return Retry(next_at=now + wait, error=error, uses_attempt=False, pause_model_until=now + pause)
    if outcome.kind != "retry":
        return None
    if expires_at is None and attempts >= MAX_TRIES_WITHOUT_WINDOW:
        return End("failed", error=error, counters={"failed": 1})
    delay = backoff_seconds(attempts, settings, rng)
    if outcome.retry_after is not None and outcome.retry_after > delay:
        delay = min(outcome.retry_after, MAX_QUEUED_WAIT_SECONDS)
    next_at = now + delay
    if expires_at is not None and next_at >= expires_at:
        return End("failed", error=error, counters={"failed": 1})
    return Retry(next_at=next_at, error=error)
