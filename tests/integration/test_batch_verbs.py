"""Each change of a batch's record is a verb of the store (moto): one that stops the batch's
requests from starting halts every counter shard in the same transaction as the record's
change, one that does not leaves the shards alone, and each changes the batch only from
the statuses it names (invariant 8: the check is in the conditional write)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

import pytest
from batchgw.api import batches
from batchgw.deps import Deps
from batchgw.domain.batch import RECORD_SK, SHARD_PREFIX, BatchRecord
from batchgw.domain.principal import Principal
from batchgw.domain.states import UNFINISHED_STATUSES, BatchStatus
from batchgw.run import lifecycle
from batchgw.storage import aws
from batchgw.storage.dynamo import Table

from local.simulator import Simulator
from tests.integration.conftest import body_of, chat_request, make_deps
from tests.support import FakeClock

pytestmark = pytest.mark.usefixtures("aws_env")

ALICE = Principal(user_id="user-alice", role="internal", key_id="key_local_alice")
SHARDS = {"BATCH_COUNTER_SHARDS": "3"}
ERROR = {"code": "owner_unauthorized", "message": "no longer allowed"}

Verb = Callable[[Deps, str], BatchRecord | None]

# Each verb, called on a batch of three counter shards, and whether it halts them.
HALTING: dict[str, Verb] = {
    "cancel": lambda deps, b: deps.batches.cancel(b, at=1),
    "fail_for_owner": lambda deps, b: deps.batches.fail_for_owner(b, ERROR),
    "start_failing": lambda deps, b: deps.batches.start_failing(b, None),
    "start_expiring": lambda deps, b: deps.batches.start_expiring(b),
    "mark_results_full": lambda deps, b: deps.batches.mark_results_full(b),
    "start_finalizing": lambda deps, b: deps.batches.start_finalizing(
        b,
        final_status=BatchStatus.COMPLETED,
        at=1,
        results_expires_at=2,
        ttl=3,
        from_status=BatchStatus.IN_PROGRESS,
    ),
}
NOT_HALTING: dict[str, Verb] = {
    "start": lambda deps, b: deps.batches.start(b, at=1),
    "note_prepared": lambda deps, b: deps.batches.note_prepared(
        b, shards=3, chains=1, written=3, from_statuses=[BatchStatus.VALIDATING, BatchStatus.IN_PROGRESS]
    ),
    "move_written": lambda deps, b: deps.batches.move_written(b, 3),
    "set_token": lambda deps, b: deps.batches.set_token(b, "token"),
    "pause": lambda deps, b: deps.batches.pause(b, {"reason": "budget", "until": 5, "check_at": 5}),
    "resume": lambda deps, b: deps.batches.resume(b),
    "mark_swept": lambda deps, b: deps.batches.mark_swept(b, status=BatchStatus.IN_PROGRESS),
    "set_generation": lambda deps, b: deps.batches.set_generation(b, 1),
    "note_reconciled": lambda deps, b: deps.batches.note_reconciled(b, left=3, progress_at=1.0, ttl=9),
    "clear_event_pending": lambda deps, b: deps.batches.clear_event_pending(b),
    "save_finalize_cursor": lambda deps, b: deps.batches.save_finalize_cursor(b, {"output": {"part": 1}}),
    "reschedule": lambda deps, b: deps.batches.reschedule(b, {"priority": 3, "complete_by": None}),
}

# The statuses each verb may change a batch from.
ANY = frozenset(BatchStatus)
FROM: dict[str, frozenset[BatchStatus]] = {
    "cancel": frozenset({BatchStatus.VALIDATING, BatchStatus.IN_PROGRESS}),
    "fail_for_owner": frozenset({BatchStatus.IN_PROGRESS}),
    "start_failing": UNFINISHED_STATUSES,
    "start_expiring": frozenset({BatchStatus.IN_PROGRESS, BatchStatus.CANCELLING}),
    "mark_results_full": ANY,
    "start_finalizing": frozenset({BatchStatus.IN_PROGRESS}),
    "start": frozenset({BatchStatus.VALIDATING}),
    "note_prepared": frozenset({BatchStatus.VALIDATING, BatchStatus.IN_PROGRESS}),
    "move_written": ANY,
    "set_token": ANY,
    "pause": frozenset({BatchStatus.IN_PROGRESS}),
    "resume": frozenset({BatchStatus.IN_PROGRESS}),
    "mark_swept": frozenset({BatchStatus.IN_PROGRESS}),
    "set_generation": frozenset({BatchStatus.IN_PROGRESS}),
    "note_reconciled": UNFINISHED_STATUSES,
    "clear_event_pending": ANY,
    "save_finalize_cursor": ANY,
    "reschedule": UNFINISHED_STATUSES,
}
TRIED_FROM = (
    BatchStatus.VALIDATING,
    BatchStatus.IN_PROGRESS,
    BatchStatus.CANCELLING,
    BatchStatus.FINALIZING,
    BatchStatus.COMPLETED,
)


@pytest.fixture
def writes(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[list[Mapping[str, Any]]]]:
    """Every write to DynamoDB, each as the actions it applied together (one for a single
    item's write, all of a transaction's)."""
    seen: list[list[Mapping[str, Any]]] = []
    transact, update_returning = Table.transact, Table.update_returning

    def transacting(self: Table, actions: Any, *, failure: str) -> Any:
        seen.append(list(actions))
        return transact(self, actions, failure=failure)

    def updating(self: Table, key: Any, update: Any, *, failure: str) -> Any:
        seen.append([{"Update": update.request(self.name, key)}])
        return update_returning(self, key, update, failure=failure)

    monkeypatch.setattr(Table, "transact", transacting)
    monkeypatch.setattr(Table, "update_returning", updating)
    yield seen


def running_batch(deps: Deps, status: BatchStatus = BatchStatus.IN_PROGRESS) -> str:
    """A prepared batch of three requests, one in each counter shard, then put in ``status``."""
    created = batches.create_batch(deps, ALICE, body_of([chat_request(f"r-{i}", "hi") for i in range(3)]))
    batch_id = str(created["id"])
    lifecycle.prepare(deps, batch_id)
    _set_status(deps, batch_id, status)
    return batch_id


def _set_status(deps: Deps, batch_id: str, status: BatchStatus) -> None:
    aws.get_clients().dynamodb.update_item(
        TableName=deps.settings.batches_table,
        Key={"pk": {"S": batch_id}, "sk": {"S": RECORD_SK}},
        UpdateExpression="SET #s = :s",
        ExpressionAttributeNames={"#s": "status"},
        ExpressionAttributeValues={":s": {"S": status.value}},
    )


def shard_items(deps: Deps, batch_id: str) -> list[dict[str, Any]]:
    return aws.get_clients().dynamodb.query(
        TableName=deps.settings.batches_table,
        KeyConditionExpression="pk = :pk AND begins_with(sk, :p)",
        ExpressionAttributeValues={":pk": {"S": batch_id}, ":p": {"S": SHARD_PREFIX}},
        ConsistentRead=True,
    )["Items"]


def _sk(action: Mapping[str, Any]) -> str:
    return str(action["Update"]["Key"]["sk"]["S"])


def _sets(action: Mapping[str, Any], attribute: str) -> bool:
    return attribute in action["Update"].get("ExpressionAttributeNames", {}).values()


def _of_shards(write: list[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    return [a for a in write if "Update" in a and _sk(a).startswith(SHARD_PREFIX)]


@pytest.mark.parametrize("verb", sorted(HALTING))
def test_a_verb_that_stops_the_batch_halts_every_shard_in_the_same_transaction(
    sim: Simulator, writes: list[list[Mapping[str, Any]]], verb: str
) -> None:
    deps = make_deps(sim, FakeClock(), **SHARDS)
    batch_id = running_batch(deps)
    writes.clear()
    assert HALTING[verb](deps, batch_id) is not None
    (write,) = [w for w in writes if _of_shards(w)]  # one write reaches the shards
    assert [_sk(a) for a in write if "Update" in a and _sk(a) == RECORD_SK] == [RECORD_SK]
    assert sorted(_sk(a) for a in _of_shards(write) if _sets(a, "halt")) == [
        f"{SHARD_PREFIX}0{k}" for k in range(3)
    ]
    assert [item.get("halt") for item in shard_items(deps, batch_id)] == [{"BOOL": True}] * 3


@pytest.mark.parametrize("verb", sorted(NOT_HALTING))
def test_a_verb_that_lets_the_batch_run_leaves_its_shards_unhalted(
    sim: Simulator, writes: list[list[Mapping[str, Any]]], verb: str
) -> None:
    deps = make_deps(sim, FakeClock(), **SHARDS)
    status = BatchStatus.VALIDATING if verb == "start" else BatchStatus.IN_PROGRESS
    batch_id = running_batch(deps, status)
    writes.clear()
    assert NOT_HALTING[verb](deps, batch_id) is not None
    assert not [a for w in writes for a in _of_shards(w) if _sets(a, "halt")]
    assert [item.get("halt") for item in shard_items(deps, batch_id)] == [None] * 3


def test_a_new_generation_reaches_every_shard_with_the_record(
    sim: Simulator, writes: list[list[Mapping[str, Any]]]
) -> None:
    deps = make_deps(sim, FakeClock(), **SHARDS)
    batch_id = running_batch(deps)
    writes.clear()
    after = deps.batches.set_generation(batch_id, 4)
    assert after is not None and after.generation == 4
    (write,) = [w for w in writes if _of_shards(w)]
    assert RECORD_SK in [_sk(a) for a in write] and all(_sets(a, "gen") for a in _of_shards(write))
    assert [item["gen"] for item in shard_items(deps, batch_id)] == [{"N": "4"}] * 3


@pytest.mark.parametrize("verb", sorted(FROM))
def test_a_verb_changes_the_batch_only_from_the_statuses_it_names(sim: Simulator, verb: str) -> None:
    deps = make_deps(sim, FakeClock(), **SHARDS)
    call = HALTING.get(verb) or NOT_HALTING[verb]
    changed = {status: call(deps, running_batch(deps, status)) is not None for status in TRIED_FROM}
    assert {status for status, did in changed.items() if did} == FROM[verb] & set(TRIED_FROM)
    assert call(deps, "batch_gone") is None  # and a deleted batch is not written again
    assert deps.batches.get_record("batch_gone") is None
