"""A batch's ``priority`` and ``complete_by`` (issue 56) through the api handler on moto:
set at create (direct requests and a file), echoed on every read, changed by
``PATCH /v1/batches/{id}`` until the batch ends, each refusal naming its field and range;
and through the OpenAI SDK, unmodified, served by the handler in this process."""

from __future__ import annotations

import json
from typing import Any

import pytest
from batchgw.api import auth, files
from batchgw.deps import Deps
from batchgw.domain.batch import RECORD_SK, BatchRecord, ScheduleChange
from batchgw.domain.contention import parse_tag
from batchgw.domain.fairness import token_of
from batchgw.domain.principal import Principal
from batchgw.domain.states import UNFINISHED_STATUSES, BatchStatus
from batchgw.storage import aws
from openai.types import Batch

from functions.api import handler as api
from local.simulator import Simulator
from tests.integration.conftest import chat_request, make_deps
from tests.integration.test_accounts import openai_over_the_handler
from tests.support import FakeClock, LambdaContext, http_event

pytestmark = pytest.mark.usefixtures("aws_env")
ALICE, BOB, ADMIN = "sk-local-alice", "sk-local-bob", "sk-local-admin"
DAY = 86400


@pytest.fixture
def world(sim: Simulator, monkeypatch: pytest.MonkeyPatch) -> tuple[Deps, FakeClock]:
    clock = FakeClock()
    deps = make_deps(sim, clock)
    monkeypatch.setattr(api, "get_deps", lambda: deps)
    auth.forget_keys()
    return deps, clock


def call(method: str, path: str, key: str = ALICE, body: Any = None) -> tuple[int, Any]:
    response = api.handler(http_event(method, path, key=key, body=body), LambdaContext())  # type: ignore[arg-type]
    return int(response["statusCode"]), json.loads(response.get("body") or "null")


def create(key: str = ALICE, **fields: Any) -> tuple[int, Any]:
    return call("POST", "/v1/batches", key, {"requests": [chat_request("q-1", "hello")], **fields})


def created(key: str = ALICE, **fields: Any) -> dict[str, Any]:
    status, batch = create(key, **fields)
    assert status == 200, batch
    return dict(batch)


def refused(answer: tuple[int, Any], param: str) -> str:
    """The message of a 400 that names ``param``."""
    status, body = answer
    assert status == 400, body
    error = body["error"]
    assert (error["type"], error["param"]) == ("invalid_request_error", param)
    return str(error["message"])


def end(deps: Deps, batch_id: str) -> None:
    """The batch reaches a final status (cancelled), as its workflow would end it."""
    ended = deps.batches.end(
        batch_id,
        {"status": BatchStatus.CANCELLED, "cancelled_at": int(deps.clock())},
        from_statuses=UNFINISHED_STATUSES,
    )
    assert ended is not None and ended.status is BatchStatus.CANCELLED


# --- create, and every read ------------------------------------------------------------------


def test_a_batch_is_created_with_priority_and_complete_by_and_every_read_echoes_them(world: Any) -> None:
    _deps, clock = world
    due = int(clock()) + 3600
    batch = created(priority=5, complete_by=due)
    assert (batch["priority"], batch["complete_by"]) == (5, due)
    got = call("GET", f"/v1/batches/{batch['id']}")[1]
    listed = call("GET", "/v1/batches")[1]["data"]
    cancelled = call("POST", f"/v1/batches/{batch['id']}/cancel")[1]
    for shown in (got, listed[0], cancelled):
        assert (shown["id"], shown["priority"], shown["complete_by"]) == (batch["id"], 5, due)


def test_without_them_a_batch_has_priority_0_and_no_complete_by(world: Any) -> None:
    batch = created()
    assert (batch["priority"], batch["complete_by"]) == (0, None)
    assert created(priority=-10)["priority"] == -10
    assert created(priority=3.0)["priority"] == 3  # a whole number, written as a float


def test_a_batch_stored_before_the_fields_reads_priority_0_and_no_complete_by(world: Any) -> None:
    deps, clock = world
    batch = created(priority=7, complete_by=int(clock()) + 60)
    aws.get_clients().dynamodb.update_item(
        TableName=deps.settings.batches_table,
        Key={"pk": {"S": batch["id"]}, "sk": {"S": RECORD_SK}},
        UpdateExpression="REMOVE priority, complete_by",
    )
    shown = call("GET", f"/v1/batches/{batch['id']}")[1]
    assert (shown["priority"], shown["complete_by"]) == (0, None)


@pytest.mark.parametrize("value", [11, -11, 1000, 2.5, True, False, "5", [5], {"p": 5}])
def test_a_users_priority_outside_minus_10_to_10_or_not_an_integer_is_refused(world: Any, value: Any) -> None:
    message = refused(create(priority=value), "priority")
    assert "from -10 to 10" in message


def test_an_administrator_may_give_minus_100_to_100_on_their_own_batch(world: Any) -> None:
    assert created(ADMIN, priority=100)["priority"] == 100
    assert created(ADMIN, priority=-100)["priority"] == -100
    assert "from -100 to 100" in refused(create(ADMIN, priority=101), "priority")


@pytest.mark.parametrize(
    ("offset", "words"),
    [
        (-1, "in the past"),
        (0, "in the past"),
        (DAY + 1, "after the batch's window ends"),
    ],
)
def test_a_complete_by_in_the_past_or_after_the_window_is_refused(
    world: Any, offset: int, words: str
) -> None:
    _deps, clock = world
    assert words in refused(create(complete_by=int(clock()) + offset), "complete_by")
    assert created(complete_by=int(clock()) + DAY)["complete_by"] == int(clock()) + DAY  # its very end


@pytest.mark.parametrize("value", [1.5, "soon", True, -5, {"at": 1}])
def test_a_complete_by_that_is_not_unix_seconds_is_refused(world: Any, value: Any) -> None:
    assert "unix seconds" in refused(create(complete_by=value), "complete_by")


def test_a_longer_window_takes_a_later_complete_by(world: Any) -> None:
    _deps, clock = world
    due = int(clock()) + 2 * DAY
    assert created(completion_window="48h", complete_by=due)["complete_by"] == due


def test_a_batch_without_a_window_takes_any_future_complete_by(sim: Simulator, monkeypatch: Any) -> None:
    clock = FakeClock()
    deps = make_deps(sim, clock, BATCH_COMPLETION_WINDOW_HOURS="0")
    monkeypatch.setattr(api, "get_deps", lambda: deps)
    far = int(clock()) + 400 * DAY
    batch = created(complete_by=far)
    assert (batch["expires_at"], batch["complete_by"]) == (None, far)
    patched = call("PATCH", f"/v1/batches/{batch['id']}", body={"complete_by": far + DAY})
    assert patched[1]["complete_by"] == far + DAY


def test_a_file_batch_is_created_with_them_through_the_openai_sdk(world: Any) -> None:
    deps, clock = world
    owner = Principal(user_id="user-alice", role="internal", key_id="key_local_alice")
    line = {"custom_id": "f", "method": "POST", "url": "/v1/chat/completions", **chat_request("f", "hi")}
    file_id = files.new_input_file(deps, owner, "in.jsonl", (json.dumps(line) + "\n").encode()).id
    due = int(clock()) + 600
    client = openai_over_the_handler(ALICE)
    batch = client.batches.create(
        input_file_id=file_id,
        endpoint="/v1/chat/completions",
        completion_window="24h",
        extra_body={"priority": 5, "complete_by": due},
    )
    assert (getattr(batch, "priority"), getattr(batch, "complete_by")) == (5, due)  # noqa: B009
    assert getattr(client.batches.retrieve(batch.id), "priority") == 5  # noqa: B009
    status, body = call(
        "POST",
        "/v1/batches",
        body={
            "input_file_id": file_id,
            "endpoint": "/v1/chat/completions",
            "completion_window": "24h",
            "priority": 50,
        },
    )
    assert "from -10 to 10" in refused((status, body), "priority")


# --- PATCH -----------------------------------------------------------------------------------


def test_patch_changes_either_or_both_and_null_clears_complete_by(world: Any) -> None:
    _deps, clock = world
    batch_id = created()["id"]
    due = int(clock()) + 1800
    path = f"/v1/batches/{batch_id}"
    status, patched = call("PATCH", path, body={"priority": 3})
    assert status == 200 and patched["object"] == "batch"
    assert (patched["priority"], patched["complete_by"]) == (3, None)
    patched = call("PATCH", path, body={"complete_by": due})[1]
    assert (patched["priority"], patched["complete_by"]) == (3, due)  # the priority stays
    patched = call("PATCH", path, body={"priority": -2, "complete_by": due + 60})[1]
    assert (patched["priority"], patched["complete_by"]) == (-2, due + 60)
    patched = call("PATCH", path, body={"complete_by": None})[1]
    assert (patched["priority"], patched["complete_by"]) == (-2, None)
    shown = call("GET", path)[1]
    assert (shown["priority"], shown["complete_by"], shown["status"]) == (-2, None, "validating")


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"priority": 11}, "priority"),
        ({"priority": None}, "priority"),
        ({"priority": 1.5}, "priority"),
        ({"complete_by": 5}, "complete_by"),  # long past
        ({"complete_by": "tomorrow"}, "complete_by"),
        ({"metadata": {"a": "b"}}, "metadata"),
        ({"priority": 1, "status": "completed"}, "status"),
        ({}, None),
        ([1], None),
        (None, None),
    ],
)
def test_patch_refuses_a_bad_value_an_unknown_field_or_an_empty_body(
    world: Any, body: Any, param: str | None
) -> None:
    batch_id = created(priority=1)["id"]
    status, answer = call("PATCH", f"/v1/batches/{batch_id}", body=body)
    assert status == 400 and answer["error"]["param"] == param, answer
    assert call("GET", f"/v1/batches/{batch_id}")[1]["priority"] == 1  # nothing changed


def test_patch_refuses_a_complete_by_after_the_batchs_window(world: Any) -> None:
    _deps, clock = world
    batch = created()
    assert batch["expires_at"] == int(clock()) + DAY
    answer = call("PATCH", f"/v1/batches/{batch['id']}", body={"complete_by": batch["expires_at"] + 1})
    assert "expires_at" in refused(answer, "complete_by")
    clock.advance(600)
    answer = call("PATCH", f"/v1/batches/{batch['id']}", body={"complete_by": int(clock()) - 1})
    assert "in the past" in refused(answer, "complete_by")


def test_patch_of_an_ended_batch_is_409_batch_finalized(world: Any) -> None:
    deps, _clock = world
    batch_id = created(priority=2)["id"]
    end(deps, batch_id)
    status, answer = call("PATCH", f"/v1/batches/{batch_id}", body={"priority": 9})
    assert status == 409 and answer["error"]["code"] == "batch_finalized", answer
    assert "cancelled" in answer["error"]["message"]
    assert call("GET", f"/v1/batches/{batch_id}")[1]["priority"] == 2


def test_patch_of_a_batch_that_ends_between_the_read_and_the_write_is_409_and_writes_nothing(
    world: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    deps, _clock = world
    batch_id = created(priority=2)["id"]
    reschedule = deps.batches.reschedule

    def ended_first(batch: str, change: ScheduleChange) -> BatchRecord | None:
        end(deps, batch)  # the workflow ends it after the PATCH read it unfinished
        return reschedule(batch, change)

    monkeypatch.setattr(deps.batches, "reschedule", ended_first)
    status, answer = call("PATCH", f"/v1/batches/{batch_id}", body={"priority": 9})
    assert status == 409 and answer["error"]["code"] == "batch_finalized", answer
    record = deps.batches.get_record(batch_id)
    assert record is not None and (record.status, record.priority) == (BatchStatus.CANCELLED, 2)


def test_patch_of_another_users_batch_is_404_and_an_administrator_may_patch_any(world: Any) -> None:
    batch_id = created()["id"]
    status, answer = call("PATCH", f"/v1/batches/{batch_id}", BOB, {"priority": 1})
    assert status == 404 and answer["error"]["code"] == "batch_not_found"
    status, answer = call("PATCH", "/v1/batches/batch_nope", ALICE, {"priority": 1})
    assert status == 404
    patched = call("PATCH", f"/v1/batches/{batch_id}", ADMIN, {"priority": 80})[1]
    assert patched["priority"] == 80
    assert "from -100 to 100" in refused(
        call("PATCH", f"/v1/batches/{batch_id}", ADMIN, {"priority": -101}), "priority"
    )
    # Its owner holds to their own range, whatever an administrator set.
    assert "from -10 to 10" in refused(
        call("PATCH", f"/v1/batches/{batch_id}", ALICE, {"priority": 80}), "priority"
    )
    assert call("PATCH", f"/v1/batches/{batch_id}", ALICE, {"priority": 10})[1]["priority"] == 10


def test_the_openai_sdk_patches_a_batch_and_reads_the_batch_back(world: Any) -> None:
    _deps, clock = world
    client = openai_over_the_handler(ALICE)
    batch_id = created()["id"]
    due = int(clock()) + 900
    patched = client.patch(f"/batches/{batch_id}", body={"priority": 4, "complete_by": due}, cast_to=Batch)
    assert isinstance(patched, Batch) and patched.id == batch_id
    assert (getattr(patched, "priority"), getattr(patched, "complete_by")) == (4, due)  # noqa: B009


@pytest.mark.parametrize("tenant_shares", [True, False])
def test_a_patch_reranks_the_batch_on_its_models_slot_map_at_once_only_with_tenant_shares(
    sim: Simulator, monkeypatch: pytest.MonkeyPatch, tenant_shares: bool
) -> None:
    """With ``BATCH_TENANT_SHARES`` on, the new priority is the batch's tag on its model's slot
    map as soon as the PATCH answers (its running chains go by it at their next request);
    off, nothing is written there (no chain would read or drop it)."""
    deps = make_deps(sim, FakeClock(), BATCH_TENANT_SHARES=str(tenant_shares).lower())
    monkeypatch.setattr(api, "get_deps", lambda: deps)
    auth.forget_keys()
    batch_id = created()["id"]
    assert deps.slots.acquire(
        "sim-chat", token_of(batch_id, "x"), cap=4, now=deps.clock(), lease_seconds=60
    ).granted
    status, _ = call("PATCH", f"/v1/batches/{batch_id}", body={"priority": 4})
    assert status == 200
    tags = deps.slots.read("sim-chat").tags
    if tenant_shares:
        tag = parse_tag(tags[batch_id])
        assert tag is not None and (tag.tenant, tag.priority) == ("user-alice", 4)
    else:
        assert batch_id not in tags
