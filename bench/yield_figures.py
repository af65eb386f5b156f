"""What the yield benchmark's runs say (``bench.yield_run``): interactive latencies within
the batch's window, the batch's use of the capacity interactive traffic leaves idle in the
quiet phases (its drain left out), where the rest went, and the spread of a measure.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from bench.probes import percentile

if TYPE_CHECKING:
    from bench.yield_run import Cycles, Run, Sample


def spread(values: list[float]) -> dict[str, Any] | None:
    """How many ``values``, their p50, p90 and mean (None: none)."""
    if not values:
        return None
    return {
        "count": len(values),
        "p50_ms": round(percentile(values, 0.50) or 0, 1),
        "p90_ms": round(percentile(values, 0.90) or 0, 1),
        "mean_ms": round(sum(values) / len(values), 1),
    }


def batch_window(run: Run, cycles: Cycles) -> tuple[float, float]:
    """The offsets during which the batch had requests to run (the whole run when it never ended)."""
    start = run.batch_started if run.batch_started is not None else 0.0
    end = run.batch_ended if run.batch_ended is not None else cycles.seconds
    return start, end


def latencies(run: Run, window: tuple[float, float]) -> dict[str, Any]:
    inside = [s for s in run.sent if window[0] <= s.offset < window[1]]
    ok = [s.latency for s in inside if s.latency is not None]
    return {
        "requests": len(inside),
        "failed": len(inside) - len(ok),
        "p50_ms": None if not ok else round(1000 * (percentile(ok, 0.50) or 0), 1),
        "p99_ms": None if not ok else round(1000 * (percentile(ok, 0.99) or 0), 1),
    }


def draining(run: Run, sample: Sample, capacity: int) -> bool:
    """Whether the batch had fewer requests left to start than the interactive requests left
    free at ``sample``: its last requests, which cannot fill the model whatever yields.

    The requests left are counted by the simulator's answers when the sample has them (read
    in the same look as the batch's sequences running; every request of the benchmark's
    batch is answered at its first attempt), else by the gateway's count, which is read once
    a second and so counts as left requests that ended up to a second before."""
    if not run.batch_requests:
        return False
    ended = sample.completed if sample.batch_answered is None else sample.batch_answered
    unstarted = run.batch_requests - ended - sample.batch_at_model
    return unstarted < capacity - sample.interactive_at_model


def idle_utilization(run: Run, cycles: Cycles, capacity: int, *, drain: bool = False) -> float | None:
    """In the quiet phases while the batch had work to fill them: the batch's sequences at
    the model over what the interactive ones left of its capacity (both as the simulator
    counts them). Its drain (``draining``) counts only with ``drain``."""
    window = batch_window(run, cycles)
    used = free = 0.0
    for s in run.samples:
        if not window[0] <= s.offset < window[1] or cycles.phase_at(s.offset) != "quiet":
            continue
        if not drain and draining(run, s, capacity):
            continue
        used += s.batch_at_model
        free += capacity - s.interactive_at_model
    return None if free <= 0 else round(used / free, 3)


def quiet_phases(run: Run, cycles: Cycles, capacity: int) -> list[dict[str, Any]]:
    """Each quiet phase's own figures (where the batch ran in it): how long the batch ran in
    it, how much of it was the drain, and its use of idle capacity without the drain."""
    window = batch_window(run, cycles)
    phases = []
    period = cycles.burst_seconds + cycles.quiet_seconds
    for cycle in range(cycles.cycles):
        start = cycle * period + cycles.burst_seconds
        inside = [
            s
            for s in run.samples
            if start <= s.offset < start + cycles.quiet_seconds and window[0] <= s.offset < window[1]
        ]
        if not inside:
            continue
        filling = [s for s in inside if not draining(run, s, capacity)]
        free = sum(capacity - s.interactive_at_model for s in filling)
        phases.append(
            {
                "cycle": cycle + 1,
                "samples": len(inside),
                "draining": len(inside) - len(filling),
                "utilization": None if free <= 0 else round(sum(s.batch_at_model for s in filling) / free, 3),
            }
        )
    return phases


# Where ``idle_lost`` puts what the batch left idle: the first seconds of each quiet phase
# (the batch takes back what a burst held), and its last requests before the drain (fewer
# chains than room, the room a finished chain leaves taken by a split); the rest is steady.
RAMP_SECONDS = 3.0
TAIL_REQUESTS = 100


def idle_lost(run: Run, cycles: Cycles, capacity: int) -> dict[str, float] | None:
    """Where the idle capacity ``idle_utilization`` counts went unused, each part as a share
    of all of it (they add up to 1 less the utilization): ``ramps``, the first
    ``RAMP_SECONDS`` of each quiet phase; ``tail``, while fewer than ``TAIL_REQUESTS`` of the
    batch's requests were left unanswered (the drain left out, as there); ``steady``, the rest."""
    window = batch_window(run, cycles)
    period = cycles.burst_seconds + cycles.quiet_seconds
    lost = {"ramps": 0.0, "steady": 0.0, "tail": 0.0}
    free = 0.0
    for s in run.samples:
        if not window[0] <= s.offset < window[1] or cycles.phase_at(s.offset) != "quiet":
            continue
        if draining(run, s, capacity):
            continue
        into_quiet = s.offset % period - cycles.burst_seconds
        answered = s.completed if s.batch_answered is None else s.batch_answered
        if into_quiet < RAMP_SECONDS:
            part = "ramps"
        elif run.batch_requests and run.batch_requests - answered < TAIL_REQUESTS:
            part = "tail"
        else:
            part = "steady"
        room = capacity - s.interactive_at_model
        free += room
        lost[part] += room - s.batch_at_model
    return None if free <= 0 else {part: round(n / free, 4) for part, n in lost.items()}


def quiet_shares(run: Run, cycles: Cycles, capacity: int) -> dict[str, Any]:
    """In the quiet phases while the batch ran, on average: what the interactive requests
    left free at the model, the batch share the gateway gave itself, the slots the batch's
    chains held, and its requests at the model (where idle capacity went, step by step); and
    how often each reason held the share."""
    window = batch_window(run, cycles)
    quiet = [
        s
        for s in run.samples
        if window[0] <= s.offset < window[1] and cycles.phase_at(s.offset) == "quiet" and s.share is not None
    ]
    if not quiet:
        return {}
    reasons: dict[str, int] = {}
    for s in quiet:
        reasons[str(s.why)] = reasons.get(str(s.why), 0) + 1
    held = [s.held for s in quiet if s.held is not None]
    return {
        "mean_free": round(sum(capacity - s.interactive_at_model for s in quiet) / len(quiet), 2),
        "mean_slots": round(sum(s.share or 0 for s in quiet) / len(quiet), 2),
        "mean_held": round(sum(held) / len(held), 2) if held else None,
        "mean_running": round(sum(s.batch_at_model for s in quiet) / len(quiet), 2),
        "reasons": {why: round(n / len(quiet), 3) for why, n in sorted(reasons.items())},
    }
