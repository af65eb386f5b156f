"""The simulator models a real server's capacity: a model serves a limited number of
sequences at once, the rest wait their turn in order (or are refused at once, when told to),
their latency grows with the load,
and it reports latencies by source and its queue as vLLM's gauges."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest

from local import sim_capacity
from local.sim_capacity import Capacity, percentile, source_of
from local.sim_protocol import MODELS
from local.simulator import Simulator
from tests.support import wait_for

LATENCY_MS = 200


@pytest.fixture
def sim() -> Iterator[Simulator]:
    simulator = Simulator(port=0, capacity=2).start()
    try:
        yield simulator
    finally:
        simulator.stop()


def chat(text: str) -> dict[str, Any]:
    return {"model": "sim-chat", "messages": [{"role": "user", "content": text}]}


def post(sim: Simulator, text: str, source: str | None = None) -> httpx.Response:
    headers = {"x-batchgw-source": source} if source else {}
    return httpx.post(f"{sim.url}/v1/chat/completions", json=chat(text), headers=headers, timeout=30)


def test_past_its_capacity_a_model_queues_requests_and_their_latency_grows(sim: Simulator) -> None:
    peak = {"running": 0, "waiting": 0}
    done = threading.Event()

    def watch() -> None:
        while not done.is_set():
            queue = sim.stats()["queues"]["sim-chat"]
            peak["running"] = max(peak["running"], queue["running"])
            peak["waiting"] = max(peak["waiting"], queue["waiting"])
            time.sleep(0.01)

    watcher = threading.Thread(target=watch)
    watcher.start()
    with ThreadPoolExecutor(6) as pool:
        answers = list(pool.map(lambda i: post(sim, f"[[sim latency_ms={LATENCY_MS}]] {i}"), range(6)))
    done.set()
    watcher.join()
    assert [a.status_code for a in answers] == [200] * 6
    # Never more than its capacity at once (the rest waited: their latency says so below; a
    # watcher's samples may miss a wait on a loaded machine, so it is not asked to see one).
    assert peak["running"] <= 2
    stats = sim.stats()
    assert stats["queues"]["sim-chat"] == {
        "capacity": 2,
        "running": 0,
        "running_by_source": {"interactive": 0, "batch": 0},
        "waiting": 0,
    }
    assert stats["models"]["sim-chat"] == {"requests": 6, "in_flight": 0, "max_in_flight": 6}
    interactive = stats["latency"]["sim-chat"]["interactive"]
    # Six requests of 200 ms through two sequences: the last ones waited for two turns at least.
    assert interactive["count"] == 6 and interactive["p99_ms"] >= 2 * LATENCY_MS
    assert stats["latency"]["sim-chat"]["batch"] == {
        "count": 0,
        "answered": 0,
        "p50_ms": None,
        "p90_ms": None,
        "p99_ms": None,
    }


def test_a_batch_workers_requests_are_measured_apart_from_interactive_ones(sim: Simulator) -> None:
    post(sim, "[[sim latency_ms=50]] b", source="batch")
    post(sim, "[[sim latency_ms=50]] b2", source="BATCH")
    post(sim, "i", source="something else")
    latency = sim.stats()["latency"]["sim-chat"]
    assert latency["batch"]["count"] == 2 and latency["batch"]["p50_ms"] >= 50
    assert latency["interactive"]["count"] == 1
    assert latency["batch"]["answered"] == 2 and latency["interactive"]["answered"] == 1


def test_the_answers_are_counted_past_the_latencies_kept_and_zeroed_by_a_reset(
    sim: Simulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sim_capacity, "KEPT_LATENCIES", 2)
    sim.core.latencies = sim_capacity.Latencies(MODELS)  # made with the smaller limit
    for i in range(3):
        post(sim, f"b{i}", source="batch")
    batch = sim.stats()["latency"]["sim-chat"]["batch"]
    assert batch["count"] == 2 and batch["answered"] == 3
    httpx.post(f"{sim.url}/_sim/reset").raise_for_status()
    assert sim.stats()["latency"]["sim-chat"]["batch"]["answered"] == 0
    assert source_of({}) == "interactive" and source_of({"x-batchgw-source": " batch "}) == "batch"


def test_metrics_show_the_queue_as_vllm_gauges(sim: Simulator) -> None:
    queued = (
        'vllm:num_requests_running{model_name="sim-chat"} 2',
        'vllm:num_requests_waiting{model_name="sim-chat"} 2',
    )

    def showing_the_queue() -> str | None:
        text = httpx.get(f"{sim.url}/metrics").text
        return text if all(line in text for line in queued) else None

    with ThreadPoolExecutor(4) as pool:
        # Read until the metrics show two running and two waiting (on a loaded machine the
        # first pair may end before one read: 1.5 s leaves each state seconds to be seen).
        futures = [pool.submit(post, sim, f"[[sim latency_ms=1500]] {i}") for i in range(4)]
        metrics = wait_for(showing_the_queue, timeout=10, interval=0.05, what="two running, two waiting")
        assert all(f.result().status_code == 200 for f in futures)
    assert "# TYPE vllm:num_requests_waiting gauge" in metrics
    assert 'vllm:num_requests_running{model_name="sim-chat"} 2' in metrics
    assert 'vllm:num_requests_waiting{model_name="sim-chat"} 2' in metrics
    assert 'vllm:num_requests_waiting{model_name="sim-embed"} 0' in metrics


def test_capacity_is_set_per_model_at_run_time_and_checked(sim: Simulator) -> None:
    url = f"{sim.url.removesuffix('/v1')}/_sim/capacity"
    assert httpx.get(url).json()["models"]["sim-chat"] == 2
    assert httpx.post(url, json={"sim-chat": 16, "sim-embed": None}).json()["models"]["sim-chat"] == 16
    for bad in ({"nope": 1}, {"sim-chat": -1}, {"sim-chat": 1.5}, {"sim-chat": True}, [1]):
        assert httpx.post(url, json=bad).status_code == 400
    assert httpx.post(url, json={"sim-chat": 0}).json()["models"]["sim-chat"] == 0  # no limit
    with ThreadPoolExecutor(5) as pool:
        # Each lasts long enough that all five overlap however slowly the threads start.
        list(pool.map(lambda i: post(sim, f"[[sim latency_ms=3000]] {i}"), range(5)))
    assert sim.stats()["models"]["sim-chat"]["max_in_flight"] == 5


def test_told_to_a_model_refuses_at_once_what_it_has_no_room_for_then_queues_again(sim: Simulator) -> None:
    url = f"{sim.url.removesuffix('/v1')}/_sim/overflow"
    for bad in ({"nope": 429}, {"sim-chat": 500}, {"sim-chat": True}, {"sim-chat": 429.0}, [429]):
        assert httpx.post(url, json=bad).status_code == 400
    assert httpx.post(url, json={"sim-chat": 429}).json()["models"]["sim-chat"] == 429
    with ThreadPoolExecutor(3) as pool:
        running = [pool.submit(post, sim, f"[[sim latency_ms=2000]] {i}") for i in range(2)]
        wait_for(lambda: sim.stats()["queues"]["sim-chat"]["running"] == 2, timeout=10, what="two running")
        started = time.monotonic()
        refused = post(sim, "a third")
        assert refused.status_code == 429 and time.monotonic() - started < 1.0  # not after a wait
        assert refused.json()["error"]["code"] == "rate_limit_exceeded"
        assert httpx.post(url, json={"sim-chat": 503}).status_code == 200
        assert post(sim, "a fourth").status_code == 503
        assert httpx.post(url, json={"sim-chat": None}).json()["models"]["sim-chat"] is None
        queued = pool.submit(post, sim, "a fifth")  # waits its turn again
        assert [r.result().status_code for r in running] == [200, 200]
        assert queued.result().status_code == 200
    assert sim.stats()["queues"]["sim-chat"]["running"] == 0


def test_requests_are_admitted_in_the_order_they_came_and_one_that_gives_up_leaves_the_queue() -> None:
    capacity = Capacity(["m"], limit=1)
    assert capacity.admit("m", lambda: False)  # one runs
    admitted: list[str] = []
    gone = threading.Event()

    def wait(name: str, give_up: Any = lambda: False) -> None:
        if capacity.admit("m", give_up):
            admitted.append(name)
            capacity.release("m")

    threads = [threading.Thread(target=wait, args=("first",))]
    threads[0].start()
    wait_for(lambda: capacity.snapshot()["m"]["waiting"] == 1, timeout=5, what="first to queue")
    threads.append(threading.Thread(target=wait, args=("gone", gone.is_set)))
    threads[1].start()
    wait_for(lambda: capacity.snapshot()["m"]["waiting"] == 2, timeout=5, what="gone to queue")
    threads.append(threading.Thread(target=wait, args=("third",)))
    threads[2].start()
    wait_for(lambda: capacity.snapshot()["m"]["waiting"] == 3, timeout=5, what="third to queue")
    gone.set()  # its client went away while it waited
    wait_for(lambda: capacity.snapshot()["m"]["waiting"] == 2, timeout=5, what="gone to leave")
    capacity.release("m")
    for thread in threads:
        thread.join(timeout=5)
    assert admitted == ["first", "third"]
    assert capacity.snapshot()["m"] == {
        "capacity": 1,
        "running": 0,
        "running_by_source": {"interactive": 0, "batch": 0},
        "waiting": 0,
    }


def test_percentiles_are_nearest_rank() -> None:
    assert percentile([], 50) is None
    assert percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.0
    assert percentile([float(v) for v in range(1, 101)], 99) == 99.0


def test_the_running_sequences_are_counted_by_source(sim: Simulator) -> None:
    seen: list[dict[str, int]] = []
    done = threading.Event()

    def watch() -> None:
        while not done.is_set():
            seen.append(dict(sim.stats()["queues"]["sim-chat"]["running_by_source"]))
            time.sleep(0.01)

    watcher = threading.Thread(target=watch)
    watcher.start()
    with ThreadPoolExecutor(2) as pool:
        answers = list(
            pool.map(lambda source: post(sim, f"[[sim latency_ms={LATENCY_MS}]]", source), ["batch", None])
        )
    done.set()
    watcher.join()
    assert [a.status_code for a in answers] == [200, 200]
    assert {"interactive": 1, "batch": 1} in seen
    assert sim.stats()["queues"]["sim-chat"]["running_by_source"] == {"interactive": 0, "batch": 0}
