"""The reference interactive path on moto, driven by API Gateway v2 events through the
interactive function's handler against the simulator: a request passes straight to its
model, counts as one interactive request of this deployment's own while it runs (a lease,
renewed, removed at its end, expiring on its own if its process dies), is checked and
priced as a batch request is, is charged once, and answers errors in its SDK's shape."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from typing import Any

import pytest
from batchgw.api import auth
from batchgw.deps import Deps
from batchgw.domain.errors import ApiError
from batchgw.domain.interactive import OWN, InteractiveLoad
from batchgw.passthrough import load, serve
from batchgw.storage.slots import Hold, UserTake
from batchgw.storage.spend import Payer

from functions.interactive import handler as interactive
from local.simulator import Simulator
from tests.integration.conftest import make_deps
from tests.support import FakeClock, LambdaContext, http_event, wait_for

pytestmark = pytest.mark.usefixtures("aws_env")

CHAT = "/v1/chat/completions"
ALICE = Payer("user-alice", "key_local_alice")


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def deps(sim: Simulator, clock: FakeClock, monkeypatch: pytest.MonkeyPatch) -> Deps:
    built = make_deps(sim, clock)
    monkeypatch.setattr(interactive, "get_deps", lambda: built)
    return built


def call(
    path: str, body: Any, *, key: str | None = "sk-local-alice", headers: dict[str, str] | None = None
) -> tuple[int, Any, dict[str, str]]:
    response = interactive.handler(
        http_event("POST", path, key=key, body=body, headers=headers),
        LambdaContext(),  # type: ignore[arg-type]
    )
    return int(response["statusCode"]), json.loads(response["body"]), response.get("headers") or {}


def chat(text: str, model: str = "sim-chat", **fields: Any) -> dict[str, Any]:
    return {"model": model, "messages": [{"role": "user", "content": text}], **fields}


def spent_today(deps: Deps) -> int:
    return deps.spend.read(ALICE, deps.clock())[1].today


def requests_seen(sim: Simulator, model: str = "sim-chat") -> int:
    return int(sim.stats()["models"].get(model, {}).get("requests", 0))


def test_a_chat_request_passes_through_and_its_cost_is_charged_once_at_the_batch_price(
    deps: Deps, sim: Simulator
) -> None:
    status, body, _ = call(CHAT, chat("hello there"))
    assert status == 200, body
    assert body["object"] == "chat.completion" and body["choices"][0]["message"]["content"]
    usage = body["usage"]
    price = deps.catalog.models["sim-chat"].price
    assert price is not None
    cost = price.cost_nano(usage["prompt_tokens"], usage["completion_tokens"])
    assert cost > 0 and spent_today(deps) == cost
    assert call(CHAT, chat("hello there"))[0] == 200
    assert spent_today(deps) == 2 * cost  # each request once, never twice
    # The simulator was told it was interactive, not batch work.
    assert sim.stats()["latency"]["sim-chat"]["interactive"]["count"] == 2


def test_while_it_runs_it_counts_as_one_own_interactive_request_and_its_end_removes_it(
    deps: Deps, clock: FakeClock
) -> None:
    answered: list[int] = []
    running = threading.Thread(
        target=lambda: answered.append(call(CHAT, chat("[[sim latency_ms=1500]] hi"))[0])
    )
    running.start()
    wait_for(lambda: deps.interactive.reports(), timeout=5, what="the request to count as in flight")
    (report,) = deps.interactive.reports()
    assert report.source == OWN and report.reporter.startswith(load.REPORTER_PREFIX)
    assert report.models == {"sim-chat": 1}
    assert report.expires_at == pytest.approx(clock() + load.LEASE_SECONDS)
    counted = InteractiveLoad.of([report], clock())
    assert counted.own == {"sim-chat": 1} and counted.shared == {"sim-chat": 1}
    running.join(10)
    assert answered == [200]
    assert deps.interactive.reports() == []


def test_a_call_longer_than_its_lease_keeps_it_renewed(
    deps: Deps, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(load, "RENEW_SECONDS", 0.1)
    running = threading.Thread(target=lambda: call(CHAT, chat("[[sim latency_ms=1500]] hi")))
    running.start()
    wait_for(lambda: deps.interactive.reports(), timeout=5, what="the request to count as in flight")
    clock.advance(load.LEASE_SECONDS - 1)  # the first report is about to run out

    def renewed() -> bool:
        reports = deps.interactive.reports()
        return bool(reports) and reports[0].expires_at >= clock() + load.LEASE_SECONDS - 0.5

    wait_for(renewed, timeout=5, what="the lease to be renewed")
    running.join(10)


def test_a_renewal_under_way_when_the_request_ends_lands_before_its_removal(
    deps: Deps, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(load, "RENEW_SECONDS", 0.05)
    store = deps.interactive
    write, removed = store.report, threading.Event()
    renewing, release = threading.Event(), threading.Event()
    writes = 0

    def slow_write(*args: Any, **kwargs: Any) -> Any:
        nonlocal writes
        writes += 1
        if writes == 2:  # the first renewal is still being written when the request ends
            renewing.set()
            release.wait(10)
        return write(*args, **kwargs)

    def remove(reporter: str) -> bool:
        removed.set()
        return type(store).remove(store, reporter)

    monkeypatch.setattr(store, "report", slow_write)
    monkeypatch.setattr(store, "remove", remove)

    async def request() -> None:
        async with load.in_flight(deps, "sim-chat"):
            await asyncio.to_thread(renewing.wait, 10)

    async def run() -> None:
        ending = asyncio.create_task(request())
        # Removed while the renewal is still being written, it would be written after.
        await asyncio.to_thread(removed.wait, 1.0)
        release.set()
        await ending

    asyncio.run(run())
    assert removed.is_set() and writes == 2
    assert store.reports() == []  # nothing counts the ended request


def test_a_request_whose_process_dies_mid_call_stops_counting_when_its_lease_runs_out(
    deps: Deps, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The process dies before the request's end removes its report: nothing removes it.
    monkeypatch.setattr(deps.interactive, "remove", lambda reporter: None)
    assert call(CHAT, chat("hi"))[0] == 200
    reports = deps.interactive.reports()
    assert InteractiveLoad.of(reports, clock()).own == {"sim-chat": 1}
    assert InteractiveLoad.of(reports, clock() + load.LEASE_SECONDS).own == {}


def test_stream_true_is_refused_naming_the_limit_of_http_apis_in_each_sdks_shape(
    deps: Deps, sim: Simulator
) -> None:
    status, body, _ = call(CHAT, chat("hi", stream=True))
    assert status == 400
    assert body["error"]["code"] == "stream_unsupported" and body["error"]["param"] == "stream"
    assert "HTTP API" in body["error"]["message"]
    messages = {"model": "sim-claude", "max_tokens": 20, "messages": [{"role": "user", "content": "hi"}]}
    status, body, _ = call(
        "/v1/messages", {**messages, "stream": True}, headers={"anthropic-version": "2023-06-01"}
    )
    assert status == 400 and body["type"] == "error"
    assert body["error"]["type"] == "invalid_request_error" and "HTTP API" in body["error"]["message"]
    assert sim.stats()["models"] == {} or requests_seen(sim) == requests_seen(sim, "sim-claude") == 0


def test_a_body_a_batch_would_refuse_is_refused_alike_naming_its_field(deps: Deps, sim: Simulator) -> None:
    status, body, _ = call(CHAT, {"model": "sim-chat", "messages": [{"role": "robot", "content": "hi"}]})
    assert status == 400 and body["error"]["param"] == "messages[0].role"
    status, body, _ = call(CHAT, chat("hi", model="no-such-model"))
    assert status == 400 and body["error"]["code"] == "model_not_found" and body["error"]["param"] == "model"
    status, body, _ = call(CHAT, "{not json")
    assert status == 400 and "not valid JSON" in body["error"]["message"]
    status, body, _ = call("/v1/embeddings", {"model": "sim-chat", "input": "hi"})
    assert status == 400 and body["error"]["code"] == "model_unsupported"
    assert requests_seen(sim) == 0


def test_a_used_up_daily_quota_answers_429_and_calls_no_model(deps: Deps, sim: Simulator) -> None:
    deps.accounts.change_user("user-alice", {"daily_quota_nano": 1000})
    deps.spend.charge(ALICE, 1000, now=deps.clock(), shard=0)
    status, body, _ = call(CHAT, chat("hi"))
    assert status == 429 and body["error"]["code"] == "daily_quota_exceeded"
    assert requests_seen(sim) == 0
    assert deps.interactive.reports() == []


def test_upstream_errors_keep_their_status_but_a_refusal_of_the_gateways_credentials_is_a_502(
    deps: Deps,
) -> None:
    status, body, _ = call(CHAT, chat("[[sim status=429 retry_after=7]] hi"))
    assert status == 429 and body["error"]["type"] == "rate_limit_error"
    status, body, headers = call(CHAT, chat("[[sim status=400]] hi"))
    assert status == 400
    status, body, _ = call(CHAT, chat("[[sim status=401]] hi"))
    assert status == 502 and "refused the gateway's credentials" in body["error"]["message"]
    assert "sk-" not in json.dumps(body)
    status, body, headers = call(CHAT, chat("[[sim queued retry_after=30]] hi"))
    assert status == 503 and headers.get("Retry-After") == "30"
    assert deps.interactive.reports() == []


def test_messages_take_x_api_key_and_answer_errors_in_anthropics_shape(deps: Deps, sim: Simulator) -> None:
    body = {"model": "sim-claude", "max_tokens": 20, "messages": [{"role": "user", "content": "hi"}]}
    version = {"anthropic-version": "2023-06-01"}
    status, answer, _ = call(
        "/v1/messages", body, key=None, headers={**version, "x-api-key": "sk-local-alice"}
    )
    assert status == 200 and answer["type"] == "message" and answer["content"][0]["text"]
    status, answer, _ = call("/v1/messages", body)
    assert status == 400 and answer["error"]["type"] == "invalid_request_error"
    assert "anthropic-version" in answer["error"]["message"]
    status, answer, _ = call("/v1/messages", body, key=None, headers={**version, "x-api-key": "sk-nobody"})
    assert status == 401 and answer == {
        "type": "error",
        "error": {"type": "authentication_error", "message": answer["error"]["message"]},
    }
    status, answer, _ = call(CHAT, chat("hi"), key=None)
    assert status == 401 and answer["error"]["code"] == "invalid_api_key"


def test_a_route_batch_work_may_not_use_still_serves_interactive_requests(
    deps: Deps, clock: FakeClock
) -> None:
    spec = deps.catalog.models["sim-chat"]
    for route in spec.routes:
        deps.live.set_route_choice("sim-chat", route.id, False, by="test", now=clock())
    assert deps.live.batch_routes("sim-chat") == []
    started = time.monotonic()
    assert call(CHAT, chat("hi"))[0] == 200
    assert time.monotonic() - started < 5


def test_with_the_shared_load_off_its_requests_still_take_batch_slots_and_other_reporters_do_not(
    deps: Deps, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(
        deps.live, "settings", deps.settings.model_copy(update={"batch_shared_interactive_load": False})
    )
    deps.interactive.report("another-gateway", {"sim-chat": 5}, now=clock(), ttl_seconds=60)
    cap = deps.shares.share("sim-chat").cap
    running = threading.Thread(target=lambda: call(CHAT, chat("[[sim latency_ms=1500]] hi")))
    running.start()
    wait_for(lambda: len(deps.interactive.reports()) == 2, timeout=5, what="the request's own report")
    clock.advance(1.0)  # past the worker's cache of the load
    share = deps.shares.share("sim-chat")
    assert (share.interactive, share.slots) == (1, cap - 1)
    running.join(10)


# --- a burst against a small quota ------------------------------------------------------------


def burst(deps: Deps, bodies: list[dict[str, Any]]) -> list[int]:
    """Send ``bodies`` at once (concurrently, as many Lambda environments would) and give
    each answer's status: 200, or the refusal's."""
    principal = auth.authenticate(deps, "Bearer sk-local-alice")

    async def one(body: dict[str, Any]) -> int:
        try:
            reply = await serve.serve(
                deps, principal, CHAT, json.dumps(body).encode(), anthropic_version=None
            )
        except ApiError as exc:
            refused.append(str(exc.code))
            return exc.status
        return reply.status

    async def every() -> list[int]:
        return list(await asyncio.gather(*(one(body) for body in bodies)))

    refused: list[str] = []
    statuses = asyncio.run(every())
    assert set(refused) <= {"quota_reserved", "daily_quota_exceeded"}, refused
    return statuses


def test_a_burst_of_twenty_at_a_quota_of_three_requests_cost_spends_at_most_four(
    deps: Deps, sim: Simulator
) -> None:
    one = chat("[[sim latency_ms=400]] hello", max_tokens=3)
    assert call(CHAT, one)[0] == 200
    cost = spent_today(deps)  # what one such request costs
    assert cost > 0
    deps.accounts.change_user("user-alice", {"daily_quota_nano": cost + 3 * cost})
    statuses = burst(deps, [one] * 20)
    assert statuses.count(200) >= 1 and set(statuses) <= {200, 429}
    assert spent_today(deps) - cost <= 4 * cost  # before: all twenty ran and were charged
    assert requests_seen(sim) == 1 + statuses.count(200)  # a refused request called no model
    # Every hold was let go with its request's end.
    assert deps.user_slots.read("user-alice").interactive == {}
    assert deps.user_slots.read("user-alice").reserved(deps.clock()) == 0


def test_a_running_request_holds_its_most_cost_and_a_dead_ones_hold_expires_on_its_own(
    deps: Deps, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    deps.accounts.change_user("user-alice", {"daily_quota_nano": 10**9})
    # The process dies after its charge, before it lets its hold go: nothing releases it.
    monkeypatch.setattr(deps.user_slots, "release_interactive", lambda user_id, token: None)
    assert call(CHAT, chat("hi", max_tokens=3))[0] == 200
    slots = deps.user_slots.read("user-alice")
    (hold,) = slots.interactive.values()
    assert hold.reserved > 0 and hold.key_id == ALICE.key_id
    assert slots.reserved(clock()) == hold.reserved  # counts while it could still be running
    clock.advance(hold.until - clock() + 1)
    assert deps.user_slots.read("user-alice").reserved(clock()) == 0  # expired: counts for nothing
    assert call(CHAT, chat("hi", max_tokens=3))[0] == 200  # and the next request's hold removes it
    assert hold not in deps.user_slots.read("user-alice").interactive.values()


def test_interactive_and_batch_holds_count_together_and_neither_takes_the_others_place(deps: Deps) -> None:
    slots = deps.user_slots
    now = deps.clock()
    # An interactive hold first: the item exists before any batch slot map does.
    assert slots.hold_interactive(
        "user-bob", "i1", Hold(now + 60, reserved=70, key_id="kb"), version=0, gone=[]
    )
    assert (
        slots.take("user-bob", "b1", Hold(now + 60, reserved=30, key_id="kb"), cap=1, now=now)
        is UserTake.TAKEN
    )
    read = slots.read("user-bob")
    assert set(read.holds) == {"b1"} and set(read.interactive) == {"i1"}  # no batch slot taken by it
    assert read.reserved(now) == 100 and read.reserved(now, key_id="kb", besides="b1") == 70
    # A hold judged against an older version is refused: the reservations changed since.
    assert not slots.hold_interactive("user-bob", "i2", Hold(now + 60, reserved=1), version=0, gone=[])
    slots.release_interactive("user-bob", "i1")
    assert slots.read("user-bob").reserved(now) == 30
