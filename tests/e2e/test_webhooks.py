"""Batch webhooks over HTTP on a stack of its own (private targets allowed, a receiver of the
test's own on loopback, short retry delays): every event type arrives once per batch end,
verified with the standardwebhooks library and the OpenAI SDK; a failing receiver gets the
same webhook-id until it answers; one user's events arrive in order while another's flow
beside them; three timeouts suspend the endpoint and it recovers; 410 disables it."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest
import standardwebhooks

from local.run import LocalStack
from tests.e2e.conftest import Account, Api, aws_calls_dir, chat, root
from tests.support import Receiver, wait_for

# Deliveries counted against timeouts: ``make test`` runs these after the rest, alone (in the
# two-process run a slow receiver's delivery was sent again).
pytestmark = pytest.mark.serial

ENV = {
    "BATCH_WEBHOOK_ALLOW_PRIVATE_TARGETS": "true",
    "BATCH_WEBHOOK_RETRY_SCHEDULE_SECONDS": "1,1,1,1,1,1,1",
    "BATCH_WEBHOOK_TIMEOUT_SECONDS": "1",
    "BATCH_WEBHOOK_SUSPEND_SECONDS": "3",
    "BATCH_WEBHOOK_SUSPEND_MAX_SECONDS": "10",
    "BATCH_MODEL_CONCURRENCY": "2",
    "BATCH_LEASE_SECONDS": "30",
    "BATCH_UPSTREAM_TIMEOUT_SECONDS": "10",
    "BATCH_WORKER_TIMEOUT_SECONDS": "60",
    "BATCH_RECONCILE_SECONDS": "2",
    "BATCHGW_WEBHOOKS_VISIBILITY_SECONDS": "3",  # a killed delivery comes back this soon
    # A background response's window: the one left waiting ends incomplete this soon (the
    # others of the test end in a few seconds).
    "BATCH_BACKGROUND_WINDOW_SECONDS": "20",
}


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    logs = tmp_path_factory.mktemp("webhooks-logs")
    env = {**ENV, "BATCHGW_AWS_CALLS_DIR": str(aws_calls_dir(tmp_path_factory) / logs.name)}
    with LocalStack(
        api_port=0, sim_port=0, moto_port=0, env_overrides=env, workers=2, log_dir=logs
    ) as running:
        yield running


@pytest.fixture(scope="module")
def receiver() -> Iterator[Receiver]:
    running = Receiver()
    yield running
    running.stop()


def hook(api: Api, url: str) -> str:
    answer = api.http.put("/batch_webhook", json={"url": url})
    assert answer.status_code == 200, answer.text
    return str(answer.json().get("secret") or "")


def ended(api: Api, batch_id: str) -> dict[str, Any]:
    return api.wait_final(batch_id, timeout=60)


def test_each_event_type_arrives_once_verified_by_both_libraries(
    stack: LocalStack, receiver: Receiver
) -> None:
    alice = Api(stack, "sk-local-alice")
    secret = hook(alice, receiver.url("/types"))
    done = alice.create([chat("a", "hi")]).json()["id"]
    cancelled = alice.create([chat(f"c{i}", f"[[sim latency_ms=3000]] {i}") for i in range(6)]).json()["id"]
    alice.http.post(f"/batches/{cancelled}/cancel")
    bad = alice.http.post(
        "/files", files={"file": ("in.jsonl", b'{"custom_id": "x"}\n')}, data={"purpose": "batch"}
    ).json()
    failed = alice.http.post(
        "/batches",
        json={"input_file_id": bad["id"], "endpoint": "/v1/chat/completions", "completion_window": "24h"},
    ).json()["id"]
    admin = root(stack, "sk-local-admin")
    window = "/admin/config/BATCH_COMPLETION_WINDOW_HOURS"
    assert admin.patch(window, json={"value": 0.001}).status_code == 200  # 3.6 s
    expired = alice.create([chat(f"e{i}", f"[[sim latency_ms=1000]] {i}") for i in range(20)]).json()["id"]
    admin.delete(window)
    statuses = {ended(alice, b)["status"]: b for b in (done, cancelled, failed, expired)}
    assert set(statuses) == {"completed", "cancelled", "failed", "expired"}

    wait_for(lambda: len(receiver.at("/types")) >= 4, timeout=30, what="four deliveries")
    time.sleep(1.5)  # and no fifth
    deliveries = receiver.at("/types")
    assert len(deliveries) == 4
    verifier = standardwebhooks.Webhook(secret)
    client = openai.OpenAI(api_key="x")
    seen = {}
    for headers, body, _ in deliveries:
        lowered = headers
        assert verifier.verify(body, lowered)["object"] == "event"
        event = client.webhooks.unwrap(body, lowered, secret=secret)
        seen[event.type] = event.data.id
    assert seen == {f"batch.{status}": batch for status, batch in statuses.items()}
    listed = alice.http.get("/batch_webhook/events").json()["data"]
    assert {e["batch_id"] for e in listed if e["delivered_at"]} >= set(statuses.values())


def test_a_failing_receiver_gets_the_same_webhook_id_until_it_answers(
    stack: LocalStack, receiver: Receiver
) -> None:
    bob = Api(stack, "sk-local-bob")
    hook(bob, receiver.url("/flaky"))
    receiver.plans["/flaky"] = [500, 503]
    ended(bob, bob.create([chat("a", "hi")]).json()["id"])
    wait_for(lambda: len(receiver.at("/flaky")) >= 3, timeout=30, what="three tries")
    ids = [h["webhook-id"] for h, _, _ in receiver.at("/flaky")]
    assert len(ids) == 3 and len(set(ids)) == 1


def test_one_users_events_arrive_in_order_while_anothers_flow_beside_them(
    stack: LocalStack, receiver: Receiver
) -> None:
    alice, bob = Api(stack, "sk-local-alice"), Api(stack, "sk-local-bob")
    hook(alice, receiver.url("/ordered"))
    hook(bob, receiver.url("/beside"))
    receiver.plans["/ordered"] = [500, 500, 500]  # alice's first event waits about three seconds
    order = []
    for i in range(3):
        batch_id = alice.create([chat(f"o{i}", "hi")]).json()["id"]
        ended(alice, batch_id)
        order.append(batch_id)
    beside = bob.create([chat("b", "hi")]).json()["id"]
    ended(bob, beside)
    wait_for(lambda: len(receiver.at("/ordered")) >= 6, timeout=60, what="alice's events")
    wait_for(lambda: receiver.at("/beside"), timeout=30, what="bob's event")
    delivered = [b for h, b, _ in receiver.at("/ordered")[3:]]
    assert [httpx.Response(200, content=b).json()["data"]["id"] for b in delivered] == order
    first_success = receiver.at("/ordered")[3][2]
    assert receiver.at("/beside")[0][2] < first_success  # bob's did not wait behind alice's


def test_three_timeouts_suspend_the_endpoint_and_it_recovers(stack: LocalStack, receiver: Receiver) -> None:
    free = Api(stack, "sk-local-admin")
    hook(free, receiver.url("/slow"))
    receiver.plans["/slow"] = ["hang", "hang", "hang"]
    ended(free, free.create([chat("a", "hi")]).json()["id"])
    wait_for(lambda: len(receiver.at("/slow")) >= 3, timeout=30, what="three timeouts")
    suspended = free.http.get("/batch_webhook").json()
    wait_for(lambda: len(receiver.at("/slow")) >= 4, timeout=30, what="a delivery after the suspension")
    tries = [t for _, _, t in receiver.at("/slow")]
    assert suspended["suspended_until"] is not None or tries[3] - tries[2] >= 2.5
    assert tries[3] - tries[2] >= 2.5  # BATCH_WEBHOOK_SUSPEND_SECONDS (3) after the third timeout
    wait_for(
        lambda: free.http.get("/batch_webhook").json()["suspended_until"] is None, timeout=10, what="recovery"
    )


def test_410_disables_the_endpoint(stack: LocalStack, receiver: Receiver) -> None:
    free = Api(stack, "sk-local-alice")
    hook(free, receiver.url("/gone"))
    receiver.plans["/gone"] = [410]
    ended(free, free.create([chat("a", "hi")]).json()["id"])
    wait_for(lambda: free.http.get("/batch_webhook").json()["enabled"] is False, timeout=30, what="disabled")
    ended(free, free.create([chat("b", "hi")]).json()["id"])
    time.sleep(1.5)
    assert len(receiver.at("/gone")) == 1


def test_a_delivery_killed_mid_flight_is_delivered_after_all(stack: LocalStack, receiver: Receiver) -> None:
    bob = Api(stack, "sk-local-bob")
    hook(bob, receiver.url("/killed"))
    receiver.plans["/killed"] = ["slow"]  # answers after 0.8 s: time to kill the deliverer
    batch_id = bob.create([chat("k", "hi")]).json()["id"]
    ended(bob, batch_id)
    wait_for(lambda: receiver.at("/killed"), timeout=30, what="the first try")
    for pid in stack.pids("poller-webhooks"):
        os.kill(pid, signal.SIGKILL)  # before it could record anything: the message comes back
    wait_for(lambda: len(receiver.at("/killed")) >= 2, timeout=30, what="the event again")
    ids = {h["webhook-id"] for h, _, _ in receiver.at("/killed")}
    assert len(ids) == 1  # the same event: receivers deduplicate on webhook-id
    wait_for(
        lambda: any(e["delivered_at"] for e in bob.http.get("/batch_webhook/events").json()["data"]),
        timeout=10,
        what="the delivery recorded",
    )


def test_the_unmodified_openai_sdk_manages_the_webhook_and_verifies_its_deliveries(
    stack: LocalStack, receiver: Receiver
) -> None:
    admin = Api(stack, "sk-local-admin")
    client = openai.OpenAI(api_key="sk-local-admin", base_url=stack.api_url)
    for found in client.webhooks.list():
        client.webhooks.delete(found.id)
    assert client.webhooks.event_types.list().data == [
        "batch.completed",
        "batch.failed",
        "batch.expired",
        "batch.cancelled",
        "response.completed",
        "response.failed",
        "response.cancelled",
        "response.incomplete",
    ]
    made = client.webhooks.create(
        name="ops", url=receiver.url("/sdk"), event_types=["batch.completed", "batch.cancelled"]
    )
    assert made.signing_secret.startswith("whsec_") and made.signing_secret_hint
    assert [e.id for e in client.webhooks.list()] == [made.id]
    assert client.webhooks.retrieve(made.id).event_types == ["batch.completed", "batch.cancelled"]
    with pytest.raises(openai.ConflictError):
        client.webhooks.create(name="again", url=receiver.url("/sdk"), event_types=["batch.completed"])
    # The spec's route shows the same webhook.
    assert admin.http.get("/batch_webhook").json()["url"] == receiver.url("/sdk")

    tested = client.webhooks.test(made.id, event_type="batch.completed")
    assert (tested.status_code, tested.webhook_endpoint_id) == (200, made.id)
    headers, body, _ = receiver.at("/sdk")[-1]
    event = client.webhooks.unwrap(body, headers, secret=made.signing_secret)
    assert event.type == "batch.completed" and event.data.id == "batch_test"

    # A rotation that keeps the old secret for 24 hours: deliveries verify with either.
    rotated = client.webhooks.rotate_secret(made.id, keep_old_secret_active_for_24_hours=True)
    assert rotated.signing_secret != made.signing_secret
    done = admin.create([chat("a", "hi")]).json()["id"]
    ended(admin, done)
    wait_for(lambda: len(receiver.at("/sdk")) >= 2, timeout=30, what="the batch's event")
    headers, body, _ = receiver.at("/sdk")[-1]
    for secret in (made.signing_secret, rotated.signing_secret):
        assert client.webhooks.unwrap(body, headers, secret=secret).data.id == done

    # An event type the endpoint does not name is not sent; a rotation without the overlap
    # leaves only the new secret signing.
    updated = client.webhooks.update(made.id, event_types=["batch.cancelled"], name="ops 2")
    assert (updated.name, updated.event_types) == ("ops 2", ["batch.cancelled"])
    newest = client.webhooks.rotate_secret(made.id)
    done_again = admin.create([chat("b", "hi")]).json()["id"]
    ended(admin, done_again)
    wait_for(
        lambda: any(
            e["batch_id"] == done_again for e in admin.http.get("/batch_webhook/events").json()["data"]
        ),
        timeout=30,
        what="the event's record",
    )
    assert len(receiver.at("/sdk")) == 2
    client.webhooks.test(made.id, event_type="batch.cancelled")
    headers, body, _ = receiver.at("/sdk")[-1]
    assert client.webhooks.unwrap(body, headers, secret=newest.signing_secret).type == "batch.cancelled"
    with pytest.raises(openai.InvalidWebhookSignatureError):
        client.webhooks.unwrap(body, headers, secret=rotated.signing_secret)

    assert client.webhooks.delete(made.id).deleted is True
    assert list(client.webhooks.list()) == []
    with pytest.raises(openai.NotFoundError):
        client.webhooks.retrieve(made.id)


def test_each_background_response_end_sends_its_response_event_once(
    stack: LocalStack, receiver: Receiver
) -> None:
    user = Account(stack)
    key = str(user.api.http.headers["Authorization"]).removeprefix("Bearer ")
    secret = hook(user.api, receiver.url("/responses"))
    client = openai.OpenAI(base_url=stack.api_url, api_key=key, max_retries=0)

    def ended(response_id: str) -> str:
        return str(
            wait_for(
                lambda: (
                    (status := client.responses.retrieve(response_id).status) not in ("queued", "in_progress")
                    and status
                ),
                timeout=60,
                what=f"{response_id} to end",
            )
        )

    made = {
        "completed": client.responses.create(model="sim-chat", input="fine", background=True).id,
        "failed": client.responses.create(
            model="sim-chat", input="[[sim status=400]] no", background=True
        ).id,
        "cancelled": client.responses.create(
            model="sim-chat", input="[[sim latency_ms=3000]] slow", background=True
        ).id,
    }
    wait_for(
        lambda: client.responses.retrieve(made["cancelled"]).status == "in_progress",
        timeout=30,
        what="the slow call to start",
    )
    client.responses.cancel(made["cancelled"])
    assert {status: ended(response_id) for status, response_id in made.items()} == {s: s for s in made}
    wait_for(lambda: len(receiver.at("/responses")) >= 3, timeout=30, what="three deliveries")
    seen = set()
    for headers, body, _ in receiver.at("/responses"):
        event = client.webhooks.unwrap(body, headers, secret=secret)
        seen.add((event.type, event.data.id))
    assert seen == {(f"response.{status}", response_id) for status, response_id in made.items()}
    failed = client.responses.retrieve(made["failed"])
    assert failed.error is not None and failed.error.message == "simulated error 400"
