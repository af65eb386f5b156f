"""Every batch ends, whatever fails (moto, the injected clock): stops racing retries, the
reconciler mending lost work, and writes whose answer was lost."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import pytest
from batchgw.api import batches
from batchgw.api import results as results_api
from batchgw.deps import Deps
from batchgw.domain.batch import Tally, shard_totals
from batchgw.domain.chains import ChainMessage, RequestMessage, WorkMessage, decode
from batchgw.domain.decisions import Verdict, verdict
from batchgw.domain.errors import ServiceUnavailable, StorageError
from batchgw.domain.outcome import Outcome
from batchgw.domain.principal import Principal
from batchgw.domain.request import RequestEnd, RequestRecord
from batchgw.domain.states import UNFINISHED_STATUSES, RequestStatus
from batchgw.run import attempt, ending, lifecycle, reconcile
from batchgw.run.chain import run_message
from batchgw.storage.requests import ClaimKind, RequestStore
from batchgw.upstream.client import classify

from local.simulator import Simulator
from tests.integration.conftest import FakeWorkflow, body_of, chat_request, make_deps, receive_all
from tests.integration.test_console_batches import call
from tests.support import FakeClock, spec_counts

pytestmark = pytest.mark.usefixtures("aws_env")

ALICE = Principal(user_id="user-alice", role="internal", key_id="key_local_alice")
# A stall (no request ending) of lease + upstream timeout + two slot waits: 94 s.
SHORT_STALL = {"BATCH_LEASE_SECONDS": "60", "BATCH_UPSTREAM_TIMEOUT_SECONDS": "30"}
RETRYABLE = {
    "429": classify("/v1/chat/completions", 429, b'{"error": {"message": "slow down"}}', {}),
    "503": classify("/v1/chat/completions", 503, b'{"error": {"message": "busy"}}', {}),
    "model_queued": classify(
        "/v1/chat/completions", 503, b'{"error": {"message": "warming up", "code": "model_queued"}}', {}
    ),
}


def prepared(deps: Deps, n: int, text: str = "hello") -> str:
    batch = batches.create_batch(
        deps, ALICE, body_of([chat_request(f"r-{i}", f"{text} {i}") for i in range(n)])
    )
    lifecycle.prepare(deps, batch["id"])
    return str(batch["id"])


def run(deps: Deps, message: WorkMessage, owner: str = "w") -> None:
    asyncio.run(run_message(deps, message, owner=owner, deadline=deps.clock() + 900))


def settle(deps: Deps, batch_id: str, held: RequestRecord, outcome: Outcome) -> attempt.Settled:
    batch = deps.batches.get_record(batch_id)
    assert batch is not None
    return asyncio.run(attempt.settle(deps, batch, held, outcome, started=deps.clock()))


def claim(deps: Deps, batch_id: str, index: int, owner: str = "w") -> RequestRecord:
    claimed = deps.requests.claim(batch_id, index, owner, deps.clock(), 60)
    assert claimed.kind is ClaimKind.CLAIMED and claimed.request is not None
    return claimed.request


def statuses(deps: Deps, batch_id: str) -> list[tuple[str, str | None]]:
    page = results_api.results_page(deps, ALICE, batch_id, {})
    return [(r["status"], r["error"] and r["error"]["code"]) for r in page["data"]]


def finish(deps: Deps, batch_id: str) -> dict[str, Any]:
    """Park (finding the batch done) and finalize, as the workflow would."""
    lifecycle.park(deps, batch_id, "token")
    assert deps.workflow.woken[-1] == ("token", {"next": "finalize", "wait_seconds": 0})  # type: ignore[attr-defined]
    ending.finalize(deps, batch_id)
    return batches.get_batch(deps, ALICE, batch_id)


# --- a stop racing a request that is with the upstream ------------------------------------------


@pytest.mark.parametrize("answer", sorted(RETRYABLE))
def test_a_retry_that_finds_its_batch_cancelled_ends_the_request_cancelled(
    sim: Simulator, answer: str
) -> None:
    deps = make_deps(sim, FakeClock())
    batch_id = prepared(deps, 3)
    receive_all(deps)
    held = claim(deps, batch_id, 0)  # with the upstream while the cancel comes
    batches.cancel_batch(deps, ALICE, batch_id)
    assert lifecycle.cancel(deps, batch_id)["next"] == "park"  # the running request is left to finish

    settled = settle(deps, batch_id, held, RETRYABLE[answer])
    assert settled.retry_at is None  # no retry was scheduled after the stop
    assert statuses(deps, batch_id) == [("cancelled", "batch_cancelled")] * 3
    done = finish(deps, batch_id)
    assert done["status"] == "cancelled"
    assert spec_counts(done) == {"total": 3, "completed": 0, "failed": 0}


def test_a_retry_that_finds_the_window_closed_fails_with_its_last_error(sim: Simulator) -> None:
    clock = FakeClock()
    deps = make_deps(sim, clock, BATCH_COMPLETION_WINDOW_HOURS="1")
    batch_id = prepared(deps, 2)
    receive_all(deps)
    held = claim(deps, batch_id, 0)
    clock.advance(3600)
    assert reconcile.reconcile(deps, batch_id)["next"] == "expire"
    lifecycle.expire(deps, batch_id)

    settle(deps, batch_id, held, RETRYABLE["503"])
    assert statuses(deps, batch_id) == [("failed", "service_unavailable"), ("expired", "batch_expired")]
    done = finish(deps, batch_id)
    assert done["status"] == "expired" and done["request_counts"]["failed"] == 2


@pytest.mark.parametrize(
    ("status", "code", "tries"),
    [
        (425, "upstream_error", 3),
        (408, "upstream_error", 3),
        (429, "rate_limited", 3),
        (500, "upstream_error", 3),
        (503, "service_unavailable", 3),
        (401, "forbidden", 1),  # not retried: the provider refused the gateway's credentials
    ],
)
def test_an_upstream_status_retried_until_the_window_closes_ends_with_its_last_error_and_spec_code(
    sim: Simulator, monkeypatch: pytest.MonkeyPatch, status: int, code: str, tries: int
) -> None:
    """Through the HTTP API: a 425 or 408 retried until the next try would start after the
    window ends as a 429 or 5xx does, with the last error it got, never ``invalid_request``
    (the model rejecting it) nor ``timeout`` (a 504's, not retried); a 401 fails at once."""
    clock = FakeClock()
    deps = make_deps(sim, clock, BATCH_COMPLETION_WINDOW_HOURS="0.01")  # 36 s
    created, batch = call(
        deps,
        monkeypatch,
        "POST",
        "/v1/batches",
        body={"requests": [chat_request("r", f"[[sim status={status}]] hi")]},
    )
    assert created == 200, batch
    lifecycle.prepare(deps, batch["id"])
    receive_all(deps)
    # Tries at 0 s, 6 s and 18 s (5 s, then 10 s, jittered by at most 20 %); the next would
    # start at 38 s or later, after the window.
    for advance in (6, 12, 0):
        run(deps, RequestMessage(batch["id"], 0))
        clock.advance(advance)
    answered, page = call(deps, monkeypatch, "GET", f"/v1/batches/{batch['id']}/results")
    assert answered == 200
    [result] = page["data"]
    assert result["status"] == "failed" and result["response"] is None
    assert (result["error"]["code"], result["error"]["status"]) == (code, status)
    assert sim.stats()["models"]["sim-chat"]["requests"] == tries


# --- the reconciler -------------------------------------------------------------------------------


def test_the_reconciler_ends_the_abandoned_requests_of_a_cancelled_batch(sim: Simulator) -> None:
    clock = FakeClock()
    deps = make_deps(sim, clock)
    batch_id = prepared(deps, 2)
    receive_all(deps)
    claim(deps, batch_id, 0, owner="a worker that dies")
    batches.cancel_batch(deps, ALICE, batch_id)
    lifecycle.cancel(deps, batch_id)
    assert reconcile.reconcile(deps, batch_id)["next"] == "park"  # its lease is still live
    clock.advance(61)
    assert reconcile.reconcile(deps, batch_id)["next"] == "finalize"
    assert statuses(deps, batch_id) == [("cancelled", "batch_cancelled")] * 2
    ending.finalize(deps, batch_id)
    done = batches.get_batch(deps, ALICE, batch_id)
    assert done["status"] == "cancelled" and done["cost_unknown_attempts"] == 1  # the lost attempt


def test_a_cancelled_batch_whose_worker_died_is_looked_at_again_once_its_lease_runs_out(
    sim: Simulator,
) -> None:
    clock = FakeClock()
    deps = make_deps(sim, clock, BATCH_RECONCILE_SECONDS="300")
    batch_id = prepared(deps, 2)
    receive_all(deps)
    claim(deps, batch_id, 0, owner="a worker that dies")  # leased for 60 s
    batches.cancel_batch(deps, ALICE, batch_id)
    # Not a whole reconcile period (300 s): a second after the running request's lease ends.
    assert lifecycle.cancel(deps, batch_id) == {"next": "park", "wait_seconds": 61}
    clock.advance(30)
    assert reconcile.reconcile(deps, batch_id) == {"next": "park", "wait_seconds": 31}
    clock.advance(31)
    assert reconcile.reconcile(deps, batch_id)["next"] == "finalize"
    assert statuses(deps, batch_id) == [("cancelled", "batch_cancelled")] * 2


def test_the_reconciler_re_sends_lost_chains_as_a_new_generation(sim: Simulator) -> None:
    clock = FakeClock()
    deps = make_deps(sim, clock, BATCH_MODEL_CONCURRENCY="2", **SHORT_STALL)
    batch_id = prepared(deps, 6)
    lost = [decode(m["Body"]) for m in receive_all(deps)]  # every chain message lost
    assert reconcile.reconcile(deps, batch_id)["next"] == "park"  # the first look only notes the count
    assert receive_all(deps) == []
    clock.advance(60)
    assert reconcile.reconcile(deps, batch_id)["next"] == "park"  # not stalled yet
    assert receive_all(deps) == []
    clock.advance(40)
    assert reconcile.reconcile(deps, batch_id)["next"] == "park"  # stalled: send the work again
    resent = [decode(m["Body"]) for m in receive_all(deps)]
    assert sorted((m.chain, m.next_index, m.generation) for m in resent if isinstance(m, ChainMessage)) == [
        (0, 0, 1),
        (1, 1, 1),
    ]
    for message in lost:  # a message of the old generation turning up after all: dropped
        run(deps, message, owner="late")
    assert sim.stats()["models"]["sim-chat"]["requests"] == 0
    for message in resent:
        run(deps, message)
    assert reconcile.reconcile(deps, batch_id)["next"] == "finalize"
    assert sim.stats()["models"]["sim-chat"]["requests"] == 6


def test_the_reconciler_re_sends_an_abandoned_request_and_an_overdue_retry(sim: Simulator) -> None:
    clock = FakeClock()
    deps = make_deps(sim, clock, **SHORT_STALL)
    batch_id = prepared(deps, 2)
    receive_all(deps)
    claim(deps, batch_id, 0, owner="dead")  # its worker dies
    waiting = claim(deps, batch_id, 1, owner="gone")  # its retry message is lost
    deps.requests.schedule_retry(
        waiting, next_at=clock() + 5, error={"code": "rate_limited"}, attempt_cost_nano=0, uses_attempt=True
    )
    reconcile.reconcile(deps, batch_id)
    clock.advance(1000)
    reconcile.reconcile(deps, batch_id)
    resent = sorted(
        m.index for m in map(decode, (m["Body"] for m in receive_all(deps))) if isinstance(m, RequestMessage)
    )
    assert resent == [0, 1]
    for index in resent:
        run(deps, RequestMessage(batch_id, index))
    assert statuses(deps, batch_id) == [("completed", None)] * 2
    assert batches.get_batch(deps, ALICE, batch_id)["cost_unknown_attempts"] == 1  # the dead worker's try


def test_a_batch_without_a_window_is_reconciled_and_its_ttl_moves_on(sim: Simulator) -> None:
    clock = FakeClock()
    deps = make_deps(sim, clock, BATCH_COMPLETION_WINDOW_HOURS="0", BATCH_RECONCILE_SECONDS="60")
    batch_id = prepared(deps, 1)
    first = deps.batches.get_record(batch_id)
    assert first is not None and first.expires_at is None and first.ttl is not None
    clock.advance(3600)
    step = reconcile.reconcile(deps, batch_id)
    assert step == {"next": "park", "wait_seconds": 60}
    later = deps.batches.get_record(batch_id)
    assert later is not None and later.ttl is not None and later.ttl >= first.ttl + 3600


def test_a_reconcile_left_behind_leaves_the_ttl_of_a_batch_that_ended_since(
    sim: Simulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = FakeClock()
    deps = make_deps(sim, clock, BATCH_COMPLETION_WINDOW_HOURS="0", BATCH_RECONCILE_SECONDS="60")
    batch_id = prepared(deps, 2)
    running = deps.batches.get(batch_id)  # what a reconcile the workflow lost track of read
    for message in receive_all(deps):
        run(deps, decode(message["Body"]), "w")
    ending.finalize(deps, batch_id)
    ended = deps.batches.get_record(batch_id)
    assert ended is not None and ended.status.value == "completed" and ended.ttl is not None

    clock.advance(3600)
    monkeypatch.setattr(deps.batches, "get", lambda _: running)
    routed = reconcile.reconcile(deps, batch_id)
    after = deps.batches.get_record(batch_id)
    assert after is not None and (after.status, after.ttl) == (ended.status, ended.ttl)
    assert routed["next"] == "finalize"  # (a no-op for an ended batch)


def test_a_shard_counting_a_missing_request_is_corrected_and_the_batch_ends(sim: Simulator) -> None:
    clock = FakeClock()
    deps = make_deps(sim, clock, **SHORT_STALL)
    batch_id = prepared(deps, 2)
    for message in receive_all(deps):
        run(deps, decode(message["Body"]))
    deps.requests._table.client.delete_item(  # a request lost from the table, counted as left
        TableName=deps.settings.requests_table, Key={"pk": {"S": batch_id}, "idx": {"N": "1"}}
    )
    shard = deps.batches.shards(batch_id)[1]
    deps.batches.correct_left(batch_id, 1, observed=shard.left, actual=1)
    reconcile.reconcile(deps, batch_id)
    clock.advance(300)
    assert reconcile.reconcile(deps, batch_id)["next"] == "finalize"


def test_a_failed_workflow_step_fails_the_batch_visibly_and_waits_for_what_still_runs(sim: Simulator) -> None:
    clock = FakeClock()
    deps = make_deps(sim, clock)
    batch_id = prepared(deps, 3)
    receive_all(deps)
    claim(deps, batch_id, 0)
    failure = "FlexibleChecksumError"
    detail = {"errorMessage": "Expected checksum nA9nMw== did not match", "errorType": failure}
    error = {"Error": failure, "Cause": json.dumps(detail)}
    with pytest.raises(ending.StillRunning):  # the workflow calls the step again
        ending.fail(deps, batch_id, ending.cause_of(error))
    batch = batches.get_batch(deps, ALICE, batch_id)  # stopped, not ended while a request runs
    assert batch["status"] == "in_progress" and batch["failed_at"] is None
    # The user reads a stable code and what to do; the exception stays in the log.
    assert batch["error"]["code"] == "internal_error" and "Retry the batch" in batch["error"]["message"]
    message = batch["error"]["message"]
    assert "FlexibleChecksumError" not in message and "nA9nMw" not in message and "checksum" not in message
    assert statuses(deps, batch_id) == [
        ("in_progress", None),
        ("failed", "batch_failed"),
        ("failed", "batch_failed"),
    ]
    assert verdict(deps.batches.get_record(batch_id), clock()) is Verdict.OWNER_FAILED  # nothing starts

    clock.advance(61)  # the running request's lease ran out: its worker is gone
    ended = ending.fail(deps, batch_id, ending.cause_of(error))
    assert ended["status"] == "failed" and ended["purge_at"]
    assert statuses(deps, batch_id) == [("failed", "batch_failed")] * 3
    batch = batches.get_batch(deps, ALICE, batch_id)
    assert batch["status"] == "failed" and batch["failed_at"] is not None
    assert spec_counts(batch) == {"total": 3, "completed": 0, "failed": 3}


def test_a_request_still_running_when_its_batch_failed_is_ended_by_its_worker_and_counted(
    sim: Simulator,
) -> None:
    deps = make_deps(sim, FakeClock())
    batch_id = prepared(deps, 2)
    receive_all(deps)
    held = claim(deps, batch_id, 0)
    with pytest.raises(ending.StillRunning):
        ending.fail(deps, batch_id, "a step failed")
    answer = b'{"id": "chatcmpl-1", "choices": [], "usage": {"prompt_tokens": 1, "completion_tokens": 1}}'
    settle(deps, batch_id, held, classify("/v1/chat/completions", 200, answer, {}))  # its answer came
    assert ending.fail(deps, batch_id, "a step failed")["status"] == "failed"
    assert statuses(deps, batch_id) == [("completed", None), ("failed", "batch_failed")]
    counts = spec_counts(batches.get_batch(deps, ALICE, batch_id))
    assert counts == {"total": 2, "completed": 1, "failed": 1}


class StepDied(BaseException):
    """The lifecycle function died (as ``local.crashes`` makes it in chaos runs)."""


def test_a_fail_step_that_died_midway_is_finished_when_the_workflow_calls_it_again(
    sim: Simulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    deps = make_deps(sim, FakeClock())
    batch_id = prepared(deps, 5)
    receive_all(deps)

    def died(*_: Any, **__: Any) -> None:
        raise StepDied("after the batch failed, before its requests were swept")

    with monkeypatch.context() as patched:
        patched.setattr(ending, "sweep", died)
        with pytest.raises(StepDied):
            ending.fail(deps, batch_id, "a step failed")
    assert batches.get_batch(deps, ALICE, batch_id)["status"] == "in_progress"  # stopped, not ended
    assert {status for status, _ in statuses(deps, batch_id)} == {"queued"}

    for _ in range(2):  # the workflow's retry, then one more: counted once
        assert ending.fail(deps, batch_id, "a step failed")["status"] == "failed"
        assert statuses(deps, batch_id) == [("failed", "batch_failed")] * 5
        counts = spec_counts(batches.get_batch(deps, ALICE, batch_id))
        assert counts == {"total": 5, "completed": 0, "failed": 5}


def test_a_batch_failed_before_prepare_recorded_anything_fails_every_request_once(sim: Simulator) -> None:
    deps = make_deps(sim, FakeClock())
    created = batches.create_batch(
        deps, ALICE, body_of([chat_request(f"r-{i}", f"hi {i}") for i in range(4)])
    )
    batch_id = str(created["id"])
    record = deps.batches.get_record(batch_id)
    assert record is not None
    next(lifecycle._write_chunks(deps, record, start=0))  # a prepare stored them, then died
    assert len(list(deps.requests.all(batch_id))) == 4

    for _ in range(2):
        assert ending.fail(deps, batch_id, "States.TaskFailed")["status"] == "failed"
        assert statuses(deps, batch_id) == [("failed", "batch_failed")] * 4
        counts = spec_counts(batches.get_batch(deps, ALICE, batch_id))
        assert counts == {"total": 4, "completed": 0, "failed": 4}


def test_the_counter_shards_of_a_batch_failed_before_prepare_are_created_once(sim: Simulator) -> None:
    """Two failing steps at once (one the workflow lost track of): the one behind creates no
    shards over those the first created and counted in."""
    deps = make_deps(sim, FakeClock())
    created = batches.create_batch(
        deps, ALICE, body_of([chat_request(f"r-{i}", f"hi {i}") for i in range(4)])
    )
    batch_id = str(created["id"])
    totals = shard_totals(4, 2)
    assert deps.batches.put_first_shards(batch_id, totals, {"written": 0}, from_statuses=UNFINISHED_STATUSES)
    record = deps.batches.get_record(batch_id)
    assert record is not None and deps.batches.count_unwritten(record, Tally(failed=1))

    assert not deps.batches.put_first_shards(
        batch_id, totals, {"written": 0}, from_statuses=UNFINISHED_STATUSES
    )
    counted = deps.batches.get(batch_id)
    assert counted is not None
    assert (counted.counts.failed, counted.counts.left) == (4, 0)


# --- writes whose answer was lost -----------------------------------------------------------------


class LostAnswers:
    """A DynamoDB client whose chosen calls commit, lose their answer, and are sent again
    (as the SDK does): the caller sees only the second call's answer."""

    def __init__(self, client: Any, operations: set[str]) -> None:
        self._client = client
        self._operations = operations

    def __getattr__(self, name: str) -> Any:
        call = getattr(self._client, name)
        if name not in self._operations:
            return call

        def twice(**request: Any) -> Any:
            call(**request)
            return call(**request)

        return twice


def lossy_requests(deps: Deps, *operations: str) -> RequestStore:
    return RequestStore(
        LostAnswers(deps.requests._table.client, set(operations)),
        deps.settings.requests_table,
        deps.settings.batches_table,
    )


def test_a_claim_whose_answer_was_lost_is_still_ours(sim: Simulator) -> None:
    deps = make_deps(sim, FakeClock())
    batch_id = prepared(deps, 1)
    claimed = lossy_requests(deps, "update_item").claim(batch_id, 0, "w", deps.clock(), 60)
    assert claimed.kind is ClaimKind.CLAIMED and claimed.request is not None
    assert claimed.request.lease_owner == "w" and claimed.request.attempts == 1


def test_an_end_whose_answer_was_lost_is_counted_once(sim: Simulator) -> None:
    deps = make_deps(sim, FakeClock())
    batch_id = prepared(deps, 1)
    held = claim(deps, batch_id, 0)
    recorded = lossy_requests(deps, "transact_write_items").record_end(
        held,
        shard=0,
        end=RequestEnd(RequestStatus.SUCCEEDED, ended_at=deps.clock()),
        tally=Tally(completed=1),
    )
    assert recorded == "shard_finished"  # ours: the caller counts the shard (idempotently)
    batch = deps.batches.get(batch_id)
    assert batch is not None and (batch.counts.completed, batch.counts.left) == (1, 0)


def test_a_retry_whose_answer_was_lost_is_scheduled(sim: Simulator) -> None:
    deps = make_deps(sim, FakeClock())
    batch_id = prepared(deps, 1)
    held = claim(deps, batch_id, 0)
    scheduled = lossy_requests(deps, "transact_write_items").schedule_retry(
        held, next_at=deps.clock() + 5, error={"code": "rate_limited"}, attempt_cost_nano=0, uses_attempt=True
    )
    assert scheduled == "scheduled"
    request = deps.requests.get(batch_id, 0)
    assert request is not None and request.status is RequestStatus.RETRY_WAIT and request.calls == 1


# --- zombies --------------------------------------------------------------------------------------


def test_a_create_whose_workflow_cannot_start_leaves_nothing_behind(
    sim: Simulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    deps = make_deps(sim, FakeClock(), BATCH_MAX_ACTIVE_PER_USER="1")

    def refuse(batch_id: str) -> None:
        raise StorageError("Step Functions is down")

    monkeypatch.setattr(deps.workflow, "start", refuse)
    with pytest.raises(ServiceUnavailable):
        batches.create_batch(deps, ALICE, body_of([chat_request("z", "hello")]))
    assert batches.list_batches(deps, ALICE, {})["data"] == []
    monkeypatch.undo()
    deps.workflow.start = FakeWorkflow().start  # type: ignore[method-assign]
    assert batches.create_batch(deps, ALICE, body_of([chat_request("z", "hello")]))["status"] == "validating"


def test_a_cancel_whose_wake_up_failed_takes_effect_when_repeated(
    sim: Simulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    deps = make_deps(sim, FakeClock())
    batch_id = prepared(deps, 2)
    receive_all(deps)
    lifecycle.park(deps, batch_id, "parked")
    woken = deps.workflow.woken  # type: ignore[attr-defined]
    real_wake = deps.workflow.wake

    def down(token: str, next_state: Any) -> bool:
        raise StorageError("Step Functions is down")

    monkeypatch.setattr(deps.workflow, "wake", down)
    assert batches.cancel_batch(deps, ALICE, batch_id)["status"] == "cancelling"
    monkeypatch.setattr(deps.workflow, "wake", real_wake)
    assert batches.cancel_batch(deps, ALICE, batch_id)["status"] == "cancelling"
    assert woken == [("parked", {"next": "cancel", "wait_seconds": 0})]
    assert lifecycle.cancel(deps, batch_id)["next"] == "finalize"


@pytest.mark.parametrize("window_hours", ["24", "0"])
def test_every_batch_record_has_a_ttl_backstop_from_its_create(sim: Simulator, window_hours: str) -> None:
    clock = FakeClock()
    deps = make_deps(sim, clock, BATCH_COMPLETION_WINDOW_HOURS=window_hours)
    created = batches.create_batch(deps, ALICE, body_of([chat_request("t", "hello")]))
    record = deps.batches.get_record(created["id"])
    assert record is not None and record.ttl is not None
    retention = deps.settings.retention_seconds
    assert record.ttl >= (record.expires_at or clock()) + retention


# --- leases of a few minutes, renewed while a call runs (rule 14) -------------------------------


def test_a_request_lease_is_renewed_while_its_call_outlasts_it(sim: Simulator) -> None:
    # A lease renewed every third of it: 2 s leaves a renewal over a second of a busy
    # machine's delay (at 0.6 s, a loaded CI machine once let the lease lapse).
    deps = make_deps(sim, time.time, BATCH_LEASE_SECONDS="2", BATCH_UPSTREAM_TIMEOUT_SECONDS="15")
    batch = batches.create_batch(deps, ALICE, body_of([chat_request("long", "slow [[sim latency_ms=6000]]")]))
    lifecycle.prepare(deps, batch["id"])
    [message] = receive_all(deps)

    async def run_and_poach() -> ClaimKind:
        chain = asyncio.create_task(
            run_message(deps, decode(message["Body"]), owner="w", deadline=deps.clock() + 60)
        )
        await asyncio.sleep(4.5)  # the call runs 6 s: well past its first 2 s lease
        poacher = await asyncio.to_thread(deps.requests.claim, batch["id"], 0, "other", deps.clock(), 2)
        await chain
        return poacher.kind

    assert asyncio.run(run_and_poach()) is ClaimKind.HELD  # still held: the lease was renewed
    request = deps.requests.get(batch["id"], 0)
    assert request is not None and request.status is RequestStatus.SUCCEEDED and request.lost == 0


def test_the_request_claimed_ahead_is_leased_for_one_lease_renewed_with_the_running_one(
    sim: Simulator,
) -> None:
    # One chain: while its first request's 6 s call runs, it claims the second ahead. That
    # claim lasts a lease (2 s), not a lease plus the upstream timeout (17 s): if the worker
    # dies, it runs out with the running request's, and a cancelled batch ends then.
    deps = make_deps(
        sim,
        time.time,
        BATCH_MODEL_CONCURRENCY="1",
        BATCH_LEASE_SECONDS="2",
        BATCH_UPSTREAM_TIMEOUT_SECONDS="15",
    )
    requests = [chat_request("long", "slow [[sim latency_ms=6000]]"), chat_request("next", "quick")]
    batch = batches.create_batch(deps, ALICE, body_of(requests))
    lifecycle.prepare(deps, batch["id"])
    [message] = receive_all(deps)

    async def run_and_watch() -> tuple[float, ClaimKind]:
        chain = asyncio.create_task(
            run_message(deps, decode(message["Body"]), owner="w", deadline=deps.clock() + 60)
        )
        await asyncio.sleep(1.0)
        ahead = await asyncio.to_thread(deps.requests.get, batch["id"], 1)
        assert ahead is not None and ahead.status is RequestStatus.RUNNING and ahead.lease_until is not None
        leased_for = ahead.lease_until - deps.clock()
        await asyncio.sleep(3.5)  # past the claim's first lease: renewed with the running one's
        poacher = await asyncio.to_thread(deps.requests.claim, batch["id"], 1, "other", deps.clock(), 2)
        await chain
        return leased_for, poacher.kind

    leased_for, poached = asyncio.run(run_and_watch())
    assert leased_for <= 2.0 and poached is ClaimKind.HELD
    for index in (0, 1):
        request = deps.requests.get(batch["id"], index)
        assert request is not None and request.status is RequestStatus.SUCCEEDED and request.lost == 0
