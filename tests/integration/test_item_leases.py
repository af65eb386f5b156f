"""The request state machine on moto: leases, fencing, and duplicate deliveries."""

from __future__ import annotations

import asyncio
import secrets
import threading
import time
from decimal import Decimal

import pytest
from batchgw.api import batches
from batchgw.api import results as results_api
from batchgw.deps import Deps
from batchgw.domain import codec
from batchgw.domain.batch import Tally
from batchgw.domain.chains import RequestMessage, WorkMessage, decode
from batchgw.domain.errors import Conflict, NotFound
from batchgw.domain.outcome import Outcome
from batchgw.domain.principal import Principal
from batchgw.domain.request import RequestEnd
from batchgw.domain.states import RequestStatus
from batchgw.run import attempt, ending, lifecycle
from batchgw.run.chain import run_message
from batchgw.storage import aws

from local.simulator import Simulator
from tests.integration.conftest import body_of, chat_request, make_deps, receive_all
from tests.support import FakeClock, spec_counts, wait_for

pytestmark = pytest.mark.usefixtures("aws_env")

ALICE = Principal(user_id="user-alice", role="internal", key_id="key_local_alice")


def _prepared_batch(deps: Deps, n: int) -> str:
    batch = batches.create_batch(
        deps, ALICE, body_of([chat_request(f"r-{i}", f"hello {i}") for i in range(n)])
    )
    lifecycle.prepare(deps, batch["id"])
    return str(batch["id"])


def _run(deps: Deps, message: WorkMessage, owner: str) -> None:
    asyncio.run(run_message(deps, message, owner=owner, deadline=deps.clock() + 900))


def test_two_workers_racing_for_one_item_only_one_claims_it(sim: Simulator) -> None:
    deps = make_deps(sim, FakeClock())
    batch_id = _prepared_batch(deps, 1)
    results: list[str] = []
    barrier = threading.Barrier(8)

    def claim(owner: str) -> None:
        barrier.wait()
        results.append(deps.requests.claim(batch_id, 0, owner, deps.clock(), 60).kind)

    threads = [threading.Thread(target=claim, args=(f"w{i}",)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(results) == ["claimed"] + ["held"] * 7


def test_a_stale_workers_write_is_refused_by_the_fencing_epoch(sim: Simulator) -> None:
    clock = FakeClock()
    deps = make_deps(sim, clock)
    batch_id = _prepared_batch(deps, 1)
    first = deps.requests.claim(batch_id, 0, "old", clock(), 60)
    assert first.kind == "claimed"
    clock.advance(61)  # the old worker's lease runs out; a new worker takes the item over
    second = deps.requests.claim(batch_id, 0, "new", clock(), 60)
    assert second.kind == "claimed" and second.took_over
    assert second.request is not None and first.request is not None
    assert second.request.epoch == first.request.epoch + 1

    stale = deps.requests.record_end(
        first.request,
        shard=0,
        end=RequestEnd(RequestStatus.SUCCEEDED, ended_at=clock()),
        tally=Tally(completed=1),
    )
    assert stale == "lease_lost"
    fresh = deps.requests.record_end(
        second.request,
        shard=0,
        end=RequestEnd(RequestStatus.SUCCEEDED, ended_at=clock()),
        tally=Tally(completed=1, cost_unknown=1),
    )
    assert fresh == "shard_finished"
    job = deps.batches.get(batch_id)
    assert job is not None
    assert job.counts.completed == 1 and job.counts.left == 0
    assert job.counts.cost_unknown_attempts == 1


def test_a_stale_workers_large_answer_does_not_replace_the_answer_recorded(sim: Simulator) -> None:
    """An answer too large for the request's record goes to S3 before the end is written:
    a worker whose lease was taken over stores its own there, under its own epoch, and the
    answer the request ended with stays the one its results read."""
    clock = FakeClock()
    deps = make_deps(sim, clock)
    batch_id = _prepared_batch(deps, 1)
    batch = deps.batches.get_record(batch_id)
    assert batch is not None
    old = deps.requests.claim(batch_id, 0, "old", clock(), 60).request
    clock.advance(61)
    new = deps.requests.claim(batch_id, 0, "new", clock(), 60).request
    assert old is not None and new is not None

    def answered(text: str) -> Outcome:
        content = secrets.token_urlsafe(400_000)  # past the record's share, even compressed
        body = {"id": text, "object": "chat.completion", "choices": [{"message": {"content": content}}]}
        return Outcome(kind="success", status_code=200, body=body, body_bytes=len(content), route="sim-chat")

    for held, text in ((new, "n"), (old, "o")):  # the new worker ends it; the old one comes late
        asyncio.run(attempt.settle(deps, batch, held, answered(text), started=clock()))

    ended = deps.requests.get(batch_id, 0)
    assert ended is not None and ended.status is RequestStatus.SUCCEEDED and ended.response_ref
    assert codec.unpack(deps.blobs.get(ended.response_ref))["id"] == "n"


def test_the_same_worker_with_an_old_epoch_cannot_write(sim: Simulator) -> None:
    clock = FakeClock()
    deps = make_deps(sim, clock)
    batch_id = _prepared_batch(deps, 1)
    first = deps.requests.claim(batch_id, 0, "w", clock(), 60)
    clock.advance(61)
    again = deps.requests.claim(batch_id, 0, "w", clock(), 60)
    assert first.request is not None and again.request is not None
    stale = deps.requests.record_end(
        first.request,
        shard=0,
        end=RequestEnd(RequestStatus.SUCCEEDED, ended_at=clock()),
        tally=Tally(completed=1),
    )
    assert stale == "lease_lost"


def test_a_duplicated_chain_message_gives_one_result_per_request(sim: Simulator) -> None:
    deps = make_deps(sim, FakeClock(), BATCH_MODEL_CONCURRENCY=4)
    batch_id = _prepared_batch(deps, 10)
    messages = [decode(m["Body"]) for m in receive_all(deps)]
    assert len(messages) == 4  # chains, not requests

    # Every message delivered twice: once concurrently with its twin, once again after.
    async def both(message: WorkMessage) -> None:
        await asyncio.gather(
            run_message(deps, message, owner="a", deadline=deps.clock() + 900),
            run_message(deps, message, owner="b", deadline=deps.clock() + 900),
        )

    for message in messages:
        asyncio.run(both(message))
    for message in messages:
        _run(deps, message, "c")
    # A twin that stopped early leaves its chain to the other; finish any leftovers.
    for message in messages:
        _run(deps, message, "d")

    job = deps.batches.get(batch_id)
    assert job is not None
    assert (job.counts.completed, job.counts.failed, job.counts.left) == (10, 0, 0)
    page = results_api.results_page(deps, ALICE, batch_id, {})
    assert [r["status"] for r in page["data"]] == ["completed"] * 10
    stats = sim.stats()["models"]["sim-chat"]
    assert stats["requests"] == 10  # no request ran twice


def test_a_batch_runs_to_completed_with_results_in_submission_order(sim: Simulator) -> None:
    deps = make_deps(sim, FakeClock(), BATCH_MODEL_CONCURRENCY=3)
    batch_id = _prepared_batch(deps, 7)
    for message in receive_all(deps):
        _run(deps, decode(message["Body"]), "w")
    woken = deps.workflow.woken  # type: ignore[attr-defined]
    assert woken == []  # nothing parked yet: the park step finds the batch done itself
    lifecycle.park(deps, batch_id, "token-1")
    assert woken == [("token-1", {"next": "finalize", "wait_seconds": 0})]
    ended = ending.finalize(deps, batch_id)
    assert ended["status"] == "completed"
    assert ending.finalize(deps, batch_id) == ended  # idempotent

    batch = batches.get_batch(deps, ALICE, batch_id)
    assert batch["status"] == "completed"
    assert spec_counts(batch) == {"total": 7, "completed": 7, "failed": 0}
    assert batch["usage"]["input_tokens"] > 0 and batch["cost_usd"] > 0
    page = results_api.results_page(deps, ALICE, batch_id, {"limit": ["5"]})
    assert [r["custom_id"] for r in page["data"]] == [f"r-{i}" for i in range(5)]
    assert page["has_more"] is True
    rest = results_api.results_page(deps, ALICE, batch_id, {"after": [page["last_id"]]})
    assert [r["custom_id"] for r in rest["data"]] == ["r-5", "r-6"]
    body = rest["data"][1]["response"]["body"]
    assert "hello 6" in body["choices"][0]["message"]["content"]
    assert Decimal(str(batch["cost_usd"])) > 0


def test_the_last_item_wakes_a_parked_workflow(sim: Simulator) -> None:
    deps = make_deps(sim, FakeClock(), BATCH_MODEL_CONCURRENCY=2)
    batch_id = _prepared_batch(deps, 5)
    lifecycle.park(deps, batch_id, "token-2")
    woken = deps.workflow.woken  # type: ignore[attr-defined]
    assert woken == []
    for message in receive_all(deps):
        _run(deps, decode(message["Body"]), "w")
    assert woken == [("token-2", {"next": "finalize", "wait_seconds": 0})]


def test_once_a_batch_fills_its_result_storage_the_rest_fail_without_running(sim: Simulator) -> None:
    deps = make_deps(sim, FakeClock(), BATCH_MAX_RESULTS_MB_PER_BATCH="0.004")  # 4,194 bytes
    requests = [chat_request(f"s-{i}", secrets.token_hex(1500)) for i in range(5)]  # ~1.6 KB stored each
    batch = batches.create_batch(deps, ALICE, body_of(requests))
    lifecycle.prepare(deps, batch["id"])
    for message in receive_all(deps):  # five chains of one request each, run in order
        _run(deps, decode(message["Body"]), "w")
    results = results_api.results_page(deps, ALICE, batch["id"], {})["data"]
    assert [r["status"] for r in results] == ["completed", "completed", "failed", "failed", "failed"]
    assert {r["error"]["code"] for r in results[2:]} == {"result_too_large"}
    assert sim.stats()["models"]["sim-chat"]["requests"] == 3  # the last two never ran
    job = deps.batches.get(batch["id"])
    assert job is not None and (job.counts.completed, job.counts.failed) == (2, 3)


def test_failures_in_a_row_pause_the_model_for_every_process(sim: Simulator) -> None:
    clock = FakeClock()
    deps = make_deps(
        sim,
        clock,
        BATCH_MODEL_CONCURRENCY="1",
        BATCH_MODEL_PAUSE_AFTER_FAILURES="3",
        BATCH_MODEL_PAUSE_SECONDS="60",
    )
    batch = batches.create_batch(
        deps, ALICE, body_of([chat_request(f"f-{i}", "[[sim status=500]]") for i in range(5)])
    )
    lifecycle.prepare(deps, batch["id"])
    [chain] = [decode(m["Body"]) for m in receive_all(deps)]
    _run(deps, chain, "w")
    assert sim.stats()["models"]["sim-chat"]["requests"] == 3  # the third failure paused the model
    assert deps.slots.holders("sim-chat") == {}  # the chain let its slot go
    grant = deps.slots.acquire("sim-chat", "other-process", cap=1, now=clock(), lease_seconds=30)
    assert not grant.granted and grant.paused_until == clock() + 60
    # Three retries wait, and the chain waits out the pause to resume where it stopped.
    attributes = aws.get_clients().sqs.get_queue_attributes(
        QueueUrl=deps.settings.work_queue_url, AttributeNames=["ApproximateNumberOfMessagesDelayed"]
    )["Attributes"]
    assert attributes["ApproximateNumberOfMessagesDelayed"] == "4"


def test_a_retry_message_that_arrives_before_its_time_is_delayed_again(sim: Simulator) -> None:
    clock = FakeClock()
    deps = make_deps(sim, clock)
    batch_id = _prepared_batch(deps, 1)
    receive_all(deps)  # the chain is not needed here
    claim = deps.requests.claim(batch_id, 0, "w", clock(), 60)
    assert claim.request is not None
    # A model_queued wait of an hour: longer than SQS's 15-minute delay.
    deps.requests.schedule_retry(
        claim.request,
        next_at=clock() + 3600,
        error={"code": "model_queued", "message": "queued", "status": 503},
        attempt_cost_nano=0,
        uses_attempt=False,
    )
    clock.advance(900)  # the delayed message arrives, 45 minutes early
    _run(deps, RequestMessage(batch_id, 0), "x")
    request = deps.requests.get(batch_id, 0)
    assert request is not None and request.status == "retry_wait"  # not run early
    assert sim.stats()["models"]["sim-chat"]["requests"] == 0
    attributes = aws.get_clients().sqs.get_queue_attributes(
        QueueUrl=deps.settings.work_queue_url, AttributeNames=["ApproximateNumberOfMessagesDelayed"]
    )["Attributes"]
    assert attributes["ApproximateNumberOfMessagesDelayed"] == "1"  # sent again for the rest of the wait


def test_a_stale_run_does_not_block_delete_but_a_live_one_does(sim: Simulator) -> None:
    clock = FakeClock()
    deps = make_deps(sim, clock)
    batch_id = _prepared_batch(deps, 2)
    deps.batches.mark_run(batch_id, "dead-worker", until=clock() + 60)  # its chain's mark
    deps.requests.claim(batch_id, 0, "dead-worker", clock(), 60)
    with pytest.raises(Conflict):
        batches.delete_batch(deps, ALICE, batch_id)
    clock.advance(61)
    assert batches.delete_batch(deps, ALICE, batch_id) == {
        "id": batch_id,
        "object": "batch.deleted",
        "deleted": True,
    }
    with pytest.raises(NotFound):
        batches.get_batch(deps, ALICE, batch_id)
    lifecycle.purge(deps, batch_id)
    assert deps.requests.get(batch_id, 0) is None and deps.batches.shards(batch_id) == []


def test_a_chain_runs_its_own_retries_with_its_slot(sim: Simulator) -> None:
    deps = make_deps(
        sim,
        time.time,
        BATCH_MODEL_CONCURRENCY="1",
        BATCH_RETRY_BASE_SECONDS="0.2",
        BATCH_RETRY_MAX_SECONDS="0.4",
    )
    requests = [chat_request("r-0", "flaky [[sim status=503 fail=2]]")] + [
        chat_request(f"r-{i}", f"fine {i}") for i in range(1, 4)
    ]
    batch = batches.create_batch(deps, ALICE, body_of(requests))
    lifecycle.prepare(deps, batch["id"])
    [chain] = [decode(m["Body"]) for m in receive_all(deps)]
    _run(deps, chain, "w")  # one message: the chain ran everything, its retries included
    job = deps.batches.get(batch["id"])
    assert job is not None and (job.counts.completed, job.counts.left) == (4, 0)
    assert sim.stats()["models"]["sim-chat"]["requests"] == 6
    assert receive_all(deps) == []  # no message was needed for the retries


def test_a_chain_waiting_seconds_for_a_retry_lets_its_slot_go_meanwhile(sim: Simulator) -> None:
    deps = make_deps(
        sim,
        time.time,
        BATCH_MODEL_CONCURRENCY="1",
        BATCH_RETRY_BASE_SECONDS="4",  # jittered on top: the retry waits 4 to 4.8 s
        BATCH_RETRY_MAX_SECONDS="4",
    )
    requests = [chat_request("r-0", "flaky [[sim status=503 fail=1]]"), chat_request("r-1", "fine")]
    batch = batches.create_batch(deps, ALICE, body_of(requests))
    lifecycle.prepare(deps, batch["id"])
    [chain] = [decode(m["Body"]) for m in receive_all(deps)]
    runner = threading.Thread(target=_run, args=(deps, chain, "w"))
    runner.start()
    # Both requests answered, the first to be tried again: the model's one slot is free for
    # another chain's requests while the retry waits.
    wait_for(
        lambda: sim.stats()["models"]["sim-chat"]["requests"] == 2 and deps.slots.holders("sim-chat") == {},
        timeout=10,
        what="the slot to be let go while the retry waits",
    )
    runner.join(timeout=30)
    assert not runner.is_alive()
    job = deps.batches.get(batch["id"])
    assert job is not None and (job.counts.completed, job.counts.left) == (2, 0)
    assert sim.stats()["models"]["sim-chat"]["requests"] == 3  # the retry took a slot again when due
    assert receive_all(deps) == []  # no message was needed for it


def test_a_chain_stopped_by_a_pause_hands_on_its_waiting_retries(sim: Simulator) -> None:
    deps = make_deps(
        sim,
        time.time,
        BATCH_MODEL_CONCURRENCY="1",
        BATCH_RETRY_BASE_SECONDS="0.1",
        BATCH_RETRY_MAX_SECONDS="0.2",
        BATCH_MODEL_PAUSE_AFTER_FAILURES="1",
        BATCH_MODEL_PAUSE_SECONDS="1",
    )
    # The last request fails once and pauses the model: the chain, at the end of its walk,
    # waits for the retry, finds the model paused when it is due, and must hand it on.
    requests = [
        chat_request("p-0", "ok 0"),
        chat_request("p-1", "ok 1"),
        chat_request("p-2", "[[sim status=503 fail=1]] 2"),
    ]
    batch = batches.create_batch(deps, ALICE, body_of(requests))
    lifecycle.prepare(deps, batch["id"])
    sqs = aws.get_clients().sqs

    def step() -> bool:
        job = deps.batches.get(batch["id"])
        assert job is not None
        if job.counts.left == 0:
            return True
        resp = sqs.receive_message(
            QueueUrl=deps.settings.work_queue_url,
            MaxNumberOfMessages=10,
            WaitTimeSeconds=1,
            VisibilityTimeout=60,
        )
        for message in resp.get("Messages", []):
            _run(deps, decode(message["Body"]), "w")
            sqs.delete_message(QueueUrl=deps.settings.work_queue_url, ReceiptHandle=message["ReceiptHandle"])
        return False

    wait_for(step, timeout=60, interval=0, what="every request to end")  # nothing left waiting for good
    assert sim.stats()["models"]["sim-chat"]["requests"] == 4  # three requests, the last one twice
