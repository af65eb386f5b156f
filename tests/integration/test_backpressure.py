"""The upstream's backpressure, kept for the whole deployment (moto): saturation answers
across many requests lower a model's adaptive limit in the control table, at most once per
cooldown whichever process sees them (requests failing one by one do not); every process's
share follows within a second; healthy answers raise it
back, once a second per process, until the model is unconstrained; off, nothing changes."""

from __future__ import annotations

import asyncio

import pytest
from batchgw.deps import Deps, build_deps
from batchgw.domain.adaptive import (
    COOLDOWN_SECONDS,
    DECREASE,
    RECOVERY_PER_SECOND,
    SATURATION_MIN_REQUESTS,
    SATURATION_WINDOW_SECONDS,
    Signal,
)
from batchgw.domain.interactive import ShareWhy
from batchgw.run.slot import SlotHolder

from local.simulator import Simulator
from tests.integration.conftest import make_deps
from tests.support import FakeClock

pytestmark = pytest.mark.usefixtures("aws_env")

CAP = 8


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def deps(sim: Simulator, clock: FakeClock) -> Deps:
    return make_deps(sim, clock, BATCH_MODEL_CONCURRENCY=str(CAP))


def answer(
    deps: Deps,
    signal: Signal,
    latency_ms: float = 100.0,
    request: str = "batch_test/0",
    *,
    retry: bool = False,
) -> None:
    """One batch answer of sim-chat, as the worker's attempt reports it."""
    to_do = deps.backpressure.note("sim-chat", signal, latency_ms, request, retry=retry)
    if to_do is not None:
        deps.backpressure.act("sim-chat", to_do)


def overload(deps: Deps) -> None:
    """An overload's answers: saturation answers of as many different requests as make it
    the model's load, not theirs."""
    for i in range(SATURATION_MIN_REQUESTS):
        answer(deps, Signal.SATURATED, request=f"batch_test/{i}")


def running(deps: Deps, clock: FakeClock, n: int) -> list[SlotHolder]:
    holders = [SlotHolder(deps, "batch_test") for _ in range(n)]
    assert all(asyncio.run(h.hold("sim-chat")).granted for h in holders)
    return holders


def test_a_saturation_answer_lowers_the_shared_limit_once_per_cooldown(deps: Deps, clock: FakeClock) -> None:
    running(deps, clock, 6)
    overload(deps)
    share = deps.shares.share("sim-chat")
    assert share.adaptive_limit == pytest.approx(6 * DECREASE)
    assert (share.slots, share.why, share.yielding) == (4, ShareWhy.ADAPTIVE, True)
    for _ in range(20):  # the rest of that overload's answers, within the cooldown
        answer(deps, Signal.SATURATED)
    clock.advance(1.0)
    assert deps.shares.share("sim-chat").adaptive_limit == pytest.approx(6 * DECREASE + RECOVERY_PER_SECOND)
    clock.advance(COOLDOWN_SECONDS)
    overload(deps)  # from the limit as it has grown since: 4.2 + 1.5
    assert deps.shares.share("sim-chat").adaptive_limit == pytest.approx(
        (6 * DECREASE + RECOVERY_PER_SECOND * (1 + COOLDOWN_SECONDS)) * DECREASE
    )


def test_another_process_follows_the_limit_and_its_own_429s_wait_for_the_cooldown(
    deps: Deps, clock: FakeClock
) -> None:
    other = build_deps(deps.settings, deps.catalog, clock=clock)  # a second worker, the same tables
    running(deps, clock, 8)
    overload(deps)
    clock.advance(1.0)
    assert other.shares.share("sim-chat").slots == int(8 * DECREASE + RECOVERY_PER_SECOND)
    overload(other)  # the same overload, seen by the other process
    clock.advance(0.5)
    deps.shares.forget()
    assert deps.shares.share("sim-chat").adaptive_limit == pytest.approx(
        8 * DECREASE + 1.5 * RECOVERY_PER_SECOND
    )


def test_healthy_answers_raise_the_limit_until_the_model_is_unconstrained(
    deps: Deps, clock: FakeClock
) -> None:
    running(deps, clock, 4)
    overload(deps)  # 4 -> 2.8
    clock.advance(COOLDOWN_SECONDS)
    limits = [deps.shares.share("sim-chat").adaptive_limit]
    for _ in range(200):
        for _ in range(5):
            answer(deps, Signal.HEALTHY)
        clock.advance(1.0)
        limit = deps.shares.share("sim-chat").adaptive_limit
        limits.append(limit)
        if limit is None:
            break
    assert limits[-1] is None  # back to the whole cap
    grown = [x for x in limits if x is not None]
    assert grown == sorted(grown) and len(grown) > 3  # additively, step by step
    share = deps.shares.share("sim-chat")
    assert (share.slots, share.why) == (CAP, ShareWhy.CAP)


def test_a_chain_gives_its_slot_back_when_the_limit_is_lowered(deps: Deps, clock: FakeClock) -> None:
    holders = running(deps, clock, 8)
    overload(deps)  # 8 -> 5.6: five slots
    kept = [asyncio.run(h.hold("sim-chat")).granted for h in holders]  # each chain's next request
    assert kept.count(True) == 5


def test_off_nothing_is_lowered_and_a_stored_limit_is_ignored(
    deps: Deps, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    running(deps, clock, 8)
    overload(deps)
    assert deps.shares.share("sim-chat").slots == 5
    off = deps.settings.model_copy(update={"batch_adaptive_concurrency": False})
    monkeypatch.setattr(deps.live, "settings", off)
    clock.advance(COOLDOWN_SECONDS)
    overload(deps)
    clock.advance(1.0)
    share = deps.shares.share("sim-chat")
    assert (share.slots, share.why, share.adaptive_limit) == (CAP, ShareWhy.CAP, None)
    monkeypatch.setattr(deps.live, "settings", off.model_copy(update={"batch_adaptive_concurrency": True}))
    clock.advance(1.0)
    elapsed = COOLDOWN_SECONDS + 1.0 + 1.0  # since the one decrease: none while off
    assert deps.shares.share("sim-chat").adaptive_limit == pytest.approx(
        8 * DECREASE + RECOVERY_PER_SECOND * elapsed
    )


def test_requests_failing_one_by_one_among_healthy_answers_lower_nothing(
    deps: Deps, clock: FakeClock
) -> None:
    running(deps, clock, 8)
    for i in range(200):  # one request in ten answered 503, each on its own, for 20 s
        answer(deps, Signal.SATURATED if i % 10 == 0 else Signal.HEALTHY, request=f"batch_test/{i}")
        clock.advance(0.1)
    assert deps.shares.share("sim-chat").adaptive_limit is None


def test_retries_refused_again_at_a_batchs_end_lower_nothing(deps: Deps, clock: FakeClock) -> None:
    running(deps, clock, 8)
    for i in range(40):  # what is left: retries of requests that fail on their own, most refused
        refused = i % 4 != 0
        answer(deps, Signal.SATURATED if refused else Signal.HEALTHY, request=f"batch_test/{i}", retry=True)
        clock.advance(0.1)
    assert deps.shares.share("sim-chat").adaptive_limit is None


def test_one_request_failing_again_and_again_lowers_nothing(deps: Deps, clock: FakeClock) -> None:
    running(deps, clock, 8)
    for _ in range(20):  # its retries, all refused: that request's own trouble
        answer(deps, Signal.SATURATED, request="batch_test/7")
        clock.advance(0.2)
    assert deps.shares.share("sim-chat").adaptive_limit is None


def test_most_answers_refused_across_requests_lower_the_limit_within_the_window(
    deps: Deps, clock: FakeClock
) -> None:
    running(deps, clock, 8)
    for i in range(20):  # healthy, until the model fills up
        answer(deps, Signal.HEALTHY, request=f"batch_test/{i}")
        clock.advance(0.1)
    started, lowered = clock(), None
    for i in range(20, 100):  # then it refuses at once what it has no room for, and answers the rest
        answer(deps, Signal.HEALTHY if i % 10 == 0 else Signal.SATURATED, request=f"batch_test/{i}")
        clock.advance(0.02)
        if deps.shares.share("sim-chat").adaptive_limit is not None:
            lowered = clock() - started
            break
    assert lowered is not None and lowered < SATURATION_WINDOW_SECONDS
    assert deps.shares.share("sim-chat").why is ShareWhy.ADAPTIVE


def test_answers_that_say_nothing_of_the_load_change_nothing(deps: Deps, clock: FakeClock) -> None:
    running(deps, clock, 8)
    for _ in range(10):
        answer(deps, Signal.NONE)
    clock.advance(1.0)
    assert deps.shares.share("sim-chat").adaptive_limit is None


def test_a_model_that_went_quiet_after_an_overload_is_not_held_back_by_it(
    deps: Deps, clock: FakeClock
) -> None:
    running(deps, clock, 8)
    overload(deps)  # 8 -> 5.6, then no answer at all
    clock.advance(2.0)
    assert deps.shares.share("sim-chat").slots == 6
    clock.advance((CAP - 8 * DECREASE) / RECOVERY_PER_SECOND)
    share = deps.shares.share("sim-chat")
    assert (share.slots, share.why, share.adaptive_limit) == (CAP, ShareWhy.CAP, None)


def test_a_failed_write_of_the_limit_never_gets_in_the_way_of_the_answer(
    deps: Deps, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    from batchgw.domain.errors import StorageError

    def refuse(*_: object, **__: object) -> bool:
        raise StorageError("could not lower the adaptive limit")

    monkeypatch.setattr(deps.backpressure._limits, "decrease", refuse)
    running(deps, clock, 4)
    overload(deps)  # logged, not raised
    assert deps.shares.share("sim-chat").adaptive_limit is None
