"""A batch's requests, one item each, and their lease-guarded state changes.

A worker writes a request only while it holds the request's lease: the owner it wrote
when it claimed the request, at the epoch that claim raised. Any other worker's write
(a duplicate delivery, a worker whose lease ran out and was taken over) is refused.

Timeline of one request's lease::

    queued ──claim──▶ running(owner A, epoch 1, until t1) ──record_end──▶ succeeded/failed
                          │ A dies; t1 passes
                          ▼
                      running(owner B, epoch 2, lost + 1) ──▶ ... A's late write: refused
    running ──schedule_retry──▶ retry_wait(next_at) ──claim once due──▶ running(epoch + 1)
    running ──release──▶ queued (attempt given back; only while the batch runs)

Ending a request and counting it in its batch's counter shard are one transaction. With
a ``RunGuard``, the count also checks that the shard is not halted (``storage.batch_records``):
the worker learns from that one write whether its batch still runs its requests.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any

from batchgw.domain.batch import RECORD_SK, Tally, shard_sk
from batchgw.domain.errors import StorageError
from batchgw.domain.request import RequestEnd, RequestRecord
from batchgw.domain.spend import Deferred
from batchgw.domain.states import BatchStatus, RequestStatus
from batchgw.storage.batch_shards import kept_charge
from batchgw.storage.dynamo import Table, Update, from_item, one_of, timestamp, to_item
from batchgw.storage.reqlog import attempts_pk

# The clauses of a request's conditional writes.
is_queued = "#st = :queued"
retry_is_due = "(#st = :retry AND next_at <= :now)"
is_running = "#st = :running"
lease_ran_out = "lease_until < :now"
lease_is_mine = "lease_owner = :me AND epoch = :epoch"
epoch_unchanged = "epoch = :epoch"
never_attempted = "(attribute_not_exists(attempts) OR attempts = :zero)"
attempted_before = "attempts > :zero"
# No attempt of it was lost with its worker (one that was is charged as it ends: not swept).
never_lost = "(attribute_not_exists(lost) OR lost = :zero)"
# ... and of the checks on the batch's record and counter shard that go with them.
batch_runs = "#st = :in_progress AND attribute_not_exists(expiring)"
more_than_one_left = "#left > :one"
exactly_one_left = "#left = :one"
shard_not_halted = "attribute_not_exists(halt)"
generation_current = "(attribute_not_exists(gen) OR gen <= :gen)"

# Takes the lease: running, this owner, until the lease ends; one more epoch and attempt.
_TAKE_LEASE = (
    "#st = :running",
    "lease_owner = :me",
    "lease_until = :until",
    "epoch = if_not_exists(epoch, :zero) + :one",
    "attempts = if_not_exists(attempts, :zero) + :one",
)
_STATUS = {"#st": "status"}
SWEEP_CHUNK = 99  # requests per transaction, with their shard's counter update
# What a result line shows of a request (``domain.results``): all but its request body.
_RESULT_NAMES = {"#st": "status", "#m": "model", "#err": "error"}
_RESULT_FIELDS = "pk, idx, custom_id, #m, #st, #err, res, res_ref, status_code, request_id"


class ClaimKind(StrEnum):
    CLAIMED = "claimed"  # this worker holds it now
    ENDED = "ended"  # already terminal
    HELD = "held"  # another worker's lease is live
    WAITING = "waiting"  # a retry is scheduled for it, not due yet
    MISSING = "missing"  # no such request


@dataclass(frozen=True, slots=True)
class Claim:
    kind: ClaimKind
    request: RequestRecord | None = None  # as it is now (claimed) or as it was (otherwise)
    took_over: bool = False  # claimed from a worker whose lease ran out


@dataclass(frozen=True, slots=True)
class Swept:
    """What a sweep did: how many requests it ended, and the indexes of those it left for
    having lost attempts with their workers (``RequestStore.end_unstarted`` ends each)."""

    ended: int
    lost: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class RunGuard:
    """A request's end recorded with a check that its batch still runs its requests: no
    stop halted the request's counter shard, and (for a chain's request) no newer
    ``generation`` of the batch's chains superseded the chain."""

    generation: int | None = None  # the chain's; None for a lone request

    def condition(self) -> tuple[str, dict[str, Any]]:
        if self.generation is None:
            return shard_not_halted, {}
        return f"{shard_not_halted} AND {generation_current}", {":gen": self.generation}


class Recorded(StrEnum):
    RUNS = "runs"  # recorded; and the batch, checked in the same write, still runs (RunGuard)
    OK = "ok"
    SHARD_FINISHED = "shard_finished"  # this was the last request of its shard
    LEASE_LOST = "lease_lost"  # another worker holds the request: nothing was written


class Scheduled(StrEnum):
    SCHEDULED = "scheduled"
    LOST = "lost"  # this worker no longer holds it
    STOPPED = "stopped"  # the batch no longer runs: end the request instead


class Released(StrEnum):
    RELEASED = "released"  # queued again
    LOST = "lost"  # this worker no longer holds it
    STOPPED = "stopped"  # the batch no longer runs: end the request instead


class RequestStore:
    def __init__(self, client: Any, requests_table: str, batches_table: str) -> None:
        self._table = Table(client, requests_table)
        self._batches = batches_table

    @staticmethod
    def _key(batch_id: str, index: int) -> dict[str, Any]:
        return {"pk": {"S": batch_id}, "idx": {"N": str(index)}}

    def put_new(self, requests: Sequence[RequestRecord]) -> None:
        self._table.put_many(request.to_item() for request in requests)

    def get(self, batch_id: str, index: int) -> RequestRecord | None:
        item = self._table.get(self._key(batch_id, index))
        return None if item is None else RequestRecord.from_item(item)

    # --- leases -------------------------------------------------------------------------------

    def claim(self, batch_id: str, index: int, owner: str, now: float, lease_seconds: float) -> Claim:
        """Take the request's lease if it is queued, due for a retry, or its lease has run out.

        Raises nothing on contention: the claim says who has it.
        """
        values = {
            ":running": RequestStatus.RUNNING.value,
            ":me": owner,
            ":until": timestamp(now + lease_seconds),
            ":now": timestamp(now),
            ":one": 1,
            ":zero": 0,
        }
        claimable = Update(
            extra_set=_TAKE_LEASE,
            condition=f"{is_queued} OR {retry_is_due}",
            names=_STATUS,
            values={
                **values,
                ":queued": RequestStatus.QUEUED.value,
                ":retry": RequestStatus.RETRY_WAIT.value,
            },
        )
        failure = f"could not claim {batch_id}/{index}"
        key = self._key(batch_id, index)
        after, before = self._table.update_returning(key, claimable, failure=failure)
        if after is not None:
            return Claim(ClaimKind.CLAIMED, RequestRecord.from_item(after))
        if before is None:
            return Claim(ClaimKind.MISSING)
        old = RequestRecord.from_item(before)
        if old.status.is_terminal:
            return Claim(ClaimKind.ENDED, old)
        if old.status is RequestStatus.RETRY_WAIT:
            return Claim(ClaimKind.WAITING, old)
        if old.status is RequestStatus.RUNNING and (old.lease_until or 0) >= now:
            if old.lease_owner == owner:
                # Our own claim, applied already: the SDK retried a call whose answer was lost.
                return Claim(ClaimKind.CLAIMED, old)
            return Claim(ClaimKind.HELD, old)
        if old.lease_owner == owner:
            # Our own claim, its lease run out while we were gone (a provider step that died
            # and is tried again): taken back as it was, no attempt lost or added.
            retaken = Update(
                extra_set=("lease_until = :until", "epoch = if_not_exists(epoch, :zero) + :one"),
                condition=f"{is_running} AND lease_owner = :me AND {epoch_unchanged}",
                names=_STATUS,
                values={k: v for k, v in values.items() if k != ":now"} | {":epoch": old.epoch},
            )
            after, _ = self._table.update_returning(
                key, retaken, failure=f"could not take back {batch_id}/{index}"
            )
            if after is not None:
                return Claim(ClaimKind.CLAIMED, RequestRecord.from_item(after))
        # A running request whose lease ran out: its worker is gone. Take it over, counting
        # the lost attempt, whose cost is unknown (the upstream may have run it).
        takeover = Update(
            extra_set=(*_TAKE_LEASE, "lost = if_not_exists(lost, :zero) + :one"),
            condition=f"{is_running} AND {lease_ran_out} AND {epoch_unchanged}",
            names=_STATUS,
            values={**values, ":epoch": old.epoch},
        )
        after, _ = self._table.update_returning(
            key, takeover, failure=f"could not take over {batch_id}/{index}"
        )
        if after is None:
            return Claim(ClaimKind.HELD, old)
        return Claim(ClaimKind.CLAIMED, RequestRecord.from_item(after), took_over=True)

    def renew(self, held: RequestRecord, *, until: float) -> bool:
        """Extend this worker's lease on a request it is running; False once it is not its own."""
        renewal = Update(
            set={"lease_until": timestamp(until)},
            condition=f"{is_running} AND {lease_is_mine}",
            names=_STATUS,
            values={":running": RequestStatus.RUNNING.value, ":me": held.lease_owner, ":epoch": held.epoch},
        )
        return self._table.update(
            self._key(held.batch_id, held.index),
            renewal,
            failure=f"could not renew {held.batch_id}/{held.index}",
        )

    def release(self, held: RequestRecord) -> Released:
        """Hand a claimed request back untouched (queued again, its attempt given back).

        Only while the batch still runs: the request update and a check of the batch's
        record are one transaction, so a request cannot go back to the queue after a
        cancel or the window's end has settled the unstarted ones.
        """
        give_back = Update(
            extra_set=("#st = :queued", "attempts = attempts - :one"),
            remove=["lease_owner", "lease_until"],
            condition=f"{is_running} AND {lease_is_mine}",
            names=_STATUS,
            values={
                ":queued": RequestStatus.QUEUED.value,
                ":running": RequestStatus.RUNNING.value,
                ":me": held.lease_owner,
                ":epoch": held.epoch,
                ":one": 1,
            },
        )
        cancelled = self._table.transact(
            [
                {"Update": give_back.request(self._table.name, self._key(held.batch_id, held.index))},
                self._batch_runs_check(held.batch_id),
            ],
            failure=f"could not release {held.batch_id}/{held.index}",
        )
        if cancelled is None:
            return Released.RELEASED
        if cancelled.failed(0):
            return Released.LOST
        if cancelled.failed(1):
            return Released.STOPPED
        raise StorageError(f"could not release {held.batch_id}/{held.index}: {list(cancelled.reasons)}")

    def _batch_runs_check(self, batch_id: str) -> dict[str, Any]:
        return {
            "ConditionCheck": {
                "TableName": self._batches,
                "Key": {"pk": {"S": batch_id}, "sk": {"S": RECORD_SK}},
                "ConditionExpression": batch_runs,
                "ExpressionAttributeNames": _STATUS,
                "ExpressionAttributeValues": {":in_progress": {"S": BatchStatus.IN_PROGRESS.value}},
            }
        }

    # --- ends and retries ---------------------------------------------------------------------

    def record_end(
        self,
        held: RequestRecord,
        *,
        shard: int,
        end: RequestEnd,
        tally: Tally,
        called: bool = False,
        charges: Sequence[dict[str, Any]] = (),
        guard: RunGuard | None = None,
        deferred: Deferred | None = None,
    ) -> Recorded:
        """End a running request and count it in its shard, in one transaction.

        The request write holds only while this worker still has the lease at its epoch;
        the shard's ``left`` falls by one. The common case is one call; the last request
        of a shard takes a second, conditional on being last, so exactly one writer
        learns that the shard finished. ``called``: the end follows an upstream call
        (counted in the request's ``calls``). ``charges``: the updates that charge the
        attempt's cost to its owner's and key's spend (``SpendStore.charge_actions``), in
        the same transaction; or ``deferred``, that cost kept in the shard until it is
        rolled up (``storage.batch_shards``). With ``guard``, the first try also checks the shard for a
        stop (RUNS when none): a refused check tries again without it (OK: the caller
        reads the batch to learn why).

        A refused write is read back: if it is this worker's own end, committed by a try
        whose answer was lost, it counts as done (SHARD_FINISHED, so the caller checks the
        shard, which is idempotent).
        """
        end = replace(end, ended_by=held.lease_owner)
        ended = self._ended(held, end, called).request(self._table.name, self._key(held.batch_id, held.index))
        recorded = self._end_and_count(
            held.batch_id, held.index, ended, shard, tally, charges, guard, deferred
        )
        if recorded is Recorded.LEASE_LOST and self._ended_by_us(held):
            return Recorded.SHARD_FINISHED
        return recorded

    def end_abandoned(
        self,
        request: RequestRecord,
        *,
        now: float,
        shard: int,
        end: RequestEnd,
        tally: Tally,
        charges: Sequence[dict[str, Any]] = (),
    ) -> bool:
        """End a running request whose lease ran out (its worker is gone), counting it (and
        ``charges``, its lost attempts' charge to its owner, in the same transaction): for a
        batch that stopped, where no worker will take it over. False if a worker claimed or
        ended it meanwhile."""
        abandoned = Update(
            set=end.stored_fields(),
            extra_set=["lost = if_not_exists(lost, :zero) + :one"],
            remove=["lease_owner", "lease_until"],
            condition=f"{is_running} AND {lease_ran_out} AND {epoch_unchanged}",
            names=_STATUS,
            values={
                ":running": RequestStatus.RUNNING.value,
                ":now": timestamp(now),
                ":epoch": request.epoch,
                ":zero": 0,
                ":one": 1,
            },
        ).request(self._table.name, self._key(request.batch_id, request.index))
        return (
            self._end_and_count(request.batch_id, request.index, abandoned, shard, tally, charges)
            is not Recorded.LEASE_LOST
        )

    def end_unstarted(
        self,
        request: RequestRecord,
        *,
        shard: int,
        end: RequestEnd,
        tally: Tally,
        charges: Sequence[dict[str, Any]] = (),
    ) -> bool:
        """End an unstarted request (queued, or waiting for a retry) of a stopped batch,
        counting it and ``charges`` (its lost attempts' charge to its owner) in the same
        transaction: the one a sweep leaves, having lost attempts. False if a worker claimed
        it meanwhile."""
        unstarted, statuses = one_of("#st", "u", [RequestStatus.QUEUED.value, RequestStatus.RETRY_WAIT.value])
        ended = Update(
            set=end.stored_fields(),
            condition=f"{unstarted} AND lost = :lost",
            names=_STATUS,
            values={**statuses, ":lost": request.lost},
        ).request(self._table.name, self._key(request.batch_id, request.index))
        return (
            self._end_and_count(request.batch_id, request.index, ended, shard, tally, charges)
            is not Recorded.LEASE_LOST
        )

    def _end_and_count(
        self,
        batch_id: str,
        index: int,
        ended: dict[str, Any],
        shard: int,
        tally: Tally,
        charges: Sequence[dict[str, Any]] = (),
        guard: RunGuard | None = None,
        deferred: Deferred | None = None,
    ) -> Recorded:
        failure = f"could not record {batch_id}/{index}"
        last, checked = False, guard
        for _ in range(3):
            count = self._count(batch_id, shard, tally, last=last, guard=checked, deferred=deferred)
            cancelled = self._table.transact(
                [{"Update": ended}, {"Update": count}, *charges], failure=failure
            )
            if cancelled is None:
                return Recorded.SHARD_FINISHED if last else Recorded.RUNS if checked else Recorded.OK
            if cancelled.failed(0):
                return Recorded.LEASE_LOST
            if not cancelled.failed(1):
                raise StorageError(f"{failure}: {list(cancelled.reasons)}")
            if last:
                break
            # The shard as the refusal found it says which clause failed: one left, so this
            # is the shard's last request; more, so the guard refused (halted, superseded).
            # Either way the next try has no guard (the caller reads the batch to learn why).
            found = cancelled.old(1) or {}
            last, checked = found.get("left") == 1, None
        raise StorageError(f"shard {shard} of {batch_id} has no request left to count {index}")

    def _ended_by_us(self, held: RequestRecord) -> bool:
        now = self.get(held.batch_id, held.index)
        return (
            now is not None
            and now.status.is_terminal
            and now.epoch == held.epoch
            and now.ended_by is not None
            and now.ended_by == held.lease_owner
        )

    def _ended(self, held: RequestRecord, end: RequestEnd, called: bool) -> Update:
        """The end of a request this worker holds. Its body goes: nothing reads it once the
        request has ended, and a write is billed by the larger of the item before and after,
        so the answer then takes the body's place instead of adding to it."""
        return Update(
            set=end.stored_fields(),
            add={"calls": 1} if called else {},
            remove=["lease_owner", "lease_until", "req"],
            condition=f"{is_running} AND {lease_is_mine}",
            names=_STATUS,
            values={":running": RequestStatus.RUNNING.value, ":me": held.lease_owner, ":epoch": held.epoch},
        )

    def _count(
        self,
        batch_id: str,
        shard: int,
        tally: Tally,
        *,
        last: bool,
        guard: RunGuard | None = None,
        deferred: Deferred | None = None,
    ) -> dict[str, Any]:
        condition, values = exactly_one_left if last else more_than_one_left, {":one": 1}
        if guard is not None:
            clause, guard_values = guard.condition()
            condition, values = f"{condition} AND {clause}", {**values, **guard_values}
        kept, payer = kept_charge(deferred)
        update = Update(
            add={"left": -1, **tally.counters(), **kept},
            set=payer,
            condition=condition,
            names={"#left": "left"},
            values=values,
        )
        request = update.request(self._batches, {"pk": {"S": batch_id}, "sk": {"S": shard_sk(shard)}})
        return {**request, "ReturnValuesOnConditionCheckFailure": "ALL_OLD"}

    def schedule_retry(
        self,
        held: RequestRecord,
        *,
        next_at: float,
        error: dict[str, Any],
        attempt_cost_nano: int,
        uses_attempt: bool,
        shard: int = 0,
        charge: Tally | None = None,
        charges: Sequence[dict[str, Any]] = (),
        deferred: Deferred | None = None,
    ) -> Scheduled:
        """Put a running request back to wait for its next try, only while its batch still
        runs: the request, a check of the batch's record and the attempt's ``charge`` to its
        shard's counters (``left`` unchanged) are one transaction, so no retry is scheduled
        after a cancel or the window's end has settled the batch's unstarted requests
        (STOPPED: end it instead), and the attempt is charged exactly once (to the shard,
        and by ``charges`` to its owner's and key's spend, or kept in the shard as
        ``deferred``).

        ``uses_attempt`` False gives the attempt back (a model_queued wait). A refused
        write is read back: this worker's own retry, committed by a try whose answer was
        lost, counts as SCHEDULED.
        """
        fields: dict[str, Any] = {
            "status": RequestStatus.RETRY_WAIT.value,
            "next_at": timestamp(next_at),
            "error": error,
            "attempt_cost_nano": attempt_cost_nano,
        }
        if not uses_attempt:
            fields["attempts"] = held.attempts - 1
        update = Update(
            set=fields,
            add={"calls": 1},
            remove=["lease_owner", "lease_until"],
            condition=f"{is_running} AND {lease_is_mine}",
            names=_STATUS,
            values={":running": RequestStatus.RUNNING.value, ":me": held.lease_owner, ":epoch": held.epoch},
        )
        actions = [
            {"Update": update.request(self._table.name, self._key(held.batch_id, held.index))},
            self._batch_runs_check(held.batch_id),
        ]
        kept, payer = kept_charge(deferred)
        counters = {**(charge.counters() if charge is not None else {}), **kept}
        if counters:
            charged = Update(add=counters, set=payer).request(
                self._batches, {"pk": {"S": held.batch_id}, "sk": {"S": shard_sk(shard)}}
            )
            actions.append({"Update": charged})
        actions += charges
        cancelled = self._table.transact(
            actions, failure=f"could not schedule a retry of {held.batch_id}/{held.index}"
        )
        if cancelled is None:
            return Scheduled.SCHEDULED
        if cancelled.failed(0):
            now = self.get(held.batch_id, held.index)
            ours = (
                now is not None
                and now.status is RequestStatus.RETRY_WAIT
                and now.epoch == held.epoch
                and now.next_at == float(timestamp(next_at))
            )
            return Scheduled.SCHEDULED if ours else Scheduled.LOST
        if cancelled.failed(1):
            return Scheduled.STOPPED
        raise StorageError(
            f"could not schedule a retry of {held.batch_id}/{held.index}: {list(cancelled.reasons)}"
        )

    # --- the batch's unstarted requests -------------------------------------------------------

    def sweep(
        self,
        batch_id: str,
        *,
        end: RequestEnd,
        tally: Tally,
        shards: int,
        attempted: bool | None = None,
        below: int | None = None,
    ) -> Swept:
        """End every unstarted request (queued or waiting for a retry) with ``end``,
        counting each once.

        ``below``: only those with a lower index (the batch's ``written`` frontier, past which
        a stored request is one a prepare that died wrote without moving the frontier: it is
        counted as never written instead).

        ``attempted`` narrows it to requests that have (True) or have not (False) used an
        attempt yet (a model_queued wait uses none). Used when a batch is cancelled or its
        window closes. Each chunk is one transaction (its requests, conditional on their
        state, and their shard's counters); a request a worker claimed meanwhile drops out
        of the chunk and is left to that worker. A request that lost attempts with their
        workers is left out and named (``Swept.lost``): those attempts are charged to its
        owner as it ends (``end_unstarted``), which a sweep cannot do.
        """
        unstarted, statuses = one_of("#st", "u", [RequestStatus.QUEUED.value, RequestStatus.RETRY_WAIT.value])
        found = unstarted
        values: dict[str, Any] = {**statuses, ":zero": 0}
        if attempted is not None:
            found += f" AND {attempted_before if attempted else never_attempted}"
        pending: dict[int, list[int]] = {}
        lost: list[int] = []
        keys, bound = "pk = :pk", {}
        if below is not None:
            keys, bound = "pk = :pk AND idx < :below", {":below": below}
        for raw in self._table.query(
            KeyConditionExpression=keys,
            FilterExpression=found,
            ProjectionExpression="idx, lost",
            ExpressionAttributeNames=_STATUS,
            ExpressionAttributeValues=to_item({":pk": batch_id, **values, **bound}),
            ConsistentRead=True,
        ):
            index = int(raw["idx"]["N"])
            if int(raw.get("lost", {}).get("N", "0")):
                lost.append(index)
            else:
                pending.setdefault(index % shards, []).append(index)
        ended = 0
        condition = f"{found} AND {never_lost}"  # one that lost an attempt meanwhile is left too
        for shard, indexes in pending.items():
            for start in range(0, len(indexes), SWEEP_CHUNK):
                chunk = indexes[start : start + SWEEP_CHUNK]
                ended += self._sweep_chunk(batch_id, shard, chunk, end, tally, condition, values)
        return Swept(ended, tuple(lost))

    def _sweep_chunk(
        self,
        batch_id: str,
        shard: int,
        indexes: list[int],
        end: RequestEnd,
        tally: Tally,
        condition: str,
        values: dict[str, Any],
    ) -> int:
        """End ``indexes`` (those still unstarted): how many it ended."""
        update = Update(set=end.stored_fields(), condition=condition, names=_STATUS, values=values)
        failure = f"could not end unstarted requests of {batch_id}"
        while indexes:
            actions = [{"Update": update.request(self._table.name, self._key(batch_id, i))} for i in indexes]
            n = len(indexes)
            count = Update(add={"left": -n, **tally.counters(n)})
            actions.append(
                {
                    "Update": count.request(
                        self._batches, {"pk": {"S": batch_id}, "sk": {"S": shard_sk(shard)}}
                    )
                }
            )
            cancelled = self._table.transact(actions, failure=failure)
            if cancelled is None:
                return n
            taken = {indexes[i] for i in cancelled.failed_actions if i < n}
            if not taken:
                raise StorageError(f"{failure}: {list(cancelled.reasons)}")
            indexes = [i for i in indexes if i not in taken]
        return 0

    # --- reads --------------------------------------------------------------------------------

    def unfinished(self, batch_id: str) -> list[RequestRecord]:
        """Every request of the batch that has not ended (queued, running, waiting for a
        retry), without its bodies (the reconciler's view)."""
        return [
            RequestRecord.from_item(from_item(raw))
            for raw in self._table.query(
                KeyConditionExpression="pk = :pk",
                FilterExpression="#st IN (:q, :r, :w)",
                ProjectionExpression="pk, idx, custom_id, model, #st, attempts, epoch, lease_owner, "
                "lease_until, next_at, lost, #err",
                ExpressionAttributeNames={**_STATUS, "#err": "error"},
                ExpressionAttributeValues={
                    ":pk": {"S": batch_id},
                    ":q": {"S": RequestStatus.QUEUED.value},
                    ":r": {"S": RequestStatus.RUNNING.value},
                    ":w": {"S": RequestStatus.RETRY_WAIT.value},
                },
                ConsistentRead=True,
            )
        ]

    def page(self, batch_id: str, *, after_index: int, limit: int) -> tuple[list[RequestRecord], bool]:
        """Up to ``limit`` requests after index ``after_index``, in submission order, and
        whether more follow."""
        found: list[RequestRecord] = []
        for raw in self._table.query(
            limit=limit + 1,
            KeyConditionExpression="pk = :pk AND idx > :after",
            ExpressionAttributeValues={":pk": {"S": batch_id}, ":after": {"N": str(after_index)}},
            ConsistentRead=True,
        ):
            found.append(RequestRecord.from_item(from_item(raw)))
            if len(found) > limit:
                break
        return found[:limit], len(found) > limit

    def results_step(
        self, batch_id: str, *, after_index: int, limit: int
    ) -> tuple[list[RequestRecord], bool]:
        """One read of the batch's requests after index ``after_index``, in submission order,
        with what a result shows and not their request bodies: at most ``limit`` of them
        (fewer when DynamoDB's 1 MB per read comes first), and whether more may follow."""
        items, start = self._table.query_step(
            limit=limit,
            KeyConditionExpression="pk = :pk AND idx > :after",
            ProjectionExpression=_RESULT_FIELDS,
            ExpressionAttributeNames=_RESULT_NAMES,
            ExpressionAttributeValues={":pk": {"S": batch_id}, ":after": {"N": str(after_index)}},
            ConsistentRead=True,
        )
        return [RequestRecord.from_item(from_item(raw)) for raw in items], start is not None

    def all(self, batch_id: str, page_size: int = 500) -> Iterator[RequestRecord]:
        """Every request of the batch in submission order, a page at a time."""
        after = -1
        while True:
            requests, more = self.page(batch_id, after_index=after, limit=page_size)
            yield from requests
            if not more or not requests:
                return
            after = requests[-1].index

    def delete_all(self, batch_id: str) -> None:
        """Delete the batch's requests and its request log."""
        for pk in (batch_id, attempts_pk(batch_id)):
            keys = (
                {"pk": raw["pk"], "idx": raw["idx"]}
                for raw in self._table.query(
                    KeyConditionExpression="pk = :pk",
                    ExpressionAttributeValues={":pk": {"S": pk}},
                    ProjectionExpression="pk, idx",
                )
            )
            self._table.delete_many(list(keys))
