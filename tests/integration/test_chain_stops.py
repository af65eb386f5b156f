"""Every way a chain's run stops is a value its step returns (``run.chain.Stopped``), acted
on by one exit (moto, the simulator, the injected clock): each reason logs exactly one
"chain stopped" line naming it, and sends exactly the continuation it calls for (the chain
resumed where it stopped, a lone request's own message, a waiting retry's message), or
nothing."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from batchgw.api import accounts, batches
from batchgw.deps import Deps
from batchgw.domain.chains import ChainMessage, RequestMessage, WorkMessage, decode
from batchgw.domain.fairness import token_of
from batchgw.domain.interactive import PEAK_HOLD_SECONDS
from batchgw.domain.principal import Principal
from batchgw.domain.request import RequestRecord
from batchgw.run import attempt, lifecycle, model_gate
from batchgw.run.chain import ChainRun, Why, run_message
from batchgw.storage.slots import Hold

from local.simulator import Simulator
from tests.integration.conftest import body_of, chat_request, make_deps, receive_all, tune
from tests.support import FakeClock

pytestmark = pytest.mark.usefixtures("aws_env")

ADMIN = Principal(user_id="user-admin", role="admin", key_id="key_local_admin")
ALICE = Principal(user_id="user-alice", role="internal", key_id="key_local_alice")
SETTINGS = {
    "BATCH_MODEL_CONCURRENCY": "1",
    "BATCH_COUNTER_SHARDS": "1",
    "BATCH_SLOT_WAIT_SECONDS": "2",
    "BATCH_RETRY_BASE_SECONDS": "100",  # a retry is not worth the chain's wait (30 s)
    "BATCH_RETRY_MAX_SECONDS": "100",
    "BATCH_QUOTA_RECHECK_SECONDS": "60",
    "BATCH_OWNER_CACHE_SECONDS": "0",
}
ONE_REQUEST_NANO = 5500  # what one "hello i" request costs on sim-chat
FAILS_ONCE = "[[sim fail=1]]"  # answers 500 once, then normally


@dataclass
class Case:
    """A batch set up to stop for one reason, the message to run, and what must be sent:
    (message, fewest seconds of delay, most)."""

    message: WorkMessage
    sent: list[tuple[WorkMessage, int, int]] = field(default_factory=list)
    deadline: float = 900.0
    taken_over: bool = False
    raises: bool = False


def prepared(deps: Deps, texts: list[str]) -> tuple[str, ChainMessage]:
    """A prepared batch of one request per text, on one chain: its id and the chain's message."""
    created = batches.create_batch(
        deps, ALICE, body_of([chat_request(f"r-{i}", t) for i, t in enumerate(texts)])
    )
    batch_id = str(created["id"])
    lifecycle.prepare(deps, batch_id)
    (message,) = [decode(raw["Body"]) for raw in receive_all(deps)]
    assert isinstance(message, ChainMessage)
    return batch_id, message


def during_call(monkeypatch: pytest.MonkeyPatch, index: int, act: Callable[[], Any]) -> None:
    """Do ``act`` while request ``index`` is with the upstream."""
    real_call = attempt.call

    async def calling(deps: Deps, batch: Any, held: RequestRecord, *args: Any, **kw: Any) -> Any:
        if held.index == index:
            await asyncio.to_thread(act)
        return await real_call(deps, batch, held, *args, **kw)

    monkeypatch.setattr(attempt, "call", calling)


def run(deps: Deps, message: WorkMessage, deadline: float = 900.0) -> None:
    asyncio.run(run_message(deps, message, owner="w", deadline=deps.clock() + deadline))


Setup = Callable[[Deps, FakeClock, pytest.MonkeyPatch], Case]


def finished(deps: Deps, clock: FakeClock, mp: pytest.MonkeyPatch) -> Case:
    _, message = prepared(deps, ["hello 0", "hello 1"])
    return Case(message)


def retries_later(deps: Deps, clock: FakeClock, mp: pytest.MonkeyPatch) -> Case:
    batch_id, message = prepared(deps, [FAILS_ONCE])
    return Case(message, [(RequestMessage(batch_id, 0), 100, 121)])  # 100 s, jitter on top


def window_closed(deps: Deps, clock: FakeClock, mp: pytest.MonkeyPatch) -> Case:
    _, message = prepared(deps, ["hello 0"])
    clock.advance(25 * 3600)
    return Case(message)


def taken_over(deps: Deps, clock: FakeClock, mp: pytest.MonkeyPatch) -> Case:
    _, message = prepared(deps, ["hello 0"])
    return Case(message, taken_over=True)


def batch_disabled(deps: Deps, clock: FakeClock, mp: pytest.MonkeyPatch) -> Case:
    _, message = prepared(deps, ["hello 0"])
    # An administrator turned batch inference off (an override, as read by this process).
    mp.setattr(deps.live, "settings", deps.settings.model_copy(update={"batch_enabled": False}))
    mp.setattr(deps.live, "due", lambda: False)
    return Case(message, [(message.resume_at(0), 5, 5)])  # max(refresh 5 s, slot wait 2 s)


def segment_deadline(deps: Deps, clock: FakeClock, mp: pytest.MonkeyPatch) -> Case:
    _, message = prepared(deps, ["hello 0"])
    return Case(message, [(message.resume_at(0), 0, 0)], deadline=1.0)


def model_paused(deps: Deps, clock: FakeClock, mp: pytest.MonkeyPatch) -> Case:
    _, message = prepared(deps, ["hello 0"])
    deps.health.note_pause("sim-chat", clock() + 100)
    return Case(message, [(message.resume_at(0, full=1), 100, 100)])


def model_full(deps: Deps, clock: FakeClock, mp: pytest.MonkeyPatch) -> Case:
    _, message = prepared(deps, ["hello 0"])
    assert deps.slots.acquire("sim-chat", "another", cap=1, now=clock(), lease_seconds=600).granted
    return Case(message, [(message.resume_at(0, full=1), 2, 4)])


def yielded(deps: Deps, clock: FakeClock, mp: pytest.MonkeyPatch) -> Case:
    _, message = prepared(deps, ["hello 0"])
    in_place(deps, mp, 0.0)  # one round in place, then it leaves
    deps.interactive.report("gateway-1", {"sim-chat": 1}, now=clock(), ttl_seconds=60)  # the cap is 1
    return Case(message, [(message.resume_at(0, full=1), 2, 4)])


def gave_way(deps: Deps, clock: FakeClock, mp: pytest.MonkeyPatch) -> Case:
    batch_id, message = prepared(deps, ["hello 0"])
    mp.setattr(deps.live, "model_cap", lambda model: (2, "test"))
    # Of the model's two slots, this batch's chain elsewhere holds one and another batch
    # waits: the one left is the other batch's.
    elsewhere = token_of(batch_id, "elsewhere")
    assert deps.slots.acquire("sim-chat", elsewhere, cap=2, now=clock(), lease_seconds=600).granted
    deps.slots.wait("sim-chat", "batch_other", until=clock() + 60)
    return Case(message, [(message.resume_at(0, full=1), 2, 4)])


def held_elsewhere(deps: Deps, clock: FakeClock, mp: pytest.MonkeyPatch) -> Case:
    batch_id, message = prepared(deps, ["hello 0"])
    assert deps.requests.claim(batch_id, 0, "another", clock(), 60).request is not None
    return Case(message, [(message.resume_at(0), 61, 61)])  # once its lease has run out


def lease_lost(deps: Deps, clock: FakeClock, mp: pytest.MonkeyPatch) -> Case:
    batch_id, message = prepared(deps, ["hello 0", "hello 1"])
    lease = deps.settings.batch_lease_seconds

    def take_over() -> None:  # the lease ran out mid-call and another worker took it
        clock.advance(lease + 1)
        assert deps.requests.claim(batch_id, 0, "another", clock(), 60).request is not None

    during_call(mp, 0, take_over)
    return Case(message, [(message.resume_at(1), 0, 0)])


def superseded(deps: Deps, clock: FakeClock, mp: pytest.MonkeyPatch) -> Case:
    batch_id, message = prepared(deps, ["hello 0", "hello 1"])
    during_call(mp, 0, lambda: deps.batches.set_generation(batch_id, 1))
    return Case(message)


def stopped_during_call(stop: Callable[[Deps, str], Any]) -> Setup:
    def setup(deps: Deps, clock: FakeClock, mp: pytest.MonkeyPatch) -> Case:
        batch_id, message = prepared(deps, ["hello 0", "hello 1"])
        during_call(mp, 0, lambda: stop(deps, batch_id))
        return Case(message)

    return setup


def results_full(deps: Deps, clock: FakeClock, mp: pytest.MonkeyPatch) -> Case:
    batch_id, _ = prepared(deps, ["hello 0"])
    deps.batches.mark_results_full(batch_id)
    return Case(RequestMessage(batch_id, 0))


def owner_unauthorized(deps: Deps, clock: FakeClock, mp: pytest.MonkeyPatch) -> Case:
    _, message = prepared(deps, ["hello 0"])
    accounts.revoke_key(deps, ADMIN, "key_local_alice")
    return Case(message)


def owner_paused(deps: Deps, clock: FakeClock, mp: pytest.MonkeyPatch) -> Case:
    accounts.update_user(deps, ADMIN, "user-alice", {"daily_quota_usd": ONE_REQUEST_NANO / 1e9})
    _, message = prepared(deps, ["hello 0", "hello 1"])
    return Case(message, [(message.resume_at(1), 60, 60)])  # when the quota is checked again


def owner_wait(deps: Deps, clock: FakeClock, mp: pytest.MonkeyPatch) -> Case:
    accounts.update_user(deps, ADMIN, "user-alice", {"daily_quota_usd": 0.01})
    hold = Hold(clock() + 600, 10**8, "key_local_alice")  # another request may cost more than is left
    deps.user_slots.take("user-alice", "elsewhere", hold, cap=0, now=clock())
    _, message = prepared(deps, ["hello 0"])
    return Case(message, [(message.resume_at(0), 0, 60)])


def lone_done(deps: Deps, clock: FakeClock, mp: pytest.MonkeyPatch) -> Case:
    batch_id, _ = prepared(deps, ["hello 0"])
    return Case(RequestMessage(batch_id, 0))


def lone_retry(deps: Deps, clock: FakeClock, mp: pytest.MonkeyPatch) -> Case:
    batch_id, _ = prepared(deps, [FAILS_ONCE])
    return Case(RequestMessage(batch_id, 0), [(RequestMessage(batch_id, 0), 100, 121)])


def lone_early(deps: Deps, clock: FakeClock, mp: pytest.MonkeyPatch) -> Case:
    batch_id, _ = prepared(deps, [FAILS_ONCE])
    run(deps, RequestMessage(batch_id, 0))  # tried once: its retry waits 100-120 s
    clock.advance(10)
    return Case(RequestMessage(batch_id, 0), [(RequestMessage(batch_id, 0), 90, 111)])


def error(deps: Deps, clock: FakeClock, mp: pytest.MonkeyPatch) -> Case:
    _, message = prepared(deps, ["hello 0"])

    async def failing(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("the call broke")

    mp.setattr(attempt, "call", failing)
    return Case(message, raises=True)


CASES: dict[Why, Setup] = {
    Why.FINISHED: finished,
    Why.RETRIES_LATER: retries_later,
    Why.WINDOW_CLOSED: window_closed,
    Why.TAKEN_OVER: taken_over,
    Why.BATCH_DISABLED: batch_disabled,
    Why.SEGMENT_DEADLINE: segment_deadline,
    Why.MODEL_PAUSED: model_paused,
    Why.MODEL_FULL: model_full,
    Why.YIELDED: yielded,
    Why.GAVE_WAY: gave_way,
    Why.HELD_ELSEWHERE: held_elsewhere,
    Why.LEASE_LOST: lease_lost,
    Why.SUPERSEDED: superseded,
    Why.CANCELLED: stopped_during_call(lambda deps, b: batches.cancel_batch(deps, ALICE, b)),
    Why.EXPIRED: stopped_during_call(lambda deps, b: deps.batches.start_expiring(b)),
    Why.FAILING: stopped_during_call(
        lambda deps, b: deps.batches.fail_for_owner(b, {"code": "owner_unauthorized", "message": "no"})
    ),
    Why.DELETED: stopped_during_call(lambda deps, b: deps.batches.delete_record(b, now=deps.clock())),
    Why.RESULTS_FULL: results_full,
    Why.OWNER_UNAUTHORIZED: owner_unauthorized,
    Why.OWNER_PAUSED: owner_paused,
    Why.OWNER_WAIT: owner_wait,
    Why.LONE_DONE: lone_done,
    Why.LONE_RETRY: lone_retry,
    Why.LONE_EARLY: lone_early,
    Why.ERROR: error,
}


def test_every_stop_reason_has_a_case() -> None:
    assert set(CASES) == set(Why)


@pytest.mark.parametrize("why", list(CASES), ids=[why.name for why in CASES])
def test_a_stop_logs_one_line_with_its_reason_and_sends_only_its_continuation(
    sim: Simulator, monkeypatch: pytest.MonkeyPatch, logged: list[logging.LogRecord], why: Why
) -> None:
    clock = FakeClock()
    deps = make_deps(sim, clock, **SETTINGS)
    case = CASES[why](deps, clock, monkeypatch)
    assert_stops(deps, case, why, monkeypatch, logged)


def test_a_chain_of_a_paused_batch_comes_back_when_its_owner_is_checked_again_claiming_nothing(
    sim: Simulator, monkeypatch: pytest.MonkeyPatch, logged: list[logging.LogRecord]
) -> None:
    clock = FakeClock()
    deps = make_deps(sim, clock, **SETTINGS)
    batch_id, message = prepared(deps, ["hello 0"])
    assert deps.batches.pause(
        batch_id, {"reason": "daily_quota", "until": clock() + 99, "check_at": clock() + 30}
    )
    assert_stops(deps, Case(message, [(message, 30, 30)]), Why.OWNER_PAUSED, monkeypatch, logged)
    request = deps.requests.get(batch_id, 0)
    assert (
        request is not None
        and request.lease_owner is None
        and sim.stats()["models"]["sim-chat"]["requests"] == 0
    )


def assert_stops(
    deps: Deps, case: Case, why: Why, monkeypatch: pytest.MonkeyPatch, logged: list[logging.LogRecord]
) -> None:
    """Run ``case``: one "chain stopped" line says ``why``, and what was sent is ``case.sent``."""
    clock = deps.clock
    sent: list[tuple[WorkMessage, int]] = []
    monkeypatch.setattr(
        deps.queue, "send", lambda message, delay_seconds=0: sent.append((message, delay_seconds))
    )
    logged.clear()

    async def drive() -> None:
        deadline = clock() + case.deadline
        if not case.taken_over:
            await run_message(deps, case.message, owner="w", deadline=deadline)
            return
        batch = deps.batches.get_record(case.message.batch_id)
        assert batch is not None
        event = asyncio.Event()
        event.set()
        await ChainRun(deps, batch, case.message, owner="w", deadline=deadline, taken_over=event).run()

    if case.raises:
        with pytest.raises(RuntimeError):
            asyncio.run(drive())
    else:
        asyncio.run(drive())

    lines = [r for r in logged if r.getMessage() == "chain stopped"]
    assert [(r.why, r.batch_id) for r in lines] == [(why.value, case.message.batch_id)]  # type: ignore[attr-defined]
    assert [message for message, _ in sent] == [message for message, _, _ in case.sent]
    for (_, delay), (_, least, most) in zip(sent, case.sent, strict=True):
        assert least <= delay <= most, (delay, least, most)
    if why is not Why.RETRIES_LATER:  # there the retry's own message is sent, not the chain's
        assert (lines[0].resume_after is None) == (not case.sent)  # type: ignore[attr-defined]


def waiting_in_place(
    sim: Simulator,
    monkeypatch: pytest.MonkeyPatch,
    meanwhile: Callable[[Deps, str], Any] = lambda d, b: None,
    *,
    ends_at_look: int | None = 1,
    **settings: str,
) -> tuple[Deps, str, ChainMessage, list[WorkMessage]]:
    """A batch of two requests whose one chain finds its model's one slot taken by an
    interactive request: at the chain's ``ends_at_look``-th look for room in place (never,
    with None), ``meanwhile`` runs and the interactive traffic ends. The batch's id, its
    chain's message, what is sent."""
    clock = FakeClock()
    deps = make_deps(sim, clock, **{**SETTINGS, **settings})
    batch_id, message = prepared(deps, ["hello 0", "hello 1"])
    deps.interactive.report("gateway-1", {"sim-chat": 1}, now=clock(), ttl_seconds=3600)  # the cap is 1
    sent: list[WorkMessage] = []
    monkeypatch.setattr(deps.queue, "send", lambda message, delay_seconds=0: sent.append(message))
    real_look = deps.ledger.look
    looks = 0

    def look(model: str) -> Any:
        nonlocal looks
        looks += 1
        if looks == ends_at_look:
            meanwhile(deps, batch_id)
            deps.interactive.remove("gateway-1")
            clock.advance(PEAK_HOLD_SECONDS + 1)  # its peak held no longer
        return real_look(model)

    monkeypatch.setattr(deps.ledger, "look", look)
    return deps, batch_id, message, sent


def test_a_chain_that_gave_way_takes_the_slot_back_in_place_once_the_interactive_traffic_ends(
    sim: Simulator, monkeypatch: pytest.MonkeyPatch, logged: list[logging.LogRecord]
) -> None:
    deps, batch_id, message, sent = waiting_in_place(sim, monkeypatch)
    asyncio.run(run_message(deps, message, owner="w", deadline=deps.clock() + 900))
    assert sim.stats()["models"]["sim-chat"]["requests"] == 2 and sent == []  # it never left
    assert [r.why for r in logged if r.getMessage() == "chain stopped"] == [Why.FINISHED.value]  # type: ignore[attr-defined]
    assert [deps.requests.get(batch_id, i).status.value for i in (0, 1)] == ["succeeded"] * 2  # type: ignore[union-attr]


def test_a_chain_that_went_for_room_in_place_and_holds_it_no_longer_counts_as_going(
    sim: Simulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    deps, _, message, _ = waiting_in_place(sim, monkeypatch)
    asyncio.run(run_message(deps, message, owner="w", deadline=deps.clock() + 900))
    # It went for the one slot, took it, ran both requests and let it go: the slot is room
    # for another chain of the process at once, not once its going has run out.
    assert sim.stats()["models"]["sim-chat"]["requests"] == 2
    assert deps.ledger.going("sim-chat", 1)


def test_a_chain_that_waited_in_place_reads_its_batch_again_so_a_cancel_meanwhile_starts_nothing(
    sim: Simulator, monkeypatch: pytest.MonkeyPatch, logged: list[logging.LogRecord]
) -> None:
    deps, _, message, _ = waiting_in_place(sim, monkeypatch, lambda d, b: batches.cancel_batch(d, ALICE, b))
    asyncio.run(run_message(deps, message, owner="w", deadline=deps.clock() + 900))
    assert sim.stats()["models"]["sim-chat"]["requests"] == 0
    assert [r.why for r in logged if r.getMessage() == "chain stopped"] == [Why.CANCELLED.value]  # type: ignore[attr-defined]


# Rounds in place of 0.25-0.5 s (the slot wait, jittered up to twice): one or two looks each
# (with ``short_rounds``).
SHORT_ROUNDS = {"BATCH_SLOT_WAIT_SECONDS": "0.25"}


def short_rounds(deps: Deps, monkeypatch: pytest.MonkeyPatch) -> None:
    tune(deps, monkeypatch, yield_round_seconds=0.25)


def in_place(deps: Deps, monkeypatch: pytest.MonkeyPatch, seconds: float) -> None:
    """BATCH_YIELD_IN_PLACE_SECONDS set to ``seconds`` (as an administrator's override would)."""
    changed = deps.settings.model_copy(update={"batch_yield_in_place_seconds": seconds})
    monkeypatch.setattr(deps.live, "settings", changed)


def test_a_chain_that_gave_way_waits_in_place_round_after_round_while_the_traffic_lasts(
    sim: Simulator, monkeypatch: pytest.MonkeyPatch, logged: list[logging.LogRecord]
) -> None:
    # The traffic ends at the sixth look: past the first round, which was all a chain
    # waited in place before it left for as long again.
    deps, batch_id, message, sent = waiting_in_place(sim, monkeypatch, ends_at_look=6, **SHORT_ROUNDS)
    short_rounds(deps, monkeypatch)
    reads = count_calls(monkeypatch, deps.batches, "get_record")
    asyncio.run(run_message(deps, message, owner="w", deadline=deps.clock() + 900))
    assert sent == [] and sim.stats()["models"]["sim-chat"]["requests"] == 2
    assert [r.why for r in logged if r.getMessage() == "chain stopped"] == [Why.FINISHED.value]  # type: ignore[attr-defined]
    assert [deps.requests.get(batch_id, i).status.value for i in (0, 1)] == ["succeeded"] * 2  # type: ignore[union-attr]
    # Read as the run starts and before its first request, and again after each round but the last.
    assert reads[0] >= 4


def test_a_chain_that_gave_way_leaves_once_it_has_waited_in_place_its_longest(
    sim: Simulator, monkeypatch: pytest.MonkeyPatch, logged: list[logging.LogRecord]
) -> None:
    deps, _, message, sent = waiting_in_place(sim, monkeypatch, ends_at_look=None, **SHORT_ROUNDS)
    short_rounds(deps, monkeypatch)
    in_place(deps, monkeypatch, 1.0)
    looks = count_calls(monkeypatch, model_gate, "share_of")
    notes = count_calls(monkeypatch, deps.slots, "wait")
    asyncio.run(run_message(deps, message, owner="w", deadline=deps.clock() + 900))
    assert sent == [message.resume_at(0, full=1)] and sim.stats()["models"]["sim-chat"]["requests"] == 0
    assert [r.why for r in logged if r.getMessage() == "chain stopped"] == [Why.YIELDED.value]  # type: ignore[attr-defined]
    # The first look before it waits, then more than one round in place, and 1 s of rounds at most.
    assert 1 + 2 <= looks[0] <= 1 + round(1.0 / deps.tuning.room_look_seconds)
    assert notes[0] >= 2  # noted waiting again for each further round


def test_a_cancel_while_a_chain_waits_in_place_ends_its_wait_at_the_round_and_starts_nothing(
    sim: Simulator, monkeypatch: pytest.MonkeyPatch, logged: list[logging.LogRecord]
) -> None:
    deps, batch_id, message, sent = waiting_in_place(sim, monkeypatch, ends_at_look=None, **SHORT_ROUNDS)
    short_rounds(deps, monkeypatch)
    real_share_of = model_gate.share_of
    looks = 0

    async def share_of(deps_: Deps, model: str) -> Any:
        nonlocal looks
        looks += 1
        if looks == 2:  # in the first round: the traffic goes on, the batch is cancelled
            batches.cancel_batch(deps, ALICE, batch_id)
        return await real_share_of(deps_, model)

    monkeypatch.setattr(model_gate, "share_of", share_of)
    asyncio.run(run_message(deps, message, owner="w", deadline=deps.clock() + 900))
    assert looks <= 1 + 2  # the first look (before it waits) and one round of two at most
    assert sent == [message.resume_at(0, full=1)]  # it left at the round's end ...
    assert [r.why for r in logged if r.getMessage() == "chain stopped"] == [Why.YIELDED.value]  # type: ignore[attr-defined]
    asyncio.run(run_message(deps, sent[0], owner="w", deadline=deps.clock() + 900))
    # ... and its next run, finding the batch cancelled, started nothing and sent nothing on.
    assert sim.stats()["models"]["sim-chat"]["requests"] == 0 and len(sent) == 1
    assert deps.requests.get(batch_id, 0).status.value == "queued"  # type: ignore[union-attr]  # the workflow's to settle


def count_calls(monkeypatch: pytest.MonkeyPatch, owner: Any, name: str) -> list[int]:
    """Count the calls of ``owner.name`` from now on (in a one-item list)."""
    calls = [0]
    real = getattr(owner, name)

    def counted(*args: Any, **kw: Any) -> Any:
        calls[0] += 1
        return real(*args, **kw)

    monkeypatch.setattr(owner, name, counted)
    return calls
