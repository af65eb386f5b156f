"""Backpressure from the upstream (``domain.adaptive``): saturation answers across many
requests and rising latency shrink a model's batch limit multiplicatively, at most once per cooldown; healthy
answers grow it back additively until it is unconstrained; answers that say nothing of the
load (model_queued, 400s, timeouts) change nothing."""

from __future__ import annotations

import pytest
from batchgw.domain.adaptive import (
    COOLDOWN_SECONDS,
    DECREASE,
    LATENCY_SUSTAINED,
    LATENCY_WARMUP,
    RECOVERY_PER_SECOND,
    SATURATION_MIN_REQUESTS,
    SATURATION_WINDOW_SECONDS,
    Adaptive,
    Answer,
    Latency,
    Signal,
    decreased,
    growth,
    saturated,
    signal_of,
)
from batchgw.domain.interactive import BatchShare, ShareWhy, limited

NOW = 1_800_000_000.0


@pytest.mark.parametrize(
    ("kind", "status", "code", "signal"),
    [
        ("success", 200, None, Signal.HEALTHY),
        ("retry", 429, "rate_limit_exceeded", Signal.SATURATED),
        ("retry", 503, None, Signal.SATURATED),
        ("queued", 503, "model_queued", Signal.NONE),  # absent, not busy: the spec's own pause
        ("retry", 500, None, Signal.NONE),
        ("failed", 400, None, Signal.NONE),
        ("retry", None, None, Signal.NONE),  # a timeout, a refused connection
    ],
)
def test_what_an_answer_says_of_the_upstreams_load(
    kind: str, status: int | None, code: str | None, signal: Signal
) -> None:
    assert signal_of(kind, status, code) is signal


def refused(n: int, *, at: float = NOW, requests: int | None = None, retry: bool = False) -> list[Answer]:
    """``n`` saturation answers at ``at``, of ``requests`` different requests (default: n), to
    their first tries (or to retries)."""
    return [Answer(at, True, f"b/{i % (requests or n)}", retry) for i in range(n)]


def healthy(n: int, *, at: float = NOW) -> list[Answer]:
    return [Answer(at, False, f"b/h{i}") for i in range(n)]


@pytest.mark.parametrize(
    ("answers", "model_saturated"),
    [
        (refused(SATURATION_MIN_REQUESTS), True),  # refusals across requests: the model is full
        (refused(SATURATION_MIN_REQUESTS - 1), False),  # too few requests to say
        (refused(20, requests=1), False),  # one request refused again and again: its own
        (refused(10) + healthy(90), False),  # one in ten failing among healthy answers
        (refused(10) + healthy(10), True),  # half refused
        (refused(10, at=NOW - SATURATION_WINDOW_SECONDS - 1), False),  # an overload that ended
        (refused(10) + healthy(30, at=NOW - SATURATION_WINDOW_SECONDS - 1), True),  # healthy before it
        (refused(10, retry=True) + healthy(2), False),  # retries of requests that failed before
        (refused(10, retry=True) + refused(4) + healthy(4), True),  # new requests refused too
    ],
)
def test_a_model_is_saturated_when_refusals_across_requests_make_half_its_recent_answers(
    answers: list[Answer], model_saturated: bool
) -> None:
    assert saturated(answers, NOW) is model_saturated


def test_a_saturation_signal_shrinks_the_limit_from_what_runs_at_most_once_per_cooldown() -> None:
    first = decreased(Adaptive(), running=10, ceiling=16, why=Signal.SATURATED, now=NOW)
    assert first == Adaptive(10 * DECREASE, NOW, "upstream_saturated")
    assert (
        decreased(first, running=7, ceiling=16, why=Signal.SATURATED, now=NOW + COOLDOWN_SECONDS / 2) is None
    )
    later = NOW + COOLDOWN_SECONDS
    second = decreased(first, running=9, ceiling=16, why=Signal.LATENCY, now=later)
    # from the limit as it had grown by then, lower than what ran
    assert second is not None and second.limit == pytest.approx(
        (7 + RECOVERY_PER_SECOND * COOLDOWN_SECONDS) * DECREASE
    )
    floor = Adaptive(0.5, NOW - 3)
    assert decreased(floor, running=1, ceiling=16, why=Signal.SATURATED, now=NOW) == Adaptive(
        1.0, NOW, "upstream_saturated"
    )
    assert (
        decreased(Adaptive(), running=3, ceiling=0, why=Signal.SATURATED, now=NOW) is None
    )  # paused already


def test_the_limit_grows_back_with_time_until_the_model_is_unconstrained() -> None:
    state = Adaptive(4.0, NOW, "upstream_saturated")
    assert state.current(NOW, 16) == 4.0
    assert state.current(NOW + 10, 16) == pytest.approx(4.0 + 10 * RECOVERY_PER_SECOND)
    assert state.current(NOW + 10 / RECOVERY_PER_SECOND * 2, 16) is None  # back at the cap: unconstrained
    assert Adaptive().current(NOW, 16) is None


def test_healthy_answers_add_about_one_request_per_limits_worth() -> None:
    state = Adaptive(4.0, NOW, "upstream_saturated")
    assert 0.8 < growth(state, healthy=4, ceiling=16, now=NOW) < 1.0
    assert growth(state, healthy=0, ceiling=16, now=NOW) == 0.0
    assert growth(Adaptive(15.5, NOW), healthy=20, ceiling=16, now=NOW) == pytest.approx(
        0.5
    )  # to the cap only
    assert growth(Adaptive(), healthy=50, ceiling=16, now=NOW) == 0.0  # unconstrained stays so


def test_the_limit_caps_the_share_only_when_it_is_lower() -> None:
    share = BatchShare(6, 8, 2, 0, ShareWhy.YIELDING)
    assert limited(share, None) is share
    assert limited(share, 7.5) == BatchShare(6, 8, 2, 0, ShareWhy.YIELDING, adaptive_limit=7.5)
    assert limited(share, 3.7) == BatchShare(3, 8, 2, 0, ShareWhy.ADAPTIVE, adaptive_limit=3.7)
    assert limited(share, 3.7).yielding


def feed(latency: Latency, values: list[float]) -> tuple[Latency, list[bool]]:
    rises = []
    for value in values:
        latency, rising = latency.observe(value)
        rises.append(rising)
    return latency, rises


def test_latency_well_above_the_unloaded_latency_for_several_answers_is_a_signal() -> None:
    latency, rises = feed(Latency(), [200.0] * LATENCY_WARMUP)
    assert not any(rises)
    latency, rises = feed(latency, [2000.0] * 40)  # the upstream queues: ten times slower
    assert any(rises)
    first = rises.index(True)
    assert first >= LATENCY_SUSTAINED - 1  # sustained, not one slow answer


def test_varied_but_steady_latency_and_a_lone_slow_answer_are_not_a_signal() -> None:
    varied = [20.0 + (i * 37) % 380 for i in range(400)]  # requests of many sizes: 20-400 ms
    _, rises = feed(Latency(), varied)
    assert not any(rises)
    latency, _ = feed(Latency(), [200.0] * 50)
    _, rises = feed(latency, [4000.0] + [200.0] * 20)
    assert not any(rises)


def test_a_latency_factor_of_zero_turns_the_latency_signal_off() -> None:
    latency = Latency()
    rises = []
    for value in [200.0] * 20 + [5000.0] * 60:
        latency, rising = latency.observe(value, factor=0)
        rises.append(rising)
    assert not any(rises)
