"""Batches run on the provider's own batch service (the simulator's OpenAI and Anthropic
batch APIs), moved on by the workflow's provider step as the workflow would (moto, the
simulator): where a batch runs and why, its lines' ends and costs at the batch price,
cancel, the provider's failures, and a submit refused for its load."""

from __future__ import annotations

import json
import time
from typing import Any

import httpx
import pytest
from batchgw.api import batches, files
from batchgw.deps import Deps
from batchgw.domain.errors import ApiError
from batchgw.domain.principal import Principal
from batchgw.domain.states import RequestStatus
from batchgw.provider.executor import provider_step
from batchgw.run import ending, lifecycle

from functions.api import handler as api
from local.simulator import Simulator
from tests.integration.conftest import chat_request, make_deps, receive_all
from tests.integration.test_owner_gate import walk
from tests.support import FakeClock, LambdaContext, http_event

pytestmark = pytest.mark.usefixtures("aws_env")

ALICE = Principal(user_id="user-alice", role="internal", key_id="key_local_alice")


def create(deps: Deps, requests: list[dict[str, Any]], mode: str | None, **extra: Any) -> dict[str, Any]:
    body = {"requests": requests, **({"execution_mode": mode} if mode else {}), **extra}
    return batches.create_batch(deps, ALICE, json.dumps(body).encode(), **_version(requests))


def _version(requests: list[dict[str, Any]]) -> dict[str, Any]:
    messages = requests[0].get("url") == "/v1/messages"
    return {"anthropic_version": "2023-06-01"} if messages else {}


def control(sim: Simulator, path: str = "", **body: Any) -> Any:
    answer = httpx.post(f"{sim.url}/_sim/provider-batches{path}", json=body)
    answer.raise_for_status()
    return answer.json()


def provider_batches(sim: Simulator) -> list[dict[str, Any]]:
    return httpx.get(f"{sim.url}/_sim/provider-batches").json()["batches"]


def drive(deps: Deps, batch_id: str, *, steps: int = 20) -> dict[str, Any]:
    """Run the workflow's steps from prepare until it leaves the provider step."""
    routed = lifecycle.prepare(deps, batch_id)
    for _ in range(steps):
        if routed["next"] != "provider":
            break
        routed = provider_step(deps, batch_id)
    if routed["next"] == "cancel":
        routed = lifecycle.cancel(deps, batch_id)
    if routed["next"] == "expire":
        routed = lifecycle.expire(deps, batch_id)
    return routed


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def deps(sim: Simulator, clock: FakeClock) -> Deps:
    return make_deps(sim, clock)


def test_a_provider_mode_batch_runs_on_the_providers_batch_service_at_the_batch_price(
    deps: Deps, sim: Simulator
) -> None:
    requests = [chat_request(f"t-{i}", f"hello {i}") for i in range(5)]
    created = create(deps, requests, "provider")
    assert created["execution_mode"] == "provider" and created["execution_mode_reason"] == "requested"
    routed = drive(deps, created["id"])
    assert routed["next"] == "finalize"
    assert receive_all(deps) == []  # no chain ran any of it here
    [submitted] = provider_batches(sim)
    assert submitted["status"] == "completed"
    # Fresh provider-side ids: neither ours nor the user's custom_ids went to the provider.
    assert submitted["custom_ids"] == [f"r{i}" for i in range(5)]
    assert all(r.status is RequestStatus.SUCCEEDED for r in deps.requests.all(created["id"]))
    ending.finalize(deps, created["id"])
    batch = deps.batches.get(created["id"])
    assert batch is not None and batch.record.status.value == "completed"
    # Each line is in the request log as its route's call, at what it was charged.
    entries, _ = deps.reqlog.page("batch", start_ms=0, end_ms=10**15 - 1, before=None, limit=100)
    logged = [entry for _, entry in entries if entry.batch_id == created["id"]]
    assert sorted(entry.index for entry in logged) == list(range(5))
    [route] = {entry.route for entry in logged}
    assert route in {r.id for r in deps.catalog.models["sim-chat"].routes}
    assert sum(entry.cost_nano or 0 for entry in logged) == batch.counts.cost_nano > 0
    # ... and counted in its hour's request counts, written before the step answered.
    hour = int(min(entry.ended_at for entry in logged) // 3600)
    assert sum(counts.batch for counts in deps.reqlog.hours(hour, hour + 1).values()) == 5
    # The same requests run by the gateway cost twice as much (sim-chat's batch discount: 0.5).
    gateway = create(deps, requests, None)
    lifecycle.prepare(deps, gateway["id"])
    receive_all(deps)
    walk(deps, gateway["id"])
    ran_here = deps.batches.get(gateway["id"])
    assert ran_here is not None and ran_here.counts.cost_nano > 0
    assert batch.counts.cost_nano * 2 == ran_here.counts.cost_nano
    assert batch.counts.input_tokens == ran_here.counts.input_tokens


def test_auto_runs_on_the_provider_when_its_batch_price_is_lower_and_says_why(deps: Deps) -> None:
    on_provider = create(deps, [chat_request("a", "hi")], "auto")
    assert (on_provider["execution_mode"], on_provider["execution_mode_reason"]) == (
        "provider",
        "provider_batch_price_cheaper",
    )
    here = create(deps, [chat_request("a", "hi", model="sim-chat-only")], "auto")
    assert (here["execution_mode"], here["execution_mode_reason"]) == ("gateway", "no_provider_batch_route")
    longer = create(deps, [chat_request("a", "hi")], "auto", completion_window="48h")
    assert (longer["execution_mode"], longer["execution_mode_reason"]) == ("gateway", "window_not_24h")
    aliased = create(deps, [chat_request("a", "hi")], None, metadata={"omg_mode": "auto"})
    assert aliased["execution_mode"] == "provider"


def test_provider_mode_without_a_batch_priced_route_is_refused_with_batch_not_supported(deps: Deps) -> None:
    with pytest.raises(ApiError) as refused:
        create(deps, [chat_request("a", "hi", model="sim-chat-only")], "provider")
    assert (refused.value.status, refused.value.code) == (403, "batch_not_supported")


def test_an_anthropic_batch_runs_on_the_message_batches_api_and_errored_lines_fail(
    deps: Deps, sim: Simulator
) -> None:
    requests = [
        {
            "custom_id": f"m-{i}",
            "url": "/v1/messages",
            "body": {
                "model": "sim-claude",
                "max_tokens": 50,
                "messages": [{"role": "user", "content": "hi" if i else "hi [[sim status=400]]"}],
            },
        }
        for i in range(3)
    ]
    created = create(deps, requests, "provider")
    assert drive(deps, created["id"])["next"] == "finalize"
    [submitted] = provider_batches(sim)
    assert submitted["provider"] == "anthropic" and submitted["custom_ids"] == ["r0", "r1", "r2"]
    ended = {r.custom_id: r for r in deps.requests.all(created["id"])}
    assert ended["m-0"].status is RequestStatus.FAILED
    assert ended["m-1"].status is ended["m-2"].status is RequestStatus.SUCCEEDED
    assert submitted["id"] not in json.dumps(ended["m-0"].error)


def test_a_cancel_cancels_the_provider_batch_and_keeps_what_finished(deps: Deps, sim: Simulator) -> None:
    control(sim, auto_seconds=None)  # the provider holds every batch until told
    created = create(deps, [chat_request(f"c-{i}", "hi") for i in range(4)], "provider")
    routed = lifecycle.prepare(deps, created["id"])
    routed = provider_step(deps, created["id"])  # submitted
    assert routed["next"] == "provider"
    [submitted] = provider_batches(sim)
    control(sim, f"/{submitted['id']}", action="partial", lines=2)
    batches.cancel_batch(deps, ALICE, created["id"])
    routed = drive(deps, created["id"])
    assert routed["next"] == "finalize"
    [after] = provider_batches(sim)
    assert after["status"] == "cancelled"
    statuses = [r.status for r in deps.requests.all(created["id"])]
    assert statuses == [RequestStatus.SUCCEEDED] * 2 + [RequestStatus.CANCELLED] * 2


def test_a_cancel_wakes_the_wait_for_the_next_poll_once_and_the_provider_hears_of_it_then(
    deps: Deps, sim: Simulator
) -> None:
    from batchgw.provider.executor import provider_park

    woken = deps.workflow.woken  # type: ignore[attr-defined]
    control(sim, auto_seconds=None)
    created = create(deps, [chat_request(f"c-{i}", "hi") for i in range(2)], "provider")
    lifecycle.prepare(deps, created["id"])
    assert provider_step(deps, created["id"])["wait_seconds"] > 0  # submitted: the next poll waits
    provider_park(deps, created["id"], "wait-1")
    assert woken == []  # nothing to do before the poll is due
    batches.cancel_batch(deps, ALICE, created["id"])
    assert woken == [("wait-1", {"next": "provider", "wait_seconds": 0})]  # to the provider step
    assert provider_step(deps, created["id"])["next"] == "provider"
    [after] = provider_batches(sim)
    assert after["status"] == "cancelled" and after["polls"] == 1  # told at once, not at a poll
    provider_park(deps, created["id"], "wait-2")
    assert len(woken) == 1  # the step saw the cancel: the next wait is not cut short again
    assert drive(deps, created["id"])["next"] == "finalize"


def test_a_cancel_that_came_while_the_provider_step_ran_wakes_its_next_wait_at_once(
    deps: Deps, sim: Simulator
) -> None:
    from batchgw.provider.executor import provider_park

    control(sim, auto_seconds=None)
    created = create(deps, [chat_request("r", "hi")], "provider")
    lifecycle.prepare(deps, created["id"])
    provider_step(deps, created["id"])  # submitted, the batch not stopping as it looked
    deps.batches.cancel(created["id"], at=1)  # no token was kept: nothing to wake yet
    provider_park(deps, created["id"], "wait-1")
    assert deps.workflow.woken == [("wait-1", {"next": "provider", "wait_seconds": 0})]  # type: ignore[attr-defined]


def test_what_a_provider_batch_left_at_the_provider_is_deleted_once_its_lines_are_recorded(
    deps: Deps, sim: Simulator
) -> None:
    chats = [chat_request(f"k-{i}", "hi" if i else "hi [[sim status=400]]") for i in range(3)]
    openai = create(deps, chats, "provider")
    assert drive(deps, openai["id"])["next"] == "finalize"
    listed = httpx.get(f"{sim.url}/_sim/provider-batches").json()
    assert listed["files"] == [] and len(listed["deleted_files"]) == 3  # input, output, errors
    messages = create(deps, _messages(2), "provider")
    assert drive(deps, messages["id"])["next"] == "finalize"
    anthropic = [b for b in provider_batches(sim) if b["provider"] == "anthropic"]
    assert [b["deleted"] for b in anthropic] == [True]
    assert all(p.cleaned for p in deps.provider_parts.parts(messages["id"]))
    requests = [*deps.requests.all(openai["id"]), *deps.requests.all(messages["id"])]
    assert [r.status.value for r in requests] == ["failed"] + ["succeeded"] * 4


def test_a_provider_that_cannot_delete_a_collected_batch_yet_is_asked_again_at_the_next_step(
    sim: Simulator, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    from batchgw.provider import services

    deps = make_deps(sim, clock, BATCH_PROVIDER_MAX_LINES="1")  # a provider batch per request
    control(sim, auto_seconds=None)
    created = create(deps, [chat_request(f"u-{i}", "hi") for i in range(2)], "provider")
    lifecycle.prepare(deps, created["id"])
    provider_step(deps, created["id"])  # both submitted
    first, second = provider_batches(sim)
    control(sim, f"/{first['id']}", action="complete")
    real = services.BatchService.discard

    def unreachable(self: Any, *args: Any) -> None:
        raise httpx.ConnectError("the provider is unreachable")

    monkeypatch.setattr(services.BatchService, "discard", unreachable)
    assert provider_step(deps, created["id"])["next"] == "provider"  # the first collected, kept there
    assert [(p.status.value, p.cleaned) for p in deps.provider_parts.parts(created["id"])] == [
        ("collected", False),
        ("submitted", False),
    ]
    monkeypatch.setattr(services.BatchService, "discard", real)
    control(sim, f"/{second['id']}", action="complete")
    assert provider_step(deps, created["id"])["next"] == "finalize"
    assert all(p.cleaned for p in deps.provider_parts.parts(created["id"]))
    listed = httpx.get(f"{sim.url}/_sim/provider-batches").json()
    assert listed["files"] == [] and len(listed["deleted_files"]) == 4  # each batch's input and output


def test_a_long_collect_stops_in_time_and_the_next_step_goes_on_from_its_last_chunk(
    sim: Simulator, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    from batchgw.provider import collecting

    deps = make_deps(sim, clock, BATCH_WORKER_TIMEOUT_SECONDS="20")  # a step collects for 10 s at most
    created = create(deps, [chat_request(f"s-{i}", "hi") for i in range(25)], "provider")
    lifecycle.prepare(deps, created["id"])
    provider_step(deps, created["id"])  # submitted
    real = collecting.attempt.settle

    async def a_second_each(*args: Any, **kwargs: Any) -> Any:
        clock.advance(1)
        return await real(*args, **kwargs)

    monkeypatch.setattr(collecting.attempt, "settle", a_second_each)
    assert provider_step(deps, created["id"]) == {"next": "provider", "wait_seconds": 0}
    [part] = deps.provider_parts.parts(created["id"])
    assert (part.status.value, part.collected) == ("submitted", 10)
    assert provider_step(deps, created["id"]) == {"next": "provider", "wait_seconds": 0}
    assert deps.provider_parts.parts(created["id"])[0].collected == 20
    assert provider_step(deps, created["id"])["next"] == "finalize"
    statuses = [r.status for r in deps.requests.all(created["id"])]
    assert statuses == [RequestStatus.SUCCEEDED] * 25
    batch = deps.batches.get(created["id"])
    assert batch is not None and batch.counts.completed == 25  # each line counted once


def test_the_retry_of_a_provider_batch_runs_on_the_providers_batch_service_too(
    deps: Deps, sim: Simulator
) -> None:
    from batchgw.api import retry

    requests = [chat_request(f"y-{i}", "hi" if i else "hi [[sim status=400]]") for i in range(3)]
    parent = create(deps, requests, "provider")
    drive(deps, parent["id"])
    ending.finalize(deps, parent["id"])
    child = retry.retry_batch(deps, ALICE, parent["id"], b"", None)
    assert (child["execution_mode"], child["execution_mode_reason"]) == ("provider", "requested")
    assert drive(deps, child["id"])["next"] == "finalize"
    assert [b["custom_ids"] for b in provider_batches(sim)] == [["r0", "r1", "r2"], ["r0"]]
    here = retry.retry_batch(deps, ALICE, parent["id"], b'{"execution_mode": "gateway"}', None)
    assert here["execution_mode"] == "gateway"  # where the retry's body says


def test_a_full_provider_queue_is_tried_again_later_or_an_auto_batch_runs_here(
    deps: Deps, sim: Simulator
) -> None:
    control(sim, submit_failure="queue_full")
    asked = create(deps, [chat_request("q", "hi")], "provider")
    lifecycle.prepare(deps, asked["id"])
    routed = provider_step(deps, asked["id"])
    assert routed["next"] == "provider" and routed["wait_seconds"] >= 30  # tried again later
    [part] = deps.provider_parts.parts(asked["id"])
    assert part.error is not None and part.error["code"] == "provider_batch_queue_full"
    auto = create(deps, [chat_request("q", "hi")], "auto")
    lifecycle.prepare(deps, auto["id"])
    routed = provider_step(deps, auto["id"])
    assert routed["next"] == "park"  # its chains run it
    record = deps.batches.get_record(auto["id"])
    assert record is not None
    assert (record.execution_mode, record.mode_reason) == ("gateway", "provider_submit_failed")
    assert receive_all(deps)  # the chains were sent


def _step_losing_the_submits_answer(
    deps: Deps, batch_id: str, monkeypatch: pytest.MonkeyPatch
) -> dict[str, Any]:
    """One provider step whose submit reaches the provider but whose answer is lost."""
    from batchgw.provider import services

    real = services.BatchService.submit

    def lost(self: Any, *args: Any, **kwargs: Any) -> Any:
        real(self, *args, **kwargs)
        raise httpx.ReadTimeout("the answer was lost")

    with monkeypatch.context() as patched:
        patched.setattr(services.BatchService, "submit", lost)
        return provider_step(deps, batch_id)


def test_a_submit_whose_answer_was_lost_is_found_by_its_mark_not_sent_twice(
    deps: Deps, sim: Simulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    created = create(deps, [chat_request("l", "hi")], "provider")
    lifecycle.prepare(deps, created["id"])
    assert _step_losing_the_submits_answer(deps, created["id"], monkeypatch)["next"] == "provider"
    [part] = deps.provider_parts.parts(created["id"])
    assert part.status.value == "submitting" and part.provider_batch_id is None
    routed = provider_step(deps, created["id"])  # finds it by its mark
    for _ in range(5):
        if routed["next"] != "provider":
            break
        routed = provider_step(deps, created["id"])
    assert routed["next"] == "finalize"
    assert len(provider_batches(sim)) == 1
    [request] = deps.requests.all(created["id"])
    assert request.status is RequestStatus.SUCCEEDED


def test_the_admin_models_list_says_where_a_models_batches_may_run_on_a_provider(deps: Deps) -> None:
    from batchgw.api import admin

    admin_principal = Principal(user_id="user-admin", role="admin", key_id="key_local_admin")
    models = {m["id"]: m for m in admin.list_models(deps, admin_principal)["data"]}
    assert models["sim-chat"]["provider_batch"] == {
        "route": "cloud",
        "protocol": "openai",
        "batch_endpoints": ["/v1/chat/completions", "/v1/responses"],
        "batch_price": {"input_per_mtok": 0.25, "output_per_mtok": 0.75},
    }
    assert models["sim-claude"]["provider_batch"]["protocol"] == "anthropic"
    assert models["sim-chat-only"]["provider_batch"] is None


def test_a_provider_batch_that_could_cost_more_than_the_quota_leaves_is_refused_at_create(
    deps: Deps, sim: Simulator
) -> None:
    from tests.integration.test_owner_gate import set_user

    requests = [chat_request(f"b-{i}", "hi") for i in range(10)]  # up to 16,384 output tokens each
    set_user(deps, "user-alice", daily_quota_usd=0.05)  # under 10 x 16,384 x $0.75 / M
    with pytest.raises(ApiError) as refused:
        create(deps, requests, "provider")
    assert (refused.value.status, refused.value.code) == (429, "budget_exceeded")
    assert provider_batches(sim) == []
    set_user(deps, "user-alice", daily_quota_usd=1.0)
    assert create(deps, requests, "provider")["execution_mode"] == "provider"


def test_a_provider_batch_over_the_quota_when_its_requests_are_read_fails_budget_exceeded_sending_nothing(
    deps: Deps, sim: Simulator
) -> None:
    # A file batch's requests are known only once its file is read: the provider step checks
    # them before it sends anything (an inline batch's create checked them already; here the
    # quota fell meanwhile).
    from tests.integration.test_owner_gate import set_user

    created = create(deps, [chat_request(f"q-{i}", "hi") for i in range(10)], "provider")
    set_user(deps, "user-alice", daily_quota_usd=0.05)
    assert drive(deps, created["id"])["next"] == "finalize"
    assert ending.finalize(deps, created["id"])["status"] == "failed"
    batch = deps.batches.get_record(created["id"])
    assert batch is not None and batch.error is not None and batch.error["code"] == "budget_exceeded"
    assert provider_batches(sim) == []
    assert {r.status for r in deps.requests.all(created["id"])} == {RequestStatus.FAILED}


def test_omg_retries_runs_a_line_the_provider_failed_again_in_a_new_provider_batch(
    deps: Deps, sim: Simulator
) -> None:
    requests = [chat_request("ok", "hi"), chat_request("flaky", "hi [[sim status=400 fail=1]]")]
    created = create(deps, requests, "provider", metadata={"omg_retries": "1"})
    assert drive(deps, created["id"])["next"] == "finalize"
    submitted = sorted(b["custom_ids"] for b in provider_batches(sim))
    assert submitted == [["r0", "r1"], ["r1"]]  # the whole batch, then the line that failed
    ended = {r.custom_id: r for r in deps.requests.all(created["id"])}
    assert ended["flaky"].status is RequestStatus.SUCCEEDED and ended["flaky"].attempts == 2
    assert ended["ok"].attempts == 1


def test_a_window_that_closes_cancels_the_provider_batch_and_expires_what_it_did_not_run(
    deps: Deps, sim: Simulator, clock: FakeClock
) -> None:
    control(sim, auto_seconds=None)
    created = create(deps, [chat_request(f"w-{i}", "hi") for i in range(3)], "provider")
    lifecycle.prepare(deps, created["id"])
    assert provider_step(deps, created["id"])["next"] == "provider"  # submitted
    [submitted] = provider_batches(sim)
    control(sim, f"/{submitted['id']}", action="partial", lines=1)
    clock.advance(24 * 3600 + 1)  # the batch's window closed
    routed = drive(deps, created["id"])
    assert routed["next"] == "finalize"
    [after] = provider_batches(sim)
    assert after["status"] == "cancelled"
    statuses = [r.status for r in deps.requests.all(created["id"])]
    assert statuses == [RequestStatus.SUCCEEDED, RequestStatus.EXPIRED, RequestStatus.EXPIRED]
    ending.finalize(deps, created["id"])
    record = deps.batches.get_record(created["id"])
    assert record is not None and record.status.value == "expired"


def test_a_collect_that_dies_goes_on_from_the_lines_it_recorded(
    deps: Deps, sim: Simulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    from batchgw.provider import collecting

    created = create(deps, [chat_request(f"d-{i}", "hi") for i in range(25)], "provider")
    lifecycle.prepare(deps, created["id"])
    assert provider_step(deps, created["id"])["next"] == "provider"  # submitted
    real, settled = collecting.attempt.settle, [0]

    async def dying(*args: Any, **kwargs: Any) -> Any:
        settled[0] += 1
        if settled[0] == 15:  # in the second chunk of ten
            raise RuntimeError("the step died")
        return await real(*args, **kwargs)

    monkeypatch.setattr(collecting.attempt, "settle", dying)
    with pytest.raises(RuntimeError):
        provider_step(deps, created["id"])
    [part] = deps.provider_parts.parts(created["id"])
    assert part.collected == 10
    claims, real_claim = [0], deps.requests.claim

    def counted(*args: Any, **kwargs: Any) -> Any:
        claims[0] += 1
        return real_claim(*args, **kwargs)

    monkeypatch.setattr(deps.requests, "claim", counted)
    assert provider_step(deps, created["id"])["next"] == "finalize"
    assert claims[0] == 15  # the lines from the eleventh on, none before
    assert all(r.status is RequestStatus.SUCCEEDED for r in deps.requests.all(created["id"]))


def test_a_step_that_died_takes_its_own_requests_back_without_a_lost_attempt(
    deps: Deps, sim: Simulator, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    from batchgw.provider import collecting

    created = create(deps, [chat_request(f"o-{i}", "hi") for i in range(3)], "provider")
    lifecycle.prepare(deps, created["id"])
    assert provider_step(deps, created["id"])["next"] == "provider"  # submitted
    real = collecting.attempt.settle

    async def dying(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("the step died holding its claims")

    monkeypatch.setattr(collecting.attempt, "settle", dying)
    with pytest.raises(RuntimeError):
        provider_step(deps, created["id"])
    monkeypatch.setattr(collecting.attempt, "settle", real)
    clock.advance(deps.settings.batch_lease_seconds + 1)  # its claims' leases ran out meanwhile
    assert provider_step(deps, created["id"])["next"] == "finalize"
    ended = list(deps.requests.all(created["id"]))
    assert [(r.status, r.attempts, r.lost) for r in ended] == [(RequestStatus.SUCCEEDED, 1, 0)] * 3


def _messages(n: int) -> list[dict[str, Any]]:
    body = {"model": "sim-claude", "max_tokens": 20, "messages": [{"role": "user", "content": "hi"}]}
    return [{"custom_id": f"m-{i}", "url": "/v1/messages", "body": body} for i in range(n)]


def _steps(deps: Deps, batch_id: str, n: int = 6) -> dict[str, Any]:
    routed = provider_step(deps, batch_id)
    for _ in range(n):
        if routed["next"] != "provider" or routed.get("wait_seconds", 0) > 0:
            break
        routed = provider_step(deps, batch_id)
    return routed


def test_a_lost_anthropic_submit_is_sent_again_and_the_batch_it_left_is_cancelled_once_no_step_can_claim_it(
    sim: Simulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = FakeClock(time.time())  # the simulator dates its batches by the real clock
    deps = make_deps(sim, clock)
    control(sim, auto_seconds=None)
    created = create(deps, _messages(3), "provider")
    lifecycle.prepare(deps, created["id"])
    _step_losing_the_submits_answer(deps, created["id"], monkeypatch)
    # Anthropic keeps no mark to find the batch by: the part is submitted again, noting when.
    routed = _steps(deps, created["id"])
    assert routed["next"] == "provider"
    [part] = deps.provider_parts.parts(created["id"])
    assert part.suspect_to is not None and part.provider_batch_id is not None
    orphan, ours = sorted(provider_batches(sim), key=lambda b: b["id"] == part.provider_batch_id)
    assert ours["id"] == part.provider_batch_id and orphan["status"] == "in_progress"

    # Until no step could still claim it, the batch the lost submit made is left alone; then
    # it is cancelled, and ours (made in the same moments, with as many lines) is not.
    provider_step(deps, created["id"])
    assert {b["id"]: b["status"] for b in provider_batches(sim)}[orphan["id"]] == "in_progress"
    clock.advance(deps.settings.batch_worker_timeout_seconds + 61)
    provider_step(deps, created["id"])
    statuses = {b["id"]: b["status"] for b in provider_batches(sim)}
    assert statuses[orphan["id"]] in ("cancelling", "cancelled") and statuses[ours["id"]] == "in_progress"
    [part] = deps.provider_parts.parts(created["id"])
    assert part.suspect_to is None

    control(sim, f"/{ours['id']}", action="complete")
    assert _steps(deps, created["id"])["next"] == "finalize"
    ended = deps.requests.all(created["id"])
    assert all(r.status is RequestStatus.SUCCEEDED and r.attempts == 1 for r in ended)


def test_a_step_that_died_before_recording_its_anthropic_batch_finds_it_by_the_note_that_it_is_ours(
    sim: Simulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    from batchgw.domain.provider import PartStatus
    from batchgw.storage.provider import ProviderParts

    deps = make_deps(sim, FakeClock(time.time()))  # the simulator dates its batches by the real clock
    control(sim, auto_seconds=None)
    created = create(deps, _messages(2), "provider")
    lifecycle.prepare(deps, created["id"])
    real = ProviderParts.save

    def dies_recording(self: ProviderParts, batch_id: str, part: Any) -> Any:
        if part.status is PartStatus.SUBMITTED:
            raise RuntimeError("the step died")
        return real(self, batch_id, part)

    monkeypatch.setattr(ProviderParts, "save", dies_recording)
    with pytest.raises(RuntimeError):
        provider_step(deps, created["id"])
    monkeypatch.setattr(ProviderParts, "save", real)
    _steps(deps, created["id"])  # the workflow tries the step again
    [made] = provider_batches(sim)  # found, not sent twice
    [part] = deps.provider_parts.parts(created["id"])
    assert part.provider_batch_id == made["id"] and part.suspect_to is None
    control(sim, f"/{made['id']}", action="complete")
    assert _steps(deps, created["id"])["next"] == "finalize"
    assert {r.status for r in deps.requests.all(created["id"])} == {RequestStatus.SUCCEEDED}


# --- media a provider's batch service cannot fetch (spec 003) ------------------------------------

UNFETCHABLE = [
    "data:image/png;base64,iVBORw0KGgo=",
    "http://127.0.0.1/cat.png",
    "http://10.0.0.7/cat.png",
    "http://localhost:8080/cat.png",
    "http://[::1]/cat.png",
    "http://169.254.10.20/cat.png",
]


def image_request(custom_id: str, url: str) -> dict[str, Any]:
    content = [{"type": "text", "text": "what is this?"}, {"type": "image_url", "image_url": {"url": url}}]
    return {
        "custom_id": custom_id,
        "body": {"model": "sim-chat", "messages": [{"role": "user", "content": content}]},
    }


def post_batch(deps: Deps, monkeypatch: pytest.MonkeyPatch, body: dict[str, Any]) -> tuple[int, Any]:
    monkeypatch.setattr(api, "get_deps", lambda: deps)
    answer = api.handler(http_event("POST", "/v1/batches", body=body), LambdaContext())  # type: ignore[arg-type]
    return int(answer["statusCode"]), json.loads(answer["body"])


@pytest.mark.parametrize("url", UNFETCHABLE)
def test_media_a_provider_batch_cannot_fetch_is_refused_unsupported_batch_media_and_nothing_is_stored(
    deps: Deps, sim: Simulator, monkeypatch: pytest.MonkeyPatch, url: str
) -> None:
    requests = [chat_request("plain", "hello"), image_request("pic", url)]
    status, body = post_batch(deps, monkeypatch, {"requests": requests, "execution_mode": "provider"})
    assert status == 400
    assert body["error"]["code"] == "unsupported_batch_media"
    assert body["error"]["param"] == "requests[1].body.messages[0].content[1].image_url.url"
    assert "custom_id 'pic'" in body["error"]["message"]
    assert batches.list_batches(deps, ALICE, {})["data"] == []
    assert deps.workflow.started == [] and provider_batches(sim) == []  # type: ignore[attr-defined]


def test_vendor_file_ids_and_inline_base64_are_refused_for_a_provider_batch(
    deps: Deps, monkeypatch: pytest.MonkeyPatch
) -> None:
    file_part = {"type": "file", "file": {"file_id": "file-abc123"}}
    chat = {"model": "sim-chat", "messages": [{"role": "user", "content": [file_part]}]}
    status, body = post_batch(
        deps, monkeypatch, {"requests": [{"custom_id": "f", "body": chat}], "execution_mode": "provider"}
    )
    assert (status, body["error"]["code"]) == (400, "unsupported_batch_media")
    assert body["error"]["param"] == "requests[0].body.messages[0].content[0].file.file_id"
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}}
    claude = {"model": "sim-claude", "max_tokens": 16, "messages": [{"role": "user", "content": [image]}]}
    monkeypatch.setattr(api, "get_deps", lambda: deps)
    answer = api.handler(
        http_event(
            "POST",
            "/v1/batches",
            body={
                "requests": [{"custom_id": "c", "url": "/v1/messages", "body": claude}],
                "execution_mode": "provider",
            },
            headers={"anthropic-version": "2023-06-01"},
        ),
        LambdaContext(),  # type: ignore[arg-type]
    )
    error = json.loads(answer["body"])["error"]
    assert (answer["statusCode"], error["code"]) == (400, "unsupported_batch_media")
    assert error["param"] == "requests[0].body.messages[0].content[0].source"


def test_a_public_media_url_runs_on_the_provider_and_a_gateway_run_batch_keeps_todays_rule(
    deps: Deps, monkeypatch: pytest.MonkeyPatch
) -> None:
    public = [image_request("pic", "https://example.com/cat.png")]
    status, body = post_batch(deps, monkeypatch, {"requests": public, "execution_mode": "provider"})
    assert status == 200 and body["execution_mode"] == "provider"
    # Run here, the same media go as an interactive request's would (README: deliberate differences).
    local = [image_request(f"pic-{i}", url) for i, url in enumerate(UNFETCHABLE)]
    status, body = post_batch(deps, monkeypatch, {"requests": local})
    assert status == 200 and body["execution_mode"] == "gateway"


def test_a_provider_file_batch_with_unfetchable_media_fails_validation_naming_the_line(
    deps: Deps, sim: Simulator
) -> None:
    lines = [
        {
            "custom_id": "a",
            "method": "POST",
            "url": "/v1/chat/completions",
            "body": chat_request("a", "hi")["body"],
        },
        {
            "custom_id": "b",
            "method": "POST",
            "url": "/v1/chat/completions",
            **image_request("b", UNFETCHABLE[1]),
        },
    ]
    data = "\n".join(json.dumps(line) for line in lines).encode()
    upload = files.upload_file(deps, ALICE, "multipart/form-data; boundary=B", multipart(data))
    raw = {"input_file_id": upload["id"], "endpoint": "/v1/chat/completions", "completion_window": "24h"}
    created = batches.create_batch(deps, ALICE, json.dumps({**raw, "execution_mode": "provider"}).encode())
    lifecycle.prepare(deps, created["id"])
    failed = batches.get_batch(deps, ALICE, created["id"])
    assert failed["status"] == "failed" and failed["error"]["code"] == "unsupported_batch_media"
    problem = failed["errors"]["data"][0]
    assert problem["line"] == 2 and problem["param"] == "body.messages[0].content[1].image_url.url"
    assert provider_batches(sim) == []


def multipart(data: bytes) -> bytes:
    return (
        b'--B\r\nContent-Disposition: form-data; name="purpose"\r\n\r\nbatch\r\n'
        b'--B\r\nContent-Disposition: form-data; name="file"; filename="in.jsonl"\r\n\r\n'
        + data
        + b"\r\n--B--\r\n"
    )
