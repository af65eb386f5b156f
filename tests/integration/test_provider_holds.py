"""Provider-run batches accepted together hold what they may cost until they are charged or
end (moto, the simulator's batch API): five batches that each fit a daily quota alone are
not all accepted, a batch's end gives its room back, a create refused after its hold was
written leaves none behind, and a hold whose batch was never stored stops counting."""

from __future__ import annotations

import json
from typing import Any

import pytest
from batchgw.api import batches, files
from batchgw.deps import Deps
from batchgw.domain.errors import ApiError
from batchgw.run import ending
from batchgw.storage.slots import Hold
from batchgw.storage.spend import PROVIDER_UNSTORED_SECONDS, Payer, room_after_holds

from local.simulator import Simulator
from tests.integration.conftest import chat_request, make_deps
from tests.integration.test_owner_gate import set_user
from tests.integration.test_provider_batches import ALICE, create, drive, provider_batches
from tests.support import FakeClock

pytestmark = pytest.mark.usefixtures("aws_env")

PAYER = Payer(ALICE.user_id, ALICE.key_id)
CHAT_URL = "/v1/chat/completions"


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def deps(sim: Simulator, clock: FakeClock) -> Deps:
    return make_deps(sim, clock)


def ten(tag: str) -> list[dict[str, Any]]:
    """Ten requests that could cost up to 10 x 16,384 output tokens x $0.75/M ($0.12) at the batch price."""
    return [chat_request(f"{tag}-{i}", "hi") for i in range(10)]


def room(deps: Deps) -> int | None:
    return room_after_holds(
        deps.accounts, deps.spend, deps.user_slots, deps.batches, PAYER, deps.clock()
    ).room


def test_five_provider_batches_that_each_fit_the_quota_alone_are_not_all_accepted(
    deps: Deps, sim: Simulator
) -> None:
    set_user(deps, "user-alice", daily_quota_usd=0.2)  # one batch's most fits, two do not
    first = create(deps, ten("a"), "provider")
    assert first["execution_mode"] == "provider"
    for tag in "bcde":
        with pytest.raises(ApiError) as refused:
            create(deps, ten(tag), "provider")
        assert (refused.value.status, refused.value.code) == (429, "budget_exceeded")
        assert "more than your quotas and budget leave" in refused.value.message
    assert list(deps.user_slots.read("user-alice").provider) == [first["id"]]  # refused: no hold
    # Its end charges what it cost and gives the rest of its hold back.
    assert drive(deps, first["id"])["next"] == "finalize"
    assert ending.finalize(deps, first["id"])["status"] == "completed"
    spent = deps.spend.read(PAYER, deps.clock())[0].today
    assert spent > 0 and room(deps) == 200_000_000 - spent
    second = create(deps, ten("f"), "provider")
    assert second["execution_mode"] == "provider"
    # The next hold removed the ended batch's.
    assert list(deps.user_slots.read("user-alice").provider) == [second["id"]]
    assert len(provider_batches(sim)) == 1


def test_a_create_refused_after_its_hold_was_written_leaves_no_hold(sim: Simulator, clock: FakeClock) -> None:
    # The ten requests are over the unfinished requests' limit, checked as the batch is stored.
    deps = make_deps(sim, clock, BATCH_MAX_QUEUED_REQUESTS_PER_USER="5")
    set_user(deps, "user-alice", daily_quota_usd=1.0)
    with pytest.raises(ApiError) as refused:
        create(deps, ten("a"), "provider")
    assert refused.value.code == "queued_request_limit"
    assert deps.user_slots.read("user-alice").provider == {}
    assert room(deps) == 1_000_000_000


def test_a_hold_whose_batch_was_never_stored_counts_only_for_a_while(deps: Deps, clock: FakeClock) -> None:
    set_user(deps, "user-alice", daily_quota_usd=1.0)
    # A create that died after writing its hold: nothing releases it.
    hold = Hold(until=clock() + PROVIDER_UNSTORED_SECONDS, reserved=400_000_000, key_id=ALICE.key_id or "")
    assert deps.user_slots.hold_provider("user-alice", "batch_dead", hold, version=0, gone=[])
    assert room(deps) == 600_000_000
    clock.advance(PROVIDER_UNSTORED_SECONDS + 1)
    assert room(deps) == 1_000_000_000


def test_provider_file_batches_created_together_hold_their_most_as_each_is_planned(
    deps: Deps, sim: Simulator
) -> None:
    # A file batch's requests are known only once its first provider step reads them: that step
    # holds their most as an inline create does, so the next file batch's plan counts it.
    set_user(deps, "user-alice", daily_quota_usd=0.2)  # one batch's most fits, two do not
    created = [create_file(deps, ten(tag)) for tag in "abc"]  # accepted: nothing read yet
    assert [drive(deps, batch["id"])["next"] for batch in created] == ["finalize"] * 3
    assert ending.finalize(deps, created[0]["id"])["status"] == "completed"  # the simulator ran it at once
    for batch in created[1:]:
        record = deps.batches.get_record(batch["id"])
        assert record is not None and record.error is not None
        assert record.error["code"] == "budget_exceeded"
    assert list(deps.user_slots.read("user-alice").provider) == [created[0]["id"]]
    assert len(provider_batches(sim)) == 1  # nothing of the others was sent


def create_file(deps: Deps, requests: list[dict[str, Any]]) -> dict[str, Any]:
    lines = [{"method": "POST", "url": CHAT_URL, **request} for request in requests]
    upload = files.new_input_file(
        deps, ALICE, "in.jsonl", b"".join(json.dumps(line).encode() + b"\n" for line in lines)
    )
    body = {
        "input_file_id": upload.id,
        "endpoint": CHAT_URL,
        "completion_window": "24h",
        "execution_mode": "provider",
    }
    return batches.create_batch(deps, ALICE, json.dumps(body).encode())
