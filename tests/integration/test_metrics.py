"""The CloudWatch metrics (EMF) one batch emits add up to its own request_counts (moto, the
simulator): successes, failures, a retry, and requests a cancel swept before they ran."""

from __future__ import annotations

import asyncio
import json
import logging
from collections import Counter
from typing import Any

import pytest
from batchgw import observability
from batchgw.api import batches
from batchgw.deferred import background as deferred_background
from batchgw.deps import Deps
from batchgw.domain.chains import ChainMessage, RequestMessage, decode
from batchgw.domain.principal import Principal
from batchgw.observability import MetricsBuffer
from batchgw.run import attempt, ending, lifecycle, reconcile
from batchgw.run.chain import run_message

from local.simulator import Simulator
from tests.integration.conftest import body_of, chat_request, make_deps, receive_all
from tests.integration.test_owner_gate import run
from tests.support import FakeClock, spec_counts

pytestmark = pytest.mark.usefixtures("aws_env")

ALICE = Principal(user_id="user-alice", role="internal", key_id="key_local_alice")


def totals(documents: list[dict[str, Any]]) -> Counter[tuple[str, str]]:
    """Each metric's sum, by (metric, the value of its model or status dimension)."""
    summed: Counter[tuple[str, str]] = Counter()
    for document in documents:
        for directive in document["_aws"]["CloudWatchMetrics"]:
            for metric in directive["Metrics"]:
                label = document.get("model") or document.get("status") or ""
                values = document[metric["Name"]]
                summed[(metric["Name"], label)] += sum(values if isinstance(values, list) else [values])
    return summed


def test_the_metrics_of_one_batch_add_up_to_its_request_counts(
    sim: Simulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    emitted: list[str] = []
    buffer = MetricsBuffer(emit=emitted.append)
    for module in (
        "batchgw.observability",
        "batchgw.run.attempt",
        "batchgw.run.ending",
        "batchgw.run.slot",
        "batchgw.run.stopped",
    ):
        monkeypatch.setattr(f"{module}.metrics", buffer)
    monkeypatch.setattr(observability, "metrics", buffer)
    clock = FakeClock()
    deps: Deps = make_deps(sim, clock, BATCH_RETRY_BASE_SECONDS="600", BATCH_RETRY_MAX_SECONDS="600")
    texts = ["a", "b", "[[sim status=400]] c", "[[sim status=503 fail=1]] d", "e", "f", "g"]
    batch = batches.create_batch(
        deps, ALICE, body_of([chat_request(f"r-{i}", t) for i, t in enumerate(texts)])
    )
    lifecycle.prepare(deps, batch["id"])
    receive_all(deps)
    for index in range(5):  # 0-4 run (3 retries later); 5 and 6 never start
        run(deps, RequestMessage(batch["id"], index))
    clock.advance(1200)
    run(deps, RequestMessage(batch["id"], 3))  # the retry succeeds
    batches.cancel_batch(deps, ALICE, batch["id"])
    lifecycle.cancel(deps, batch["id"])
    ending.finalize(deps, batch["id"])
    documents = buffer.flush()

    final = batches.get_batch(deps, ALICE, batch["id"])
    counts = spec_counts(final)
    assert final["status"] == "cancelled" and counts == {"total": 7, "completed": 4, "failed": 1}
    summed = totals(documents)
    assert summed[("RequestsSucceeded", "sim-chat")] == counts["completed"]
    assert summed[("RequestsFailed", "sim-chat")] == counts["failed"]
    assert (
        summed[("RequestsCancelled", "sim-chat")] == counts["total"] - counts["completed"] - counts["failed"]
    )
    assert summed[("RequestsStarted", "sim-chat")] == sim.stats()["models"]["sim-chat"]["requests"] == 6
    assert summed[("RequestsRetried", "sim-chat")] == 1
    assert summed[("BatchesEnded", "cancelled")] == 1
    for dimension in ("model", "source"):  # per model, and once more per source (all batch)
        latencies = [d["UpstreamLatency"] for d in documents if "UpstreamLatency" in d and dimension in d]
        assert sum(len(v) if isinstance(v, list) else 1 for v in latencies) == 6
    assert emitted and all(line.startswith('{"_aws"') for line in emitted)  # EMF, one line each


def test_a_model_that_serves_no_queued_request_for_the_alert_hours_is_reported_until_it_serves_one(
    sim: Simulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    buffer = MetricsBuffer(emit=lambda _: None)
    monkeypatch.setattr("batchgw.run.reconcile.metrics", buffer)
    clock = FakeClock()
    deps = make_deps(sim, clock, BATCH_QUEUED_ALERT_HOURS="2")
    batch = batches.create_batch(deps, ALICE, body_of([chat_request(f"r-{i}", "x") for i in range(3)]))
    lifecycle.prepare(deps, batch["id"])
    receive_all(deps)

    def waiting() -> list[float]:
        reconcile.reconcile(deps, batch["id"])
        documents = buffer.flush()
        return [v for d in documents if d.get("model") == "sim-chat" for v in d["ModelWaitingForCapacity"]]

    assert waiting() == [0]  # queued for under two hours
    clock.advance(2 * 3600 + 1)
    assert waiting() == [1]  # two hours without serving a batch request
    run(deps, RequestMessage(batch["id"], 0))  # it serves one
    assert waiting() == [0]
    clock.advance(2 * 3600 + 1)
    assert waiting() == [1]


def test_a_request_that_succeeded_is_logged_for_debugging_and_one_that_failed_for_the_operator(
    sim: Simulator, logged: list[logging.LogRecord]
) -> None:
    deps = make_deps(sim, FakeClock())
    texts = ["a", "[[sim status=400]] b"]
    batch = batches.create_batch(
        deps, ALICE, body_of([chat_request(f"r-{i}", t) for i, t in enumerate(texts)])
    )
    lifecycle.prepare(deps, batch["id"])
    receive_all(deps)
    for index in range(2):
        run(deps, RequestMessage(batch["id"], index))

    ended = {
        vars(r)["index"]: (r.levelname, vars(r)["outcome"])
        for r in logged
        if r.getMessage() == "request ended"
    }
    assert ended == {0: ("DEBUG", "succeeded"), 1: ("INFO", "failed")}


def test_a_chain_measures_the_time_its_slot_sits_idle_from_each_answer_to_its_next_call(
    sim: Simulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    """AnswerToNextCall: one value per request after a chain's first, each the time from an
    answer to the next call: here the 40 ms each end takes to write (the injected clock)."""
    buffer = MetricsBuffer(emit=lambda _: None)
    monkeypatch.setattr("batchgw.run.chain.metrics", buffer)
    clock = FakeClock()
    deps = make_deps(sim, clock, BATCH_MODEL_CONCURRENCY="1")
    real_settle = attempt.settle

    async def slow_settle(*args: Any, **kwargs: Any) -> Any:
        clock.advance(0.04)
        return await real_settle(*args, **kwargs)

    monkeypatch.setattr(attempt, "settle", slow_settle)
    batch = batches.create_batch(deps, ALICE, body_of([chat_request(f"r-{i}", "x") for i in range(4)]))
    lifecycle.prepare(deps, batch["id"])
    (message,) = [
        m for m in (decode(raw["Body"]) for raw in receive_all(deps)) if isinstance(m, ChainMessage)
    ]
    asyncio.run(run_message(deps, message, owner="w", deadline=clock() + 900))
    idle = [v for d in buffer.flush() if "AnswerToNextCall" in d for v in d["AnswerToNextCall"]]
    assert idle == pytest.approx([40.0] * 3)


def test_a_background_responses_attempt_is_measured_under_source_background_and_a_batchs_under_batch(
    sim: Simulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Beside the per-model series (unchanged: the alarms and the dashboard read them), an
    attempt writes its started, latency, queue wait and retry once more with only a ``source``
    dimension, so a background response's calls are told from a batch's in CloudWatch."""
    buffer = MetricsBuffer(emit=lambda _: None)
    monkeypatch.setattr("batchgw.run.attempt.metrics", buffer)
    deps = make_deps(sim, FakeClock(), BATCH_RETRY_BASE_SECONDS="600", BATCH_RETRY_MAX_SECONDS="600")
    body = {"model": "sim-chat", "input": "[[sim status=503 fail=1]] in the background", "background": True}
    response = deferred_background.create(deps, ALICE, json.dumps(body).encode(), body)
    batch = batches.create_batch(deps, ALICE, body_of([chat_request("r-0", "a"), chat_request("r-1", "b")]))
    for made in (response["id"], batch["id"]):
        lifecycle.prepare(deps, made)
    receive_all(deps)
    run(deps, RequestMessage(response["id"], 0))  # a 503: retried later
    for index in range(2):
        run(deps, RequestMessage(batch["id"], index))
    documents = buffer.flush()

    def series(**dimensions: str) -> dict[str, float]:
        """Each metric's count of values (a count's sum) in the documents of exactly these
        dimensions (besides ``service``)."""
        found: Counter[str] = Counter()
        for document in documents:
            (directive,) = document["_aws"]["CloudWatchMetrics"]
            names = set(directive["Dimensions"][0]) - {"service"}
            if names != set(dimensions) or any(document[k] != v for k, v in dimensions.items()):
                continue
            for name in ("RequestsStarted", "RequestsRetried"):
                found[name] += sum(document.get(name, []))
            for name in ("UpstreamLatency", "QueueWait"):
                found[name] += len(document.get(name, []))
        return dict(found)

    assert series(source="background") == {
        "RequestsStarted": 1,
        "RequestsRetried": 1,
        "UpstreamLatency": 1,
        "QueueWait": 1,
    }
    assert series(source="batch") == {
        "RequestsStarted": 2,
        "RequestsRetried": 0,
        "UpstreamLatency": 2,
        "QueueWait": 2,
    }
    assert series(source="flex") == {}
    # The per-model series counts them all, as it did before.
    assert series(model="sim-chat") == {
        "RequestsStarted": 3,
        "RequestsRetried": 1,
        "UpstreamLatency": 3,
        "QueueWait": 3,
    }
