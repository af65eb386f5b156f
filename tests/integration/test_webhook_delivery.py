"""Batch events delivered to a receiver of the test's own on loopback (moto; private targets
allowed): announced once per batch end, signed so the OpenAI SDK verifies them, retried with
the same webhook-id, 410 disabling the endpoint, three timeouts suspending it until it
recovers, and the webhook function keeping a waiting event's message invisible."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import openai
import pytest
from batchgw.api import batches, webhooks
from batchgw.deps import Deps
from batchgw.domain.principal import Principal
from batchgw.domain.webhooks import EventMessage
from batchgw.run import ending
from batchgw.run.webhooks import Later, deliver
from batchgw.storage import aws

from functions.webhooks import handler as webhook_function
from local.simulator import Simulator
from tests.integration.conftest import body_of, chat_request, make_deps
from tests.support import FakeClock, LambdaContext, Receiver

pytestmark = pytest.mark.usefixtures("aws_env")
HOOK = "/hook"
ALICE = Principal(user_id="user-alice", role="internal", key_id="key_local_alice")
SETTINGS = {
    "BATCH_WEBHOOK_ALLOW_PRIVATE_TARGETS": "true",
    "BATCH_WEBHOOK_RETRY_SCHEDULE_SECONDS": "5,30,60,60,60,60,60",
    # Room for a loaded two-core CI machine's answer on loopback (0.5 s was once not enough);
    # the receiver's "hang" answers after 5 s.
    "BATCH_WEBHOOK_TIMEOUT_SECONDS": "2",
    "BATCH_WEBHOOK_SUSPEND_SECONDS": "600",
    "BATCH_WEBHOOK_SUSPEND_MAX_SECONDS": "3600",
}


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    running = Receiver()
    yield running
    running.stop()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(time.time())  # signatures carry real timestamps: the SDK checks them


@pytest.fixture
def deps(sim: Simulator, clock: FakeClock) -> Deps:
    return make_deps(sim, clock, **SETTINGS)


def ended_batch(deps: Deps) -> str:
    batch = batches.create_batch(deps, ALICE, body_of([chat_request("a", "hi")]))
    batches.cancel_batch(deps, ALICE, batch["id"])
    ending.finalize(deps, batch["id"])
    return str(batch["id"])


def queued_events(deps: Deps) -> list[EventMessage]:
    out = []
    while True:
        resp = aws.get_clients().sqs.receive_message(
            QueueUrl=deps.settings.webhook_queue_url, MaxNumberOfMessages=10, VisibilityTimeout=600
        )
        for message in resp.get("Messages", []):
            out.append(EventMessage.decode(message["Body"]))
            aws.get_clients().sqs.delete_message(
                QueueUrl=deps.settings.webhook_queue_url, ReceiptHandle=message["ReceiptHandle"]
            )
        if not resp.get("Messages"):
            return out


def test_a_batch_end_is_announced_once_and_the_openai_sdk_verifies_the_delivery(
    deps: Deps, receiver: Receiver
) -> None:
    secret = webhooks.put_webhook(deps, ALICE, {"url": receiver.url(HOOK)})["secret"]
    batch_id = ended_batch(deps)
    ending.finalize(deps, batch_id)  # the step retried: no second event
    (event,) = queued_events(deps)
    assert deps.batches.get_record(batch_id).event_pending is False  # type: ignore[union-attr]
    assert deliver(deps, event) is None
    (headers, body, _) = receiver.at(HOOK)[0]
    unwrapped = openai.OpenAI(api_key="x").webhooks.unwrap(body, headers, secret=secret)
    assert (unwrapped.type, unwrapped.data.id) == ("batch.cancelled", batch_id)
    assert json.loads(body) == {
        "id": event.event_id,
        "object": "event",
        "type": "batch.cancelled",
        "created_at": event.created_at // 1000,
        "data": {"id": batch_id},
    }
    (listed,) = webhooks.list_events(deps, ALICE)["data"]
    assert listed["id"] == event.event_id and listed["attempts"] == 1 and listed["delivered_at"] is not None
    assert deliver(deps, event) is None  # a duplicate message: not sent again
    assert len(receiver.at(HOOK)) == 1


def test_a_user_without_a_webhook_gets_no_event(deps: Deps) -> None:
    ended_batch(deps)
    assert queued_events(deps) == []


def test_a_failing_receiver_gets_the_same_webhook_id_until_it_answers_2xx(
    deps: Deps, receiver: Receiver, clock: FakeClock
) -> None:
    webhooks.put_webhook(deps, ALICE, {"url": receiver.url(HOOK)})
    ended_batch(deps)
    (event,) = queued_events(deps)
    receiver.plans[HOOK] = [500, 503]
    assert deliver(deps, event) == Later(5)
    clock.advance(5)
    assert deliver(deps, event) == Later(30)
    clock.advance(30)
    assert deliver(deps, event) is None
    assert [h["webhook-id"] for h, _, _ in receiver.at(HOOK)] == [event.event_id] * 3
    (listed,) = webhooks.list_events(deps, ALICE)["data"]
    assert listed["attempts"] == 3 and listed["last_status"] == 200


def test_an_event_that_arrives_before_its_next_attempt_waits_for_it_untried(
    deps: Deps, receiver: Receiver, clock: FakeClock
) -> None:
    """As a queue re-created from the delivery records delivers it (a local stack's restart)."""
    webhooks.put_webhook(deps, ALICE, {"url": receiver.url(HOOK)})
    ended_batch(deps)
    (event,) = queued_events(deps)
    receiver.plans[HOOK] = [500]
    assert deliver(deps, event) == Later(5)
    clock.advance(2)
    assert deliver(deps, event) == Later(3)  # early: held for the rest of its backoff
    assert len(receiver.at(HOOK)) == 1
    clock.advance(3)
    assert deliver(deps, event) is None
    assert len(receiver.at(HOOK)) == 2
    (listed,) = webhooks.list_events(deps, ALICE)["data"]
    assert listed["attempts"] == 2 and listed["last_status"] == 200


def test_410_disables_the_endpoint_until_it_is_saved_again(deps: Deps, receiver: Receiver) -> None:
    webhooks.put_webhook(deps, ALICE, {"url": receiver.url(HOOK)})
    ended_batch(deps)
    (event,) = queued_events(deps)
    receiver.plans[HOOK] = [410]
    assert deliver(deps, event) is None
    shown = webhooks.get_webhook(deps, ALICE)
    assert shown["enabled"] is False and "410" in shown["disabled_reason"]
    ended_batch(deps)
    assert queued_events(deps) == []  # disabled: nothing is queued
    assert webhooks.put_webhook(deps, ALICE, {"url": receiver.url(HOOK)})["enabled"] is True


def test_three_timeouts_suspend_the_endpoint_and_it_recovers(
    deps: Deps, receiver: Receiver, clock: FakeClock
) -> None:
    webhooks.put_webhook(deps, ALICE, {"url": receiver.url(HOOK)})
    ended_batch(deps)
    (event,) = queued_events(deps)
    receiver.plans[HOOK] = ["hang", "hang", "hang"]
    assert deliver(deps, event) == Later(5)
    clock.advance(5)
    assert deliver(deps, event) == Later(30)
    clock.advance(30)
    assert deliver(deps, event) == Later(600)  # suspended
    assert webhooks.get_webhook(deps, ALICE)["suspended_until"] is not None
    seen = len(receiver.at(HOOK))
    waiting = deliver(deps, event)
    assert isinstance(waiting, Later) and waiting.seconds > 590 and len(receiver.at(HOOK)) == seen
    clock.advance(601)
    assert deliver(deps, event) is None  # it recovered
    assert webhooks.get_webhook(deps, ALICE)["suspended_until"] is None


def test_the_webhook_function_keeps_a_waiting_event_invisible_and_reports_it_failed(
    deps: Deps, receiver: Receiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(webhook_function, "get_deps", lambda: deps)
    webhooks.put_webhook(deps, ALICE, {"url": receiver.url(HOOK)})
    ended_batch(deps)
    sqs = aws.get_clients().sqs
    (message,) = sqs.receive_message(
        QueueUrl=deps.settings.webhook_queue_url, AttributeNames=["All"], VisibilityTimeout=30
    )["Messages"]
    receiver.plans[HOOK] = [500]
    record = {
        "messageId": message["MessageId"],
        "receiptHandle": message["ReceiptHandle"],
        "body": message["Body"],
        "attributes": {"MessageGroupId": "user-alice", **message.get("Attributes", {})},
        "messageAttributes": {},
        "eventSource": "aws:sqs",
        "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:batchgw-webhooks.fifo",
        "awsRegion": "us-east-1",
    }
    answer = webhook_function.handler({"Records": [record]}, LambdaContext())  # type: ignore[arg-type]
    assert answer == {"batchItemFailures": [{"itemIdentifier": message["MessageId"]}]}
    assert receive_all_events(deps) == []  # invisible for its backoff, not 30 s less


def receive_all_events(deps: Deps) -> list[dict[str, Any]]:
    resp = aws.get_clients().sqs.receive_message(
        QueueUrl=deps.settings.webhook_queue_url, MaxNumberOfMessages=10
    )
    return list(resp.get("Messages", []))


def test_after_a_rotation_deliveries_verify_with_the_old_secret_and_the_new(
    deps: Deps, receiver: Receiver
) -> None:
    old = webhooks.put_webhook(deps, ALICE, {"url": receiver.url(HOOK)})["secret"]
    new = webhooks.put_webhook(deps, ALICE, {"url": receiver.url(HOOK), "rotate_secret": True})["secret"]
    ended_batch(deps)
    (event,) = queued_events(deps)
    assert deliver(deps, event) is None
    (headers, body, _) = receiver.at(HOOK)[0]
    client = openai.OpenAI(api_key="x")
    for secret in (old, new):
        client.webhooks.verify_signature(body, headers, secret=secret)
    assert len(headers["webhook-signature"].split(" ")) == 2
