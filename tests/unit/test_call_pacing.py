"""Calls started in one worker process are spaced apart (``scheduling.pacing``): spread over half the
recent call length, so that requests of one length that started together do not all end
together, and never so far apart that the process's chains run slower than their calls let
them."""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
from collections.abc import Callable

import pytest
from batchgw.scheduling.pacing import CallPacer
from batchgw.scheduling.tuning import TUNING


class FakeTime:
    def __init__(self) -> None:
        self.now = 100.0
        self.slept: list[float] = []

    def clock(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.slept.append(round(seconds, 6))


def pacer_with(
    time: FakeTime, *, chains: int, call_seconds: float, enabled: Callable[[], bool] = lambda: True
) -> CallPacer:
    pacer = CallPacer(clock=time.clock, sleep=time.sleep, enabled=enabled)
    for _ in range(chains):
        pacer.joined()
    started = time.now
    time.now += call_seconds
    pacer.answered(started)  # one call of that length seen
    return pacer


async def turns(pacer: CallPacer, n: int) -> list[float]:
    return list(await asyncio.gather(*(pacer.turn() for _ in range(n))))


def test_calls_that_would_start_together_spread_over_half_a_calls_length() -> None:
    time = FakeTime()
    pacer = pacer_with(time, chains=4, call_seconds=0.5)
    starts = asyncio.run(turns(pacer, 4))
    assert TUNING.spread_share == 0.5
    assert [round(s - time.now, 6) for s in starts] == [0, 0.0625, 0.125, 0.1875]
    assert time.slept == [0.0625, 0.125, 0.1875]  # the first starts at once


def test_a_call_after_the_spacing_has_passed_starts_at_once() -> None:
    time = FakeTime()
    pacer = pacer_with(time, chains=4, call_seconds=0.5)
    asyncio.run(turns(pacer, 1))
    time.now += pacer.spacing()
    asyncio.run(turns(pacer, 1))
    assert time.slept == []


def test_the_spacing_never_slows_the_chains_below_their_calls_pace() -> None:
    time = FakeTime()
    quick = pacer_with(time, chains=10, call_seconds=0.02)  # ten chains of 20-ms calls
    assert quick.spacing() == pytest.approx(0.001)
    starts = asyncio.run(turns(quick, 10))
    assert starts[-1] - starts[0] <= 0.01  # all ten start within half a call's length
    for _ in range(8):
        quick.left()
    assert quick.spacing() == pytest.approx(0.005)  # two chains left: each gets more
    instant = pacer_with(FakeTime(), chains=10, call_seconds=0.0)
    assert instant.spacing() == 0.0  # calls that answer at once are not spaced at all
    assert CallPacer(clock=time.clock, sleep=time.sleep).spacing() == 0.0  # none seen yet


def test_with_pacing_off_calls_start_at_once_and_back_on_they_are_spaced_again() -> None:
    time, pacing = FakeTime(), [False]  # BATCH_CALL_PACING, as an administrator sets it
    pacer = pacer_with(time, chains=4, call_seconds=0.5, enabled=lambda: pacing[0])
    assert pacer.spacing() == 0.0
    assert len(set(asyncio.run(turns(pacer, 4)))) == 1  # all four at the same instant
    pacing[0] = True
    assert pacer.spacing() > 0.0
    assert len(set(asyncio.run(turns(pacer, 4)))) == 4


def test_the_invocations_of_one_process_take_turns_on_its_pacer() -> None:
    pacer = CallPacer()  # the process's, in its Deps
    pacer.joined()
    pacer.answered(time.monotonic() - 0.5)  # one call of 500 ms seen
    starts: list[float] = []

    def invocation() -> None:  # as the local poller runs them: a loop in a thread each
        starts.append(asyncio.run(pacer.turn()))

    threads = [threading.Thread(target=invocation) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    starts.sort()
    assert len(starts) == 3
    assert all(b - a >= TUNING.spacing_max_seconds - 1e-9 for a, b in itertools.pairwise(starts))


def test_one_long_call_spaces_the_calls_after_it_at_most_the_longest_spacing() -> None:
    time = FakeTime()
    pacer = pacer_with(time, chains=4, call_seconds=0.2)  # 25 ms apart
    assert pacer.spacing() == pytest.approx(0.025)
    started = time.now
    time.now += 60.0
    pacer.answered(started)  # one call of a minute: the recent length is 12.2 s
    assert pacer.recent_length() == pytest.approx(12.16)
    assert pacer.spacing() == TUNING.spacing_max_seconds == 0.1  # not 1.5 s
