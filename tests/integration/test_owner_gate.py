"""Before each request runs, the batch's key and owner are checked again (moto, the
injected clock): quotas and budgets pause and resume batches, reservations make a request
wait, a revoked key fails the batch, a lowered role pauses it, and a user's role caps how
many of their requests run at once."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from batchgw.api import accounts, batches
from batchgw.api import results as results_api
from batchgw.deps import Deps
from batchgw.domain.chains import ChainMessage, RequestMessage, WorkMessage, decode
from batchgw.domain.outcome import Outcome
from batchgw.domain.principal import Principal
from batchgw.domain.spend import Judgement, next_day, next_month
from batchgw.run import ending, lifecycle
from batchgw.run.chain import run_message
from batchgw.run.owner import OwnerGate
from batchgw.storage import aws
from batchgw.storage.slots import Hold
from batchgw.storage.spend import Payer

from local.simulator import Simulator
from tests.integration.conftest import body_of, chat_request, make_deps, receive_all
from tests.integration.test_every_batch_ends import claim, settle
from tests.support import FakeClock

pytestmark = pytest.mark.usefixtures("aws_env")

ADMIN = Principal(user_id="user-admin", role="admin", key_id="key_local_admin")
ALICE = Principal(user_id="user-alice", role="internal", key_id="key_local_alice")
BOB = Principal(user_id="user-bob", role="internal", key_id="key_local_bob")
# What one "hello i" request costs on sim-chat: 2 input words at $0.50/M, 3 output at $1.50/M.
ONE_REQUEST_NANO = 5500
FAST = {"BATCH_QUOTA_RECHECK_SECONDS": "60", "BATCH_OWNER_CACHE_SECONDS": "0"}


def gate_deps(sim: Simulator, clock: FakeClock, **overrides: str) -> Deps:
    return make_deps(sim, clock, **{**FAST, **overrides})


def prepared(deps: Deps, principal: Principal, n: int, text: str = "hello") -> str:
    batch = batches.create_batch(
        deps, principal, body_of([chat_request(f"r-{i}", f"{text} {i}") for i in range(n)])
    )
    lifecycle.prepare(deps, batch["id"])
    receive_all(deps)  # the chains' first messages: each test runs the chains itself
    return str(batch["id"])


def run(deps: Deps, message: WorkMessage, owner: str = "w") -> None:
    asyncio.run(run_message(deps, message, owner=owner, deadline=deps.clock() + 900))


def walk(deps: Deps, batch_id: str, start: int = 0) -> None:
    """Run the batch's requests in order from ``start``, as one chain."""
    run(deps, ChainMessage(batch_id, 0, start, 1))


def statuses(deps: Deps, principal: Principal, batch_id: str) -> list[str]:
    page = results_api.results_page(deps, principal, batch_id, {})
    return [r["status"] for r in page["data"]]


def set_user(deps: Deps, user_id: str, **fields: Any) -> None:
    accounts.update_user(deps, ADMIN, user_id, fields)


def spent(deps: Deps, principal: Principal) -> tuple[int, int]:
    user, key = deps.spend.read(Payer(principal.user_id, principal.key_id), deps.clock())
    return user.today, key.today


# --- quotas ----------------------------------------------------------------------------------


def test_a_used_up_daily_quota_pauses_the_batch_until_midnight_keeping_its_results_readable(
    sim: Simulator,
) -> None:
    clock = FakeClock()
    deps = gate_deps(sim, clock)
    set_user(deps, "user-alice", daily_quota_usd=2 * ONE_REQUEST_NANO / 1e9)
    batch_id = prepared(deps, ALICE, 5)
    walk(deps, batch_id)

    batch = batches.get_batch(deps, ALICE, batch_id)
    assert batch["status"] == "in_progress"
    assert batch["paused"] == {"reason": "daily_quota", "until": next_day(clock())}
    assert statuses(deps, ALICE, batch_id) == ["completed", "completed", "queued", "queued", "queued"]
    assert sim.stats()["models"]["sim-chat"]["requests"] == 2


def test_a_raised_quota_resumes_a_paused_batch_within_the_recheck_period(sim: Simulator) -> None:
    clock = FakeClock()
    deps = gate_deps(sim, clock)
    set_user(deps, "user-alice", daily_quota_usd=ONE_REQUEST_NANO / 1e9)
    batch_id = prepared(deps, ALICE, 3)
    walk(deps, batch_id)
    assert batches.get_batch(deps, ALICE, batch_id)["paused"]["reason"] == "daily_quota"

    set_user(deps, "user-alice", daily_quota_usd=1.0)
    walk(deps, batch_id, 1)  # before the re-check is due: the chain comes back later
    assert sim.stats()["models"]["sim-chat"]["requests"] == 1
    clock.advance(61)
    walk(deps, batch_id, 1)
    batch = batches.get_batch(deps, ALICE, batch_id)
    assert batch["paused"] is None
    assert statuses(deps, ALICE, batch_id) == ["completed"] * 3


def test_a_daily_quota_renews_at_midnight_utc(sim: Simulator) -> None:
    start = next_day(1_800_000_000) - 30  # 23:59:30 UTC
    clock = FakeClock(start)
    deps = gate_deps(sim, clock, BATCH_QUOTA_RECHECK_SECONDS="3600")
    set_user(deps, "user-alice", daily_quota_usd=ONE_REQUEST_NANO / 1e9)
    batch_id = prepared(deps, ALICE, 2)
    walk(deps, batch_id)
    paused = batches.get_batch(deps, ALICE, batch_id)["paused"]
    assert paused == {"reason": "daily_quota", "until": start + 30}

    clock.advance(31)  # a new UTC day: nothing charged today yet
    walk(deps, batch_id, 1)
    assert statuses(deps, ALICE, batch_id) == ["completed", "completed"]
    assert spent(deps, ALICE) == (ONE_REQUEST_NANO, ONE_REQUEST_NANO)  # today's, the new day's


def test_a_monthly_quota_pauses_until_the_first_and_renews_then(sim: Simulator) -> None:
    start = next_month(1_800_000_000) - 30  # the last day of a month, 23:59:30 UTC
    clock = FakeClock(start)
    deps = gate_deps(sim, clock, BATCH_QUOTA_RECHECK_SECONDS="3600")
    set_user(deps, "user-alice", monthly_quota_usd=ONE_REQUEST_NANO / 1e9)
    batch_id = prepared(deps, ALICE, 2)
    walk(deps, batch_id)
    assert batches.get_batch(deps, ALICE, batch_id)["paused"] == {
        "reason": "monthly_quota",
        "until": start + 30,
    }
    clock.advance(31)
    walk(deps, batch_id, 1)
    assert statuses(deps, ALICE, batch_id) == ["completed", "completed"]


def test_a_keys_own_budget_pauses_only_the_batches_of_that_key(sim: Simulator) -> None:
    clock = FakeClock()
    deps = gate_deps(sim, clock)
    budgeted = accounts.create_key(
        deps, ADMIN, "user-alice", {"name": "tight", "daily_budget_usd": ONE_REQUEST_NANO / 1e9}
    )
    tight = Principal(user_id="user-alice", role="internal", key_id=budgeted["id"])
    held_back = prepared(deps, tight, 3)
    free = prepared(deps, ALICE, 3)
    walk(deps, held_back)
    walk(deps, free)

    assert batches.get_batch(deps, ALICE, held_back)["paused"]["reason"] == "key_budget"
    assert statuses(deps, ALICE, held_back) == ["completed", "queued", "queued"]
    assert batches.get_batch(deps, ALICE, free)["paused"] is None
    assert statuses(deps, ALICE, free) == ["completed"] * 3

    accounts.update_key(deps, ADMIN, budgeted["id"], {"daily_budget_usd": None})
    clock.advance(61)
    walk(deps, held_back, 1)
    assert statuses(deps, ALICE, held_back) == ["completed"] * 3


def test_a_create_is_refused_429_once_a_quota_or_budget_is_used_up(sim: Simulator) -> None:
    deps = gate_deps(sim, FakeClock())
    set_user(deps, "user-alice", daily_quota_usd=ONE_REQUEST_NANO / 1e9)
    walk(deps, prepared(deps, ALICE, 1))
    with pytest.raises(Exception) as refused:
        prepared(deps, ALICE, 1)
    assert getattr(refused.value, "status", None) == 429
    assert getattr(refused.value, "code", None) == "daily_quota_exceeded"
    assert "daily" in str(refused.value)
    prepared(deps, BOB, 1)  # another user's quota is their own


# --- reservations -----------------------------------------------------------------------------


def test_when_only_reservations_stand_in_the_way_the_request_waits_and_nothing_pauses(
    sim: Simulator,
) -> None:
    clock = FakeClock()
    deps = gate_deps(sim, clock)
    set_user(deps, "user-alice", daily_quota_usd=0.01)
    # Another request of alice's is running and may cost more than what is left.
    deps.user_slots.take(
        "user-alice", "elsewhere", Hold(clock() + 600, 10**8, "key_local_alice"), cap=0, now=clock()
    )
    batch_id = prepared(deps, ALICE, 2)
    walk(deps, batch_id)
    assert batches.get_batch(deps, ALICE, batch_id)["paused"] is None
    assert statuses(deps, ALICE, batch_id) == ["queued", "queued"]
    delayed = aws.get_clients().sqs.get_queue_attributes(
        QueueUrl=deps.settings.work_queue_url, AttributeNames=["ApproximateNumberOfMessagesDelayed"]
    )["Attributes"]["ApproximateNumberOfMessagesDelayed"]
    assert delayed == "1"  # the chain comes back shortly, to check again

    deps.user_slots.release("user-alice", "elsewhere")
    walk(deps, batch_id)
    assert statuses(deps, ALICE, batch_id) == ["completed", "completed"]


def test_a_request_reserves_what_it_may_cost_while_it_runs(sim: Simulator) -> None:
    deps = gate_deps(sim, FakeClock())
    set_user(deps, "user-alice", daily_quota_usd=1.0)
    batch_id = prepared(deps, ALICE, 1)
    seen: list[int] = []
    real_call = deps.user_slots.take

    def take(*args: Any, **kwargs: Any) -> Any:
        taken = real_call(*args, **kwargs)
        seen.append(deps.user_slots.read("user-alice").reserved(deps.clock()))
        return taken

    deps.user_slots.take = take  # type: ignore[method-assign]
    walk(deps, batch_id)
    # Its input estimated, its output priced at the model's 16,384-token limit ($1.50/M).
    assert seen and seen[0] > 16384 * 1500
    assert deps.user_slots.read("user-alice").reserved(deps.clock()) == 0  # let go once it ended


# --- the key and the account ----------------------------------------------------------------


def test_a_revoked_key_fails_its_batch_keeping_what_finished_and_what_was_running(sim: Simulator) -> None:
    clock = FakeClock()
    deps = gate_deps(sim, clock)
    batch_id = prepared(deps, ALICE, 5)
    run(deps, RequestMessage(batch_id, 0))  # one finished
    running = claim(deps, batch_id, 1, owner="other")  # one with the upstream
    lifecycle.park(deps, batch_id, "token")
    accounts.revoke_key(deps, ADMIN, "key_local_alice")

    walk(deps, batch_id, 2)
    assert deps.workflow.woken[-1] == ("token", {"next": "cancel", "wait_seconds": 0})  # type: ignore[attr-defined]
    assert lifecycle.cancel(deps, batch_id)["next"] == "park"  # the running one finishes
    settle(deps, batch_id, running, Outcome("success", status_code=200, body={"ok": True}))
    ending.finalize(deps, batch_id)

    batch = batches.get_batch(deps, ADMIN, batch_id)
    assert batch["status"] == "failed"
    assert batch["error"]["code"] == "owner_unauthorized"
    assert "revoked" in batch["error"]["message"]
    page = results_api.results_page(deps, ADMIN, batch_id, {})["data"]
    assert [r["status"] for r in page] == ["completed", "completed", "failed", "failed", "failed"]
    assert {r["error"]["code"] for r in page[2:]} == {"batch_failed"}
    assert sim.stats()["models"]["sim-chat"]["requests"] == 1  # nothing ran after the revocation


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"status": "suspended"}, "suspended"),
        (None, "deleted"),
    ],
)
def test_a_suspended_or_deleted_owner_fails_the_batch(
    sim: Simulator, change: dict[str, Any] | None, reason: str
) -> None:
    deps = gate_deps(sim, FakeClock())
    batch_id = prepared(deps, BOB, 2)
    if change is None:
        deps.accounts.change_user("user-bob", {"status": "deleted"})
    else:
        set_user(deps, "user-bob", **change)
    walk(deps, batch_id)
    record = deps.batches.get_record(batch_id)
    assert record is not None and record.owner_failed
    assert record.error is not None and reason in record.error["message"]


def test_an_expired_key_fails_its_batch(sim: Simulator) -> None:
    clock = FakeClock()
    deps = gate_deps(sim, clock)
    made = accounts.create_key(deps, ADMIN, "user-alice", {"expires_at": int(clock() + 10)})
    short = Principal(user_id="user-alice", role="internal", key_id=made["id"])
    batch_id = prepared(deps, short, 2)
    clock.advance(11)
    walk(deps, batch_id)
    record = deps.batches.get_record(batch_id)
    assert record is not None and record.owner_failed and "expired" in (record.error or {})["message"]


def test_a_role_below_min_role_pauses_the_batch_until_it_is_raised(sim: Simulator) -> None:
    clock = FakeClock()
    deps = gate_deps(sim, clock)
    batch_id = prepared(deps, ALICE, 2)
    set_user(deps, "user-alice", role="pro")  # BATCH_MIN_ROLE is internal
    walk(deps, batch_id)
    assert batches.get_batch(deps, ALICE, batch_id)["paused"] == {"reason": "role", "until": None}
    assert sim.stats()["models"]["sim-chat"]["requests"] == 0
    # Reading and listing still work below the role.
    pro = Principal(user_id="user-alice", role="pro", key_id="key_local_alice")
    assert batches.get_batch(deps, pro, batch_id)["status"] == "in_progress"

    set_user(deps, "user-alice", role="internal")
    clock.advance(61)
    walk(deps, batch_id)
    assert statuses(deps, ALICE, batch_id) == ["completed", "completed"]


# --- per-role concurrency -------------------------------------------------------------------------


def test_a_users_requests_never_run_beyond_their_roles_concurrency(sim: Simulator) -> None:
    deps = gate_deps(sim, FakeClock(), BATCH_ROLE_CONCURRENCY_INTERNAL="2", BATCH_SLOT_WAIT_SECONDS="0")
    text = "[[sim latency_ms=100 tag=alice]] hello"
    first = prepared(deps, ALICE, 6, text)
    second = prepared(deps, ALICE, 6, text)
    chains = [ChainMessage(b, c, c, 3) for b in (first, second) for c in range(3)]

    async def workers(messages: list[WorkMessage]) -> None:
        await asyncio.gather(
            *(
                run_message(deps, m, owner=f"w{i}", deadline=deps.clock() + 900)
                for i, m in enumerate(messages)
            )
        )

    asyncio.run(workers(list(chains)))
    sqs = aws.get_clients().sqs
    for _ in range(100):
        handed_on = receive_all(deps)
        if not handed_on:
            break
        for message in handed_on:
            sqs.delete_message(QueueUrl=deps.settings.work_queue_url, ReceiptHandle=message["ReceiptHandle"])
        asyncio.run(workers([decode(m["Body"]) for m in handed_on]))
    assert statuses(deps, ALICE, first) + statuses(deps, ALICE, second) == ["completed"] * 12
    assert sim.stats()["tags"]["alice"]["max_in_flight"] == 2


def test_an_owner_without_limits_holds_one_role_slot_across_requests_of_different_reservations(
    sim: Simulator,
) -> None:
    """No quota or budget judges the reservation a hold carries: a chain's next request keeps
    the hold it has (one write per chain, not per request), and an unknown cost is still
    charged at its own request's most."""
    deps = gate_deps(sim, FakeClock(), BATCH_ROLE_CONCURRENCY_INTERNAL="2")
    texts = ["hi", "x" * 4000, "x" * 9000]  # ever longer bodies: ever larger reservations
    created = batches.create_batch(
        deps, ALICE, body_of([chat_request(f"r-{i}", t) for i, t in enumerate(texts)])
    )
    lifecycle.prepare(deps, created["id"])
    receive_all(deps)
    batch_id = str(created["id"])
    batch = deps.batches.get_record(batch_id)
    assert batch is not None
    takes: list[int] = []
    real_take = deps.user_slots.take

    def take(*args: Any, **kwargs: Any) -> Any:
        takes.append(args[2].reserved)
        return real_take(*args, **kwargs)

    deps.user_slots.take = take  # type: ignore[method-assign]
    gate, reserves = OwnerGate(deps, batch), []
    for index in range(len(texts)):
        verdict = asyncio.run(gate.admit(claim(deps, batch_id, index)))
        assert verdict.standing.judgement is Judgement.RUN
        reserves.append(gate.reserved)
    assert len(takes) == 1 and takes[0] == reserves[0]
    assert reserves[0] < reserves[1] < reserves[2]


def test_a_revoked_key_found_as_the_batch_is_cancelled_ends_the_request_cancelled(
    sim: Simulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The chain finds the key revoked, but a cancel lands first: the batch stays cancelled
    (it cannot start failing from cancelling), and the request the chain holds ends as the
    cancel ends it, not failed as if the batch failed."""
    deps = gate_deps(sim, FakeClock())
    batch_id = prepared(deps, ALICE, 2)
    accounts.revoke_key(deps, ADMIN, "key_local_alice")
    fail_for_owner = deps.batches.fail_for_owner

    def cancelled_first(batch: str, error: dict[str, Any]) -> Any:
        batches.cancel_batch(deps, ADMIN, batch)
        return fail_for_owner(batch, error)

    monkeypatch.setattr(deps.batches, "fail_for_owner", cancelled_first)
    walk(deps, batch_id)
    lifecycle.cancel(deps, batch_id)
    page = results_api.results_page(deps, ADMIN, batch_id, {})["data"]
    assert [(r["status"], r["error"]["code"]) for r in page] == [("cancelled", "batch_cancelled")] * 2


def test_attempts_of_unknown_cost_count_against_the_quota_at_their_most(sim: Simulator) -> None:
    """Answers too large to keep have no known cost: each is charged what it could have cost
    at most, so a tiny quota stops the batch after the first, not after all of them."""
    clock = FakeClock()
    deps = gate_deps(sim, clock, BATCH_MAX_RESULT_KB="1")
    set_user(deps, "user-alice", daily_quota_usd=0.0000001)
    batch_id = prepared(deps, ALICE, 8, text="[[sim bytes=4000]] big")
    walk(deps, batch_id)

    assert sim.stats()["models"]["sim-chat"]["requests"] == 1  # was 8: unknown cost escaped
    batch = batches.get_batch(deps, ALICE, batch_id)
    assert batch["paused"] is not None and batch["paused"]["reason"] == "daily_quota"
    assert batch["cost_usd"] == 0 and batch["cost_unknown_attempts"] == 1  # known cost stays known
    me = accounts.me(deps, ALICE)
    assert me["unknown_cost_today_usd"] > 0.0000001 and me["spend_today_usd"] == me["unknown_cost_today_usd"]
    assert me["key"]["unknown_cost_today_usd"] == me["unknown_cost_today_usd"]
