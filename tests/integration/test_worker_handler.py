"""The worker function's handler on moto, driven by an SQS event like the event source's."""

from __future__ import annotations

import json

import pytest
from batchgw.api import batches
from batchgw.domain.principal import Principal
from batchgw.run import lifecycle

from functions.worker import handler as worker
from local.simulator import Simulator
from tests.integration.conftest import body_of, chat_request, make_deps, receive_all
from tests.support import FakeClock, LambdaContext, load_event

pytestmark = pytest.mark.usefixtures("aws_env")
ALICE = Principal(user_id="user-alice", role="internal", key_id="key_local_alice")


def test_a_message_for_an_unknown_batch_is_consumed(sim: Simulator, monkeypatch: pytest.MonkeyPatch) -> None:
    deps = make_deps(sim, FakeClock())
    monkeypatch.setattr(worker, "get_deps", lambda: deps)
    assert worker.handler(
        load_event("sqs_chain_message"),
        LambdaContext("batchgw-worker", request_id="req-w", remaining_ms=900_000),
    ) == {"batchItemFailures": []}  # type: ignore[arg-type]


def test_a_chain_message_runs_its_requests(sim: Simulator, monkeypatch: pytest.MonkeyPatch) -> None:
    deps = make_deps(sim, FakeClock(), BATCH_MODEL_CONCURRENCY="1")
    monkeypatch.setattr(worker, "get_deps", lambda: deps)
    batch = batches.create_batch(
        deps, ALICE, body_of([chat_request(f"h-{i}", f"via sqs {i}") for i in range(3)])
    )
    lifecycle.prepare(deps, batch["id"])
    [message] = receive_all(deps)
    event = load_event("sqs_chain_message")
    event["Records"][0].update(body=message["Body"], receiptHandle=message["ReceiptHandle"])
    assert worker.handler(
        event, LambdaContext("batchgw-worker", request_id="req-w", remaining_ms=900_000)
    ) == {"batchItemFailures": []}  # type: ignore[arg-type]
    assert batches.get_batch(deps, ALICE, batch["id"])["request_counts"]["completed"] == 3
    assert json.loads(message["Body"])["w"] == 1
