"""``local.resume.waiting_events``: the webhook events a restored stack queues again, read from
the delivery records (``storage.webhooks.waiting_delivery``): those waiting for their next
attempt, each user's in order; never a delivered one, one given up on, or a sample event."""

from __future__ import annotations

from batchgw.deps import Deps
from batchgw.domain.webhooks import EventMessage
from batchgw.storage import aws
from batchgw.storage.webhooks import Delivery

from local.resume import waiting_events
from local.simulator import Simulator
from tests.integration.conftest import make_deps
from tests.support import FakeClock

NOW = 1_800_000_000.0


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
