"""Workflow tasks that die mid-run, for chaos runs of the local stack.

On Lambda a function can die at any line: a timeout, an out-of-memory kill, its host
going away. What it wrote before stays; what it would have written after never happens;
the answer of a call it was waiting for is lost with it. The workflow's tasks run in
moto's process (``local.moto_server``'s Lambda hook), where killing the process would
lose every AWS resource with it, so their deaths are made at the one boundary that
matters to what is stored: an AWS call.

``BATCHGW_LAMBDA_CRASHES`` (``<function>=<probability>[,...]``, e.g.
``batchgw-lifecycle=0.03``) makes each AWS call of those functions' invocations (made in
the invocation's own context: not boto3's S3 transfer threads, whose deaths would hang the
transfer rather than end it) end the invocation with that probability: half of the deaths
come before the call is sent, half after its answer came back (the write made, its answer
lost). ``BATCHGW_LAMBDA_CRASH_SEED`` seeds the draws.

A death is a ``LambdaDied``: a ``BaseException``, so that no ``except Exception`` of the
handler survives it, as none survives a killed process. The Lambda hook answers it as the
runtime answers a process that exited (``Runtime.ExitError``), which the workflow's Retry
and Catch see as the task's failure, and drops the execution environment, so the next
invocation starts cold. Each death is logged (``lambda died``).
"""

from __future__ import annotations

import logging
import random
import threading
from collections.abc import Mapping
from typing import Any

from batchgw.storage.aws import invoked_function

CRASHES_ENV = "BATCHGW_LAMBDA_CRASHES"
CRASH_SEED_ENV = "BATCHGW_LAMBDA_CRASH_SEED"
DIED = "lambda died"  # the log line of each death

log = logging.getLogger("local.crashes")


class LambdaDied(BaseException):  # a death, not an error a handler could handle
    """The invocation died here (a chaos run's doing)."""


def crash_rates(env: Mapping[str, str]) -> dict[str, float]:
    """``BATCHGW_LAMBDA_CRASHES`` read: function name -> probability of dying at each call."""
    rates: dict[str, float] = {}
    for pair in env.get(CRASHES_ENV, "").split(","):
        if not pair.strip():
            continue
        name, sep, value = pair.partition("=")
        rate = float(value) if sep else -1.0
        if not name.strip() or not 0.0 <= rate <= 1.0:
            raise ValueError(f"{CRASHES_ENV}: {pair!r} is not <function>=<probability between 0 and 1>")
        rates[name.strip()] = rate
    return rates


class Crashes:
    """Draws, for each AWS call of a listed function, whether its invocation dies there."""

    def __init__(self, rates: Mapping[str, float], seed: int = 0) -> None:
        self.rates = dict(rates)
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self._after = threading.local()  # a death drawn for after this thread's current call
        self.deaths = 0

    def _die(self, function: str, event_name: str, when: str) -> None:
        operation = event_name.split(".", 1)[1]
        log.warning(DIED, extra={"function": function, "call": operation, "when": when})
        raise LambdaDied(f"{function} died {when} {operation}")

    def before_call(self, event_name: str, **_: Any) -> None:
        self._after.function = None
        function = invoked_function()
        rate = self.rates.get(function) if function else None
        if not function or not rate:  # off an invocation's context (an S3 transfer thread): never
            return
        with self._lock:
            dies, before = self._rng.random() < rate, self._rng.random() < 0.5
            self.deaths += dies
        if dies and before:
            self._die(function, event_name, "before")
        if dies:
            self._after.function = function

    def after_call(self, event_name: str, **_: Any) -> None:
        function = getattr(self._after, "function", None)
        if function:
            self._after.function = None
            self._die(function, event_name, "after")

    def install(self, events: Any) -> None:
        """Draw at every call of the clients made from ``events``' session from now on."""
        events.register("before-call", self.before_call)
        events.register("after-call", self.after_call)


def install(events: Any, env: Mapping[str, str]) -> Crashes | None:
    """Install the deaths ``env`` asks for on the session behind ``events``; None if it asks none."""
    rates = crash_rates(env)
    if not rates:
        return None
    crashes = Crashes(rates, seed=int(env.get(CRASH_SEED_ENV, "0")))
    crashes.install(events)
    log.info("lambda crashes installed", extra={"rates": rates})
    return crashes
