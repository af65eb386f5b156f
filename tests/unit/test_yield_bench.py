"""The yield benchmark's arithmetic (``bench.yield_run``): the cycles it sends, and how it
turns what it saw into the two figures it reports."""

from __future__ import annotations

import json
from collections import Counter

from bench.metric_logs import metric_values
from bench.sched_rates import Look, rates
from bench.yield_figures import batch_window, idle_lost, idle_utilization, latencies, quiet_phases, spread
from bench.yield_run import Cycles, Run, Sample, Sent, summary

CYCLES = Cycles(burst_rps=4, burst_seconds=2, quiet_rps=1, quiet_seconds=2, cycles=2)


def test_the_cycles_send_at_each_phases_rate() -> None:
    offsets = CYCLES.send_offsets()
    assert offsets == [
        0,
        0.25,
        0.5,
        0.75,
        1.0,
        1.25,
        1.5,
        1.75,
        2,
        3,
        4,
        4.25,
        4.5,
        4.75,
        5,
        5.25,
        5.5,
        5.75,
        6,
        7,
    ]
    assert [CYCLES.phase_at(x) for x in (0, 1.9, 2, 3.9, 4, 6.5)] == [
        "burst",
        "burst",
        "quiet",
        "quiet",
        "burst",
        "quiet",
    ]
    assert CYCLES.seconds == 8
    default = Cycles()
    assert len(default.send_offsets()) == 3 * (15 * 60 + 60)


def test_latencies_count_the_requests_sent_while_the_batch_ran() -> None:
    run = Run(
        "yield", sent=[Sent(0.5, 0.5), Sent(1.0, 1.0), Sent(1.5, 0.7), Sent(2.0, None, 503), Sent(9.0, 9.0)]
    )
    assert latencies(run, (0.0, 5.0)) == {"requests": 4, "failed": 1, "p50_ms": 700.0, "p99_ms": 1000.0}


def test_idle_utilization_is_the_batchs_share_of_what_interactive_left_at_the_model_in_quiet_phases() -> None:
    samples = [
        Sample(1.0, 16, 8, 0, batch_at_model=8, interactive_at_model=8),  # a burst: not counted
        Sample(2.5, 16, 1, 10, batch_at_model=15, interactive_at_model=1),  # quiet: 15 of 15 free
        # Quiet: batch 10 of 16 free; the interactive request sent is not at the model yet.
        Sample(3.5, 10, 1, 20, batch_at_model=10, interactive_at_model=0),
        Sample(6.5, 16, 0, 30, batch_at_model=16, interactive_at_model=0),  # after the batch: not counted
    ]
    run = Run("yield", samples=samples, batch_started=0.0, batch_ended=5.0)
    assert batch_window(run, CYCLES) == (0.0, 5.0)
    assert idle_utilization(run, CYCLES, capacity=16) == round(25 / 31, 3)


def test_the_summary_compares_each_run_with_the_interactive_load_alone() -> None:
    alone = Run("alone", sent=[Sent(0.1, 0.5), Sent(0.2, 0.5)])
    yielding = Run("yield", sent=[Sent(0.1, 0.5), Sent(0.2, 0.55)], batch_started=0.0, batch_ended=4.0)
    no_yield = Run("no_yield", sent=[Sent(0.1, 1.0), Sent(0.2, 1.5)])
    figures = summary({"alone": alone, "yield": yielding, "no_yield": no_yield}, CYCLES, capacity=16)
    assert figures["yield"]["p99_ratio"] == 1.1 and figures["no_yield"]["p99_ratio"] == 3.0
    assert figures["window_seconds"] == [0.0, 4.0]


def test_idle_utilization_leaves_out_the_batchs_drain_when_too_few_requests_are_left_to_fill_the_room() -> (
    None
):
    samples = [
        Sample(2.5, 16, 1, 10, batch_at_model=15, interactive_at_model=1),  # 75 left to start: filling
        # 84 done, 10 at the model: 6 left to start, fewer than the 15 free: the drain.
        Sample(3.5, 11, 1, 84, batch_at_model=10, interactive_at_model=1),
    ]
    run = Run("yield", samples=samples, batch_started=0.0, batch_ended=5.0, batch_requests=100)
    assert idle_utilization(run, CYCLES, capacity=16) == 1.0
    assert idle_utilization(run, CYCLES, capacity=16, drain=True) == round(25 / 30, 3)
    assert quiet_phases(run, CYCLES, capacity=16) == [
        {"cycle": 1, "samples": 2, "draining": 1, "utilization": 1.0}
    ]


def test_the_drain_is_judged_by_the_simulators_answers_when_the_gateways_count_lags() -> None:
    # The gateway's count (read a second before) says 60 done; the simulator has answered
    # 80 by now, 10 more run: 10 left to start, fewer than the 15 free, so the drain.
    lagging = Sample(2.5, 11, 1, 60, batch_at_model=10, interactive_at_model=1, batch_answered=80)
    filling = Sample(3.5, 16, 1, 60, batch_at_model=15, interactive_at_model=1, batch_answered=60)
    run = Run("yield", samples=[filling, lagging], batch_started=0.0, batch_ended=5.0, batch_requests=100)
    assert quiet_phases(run, CYCLES, capacity=16) == [
        {"cycle": 1, "samples": 2, "draining": 1, "utilization": 1.0}
    ]
    assert idle_utilization(run, CYCLES, capacity=16, drain=True) == round(25 / 30, 3)


def test_idle_lost_splits_what_the_batch_left_idle_into_ramps_steady_and_tail() -> None:
    samples = [
        Sample(2.5, 9, 1, 0, batch_at_model=8, interactive_at_model=1),  # a ramp: 7 of 15 lost
        Sample(5.5, 15, 1, 0, batch_at_model=14, interactive_at_model=1, batch_answered=500),  # steady: 1
        # 950 of 1000 answered, 12 at the model: 38 left to start, more than the 15 free: the tail.
        Sample(13.5, 31, 1, 0, batch_at_model=12, interactive_at_model=1, batch_answered=950),
        Sample(14.5, 6, 1, 0, batch_at_model=5, interactive_at_model=1, batch_answered=990),  # drain
    ]
    cycles = Cycles(burst_rps=4, burst_seconds=2, quiet_rps=1, quiet_seconds=12, cycles=2)
    run = Run("yield", samples=samples, batch_started=0.0, batch_ended=20.0, batch_requests=1000)
    lost = idle_lost(run, cycles, capacity=16)
    assert lost == {"ramps": round(7 / 45, 4), "steady": round(1 / 45, 4), "tail": round(3 / 45, 4)}
    assert idle_utilization(run, cycles, capacity=16) == round(1 - sum(lost.values()), 3)


def emf(timestamp: float, **values: object) -> str:
    return json.dumps({"_aws": {"Timestamp": int(timestamp * 1000), "CloudWatchMetrics": []}, **values})


def test_a_runs_answer_to_next_call_is_what_the_workers_wrote_during_it() -> None:
    lines = [
        emf(99.5, AnswerToNextCall=[50.0]),  # before the run
        "2026-12-05 worker-0.0 INFO local.poller: AnswerToNextCall is not EMF here",
        emf(100.0, AnswerToNextCall=[10.0, 30.0], model="sim-chat"),
        emf(150.0, UpstreamLatency=[500.0]),
        emf(160.0, AnswerToNextCall=20.0),  # one value alone is not a list
        emf(200.5, AnswerToNextCall=[70.0]),  # after it
        # Threads of one worker share its output: two documents on a line, or one cut into.
        emf(170.0, AnswerToNextCall=[5.0]) + emf(171.0, AnswerToNextCall=[6.0]),
        emf(172.0, AnswerToNextCall=[7.0])[:40] + emf(173.0, AnswerToNextCall=[8.0]),
    ]
    assert metric_values(lines, "AnswerToNextCall", 100.0, 200.0) == [10.0, 30.0, 20.0, 5.0, 6.0]
    assert spread([10.0, 30.0, 20.0, 40.0]) == {"count": 4, "p50_ms": 30.0, "p90_ms": 40.0, "mean_ms": 25.0}
    assert spread([]) is None


def test_scheduling_calls_are_counted_per_second_in_each_phase_while_the_batch_runs() -> None:
    worker_read = ("batchgw-worker", "read", "interactive")
    slot_write = ("batchgw-worker", "write", "slots#*")
    looks = [  # CYCLES: bursts from 0 to 2 s, quiet from 2 to 4 s
        Look(0.0, Counter({worker_read: 0}), busy=4),
        Look(1.0, Counter({worker_read: 8, slot_write: 2}), busy=4),  # burst: 8 reads, 2 writes in 1 s
        Look(1.5, Counter({worker_read: 12, slot_write: 3}), busy=4),
        Look(2.5, Counter({worker_read: 17, slot_write: 4}), busy=2),  # crosses into quiet: left out
        Look(3.0, Counter({worker_read: 18, slot_write: 4}), busy=2),  # quiet: 3 calls in 1 s
        Look(3.5, Counter({worker_read: 19, slot_write: 5}), busy=2),
        Look(9.0, Counter({worker_read: 99}), busy=2),  # after the batch ended: left out
    ]

    figures = rates(looks, CYCLES.phase_at, window=(0.0, 4.0))

    assert figures["burst"] == {
        "seconds": 1.5,
        "busy_environments": 4.0,
        "calls_per_second": 10.0,
        "calls_per_second_per_busy_environment": 2.5,
        "by_kind": {"batchgw-worker read interactive": 8.0, "batchgw-worker write slots#*": 2.0},
    }
    assert figures["quiet"] == {
        "seconds": 1.0,
        "busy_environments": 2.0,
        "calls_per_second": 3.0,
        "calls_per_second_per_busy_environment": 1.5,
        "by_kind": {"batchgw-worker read interactive": 2.0, "batchgw-worker write slots#*": 1.0},
    }
