"""A worker keeps the messages of the chains it runs invisible while they run, all of an
invocation's messages in one call per tick (moto's SQS, real time: its visibility is)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import pytest
from batchgw.api import batches
from batchgw.deps import Deps
from batchgw.domain.chains import decode
from batchgw.domain.principal import Principal
from batchgw.run import lifecycle
from batchgw.run.chain import run_message
from batchgw.storage import aws

from local.simulator import Simulator
from tests.integration.conftest import body_of, chat_request, make_deps
from tests.support import FakeClock

pytestmark = pytest.mark.usefixtures("aws_env")

ALICE = Principal(user_id="user-alice", role="internal", key_id="key_local_alice")
# Seconds: a message is held for one lease, every third of one. Two, not one: moto's SQS
# keeps real time, and a tick may come two thirds of a lease late before a message shows
# (a busy 2-core CI stalled a 1 s lease's tick that long once).
LEASE = 2.0


def started(sim: Simulator, *, chains: int, latency_ms: int) -> tuple[Deps, str, list[dict[str, Any]]]:
    """A batch of three requests of ``latency_ms`` each, prepared into ``chains`` chains,
    whose messages were received as a worker receives them (visible again after one lease)."""
    deps = make_deps(sim, FakeClock(), BATCH_LEASE_SECONDS=str(LEASE), BATCH_MODEL_CONCURRENCY=str(chains))
    requests = [chat_request(f"r-{i}", f"[[sim latency_ms={latency_ms}]] hello") for i in range(3)]
    batch_id = batches.create_batch(deps, ALICE, body_of(requests))["id"]
    lifecycle.prepare(deps, batch_id)
    sqs = aws.get_clients().sqs
    received = sqs.receive_message(
        QueueUrl=deps.settings.work_queue_url, MaxNumberOfMessages=10, VisibilityTimeout=int(LEASE)
    )["Messages"]
    return deps, batch_id, list(received)


def test_an_invocations_messages_stay_invisible_while_their_chains_run_held_in_one_call_a_tick(
    sim: Simulator,
) -> None:
    # Each request takes 2.5 leases upstream: its chain outlives the messages' visibility.
    deps, _, received = started(sim, chains=3, latency_ms=int(2500 * LEASE))
    sqs, url = aws.get_clients().sqs, deps.settings.work_queue_url
    assert len(received) == 3  # one per chain

    held: list[int] = []
    hold_many = deps.queue.hold_many

    def counting(receipts: Sequence[str], seconds: float, source: str | None = None) -> list[str]:
        held.append(len(receipts))
        return hold_many(receipts, seconds, source)

    deps.queue.hold_many = counting  # type: ignore[method-assign]

    async def invocation() -> list[Any]:
        chains = [
            run_message(
                deps, decode(m["Body"]), owner="w", deadline=deps.clock() + 900, receipt=m["ReceiptHandle"]
            )
            for m in received
        ]
        running = asyncio.gather(*chains)
        await asyncio.sleep(2 * LEASE)  # past the visibility they were received with
        seen = await asyncio.to_thread(sqs.receive_message, QueueUrl=url, MaxNumberOfMessages=10)
        await running
        return list(seen.get("Messages", []))

    assert asyncio.run(invocation()) == []
    assert held and held[0] == 3 and max(held) == 3, held  # all three in each call
    assert len(held) >= 3  # a call every third of a lease while the chains ran
    # The receipts are still this worker's: the messages can be deleted with them.
    deleted = sqs.delete_message_batch(
        QueueUrl=url,
        Entries=[{"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(received)],
    )
    assert not deleted.get("Failed")


def test_a_run_whose_message_another_run_took_over_stops_at_its_next_request_handing_nothing_on(
    sim: Simulator,
) -> None:
    deps, batch_id, [message] = started(sim, chains=1, latency_ms=1500)
    sqs, url = aws.get_clients().sqs, deps.settings.work_queue_url
    sent: list[Any] = []
    deps.queue.send = lambda message, delay_seconds=0: sent.append(message)  # type: ignore[method-assign]

    async def invocation() -> None:
        running = asyncio.ensure_future(
            run_message(
                deps,
                decode(message["Body"]),
                owner="w",
                deadline=deps.clock() + 900,
                receipt=message["ReceiptHandle"],
            )
        )
        # Its first request is running (a deadline, not a guess: a loaded CI took over 0.2 s).
        deadline = asyncio.get_running_loop().time() + 30
        while sim.stats()["models"].get("sim-chat", {}).get("in_flight") != 1:
            assert asyncio.get_running_loop().time() < deadline, "the first request never reached the model"
            await asyncio.sleep(0.02)
        # Another run received the message again, ran the chain on and deleted it.
        await asyncio.to_thread(sqs.delete_message, QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])
        await running

    asyncio.run(invocation())
    assert sent == []  # the chain is the other run's to hand on
    assert sim.stats()["models"]["sim-chat"]["requests"] == 1  # the request it had started ended
    statuses = [r.status.value for r in deps.requests.page(batch_id, after_index=-1, limit=10)[0]]
    assert statuses == ["succeeded", "queued", "queued"]
