"""A batch run on its provider's batch service keeps a gateway-run batch's promises (moto,
the simulator's batch APIs, the injected clock), each proven with the provider's own count
of the lines it was sent: its key and owner are checked again (a revoked key, a suspended or
deleted owner fail it and nothing more reaches the provider; a role below BATCH_MIN_ROLE
pauses it), BATCH_ENABLED off sends nothing to the provider, a route an administrator
forbade takes nothing, a provider batch the provider lost ends its part, and a delete
leaves nothing running or stored at the provider."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from batchgw.api import accounts, admin, batches, files
from batchgw.deps import Deps
from batchgw.domain.errors import ApiError
from batchgw.domain.principal import Principal
from batchgw.domain.provider import PartStatus
from batchgw.domain.states import RequestStatus
from batchgw.provider.cleanup import provider_purge
from batchgw.provider.executor import provider_park, provider_step
from batchgw.run import ending, lifecycle

from local.simulator import Simulator
from tests.integration.conftest import chat_request, make_deps, receive_all
from tests.integration.test_owner_gate import walk
from tests.integration.test_provider_batches import ALICE, _messages, control, create, drive
from tests.support import FakeClock

pytestmark = pytest.mark.usefixtures("aws_env")

ADMIN = Principal(user_id="user-admin", role="admin", key_id="key_local_admin")
# Accounts read afresh at each step, a paused batch checked again a minute on.
FAST = {"BATCH_OWNER_CACHE_SECONDS": "0", "BATCH_QUOTA_RECHECK_SECONDS": "60"}


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def deps(sim: Simulator, clock: FakeClock) -> Deps:
    return make_deps(sim, clock, **FAST)


def listed(sim: Simulator) -> dict[str, Any]:
    return dict(httpx.get(f"{sim.url}/_sim/provider-batches").json())


def lines_sent(sim: Simulator) -> int:
    """The provider's own count of the lines it was sent in batches."""
    return int(listed(sim)["lines"])


def held_batch(deps: Deps, sim: Simulator, n: int = 4, mode: str = "provider") -> str:
    """A provider-run batch of ``n`` chat requests, submitted, that the provider holds."""
    control(sim, auto_seconds=None)
    created = create(deps, [chat_request(f"h-{i}", f"hi {i}") for i in range(n)], mode)
    lifecycle.prepare(deps, created["id"])
    assert provider_step(deps, created["id"])["next"] == "provider"  # submitted
    assert lines_sent(sim) == n
    return str(created["id"])


def refused_batch(deps: Deps, sim: Simulator, mode: str = "provider") -> str:
    """A provider-run batch of three requests whose submit the provider refused for its load:
    planned, to be tried again 30 s on; nothing sent."""
    control(sim, submit_failure="rate_limited")
    created = create(deps, [chat_request(f"p-{i}", f"hi {i}") for i in range(3)], mode)
    lifecycle.prepare(deps, created["id"])
    routed = provider_step(deps, created["id"])
    assert routed["next"] == "provider" and routed["wait_seconds"] >= 30
    control(sim, submit_failure=None)
    return str(created["id"])


def until_final(deps: Deps, batch_id: str) -> dict[str, Any]:
    routed = drive(deps, batch_id)
    assert routed["next"] == "finalize", routed
    ending.finalize(deps, batch_id)
    return batches.get_batch(deps, ADMIN, batch_id)


def request_ends(deps: Deps, batch_id: str) -> list[tuple[str, str | None]]:
    return [
        (r.status.value, None if r.error is None else r.error.get("code"))
        for r in deps.requests.all(batch_id)
    ]


# --- the key and the owner ------------------------------------------------------------------


def _revoke(deps: Deps) -> None:
    accounts.revoke_key(deps, ADMIN, "key_local_alice")


def _suspend(deps: Deps) -> None:
    accounts.update_user(deps, ADMIN, "user-alice", {"status": "suspended"})


def _delete(deps: Deps) -> None:
    deps.accounts.change_user("user-alice", {"status": "deleted"})  # the record, as a delete leaves it


OWNER_CHANGES = [(_revoke, "revoked"), (_suspend, "suspended"), (_delete, "deleted")]


@pytest.mark.parametrize(("change", "word"), OWNER_CHANGES, ids=["revoked", "suspended", "deleted"])
def test_a_key_or_owner_that_may_no_longer_run_it_cancels_the_provider_batch_and_fails_owner_unauthorized(
    deps: Deps, sim: Simulator, change: Any, word: str
) -> None:
    batch_id = held_batch(deps, sim)
    [submitted] = listed(sim)["batches"]
    control(sim, f"/{submitted['id']}", action="partial", lines=1)  # one line ran before the change
    change(deps)
    batch = until_final(deps, batch_id)
    assert (batch["status"], batch["error"]["code"]) == ("failed", "owner_unauthorized")
    assert word in batch["error"]["message"]
    [after] = listed(sim)["batches"]
    assert after["status"] == "cancelled"  # cancelled there at the first step after the change
    assert lines_sent(sim) == 4  # nothing more was sent
    assert request_ends(deps, batch_id) == [("succeeded", None)] + [("failed", "batch_failed")] * 3


@pytest.mark.parametrize(("change", "word"), OWNER_CHANGES, ids=["revoked", "suspended", "deleted"])
def test_a_part_not_yet_submitted_is_never_submitted_once_the_owner_may_no_longer_run_it(
    deps: Deps, sim: Simulator, clock: FakeClock, change: Any, word: str
) -> None:
    batch_id = refused_batch(deps, sim)
    change(deps)
    clock.advance(31)  # the refused submit is due again
    batch = until_final(deps, batch_id)
    assert (batch["status"], batch["error"]["code"]) == ("failed", "owner_unauthorized")
    assert word in batch["error"]["message"]
    assert lines_sent(sim) == 0 and listed(sim)["batches"] == []
    assert request_ends(deps, batch_id) == [("failed", "batch_failed")] * 3
    assert [p.status for p in deps.provider_parts.parts(batch_id)] == [PartStatus.SKIPPED]


def test_a_role_below_min_role_pauses_a_provider_batch_sending_nothing_until_it_is_raised(
    deps: Deps, sim: Simulator, clock: FakeClock
) -> None:
    batch_id = refused_batch(deps, sim)
    accounts.update_user(deps, ADMIN, "user-alice", {"role": "pro"})  # BATCH_MIN_ROLE is internal
    clock.advance(31)
    routed = provider_step(deps, batch_id)
    assert routed["next"] == "provider" and 0 < routed["wait_seconds"] <= 60  # checked again in a minute
    assert batches.get_batch(deps, ADMIN, batch_id)["paused"] == {"reason": "role", "until": None}
    clock.advance(61)
    assert provider_step(deps, batch_id)["next"] == "provider"  # still below: still held
    assert lines_sent(sim) == 0

    accounts.update_user(deps, ADMIN, "user-alice", {"role": "internal"})
    batch = until_final(deps, batch_id)
    assert batch["status"] == "completed" and batch["paused"] is None
    assert lines_sent(sim) == 3
    assert {end for end in request_ends(deps, batch_id)} == {("succeeded", None)}


def test_a_lowered_role_lets_what_the_provider_has_finish_and_be_collected(
    deps: Deps, sim: Simulator
) -> None:
    batch_id = held_batch(deps, sim, n=2)
    accounts.update_user(deps, ADMIN, "user-alice", {"role": "pro"})
    [submitted] = listed(sim)["batches"]
    control(sim, f"/{submitted['id']}", action="complete")
    assert drive(deps, batch_id)["next"] == "finalize"  # a running request finishes, as on the gateway
    assert listed(sim)["batches"][0]["status"] == "completed" and lines_sent(sim) == 2
    assert {end for end in request_ends(deps, batch_id)} == {("succeeded", None)}


# --- BATCH_ENABLED -----------------------------------------------------------------------------


def _set_enabled(deps: Deps, on: bool) -> None:
    admin.set_config(deps, ADMIN, "BATCH_ENABLED", {"value": on})


def test_batch_enabled_off_submits_nothing_polls_nothing_and_moves_nothing_on(
    deps: Deps, sim: Simulator, clock: FakeClock
) -> None:
    waiting = refused_batch(deps, sim)  # a part to submit
    running = held_batch(deps, sim, n=2)  # a provider batch to poll
    polls = listed(sim)["batches"][0]["polls"]
    _set_enabled(deps, False)
    clock.advance(31)
    [ran] = listed(sim)["batches"]
    control(sim, f"/{ran['id']}", action="complete")  # ended there: nothing reads it while off
    batches.cancel_batch(deps, ADMIN, waiting)
    provider_park(deps, waiting, "wait-1")
    assert deps.workflow.woken == []  # type: ignore[attr-defined]  # a cancel wakes no step while off
    clock.advance(24 * 3600 + 1)  # the window closes too: nothing is swept while off
    for batch_id in (waiting, running):
        for _ in range(3):
            routed = provider_step(deps, batch_id)
            assert routed["next"] == "provider" and 1 <= routed["wait_seconds"] <= 5
    assert lines_sent(sim) == 2 and listed(sim)["batches"][0]["polls"] == polls
    assert {r.status for r in deps.requests.all(waiting)} == {RequestStatus.QUEUED}
    assert {r.status for r in deps.requests.all(running)} == {RequestStatus.QUEUED}
    assert deps.batches.runs_live(running, clock())  # still marked running: a delete waits

    _set_enabled(deps, True)
    assert until_final(deps, waiting)["status"] == "cancelled"
    assert lines_sent(sim) == 2  # the cancelled one never reached the provider
    # The window closed while it was off: what the provider finished is kept, nothing is lost.
    assert until_final(deps, running)["status"] == "expired"
    assert {end for end in request_ends(deps, running)} == {("succeeded", None)}


# --- routes an administrator forbade ------------------------------------------------------------


def _forbid(deps: Deps, model: str, allowed: bool | None = False) -> None:
    admin.set_route(deps, ADMIN, model, "cloud", {"batch_allowed": allowed})


def test_provider_mode_on_a_forbidden_route_is_refused_403_naming_why_and_auto_runs_here(
    deps: Deps, sim: Simulator
) -> None:
    _forbid(deps, "sim-chat")
    with pytest.raises(ApiError) as refused:
        create(deps, [chat_request("f", "hi")], "provider")
    assert (refused.value.status, refused.value.code) == (403, "batch_not_supported")
    assert "administrator forbade batch work on route 'cloud' of 'sim-chat'" in refused.value.message
    auto = create(deps, [chat_request("f", "hi")], "auto")
    assert (auto["execution_mode"], auto["execution_mode_reason"]) == ("gateway", "no_provider_batch_route")
    lifecycle.prepare(deps, auto["id"])
    receive_all(deps)
    walk(deps, auto["id"])
    assert request_ends(deps, auto["id"]) == [("succeeded", None)]
    # An Anthropic model's forbidden route is refused the same way.
    _forbid(deps, "sim-claude")
    with pytest.raises(ApiError) as messages:
        create(deps, _messages(1), "provider")
    assert "route 'cloud' of 'sim-claude'" in messages.value.message
    assert lines_sent(sim) == 0 and listed(sim)["batches"] == []
    # Only an administrator's false forbids it: the route's default (null) and true allow it.
    for choice in (None, True):
        _forbid(deps, "sim-chat", choice)
        assert create(deps, [chat_request("f", "hi")], "provider")["execution_mode"] == "provider"


def test_a_file_batch_in_provider_mode_on_a_forbidden_route_fails_batch_not_supported_sending_nothing(
    deps: Deps, sim: Simulator
) -> None:
    import json

    from tests.integration.test_batch_routes import _multipart

    _forbid(deps, "sim-chat")
    line = {"method": "POST", "url": "/v1/chat/completions", **chat_request("f-0", "hi")}
    upload = files.upload_file(
        deps, ALICE, "multipart/form-data; boundary=x", _multipart(json.dumps(line).encode() + b"\n")
    )
    body = {
        "input_file_id": upload["id"],
        "endpoint": "/v1/chat/completions",
        "completion_window": "24h",
        "execution_mode": "provider",
    }
    created = batches.create_batch(deps, ALICE, json.dumps(body).encode())
    assert lifecycle.prepare(deps, created["id"])["next"] == "finalize"
    batch = batches.get_batch(deps, ALICE, created["id"])
    assert (batch["status"], batch["error"]["code"]) == ("failed", "batch_not_supported")
    assert "route 'cloud' of 'sim-chat'" in batch["error"]["message"]
    assert lines_sent(sim) == 0


def test_a_route_forbidden_after_create_takes_nothing_more_and_auto_runs_the_rest_here(
    deps: Deps, sim: Simulator, clock: FakeClock
) -> None:
    asked = refused_batch(deps, sim, "provider")  # planned, its submit due again in 30 s
    auto = create(deps, [chat_request(f"a-{i}", "hi") for i in range(3)], "auto")["id"]
    lifecycle.prepare(deps, auto)  # to run on the provider, nothing planned yet
    _forbid(deps, "sim-chat")
    clock.advance(31)
    assert drive(deps, asked)["next"] == "finalize"
    assert request_ends(deps, asked) == [("failed", "batch_route_unavailable")] * 3
    routed = provider_step(deps, auto)
    assert routed["next"] == "park"  # its chains run it here
    record = deps.batches.get_record(auto)
    assert record is not None
    assert (record.execution_mode, record.mode_reason) == ("gateway", "provider_batch_route_forbidden")
    receive_all(deps)
    walk(deps, auto)
    assert {end for end in request_ends(deps, auto)} == {("succeeded", None)}
    assert lines_sent(sim) == 0 and listed(sim)["batches"] == []


# --- a provider batch the provider no longer knows -----------------------------------------------


def test_a_provider_batch_the_provider_lost_ends_its_requests_failed_provider_batch_lost(
    deps: Deps, sim: Simulator
) -> None:
    batch_id = held_batch(deps, sim, n=3)
    [submitted] = listed(sim)["batches"]
    control(sim, f"/{submitted['id']}", action="lose")
    batch = until_final(deps, batch_id)
    assert batch["status"] == "completed" and batch["request_counts"]["failed"] == 3
    assert request_ends(deps, batch_id) == [("failed", "provider_batch_lost")] * 3
    [part] = deps.provider_parts.parts(batch_id)
    assert part.status is PartStatus.LOST and part.cleaned
    assert submitted["id"] not in str(deps.requests.all(batch_id))  # its id stays in the part
    assert lines_sent(sim) == 3
    assert not deps.batches.runs_live(batch_id, deps.clock())


def test_an_auto_batch_whose_provider_batch_was_lost_runs_the_rest_on_the_gateway(
    deps: Deps, sim: Simulator
) -> None:
    batch_id = held_batch(deps, sim, n=2, mode="auto")
    httpx.post(f"{sim.url}/_sim/reset").raise_for_status()  # the simulator restarted: it knows nothing
    routed = provider_step(deps, batch_id)
    assert routed["next"] == "park"
    record = deps.batches.get_record(batch_id)
    assert record is not None and (record.execution_mode, record.mode_reason) == (
        "gateway",
        "provider_batch_lost",
    )
    receive_all(deps)
    walk(deps, batch_id)
    assert {end for end in request_ends(deps, batch_id)} == {("succeeded", None)}


def test_a_cancel_of_a_batch_whose_provider_batch_was_lost_reaches_cancelled(
    deps: Deps, sim: Simulator
) -> None:
    batch_id = held_batch(deps, sim, n=2)
    [submitted] = listed(sim)["batches"]
    control(sim, f"/{submitted['id']}", action="lose")
    batches.cancel_batch(deps, ALICE, batch_id)
    assert until_final(deps, batch_id)["status"] == "cancelled"
    assert request_ends(deps, batch_id) == [("cancelled", "batch_cancelled")] * 2


def test_a_collect_the_provider_lost_halfway_ends_what_was_not_recorded(
    sim: Simulator, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    from batchgw.provider import collecting

    deps = make_deps(sim, clock, **FAST)
    created = create(deps, [chat_request(f"c-{i}", "hi") for i in range(15)], "provider")
    lifecycle.prepare(deps, created["id"])
    provider_step(deps, created["id"])  # submitted; the simulator ends it at its first poll
    real, settled = collecting.attempt.settle, [0]

    async def dying(*args: Any, **kwargs: Any) -> Any:
        settled[0] += 1
        if settled[0] == 11:  # in the second chunk of ten
            raise RuntimeError("the step died")
        return await real(*args, **kwargs)

    monkeypatch.setattr(collecting.attempt, "settle", dying)
    with pytest.raises(RuntimeError):
        provider_step(deps, created["id"])
    monkeypatch.setattr(collecting.attempt, "settle", real)
    [submitted] = listed(sim)["batches"]
    control(sim, f"/{submitted['id']}", action="lose")
    clock.advance(deps.settings.batch_lease_seconds + 1)
    until_final(deps, created["id"])
    ends = request_ends(deps, created["id"])
    # The first chunk was recorded (and some of the second, as the step died); the rest is lost.
    assert ends[:10] == [("succeeded", None)] * 10
    assert set(ends[10:]) <= {("succeeded", None), ("failed", "provider_batch_lost")}
    assert ("failed", "provider_batch_lost") in ends[10:]  # the one whose record died, at least


# --- delete -------------------------------------------------------------------------------------


def test_a_provider_batch_is_not_deleted_while_it_runs_at_the_provider_and_its_files_go_with_it(
    deps: Deps, sim: Simulator
) -> None:
    batch_id = held_batch(deps, sim, n=2)
    with pytest.raises(ApiError) as refused:
        batches.delete_batch(deps, ALICE, batch_id)
    assert (refused.value.status, refused.value.code) == (409, "batch_not_deletable")
    assert listed(sim)["batches"][0]["status"] == "validating"  # running there still
    batches.cancel_batch(deps, ALICE, batch_id)
    assert until_final(deps, batch_id)["status"] == "cancelled"
    assert listed(sim)["batches"][0]["status"] == "cancelled"
    assert batches.delete_batch(deps, ALICE, batch_id)["deleted"] is True
    provider_purge(deps, batch_id)
    after = listed(sim)
    assert after["files"] == [] and len(after["deleted_files"]) == 2  # its input and its errors


def test_a_user_delete_cancels_their_provider_batch_there_and_the_next_delete_removes_it(
    deps: Deps, sim: Simulator
) -> None:
    batch_id = held_batch(deps, sim, n=2)
    first = accounts.delete_user(deps, ADMIN, "user-alice")
    assert first["batches_pending"] == [batch_id]
    assert until_final(deps, batch_id)["status"] in ("cancelled", "failed")
    assert listed(sim)["batches"][0]["status"] == "cancelled" and lines_sent(sim) == 2
    assert accounts.delete_user(deps, ADMIN, "user-alice")["batches_pending"] == []
    provider_purge(deps, batch_id)
    assert listed(sim)["files"] == []
    assert deps.batches.get_record(batch_id) is None


def test_the_purge_deletes_what_a_provider_batch_left_there_and_cancels_one_no_workflow_watches(
    deps: Deps, sim: Simulator, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    from batchgw.provider import services

    # Its workflow gone (no step renews its mark): the delete goes through, the purge cancels it.
    orphaned = held_batch(deps, sim, n=2)
    clock.advance(deps.settings.batch_worker_timeout_seconds + 200)
    assert batches.delete_batch(deps, ALICE, orphaned)["deleted"] is True
    provider_purge(deps, orphaned)
    assert listed(sim)["batches"][0]["status"] == "cancelled"
    assert listed(sim)["files"] == []

    # Its files not deleted when it ended (the provider unreachable then): the purge does it.
    control(sim, auto_seconds=0)
    created = create(deps, [chat_request("k", "hi")], "provider")

    def unreachable(self: Any, *args: Any) -> None:
        raise httpx.ConnectError("the provider is unreachable")

    with monkeypatch.context() as patched:
        patched.setattr(services.BatchService, "discard", unreachable)
        assert until_final(deps, created["id"])["status"] == "completed"
    assert len(listed(sim)["files"]) == 2  # its input and output
    provider_purge(deps, created["id"])
    assert listed(sim)["files"] == []
