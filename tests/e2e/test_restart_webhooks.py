"""A webhook event waiting for its next attempt is still delivered after the local stack
restarts (``local.resume`` queues it again from its delivery record), at that attempt's time.

Two stacks, one after the other, on one state directory of the test's own: the first's
receiver fails the event's first attempt; the stack stops while the event waits for its next
try; the second delivers it, with the same webhook-id, once the wait is over.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from local.run import LocalStack
from tests.e2e.conftest import Api, chat, stack_for
from tests.support import Receiver, wait_for

# Webhooks that give up on nothing soon, with private (loopback) receivers allowed.
RETRY_WAIT_SECONDS = 25  # the first retry's wait: longer than a stop and a restart take
ENV = {
    "BATCH_WEBHOOK_ALLOW_PRIVATE_TARGETS": "true",
    "BATCH_WEBHOOK_RETRY_SCHEDULE_SECONDS": f"{RETRY_WAIT_SECONDS},1,1,1,1,1,1",
    "BATCH_WEBHOOK_TIMEOUT_SECONDS": "5",
    "BATCH_MODEL_CONCURRENCY": "2",
}
CHECKPOINT_SECONDS = 1.0
HOOK = "/restart"
# An early arrival within this of its attempt's time is tried (``run.webhooks``), and the
# record keeps whole seconds: the second attempt comes no sooner than the wait less this.
EARLY_SECONDS = 2.0


def stack_on(tmp_path_factory: pytest.TempPathFactory, state_dir: Path, name: str) -> LocalStack:
    return stack_for(
        tmp_path_factory,
        f"restart-webhooks-{name}",
        ENV,
        workers=1,
        state_dir=state_dir,
        checkpoint_seconds=CHECKPOINT_SECONDS,
    )


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    running = Receiver()
    yield running
    running.stop()


def delivery(api: Api) -> dict[str, Any]:
    answer = api.http.get("/batch_webhook/events")
    assert answer.status_code == 200, answer.text
    (only,) = answer.json()["data"]
    return dict(only)


def test_a_webhook_event_waiting_for_its_next_attempt_is_delivered_after_a_restart(
    tmp_path_factory: pytest.TempPathFactory, receiver: Receiver
) -> None:
    state_dir = tmp_path_factory.mktemp("restart-webhooks-state")
    receiver.plans[HOOK] = [500]  # the first attempt fails, the next succeeds
    with stack_on(tmp_path_factory, state_dir, "first") as first:
        alice = Api(first, "sk-local-alice")
        assert alice.http.put("/batch_webhook", json={"url": receiver.url(HOOK)}).status_code == 200
        batch_id = alice.create([chat("a", "hi")]).json()["id"]
        assert alice.wait_final(batch_id)["status"] == "completed"
        wait_for(lambda: receiver.at(HOOK), timeout=60, what="the first attempt")
        waiting = wait_for(
            lambda: (d := delivery(alice))["next_attempt_at"] and d, timeout=30, what="the retry planned"
        )
        assert waiting["attempts"] == 1 and waiting["last_status"] == 500 and waiting["delivered_at"] is None
        stopped_at = time.time()
    assert stopped_at < waiting["next_attempt_at"]  # stopped while the event waited

    with stack_on(tmp_path_factory, state_dir, "second") as second:
        assert second.restored
        assert second.wait_resumed()["events"] == 1
        alice = Api(second, "sk-local-alice")
        delivered = wait_for(
            lambda: (d := delivery(alice))["delivered_at"] and d,
            timeout=RETRY_WAIT_SECONDS + 60,
            what="the event delivered after the restart",
        )
    assert delivered["attempts"] == 2 and delivered["last_status"] == 200
    (first_try, _, tried_at), (second_try, _, retried_at) = receiver.at(HOOK)
    assert first_try["webhook-id"] == second_try["webhook-id"] == delivered["id"]
    assert retried_at - tried_at >= RETRY_WAIT_SECONDS - EARLY_SECONDS  # at its time, not at once
