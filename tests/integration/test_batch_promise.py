"""The promise at create (issue 56) through the api handler on moto: the capacity answer, a
batch's ``estimated_completion_at`` (at create, then at its own pace while it runs), and the
422 ``deadline_infeasible`` of a ``complete_by`` the gateway cannot meet, which stores
nothing at create and changes nothing at a ``PATCH``.

The model's pace comes from its batch answers in the request log (seeded here, each 0.95 s
long: with the chain's 0.05 s gap, a slot ends a request a second), its slots from its cap
(4), and the batches ahead from its slot map; a new batch's first call is taken to start
a second after its create (``Tuning.first_call_seconds``)."""

from __future__ import annotations

import asyncio
import json
import math
from typing import Any

import boto3
import pytest
from batchgw.api import auth, files
from batchgw.deps import Deps
from batchgw.domain.attempts import AttemptEntry
from batchgw.domain.chains import decode
from batchgw.domain.fairness import token_of
from batchgw.domain.principal import Principal
from batchgw.domain.states import UNFINISHED_STATUSES, BatchStatus
from batchgw.run import lifecycle
from batchgw.run.chain import run_message

from functions.api import handler as api
from local.simulator import Simulator
from tests.integration.conftest import chat_request, make_deps, receive_all
from tests.support import FakeClock, LambdaContext, http_event

pytestmark = pytest.mark.usefixtures("aws_env")
ALICE, BOB = "sk-local-alice", "sk-local-bob"
MODEL, CAP = "sim-chat", 4


def world(
    sim: Simulator,
    monkeypatch: pytest.MonkeyPatch,
    *,
    tenant_shares: bool = False,
    clock: FakeClock | None = None,
) -> Deps:
    deps = make_deps(
        sim,
        clock or FakeClock(),
        BATCH_MODEL_CONCURRENCY=str(CAP),
        BATCH_TENANT_SHARES=str(tenant_shares).lower(),
    )
    monkeypatch.setattr(api, "get_deps", lambda: deps)
    auth.forget_keys()
    return deps


def call(method: str, path: str, key: str = ALICE, body: Any = None) -> tuple[int, Any]:
    path, _, query = path.partition("?")
    event = http_event(method, path, key=key, body=body, query=query)
    response = api.handler(event, LambdaContext())  # type: ignore[arg-type]
    return int(response["statusCode"]), json.loads(response.get("body") or "null")


def requests(n: int, prefix: str = "q") -> list[dict[str, Any]]:
    return [chat_request(f"{prefix}-{i}", f"hello {i}") for i in range(n)]


def create(n: int, key: str = ALICE, **fields: Any) -> tuple[int, Any]:
    return call("POST", "/v1/batches", key, {"requests": requests(n), **fields})


def answered(deps: Deps, count: int = 20, latency_ms: int = 950) -> None:
    """``count`` batch answers of the model in the request log, the last a second ago."""
    table = boto3.client("dynamodb")
    for i in range(count):
        entry = AttemptEntry(
            batch_id="batch_earlier",
            index=i,
            custom_id=f"r-{i}",
            model=MODEL,
            attempt=1,
            outcome="success",
            ended_at=deps.clock() - 1 - i,
            latency_ms=latency_ms,
            status_code=200,
            user_id="user-bob",
        )
        table.put_item(**deps.reqlog.batch_entry_action(entry, ttl=int(deps.clock()) + 86400)["Put"])


def queued(deps: Deps, batch_id: str) -> None:
    """``batch_id`` waits for the model's slots, as its first chain would."""
    deps.slots.wait(MODEL, batch_id, until=deps.clock() + 600)


def capacity(query: str, key: str = ALICE) -> dict[str, Any]:
    status, body = call("GET", f"/v1/batches/capacity?{query}", key)
    assert status == 200, body
    [model] = body["data"]
    return dict(model)


def test_without_a_recent_answer_on_the_model_there_is_no_estimate_and_a_complete_by_is_taken(
    sim: Simulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    deps = world(sim, monkeypatch)
    seen = capacity(f"model={MODEL}&requests=10")
    assert (seen["earliest_completion_at"], seen["requests_per_second"]) == (None, None)
    status, batch = create(10, complete_by=int(deps.clock()) + 5)
    assert status == 200, batch
    assert batch["estimated_completion_at"] is None


def test_the_capacity_answer_gives_the_models_slots_pace_and_the_end_of_n_more_requests(
    sim: Simulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    deps = world(sim, monkeypatch)
    answered(deps)
    now = deps.clock()
    seen = capacity(f"model={MODEL}&requests=40")
    assert seen["object"] == "batch.capacity" and seen["model"] == MODEL and seen["requests"] == 40
    assert (seen["model_batch_slots"], seen["batch_slots"]) == (CAP, CAP)
    assert seen["requests_per_second"] == pytest.approx(CAP / 1.0)  # 0.95 s answers, 0.05 s gaps
    assert (seen["queued_requests"], seen["own_queued_requests"]) == (0, 0)
    assert seen["earliest_completion_at"] == math.ceil(now + 1 + 40 / CAP)
    # Every model the key may use, without ?model=; an alias reads as its model.
    status, every = call("GET", "/v1/batches/capacity")
    assert status == 200 and MODEL in [m["model"] for m in every["data"]]
    assert capacity("model=sim-chat-latest")["model"] == MODEL


@pytest.mark.parametrize(
    ("query", "param"),
    [("model=no-such-model", "model"), ("requests=0", "requests"), ("requests=x", "requests")],
)
def test_a_capacity_question_that_is_not_valid_is_a_400_naming_its_parameter(
    sim: Simulator, monkeypatch: pytest.MonkeyPatch, query: str, param: str
) -> None:
    world(sim, monkeypatch)
    status, body = call("GET", f"/v1/batches/capacity?{query}")
    assert status == 400 and body["error"]["param"] == param, body


def test_a_complete_by_before_the_estimate_is_a_422_naming_the_earliest_time_and_stores_nothing(
    sim: Simulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    deps = world(sim, monkeypatch)
    answered(deps)
    now = deps.clock()
    earliest = math.ceil(now + 1 + 40 / CAP)
    infeasible(create(40, complete_by=earliest - 1), earliest, outcome="Nothing was created")
    assert call("GET", "/v1/batches")[1]["data"] == []  # nothing stored
    status, batch = create(40, complete_by=earliest)
    assert status == 200, batch
    assert batch["estimated_completion_at"] == earliest
    # Read again, while it has not run: the estimate made at its create.
    assert call("GET", f"/v1/batches/{batch['id']}")[1]["estimated_completion_at"] == earliest


@pytest.mark.parametrize("tenant_shares", [False, True])
def test_the_batches_queued_on_the_model_push_the_estimate_back_as_the_workers_would_share_the_slots(
    sim: Simulator, monkeypatch: pytest.MonkeyPatch, tenant_shares: bool
) -> None:
    """Bob's batch of 40 on the model: Alice's 8 share the 4 slots with it (2 each, either
    way). Alice's own batch of 40 ahead: with tenant shares, hers goes first within her share
    (13 s); without, each batch has an even share (5 s)."""
    clock = FakeClock()
    deps = world(sim, monkeypatch, tenant_shares=tenant_shares, clock=clock)
    answered(deps)
    bobs = create(40, key=BOB)[1]["id"]
    queued(deps, bobs)
    now = deps.clock()
    seen = capacity(f"model={MODEL}&requests=8")
    assert (seen["queued_requests"], seen["own_queued_requests"], seen["batch_slots"]) == (40, 0, 2)
    assert seen["earliest_completion_at"] == math.ceil(now + 1 + 8 / 2)

    deps.batches.end(
        bobs, {"status": BatchStatus.CANCELLED, "cancelled_at": int(now)}, from_statuses=UNFINISHED_STATUSES
    )
    deps.slots.stop_waiting(MODEL, bobs)
    alices = create(40)[1]["id"]
    assert deps.slots.acquire(MODEL, token_of(alices, "x"), cap=CAP, now=now, lease_seconds=600).granted
    clock.advance(1)  # the next batch is created after hers
    now = clock()
    seen = capacity(f"model={MODEL}&requests=8")
    assert (seen["queued_requests"], seen["own_queued_requests"]) == (40, 40)
    expected = now + 1 + (48 / CAP if tenant_shares else 8 / 2)
    assert seen["earliest_completion_at"] == math.ceil(expected)
    status, batch = create(8)
    assert status == 200 and batch["estimated_completion_at"] == math.ceil(expected), batch


def test_a_batch_that_ended_has_no_estimate(sim: Simulator, monkeypatch: pytest.MonkeyPatch) -> None:
    deps = world(sim, monkeypatch)
    answered(deps)
    batch = create(4)[1]
    assert batch["estimated_completion_at"] is not None
    status, cancelled = call("POST", f"/v1/batches/{batch['id']}/cancel")
    assert status == 200 and cancelled["estimated_completion_at"] is None


# --- while it runs, and a PATCH of its complete_by -------------------------------------------


def patch(batch_id: str, body: dict[str, Any], key: str = ALICE) -> tuple[int, Any]:
    return call("PATCH", f"/v1/batches/{batch_id}", key, body)


def infeasible(answer: tuple[int, Any], earliest: int, outcome: str = "Nothing was changed") -> str:
    """The message of a 422 ``deadline_infeasible`` naming ``earliest`` (a PATCH's, or with
    ``outcome`` a create's)."""
    status, body = answer
    assert status == 422, body
    error = body["error"]
    assert (error["code"], error["param"], error["earliest_completion_at"]) == (
        "deadline_infeasible",
        "complete_by",
        earliest,
    )
    assert str(earliest) in error["message"] and outcome in error["message"]
    return str(error["message"])


def test_a_patch_whose_complete_by_comes_before_the_batchs_estimate_now_is_a_422_and_changes_nothing(
    sim: Simulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before any of its requests ended, a batch's estimate is remade at the PATCH: its 40
    requests from now (5 s after its create), not the promise its create made."""
    clock = FakeClock()
    deps = world(sim, monkeypatch, clock=clock)
    answered(deps)
    batch = create(40)[1]
    promised = math.ceil(clock() + 1 + 40 / CAP)
    assert batch["estimated_completion_at"] == promised
    clock.advance(5)
    earliest = math.ceil(clock() + 1 + 40 / CAP)
    assert "unfinished requests" in infeasible(
        patch(batch["id"], {"priority": 3, "complete_by": earliest - 1}), earliest
    )
    shown = call("GET", f"/v1/batches/{batch['id']}")[1]
    assert (shown["priority"], shown["complete_by"], shown["estimated_completion_at"]) == (0, None, promised)

    status, patched = patch(batch["id"], {"priority": 3, "complete_by": earliest})
    assert status == 200, patched
    assert (patched["priority"], patched["complete_by"]) == (3, earliest)
    assert patched["estimated_completion_at"] == earliest  # the estimate remade for it
    assert call("GET", f"/v1/batches/{batch['id']}")[1]["estimated_completion_at"] == earliest


def test_a_patch_of_priority_alone_or_clearing_complete_by_takes_no_deadline_check(
    sim: Simulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A complete_by met at create that time has made infeasible stays: a priority alone
    changes, and clearing complete_by is always taken."""
    clock = FakeClock()
    deps = world(sim, monkeypatch, clock=clock)
    answered(deps)
    due = math.ceil(clock() + 1 + 40 / CAP)
    batch = create(40, complete_by=due)[1]
    clock.advance(5)  # its 40 requests would now end 5 s after ``due``
    status, patched = patch(batch["id"], {"priority": 7})
    assert status == 200 and (patched["priority"], patched["complete_by"]) == (7, due), patched
    status, patched = patch(batch["id"], {"complete_by": None})
    assert status == 200 and patched["complete_by"] is None, patched


def test_a_patch_without_an_estimate_takes_any_complete_by_in_the_window(
    sim: Simulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No recent answer on the model: no estimate, so nothing to refuse by (its window is the
    hard limit)."""
    deps = world(sim, monkeypatch)
    batch = create(40)[1]
    due = int(deps.clock()) + 2
    status, patched = patch(batch["id"], {"complete_by": due})
    assert status == 200 and patched["complete_by"] == due, patched
    assert patched["estimated_completion_at"] is None


def run_chains(deps: Deps, batch_id: str, count: int) -> None:
    """Prepare the batch (it runs from now) and run ``count`` of its chains to their end, as a
    worker would; the others wait on the queue."""
    lifecycle.prepare(deps, batch_id)
    messages = [decode(message["Body"]) for message in receive_all(deps)]
    for message in messages[:count]:
        asyncio.run(run_message(deps, message, owner="w", deadline=deps.clock() + 900))


def running(sim: Simulator, monkeypatch: pytest.MonkeyPatch) -> tuple[str, int, int]:
    """A batch of 12 requests on 4 chains, one of which ended its 3 at once, 20 s ago, the
    others stuck since: its id, the end its create promised, and the end at its own pace
    (3 in 20 s: the 9 left take 60 s more)."""
    clock = FakeClock()
    deps = world(sim, monkeypatch, clock=clock)
    answered(deps)
    batch = create(12)[1]
    start = int(clock())
    run_chains(deps, batch["id"], 1)
    clock.advance(20)
    return batch["id"], batch["estimated_completion_at"], start + 20 + 9 * 20 // 3


def test_a_running_batchs_estimate_follows_its_own_pace_not_its_creates_promise(
    sim: Simulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    batch_id, promised, pace_end = running(sim, monkeypatch)
    assert promised == 1_800_000_000 + 1 + 12 // CAP  # at the model's pace: 4 s
    shown = call("GET", f"/v1/batches/{batch_id}")[1]
    assert (shown["status"], shown["request_counts"]["completed"]) == ("in_progress", 3), shown
    assert shown["estimated_completion_at"] == pace_end == 1_800_000_080
    assert shown["eta"]["estimated_completion_at"] == pace_end


def test_a_patch_of_a_running_batch_is_judged_by_its_own_pace(
    sim: Simulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    batch_id, _promised, pace_end = running(sim, monkeypatch)
    answer = patch(batch_id, {"priority": 5, "complete_by": pace_end - 1})
    assert "pace it has kept so far" in infeasible(answer, pace_end)
    assert call("GET", f"/v1/batches/{batch_id}")[1]["priority"] == 0
    status, patched = patch(batch_id, {"priority": 5, "complete_by": pace_end})
    assert status == 200 and (patched["priority"], patched["complete_by"]) == (5, pace_end), patched
    assert patched["estimated_completion_at"] == pace_end


def file_of_40(sim: Simulator, monkeypatch: pytest.MonkeyPatch, clock: FakeClock) -> tuple[Deps, str]:
    """The stack with its model's pace known, and alice's input file of 40 requests."""
    deps = world(sim, monkeypatch, clock=clock)
    answered(deps)
    owner = Principal(user_id="user-alice", role="internal", key_id="key_local_alice")
    lines = [
        json.dumps({"method": "POST", "url": "/v1/chat/completions", **r}) for r in requests(40, prefix="f")
    ]
    return deps, files.new_input_file(deps, owner, "in.jsonl", "\n".join(lines).encode()).id


def test_a_file_batch_has_no_estimate_until_its_file_is_read_then_a_patch_is_judged_by_its_requests(
    sim: Simulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its create knows the file's bytes, not its requests: no estimate. Once its file is read
    (its 40 requests counted), a PATCH is judged by the forecast of those 40, as for a batch
    of requests."""
    clock = FakeClock()
    deps, file_id = file_of_40(sim, monkeypatch, clock)
    body = {"input_file_id": file_id, "endpoint": "/v1/chat/completions", "completion_window": "24h"}
    status, batch = call("POST", "/v1/batches", body=body)
    assert status == 200 and batch["estimated_completion_at"] is None, batch
    lifecycle.prepare(deps, batch["id"])
    earliest = math.ceil(clock() + 1 + 40 / CAP)
    infeasible(patch(batch["id"], {"complete_by": earliest - 1}), earliest)
    status, patched = patch(batch["id"], {"complete_by": earliest})
    assert status == 200 and patched["estimated_completion_at"] == earliest, patched


def test_a_file_batch_is_estimated_once_its_file_is_read_and_fails_there_if_its_complete_by_comes_first(
    sim: Simulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its create knows the file's bytes, not its requests: the estimate (and the refusal of a
    complete_by it cannot meet) comes when its file is read, before anything is counted or run."""
    clock = FakeClock()
    deps, file_id = file_of_40(sim, monkeypatch, clock)
    earliest = math.ceil(clock() + 1 + 40 / CAP)
    made = {}
    for complete_by in (earliest - 1, earliest):
        body = {
            "input_file_id": file_id,
            "endpoint": "/v1/chat/completions",
            "completion_window": "24h",
            "complete_by": complete_by,
        }
        status, batch = call("POST", "/v1/batches", body=body)
        assert status == 200 and batch["estimated_completion_at"] is None, batch
        lifecycle.prepare(deps, batch["id"])
        made[complete_by] = call("GET", f"/v1/batches/{batch['id']}")[1]
    late, kept = made[earliest - 1], made[earliest]
    assert late["status"] == "failed" and late["request_counts"]["total"] == 0, late
    assert late["errors"]["data"][0]["code"] == "deadline_infeasible", late["errors"]
    assert f"at {earliest} at the earliest" in late["errors"]["data"][0]["message"]
    assert late["error"]["param"] == "complete_by" and late["error"]["earliest_completion_at"] == earliest
    assert kept["status"] == "in_progress" and kept["estimated_completion_at"] == earliest, kept
    assert sim.stats()["models"].get("sim-chat", {}).get("requests", 0) == 0  # nothing ran
