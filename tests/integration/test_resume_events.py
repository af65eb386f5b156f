"""``local.resume.waiting_events``: the webhook events a restored stack queues again, read from
the delivery records (``storage.webhooks.waiting_delivery``): those waiting for their next
attempt (one queued and never tried too), each user's in order; never a delivered one, one
given up on, or a sample event."""

from __future__ import annotations

from batchgw.api import batches, webhooks
from batchgw.deps import Deps
from batchgw.domain.principal import Principal
from batchgw.domain.webhooks import EventMessage
from batchgw.run import ending
from batchgw.storage import aws
from batchgw.storage.webhooks import Delivery

from local.resume import waiting_events
from local.simulator import Simulator
from tests.integration.conftest import body_of, chat_request, make_deps
from tests.support import FakeClock

NOW = 1_800_000_000.0
ALICE = Principal(user_id="user-alice", role="internal", key_id="key_local_alice")


def _record(deps: Deps, user_id: str, delivery: Delivery) -> None:
    deps.webhooks.record(user_id, delivery.created_ms, delivery, now=NOW)


def test_only_deliveries_waiting_for_their_next_attempt_are_queued_again_in_order(
    aws_env: None, sim: Simulator
) -> None:
    deps = make_deps(sim, FakeClock(NOW))
    created = int(NOW * 1000)
    later_of_alice = Delivery(
        "evt_2", "batch.failed", "batch_2", created + 5, attempts=3, next_attempt_at=NOW + 60
    )
    first_of_alice = Delivery(
        "evt_1", "batch.completed", "batch_1", created, attempts=1, next_attempt_at=NOW + 5
    )
    of_bob = Delivery("evt_3", "batch.expired", "batch_3", created + 1, attempts=1, next_attempt_at=NOW + 1)
    for user_id, delivery in [("alice", later_of_alice), ("alice", first_of_alice), ("bob", of_bob)]:
        _record(deps, user_id, delivery)
    # Not waiting: delivered; given up (8 attempts, a 410, no webhook); and a sample event sent once.
    _record(
        deps,
        "alice",
        Delivery("evt_4", "batch.completed", "batch_4", created + 2, attempts=2, delivered_at=NOW),
    )
    _record(
        deps, "bob", Delivery("evt_5", "batch.completed", "batch_5", created + 3, attempts=8, last_status=500)
    )
    _record(
        deps, "bob", Delivery("evt_6", "batch.completed", "batch_6", created + 4, last_error="no webhook")
    )

    found = waiting_events(aws.get_clients().dynamodb, deps.settings.control_table)

    assert found == [
        EventMessage("evt_1", "alice", "batch_1", "batch.completed", created),
        EventMessage("evt_2", "alice", "batch_2", "batch.failed", created + 5),
        EventMessage("evt_3", "bob", "batch_3", "batch.expired", created + 1),
    ]


def test_an_event_queued_at_a_batch_end_and_never_tried_is_queued_again(
    aws_env: None, sim: Simulator
) -> None:
    deps = make_deps(sim, FakeClock(NOW), BATCH_WEBHOOK_ALLOW_PRIVATE_TARGETS="true")
    webhooks.put_webhook(deps, ALICE, {"url": "http://127.0.0.1:9/hook"})
    batch = batches.create_batch(deps, ALICE, body_of([chat_request("a", "hi")]))
    batches.cancel_batch(deps, ALICE, batch["id"])
    ending.finalize(deps, batch["id"])
    ending.finalize(deps, batch["id"])  # the step retried: still one event, its record unchanged

    found = waiting_events(aws.get_clients().dynamodb, deps.settings.control_table)

    (event,) = found
    assert (event.user_id, event.batch_id, event.type) == (ALICE.user_id, batch["id"], "batch.cancelled")
    (listed,) = webhooks.list_events(deps, ALICE)["data"]
    assert (listed["id"], listed["attempts"], listed["next_attempt_at"]) == (event.event_id, 0, int(NOW))
