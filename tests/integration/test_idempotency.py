"""Idempotency-Key on create (moto, the injected clock): one batch per key whatever races,
replays that return it, and the 409 and 410 rules."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from batchgw.api import accounts, batches, idempotency
from batchgw.deps import Deps
from batchgw.domain.errors import ApiError
from batchgw.domain.principal import Principal
from batchgw.run import ending, lifecycle

from local.simulator import Simulator
from tests.integration.conftest import body_of, chat_request, make_deps
from tests.support import FakeClock

pytestmark = pytest.mark.usefixtures("aws_env")

ADMIN = Principal(user_id="user-admin", role="admin", key_id="key_local_admin")
ALICE = Principal(user_id="user-alice", role="internal", key_id="key_local_alice")
BOB = Principal(user_id="user-bob", role="internal", key_id="key_local_bob")
BODY = body_of([chat_request("a", "hello"), chat_request("b", "world")])
DAY = 86400


def create(
    deps: Deps, principal: Principal, key: str | None, body: bytes = BODY, **kw: Any
) -> dict[str, Any]:
    return batches.create_batch(deps, principal, body, idempotency_key=key, **kw)


def refused(deps: Deps, principal: Principal, key: str | None, body: bytes = BODY, **kw: Any) -> ApiError:
    with pytest.raises(ApiError) as caught:
        create(deps, principal, key, body, **kw)
    return caught.value


def owned(deps: Deps, principal: Principal) -> list[str]:
    return [b["id"] for b in batches.list_batches(deps, principal, {})["data"]]


def test_twenty_concurrent_creates_with_one_key_make_exactly_one_batch(sim: Simulator) -> None:
    deps = make_deps(sim, FakeClock())

    def attempt(_: int) -> str:
        try:
            return str(create(deps, ALICE, "one-key")["id"])
        except ApiError as exc:
            return str(exc.code)

    with ThreadPoolExecutor(20) as pool:
        answers = list(pool.map(attempt, range(20)))
    made = owned(deps, ALICE)
    assert len(made) == 1
    assert set(answers) <= {made[0], "idempotency_key_in_use"}
    assert answers.count(made[0]) >= 1


def test_the_same_key_and_request_return_the_first_batch_from_any_of_the_users_keys(sim: Simulator) -> None:
    deps = make_deps(sim, FakeClock())
    first = create(deps, ALICE, "k1")
    other_key = accounts.create_key(deps, ADMIN, "user-alice", {"name": "second"})
    second_key = Principal(user_id="user-alice", role="internal", key_id=other_key["id"])
    spaced = json.dumps(json.loads(BODY), indent=2).encode()  # the same request, spelt differently
    assert create(deps, second_key, "k1", spaced)["id"] == first["id"]
    record = deps.batches.get_record(first["id"])
    assert record is not None and record.key_id == "key_local_alice"  # still runs under its key
    assert owned(deps, ALICE) == [first["id"]]
    assert create(deps, BOB, "k1")["id"] != first["id"]  # a key is one account's own


def test_a_replay_returns_the_batch_after_the_quota_ran_out_or_the_role_changed(sim: Simulator) -> None:
    deps = make_deps(sim, FakeClock())
    first = create(deps, ALICE, "k1")
    accounts.update_user(deps, ADMIN, "user-alice", {"daily_quota_usd": 0, "role": "free"})
    demoted = Principal(user_id="user-alice", role="free", key_id="key_local_alice")
    assert refused(deps, demoted, None).status == 403
    assert create(deps, demoted, "k1")["id"] == first["id"]
    accounts.update_user(deps, ADMIN, "user-alice", {"role": "internal"})
    assert refused(deps, ALICE, None).code == "daily_quota_exceeded"
    assert create(deps, ALICE, "k1")["id"] == first["id"]


def test_the_same_key_with_a_different_request_answers_409(sim: Simulator) -> None:
    deps = make_deps(sim, FakeClock())
    create(deps, ALICE, "k1")
    other = body_of([chat_request("a", "something else")])
    conflict = refused(deps, ALICE, "k1", other)
    assert (conflict.status, conflict.code) == (409, "idempotency_key_reused")


def test_a_messages_batch_replays_only_with_the_same_anthropic_version(sim: Simulator) -> None:
    deps = make_deps(sim, FakeClock())
    params = {"model": "sim-claude", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]}
    body = body_of([{"custom_id": "a", "url": "/v1/messages", "body": params}])
    first = create(deps, ALICE, "k1", body, anthropic_version="2023-06-01")
    assert create(deps, ALICE, "k1", body, anthropic_version="2023-06-01")["id"] == first["id"]
    assert refused(deps, ALICE, "k1", body, anthropic_version="2026-10-21").status == 409


def test_after_its_batch_is_deleted_the_key_answers_410_for_a_day(sim: Simulator) -> None:
    clock = FakeClock()
    deps = make_deps(sim, clock)
    first = create(deps, ALICE, "k1")
    batches.delete_batch(deps, ALICE, first["id"])
    gone = refused(deps, ALICE, "k1")
    assert (gone.status, gone.code) == (410, "idempotency_key_batch_deleted")
    clock.advance(DAY - 1)
    assert refused(deps, ALICE, "k1").status == 410
    clock.advance(2)
    assert create(deps, ALICE, "k1")["id"] != first["id"]  # forgotten a day later


def test_a_key_is_remembered_until_a_day_after_its_batch_ends(sim: Simulator) -> None:
    clock = FakeClock()
    deps = make_deps(sim, clock)
    first = create(deps, ALICE, "k1")
    lifecycle.prepare(deps, first["id"])
    batches.cancel_batch(deps, ALICE, first["id"])
    lifecycle.cancel(deps, first["id"])
    ending.finalize(deps, first["id"])
    clock.advance(DAY - 1)
    assert create(deps, ALICE, "k1")["id"] == first["id"]
    clock.advance(2)
    assert create(deps, ALICE, "k1")["id"] != first["id"]


def test_a_create_that_failed_leaves_the_key_free_to_use(sim: Simulator) -> None:
    deps = make_deps(sim, FakeClock())
    assert refused(deps, ALICE, "k1", b'{"requests": []}').status == 400
    assert create(deps, ALICE, "k1")["id"] in owned(deps, ALICE)


def test_a_create_whose_process_died_is_finished_by_the_next_caller_never_twice(
    sim: Simulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = FakeClock()
    deps = make_deps(sim, clock)

    def dies(*_: Any, **__: Any) -> bool:
        raise RuntimeError("the process died after storing the batch")

    real_complete = deps.idempotency.complete
    monkeypatch.setattr(deps.idempotency, "complete", dies)
    with pytest.raises(RuntimeError):
        create(deps, ALICE, "k1")
    monkeypatch.setattr(deps.idempotency, "complete", real_complete)
    made = owned(deps, ALICE)
    assert len(made) == 1
    clock.advance(idempotency.CLAIM_LEASE_SECONDS + 1)
    assert create(deps, ALICE, "k1")["id"] == made[0]
    assert owned(deps, ALICE) == made


def test_a_duplicate_of_a_create_still_under_way_waits_then_answers_409(
    sim: Simulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = FakeClock()
    deps = make_deps(sim, clock)
    monkeypatch.setattr(idempotency, "WAIT_FOR_FIRST_SECONDS", 0.3)
    key = idempotency.stored_key("batches", "k1")
    deps.idempotency.claim(
        "user-alice",
        key,
        fingerprint=idempotency.fingerprint(BODY, None),
        batch_id="batch_under_way",
        token="first",
        now=clock(),
        lease_seconds=60,
        ttl=int(clock() + DAY),
    )
    busy = refused(deps, ALICE, "k1")
    assert (busy.status, busy.code) == (409, "idempotency_key_in_use")
    assert owned(deps, ALICE) == []


@pytest.mark.parametrize("bad", ["", "x" * 256, "tab\there", "é"])
def test_an_unusable_key_is_refused_400(sim: Simulator, bad: str) -> None:
    deps = make_deps(sim, FakeClock())
    assert refused(deps, ALICE, bad).status == 400


def test_deleting_a_user_forgets_their_keys(sim: Simulator) -> None:
    deps = make_deps(sim, FakeClock())
    create(deps, BOB, "k1")
    accounts.delete_user(deps, ADMIN, "user-bob")
    assert deps.idempotency.get("user-bob", idempotency.stored_key("batches", "k1")) is None
