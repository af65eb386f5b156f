"""DynamoDB adapters: batches (jobs), their requests (items), and model slot leases.

Every state change is a conditional write. An item is written by a worker only while the
worker holds its lease (owner plus an epoch that rises on every claim), so a stale or
duplicate worker's write is refused rather than applied twice. SDK errors become domain
results or ``StorageError`` here, never beyond.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from boto3.dynamodb.types import TypeDeserializer, TypeSerializer
from botocore.exceptions import ClientError

from batchgw.errors import StorageError
from batchgw.records import (
    IN_PROGRESS,
    ITEM_QUEUED,
    ITEM_RETRY,
    ITEM_RUNNING,
    ITEM_TERMINAL,
    META_SK,
    SHARD_PREFIX,
    Counts,
    Job,
    created_bound,
    shard_sk,
)

_ser = TypeSerializer()
_de = TypeDeserializer()


def to_ddb(item: dict[str, Any]) -> dict[str, Any]:
    return {k: _ser.serialize(_ddb_value(v)) for k, v in item.items() if v is not None}


def _ddb_value(value: Any) -> Any:
    if isinstance(value, float):
        return Decimal(str(value))
    if isinstance(value, dict):
        return {k: _ddb_value(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_ddb_value(v) for v in value]
    return value


def from_ddb(item: dict[str, Any]) -> dict[str, Any]:
    out = {k: _de.deserialize(v) for k, v in item.items()}
    for key, value in out.items():
        if hasattr(value, "value") and type(value).__name__ == "Binary":
            out[key] = bytes(value.value)
    return out


def _values(values: dict[str, Any]) -> dict[str, Any]:
    return {k: _ser.serialize(_ddb_value(v)) for k, v in values.items()}


def _code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


def _conditional(failure: str, call: Callable[..., Any], **request: Any) -> bool:
    """Make one conditional write: True if it applied, False if its condition did not hold.

    Any other error becomes a StorageError saying ``failure``.
    """
    try:
        call(**request)
    except ClientError as exc:
        if _code(exc) == "ConditionalCheckFailedException":
            return False
        raise StorageError(failure) from exc
    return True


def _chunks(seq: Sequence[Any], size: int) -> Iterator[Sequence[Any]]:
    for start in range(0, len(seq), size):
        yield seq[start : start + size]


class JobStore:
    """Batches: the meta item, counter shards, and the owner index."""

    def __init__(self, client: Any, table: str) -> None:
        self._db = client
        self._table = table

    def _key(self, batch_id: str, sk: str = META_SK) -> dict[str, Any]:
        return {"pk": {"S": batch_id}, "sk": {"S": sk}}

    def put_new(self, meta: dict[str, Any]) -> None:
        try:
            self._db.put_item(
                TableName=self._table,
                Item=to_ddb({**meta, "sk": META_SK}),
                ConditionExpression="attribute_not_exists(pk)",
            )
        except ClientError as exc:
            raise StorageError(f"could not store batch {meta['pk']}") from exc

    def get(self, batch_id: str) -> Job | None:
        """The batch with its counters summed (one strongly consistent query)."""
        resp = self._db.query(
            TableName=self._table,
            KeyConditionExpression="pk = :pk",
            ExpressionAttributeValues={":pk": {"S": batch_id}},
            ConsistentRead=True,
        )
        meta: dict[str, Any] | None = None
        counts = Counts()
        for raw in resp.get("Items", []):
            record = from_ddb(raw)
            if record["sk"] == META_SK:
                meta = record
            elif str(record["sk"]).startswith(SHARD_PREFIX):
                counts.add_shard(record)
        return None if meta is None else Job(meta=meta, counts=counts)

    def get_meta(self, batch_id: str) -> dict[str, Any] | None:
        resp = self._db.get_item(TableName=self._table, Key=self._key(batch_id), ConsistentRead=True)
        raw = resp.get("Item")
        return None if raw is None else from_ddb(raw)

    def update(
        self,
        batch_id: str,
        fields: dict[str, Any],
        *,
        from_statuses: Iterable[str] | None = None,
        remove: Iterable[str] = (),
    ) -> dict[str, Any] | None:
        """Set ``fields`` on the meta item, only if its status is one of ``from_statuses``.

        Returns the updated meta, or None when the condition did not hold.
        """
        names = {f"#f{i}": name for i, name in enumerate(fields)}
        values = {f":v{i}": value for i, value in enumerate(fields.values())}
        sets = [f"#f{i} = :v{i}" for i in range(len(fields))]
        expression = "SET " + ", ".join(sets)
        removes = list(remove)
        if removes:
            for j, name in enumerate(removes):
                names[f"#r{j}"] = name
            expression += " REMOVE " + ", ".join(f"#r{j}" for j in range(len(removes)))
        condition = "attribute_exists(pk)"
        if from_statuses is not None:
            allowed = list(from_statuses)
            names["#status"] = "status"
            for j, status in enumerate(allowed):
                values[f":s{j}"] = status
            condition += " AND #status IN (" + ", ".join(f":s{j}" for j in range(len(allowed))) + ")"
        try:
            resp = self._db.update_item(
                TableName=self._table,
                Key=self._key(batch_id),
                UpdateExpression=expression,
                ConditionExpression=condition,
                ExpressionAttributeNames=names,
                ExpressionAttributeValues=_values(values),
                ReturnValues="ALL_NEW",
            )
        except ClientError as exc:
            if _code(exc) == "ConditionalCheckFailedException":
                return None
            raise StorageError(f"could not update batch {batch_id}") from exc
        return from_ddb(resp["Attributes"])

    def put_shards(self, batch_id: str, totals: Sequence[int]) -> None:
        """Create the counter shards (idempotent: a retried prepare rewrites the same zeros)."""
        requests = [
            {"PutRequest": {"Item": to_ddb({"pk": batch_id, "sk": shard_sk(k), "left": left})}}
            for k, left in enumerate(totals)
        ]
        for chunk in _chunks(requests, 25):
            _batch_write(self._db, self._table, list(chunk))

    def finish_shard(self, batch_id: str, shard: int) -> bool:
        """Count shard ``shard`` as finished in the meta, exactly once, if nothing is left in it.

        The shard's ``done`` flag and the meta's ``shards_done`` change in one transaction,
        so a crash between them cannot lose or double the count. False when the shard still
        has items left or was counted already.
        """
        try:
            self._db.transact_write_items(
                TransactItems=[
                    {
                        "Update": {
                            "TableName": self._table,
                            "Key": self._key(batch_id, shard_sk(shard)),
                            "UpdateExpression": "SET done = :t",
                            "ConditionExpression": "#left = :zero AND attribute_not_exists(done)",
                            "ExpressionAttributeNames": {"#left": "left"},
                            "ExpressionAttributeValues": {":t": {"BOOL": True}, ":zero": {"N": "0"}},
                        }
                    },
                    {
                        "Update": {
                            "TableName": self._table,
                            "Key": self._key(batch_id),
                            "UpdateExpression": "ADD shards_done :one",
                            "ConditionExpression": "attribute_exists(pk)",
                            "ExpressionAttributeValues": {":one": {"N": "1"}},
                        }
                    },
                ]
            )
        except ClientError as exc:
            if _code(exc) == "TransactionCanceledException":
                reasons = [r.get("Code") for r in exc.response.get("CancellationReasons", [])]
                if "TransactionConflict" in reasons:
                    return self.finish_shard(batch_id, shard)
                return False
            raise StorageError(f"could not finish shard {shard} of {batch_id}") from exc
        return True

    def delete_all(self, batch_id: str) -> None:
        """Delete the batch's meta and counter shards."""
        resp = self._db.query(
            TableName=self._table,
            KeyConditionExpression="pk = :pk",
            ExpressionAttributeValues={":pk": {"S": batch_id}},
            ProjectionExpression="pk, sk",
        )
        deletes = [{"DeleteRequest": {"Key": {"pk": r["pk"], "sk": r["sk"]}}} for r in resp.get("Items", [])]
        for chunk in _chunks(deletes, 25):
            _batch_write(self._db, self._table, list(chunk))

    def delete_meta(self, batch_id: str) -> bool:
        """Remove the batch's record (it then reads as not found everywhere)."""
        return _conditional(
            f"could not delete batch {batch_id}",
            self._db.delete_item,
            TableName=self._table,
            Key=self._key(batch_id),
            ConditionExpression="attribute_exists(pk)",
        )

    def clear_token(self, batch_id: str, token: str) -> None:
        """Forget a task token once used (only if it is still the one stored)."""
        try:
            self._db.update_item(
                TableName=self._table,
                Key=self._key(batch_id),
                UpdateExpression="REMOVE task_token",
                ConditionExpression="task_token = :t",
                ExpressionAttributeValues={":t": {"S": token}},
            )
        except ClientError as exc:
            if _code(exc) != "ConditionalCheckFailedException":
                raise StorageError(f"could not update batch {batch_id}") from exc

    def shards(self, batch_id: str) -> list[dict[str, Any]]:
        resp = self._db.query(
            TableName=self._table,
            KeyConditionExpression="pk = :pk AND begins_with(sk, :p)",
            ExpressionAttributeValues={":pk": {"S": batch_id}, ":p": {"S": SHARD_PREFIX}},
            ConsistentRead=True,
        )
        return [from_ddb(raw) for raw in resp.get("Items", [])]

    def list_for_owner(
        self,
        owner: str,
        *,
        limit: int,
        before_key: str | None,
        created_after: int | None,
        created_before: int | None,
        statuses: Sequence[str],
        index: str,
    ) -> tuple[list[dict[str, Any]], bool]:
        """The owner's batches newest first: at most ``limit`` metas, and whether more follow."""
        names = {"#o": "owner", "#k": "created_key"}
        values: dict[str, Any] = {":o": owner}
        upper = before_key
        if created_before is not None:
            bound = created_bound(created_before)  # strictly before
            upper = bound if upper is None or bound < upper else upper
        lower = created_bound(created_after + 1) if created_after is not None else None  # strictly after
        if upper is not None and lower is not None:
            key_condition = "#o = :o AND #k BETWEEN :lo AND :hi"
            values[":lo"], values[":hi"] = lower, upper
        elif upper is not None:
            key_condition = "#o = :o AND #k < :hi"
            values[":hi"] = upper
        elif lower is not None:
            key_condition = "#o = :o AND #k >= :lo"
            values[":lo"] = lower
        else:
            key_condition = "#o = :o"
            del names["#k"]
        kwargs: dict[str, Any] = {
            "TableName": self._table,
            "IndexName": index,
            "KeyConditionExpression": key_condition,
            "ScanIndexForward": False,
        }
        if statuses:
            names["#s"] = "status"
            for j, status in enumerate(statuses):
                values[f":s{j}"] = status
            kwargs["FilterExpression"] = "#s IN (" + ", ".join(f":s{j}" for j in range(len(statuses))) + ")"
        kwargs["ExpressionAttributeNames"] = names
        kwargs["ExpressionAttributeValues"] = _values(values)
        found: list[dict[str, Any]] = []
        while True:
            kwargs["Limit"] = max(limit + 1 - len(found), 1) if not statuses else 200
            resp = self._db.query(**kwargs)
            for raw in resp.get("Items", []):
                record = from_ddb(raw)
                # BETWEEN is inclusive: keep the exclusive upper bound of a cursor.
                if upper is not None and record["created_key"] >= upper:
                    continue
                found.append(record)
            if len(found) > limit or "LastEvaluatedKey" not in resp:
                break
            kwargs["ExclusiveStartKey"] = resp["LastEvaluatedKey"]
        return found[:limit], len(found) > limit


@dataclass(frozen=True)
class Claim:
    """The outcome of trying to claim an item.

    kind: ``claimed`` (this worker holds it now; ``item`` is its new state), ``ended``
    (already terminal), ``held`` (another worker's lease is live), ``waiting`` (a retry
    is scheduled for it), ``missing`` (no such item).
    """

    kind: str
    item: dict[str, Any] | None = None
    took_over: bool = False


@dataclass(frozen=True)
class Recorded:
    """The outcome of recording an item's end.

    kind: ``ok``; ``shard_finished`` (this was the last item of its shard); ``lease_lost``
    (another worker owns the item: nothing was written).
    """

    kind: str


class ItemStore:
    """A batch's requests, one item each, and their lease-guarded state changes."""

    def __init__(self, client: Any, items_table: str, jobs_table: str) -> None:
        self._db = client
        self._table = items_table
        self._jobs = jobs_table

    def _key(self, batch_id: str, idx: int) -> dict[str, Any]:
        return {"pk": {"S": batch_id}, "idx": {"N": str(idx)}}

    def put_many(self, items: Sequence[dict[str, Any]]) -> None:
        requests = [{"PutRequest": {"Item": to_ddb(item)}} for item in items]
        for chunk in _chunks(requests, 25):
            _batch_write(self._db, self._table, list(chunk))

    def get(self, batch_id: str, idx: int) -> dict[str, Any] | None:
        resp = self._db.get_item(TableName=self._table, Key=self._key(batch_id, idx), ConsistentRead=True)
        raw = resp.get("Item")
        return None if raw is None else from_ddb(raw)

    def claim(self, batch_id: str, idx: int, owner: str, now: float, lease_seconds: float) -> Claim:
        """Take the item's lease if it is queued, due for a retry, or its lease has run out.

        Raises nothing on contention: the result says who has it.
        """
        values = {
            ":running": ITEM_RUNNING,
            ":queued": ITEM_QUEUED,
            ":retry": ITEM_RETRY,
            ":me": owner,
            ":until": Decimal(str(round(now + lease_seconds, 3))),
            ":now": Decimal(str(round(now, 3))),
            ":one": 1,
            ":zero": 0,
        }
        base = (
            "SET #st = :running, lease_owner = :me, lease_until = :until, "
            "epoch = if_not_exists(epoch, :zero) + :one, attempts = if_not_exists(attempts, :zero) + :one"
        )
        try:
            resp = self._db.update_item(
                TableName=self._table,
                Key=self._key(batch_id, idx),
                UpdateExpression=base,
                ConditionExpression="#st = :queued OR (#st = :retry AND next_at <= :now)",
                ExpressionAttributeNames={"#st": "status"},
                ExpressionAttributeValues=_values(values),
                ReturnValues="ALL_NEW",
                ReturnValuesOnConditionCheckFailure="ALL_OLD",
            )
            return Claim("claimed", from_ddb(resp["Attributes"]))
        except ClientError as exc:
            if _code(exc) != "ConditionalCheckFailedException":
                raise StorageError(f"could not claim {batch_id}/{idx}") from exc
            old_raw = exc.response.get("Item")
        if old_raw is None:
            return Claim("missing")
        old = from_ddb(old_raw)
        state = old.get("status")
        if state in ITEM_TERMINAL:
            return Claim("ended", old)
        if state == ITEM_RETRY:
            return Claim("waiting", old)
        if state == ITEM_RUNNING and float(old.get("lease_until", 0)) >= now:
            return Claim("held", old)
        # A running item whose lease ran out: its worker is gone. Take it over, counting
        # the lost attempt, whose cost is unknown (the upstream may have run it).
        takeover = {k: v for k, v in values.items() if k not in (":queued", ":retry")}
        takeover[":epoch"] = old.get("epoch", 0)
        try:
            resp = self._db.update_item(
                TableName=self._table,
                Key=self._key(batch_id, idx),
                UpdateExpression=base + ", lost = if_not_exists(lost, :zero) + :one",
                ConditionExpression="#st = :running AND lease_until < :now AND epoch = :epoch",
                ExpressionAttributeNames={"#st": "status"},
                ExpressionAttributeValues=_values(takeover),
                ReturnValues="ALL_NEW",
            )
        except ClientError as exc:
            if _code(exc) == "ConditionalCheckFailedException":
                return Claim("held", old)
            raise StorageError(f"could not take over {batch_id}/{idx}") from exc
        return Claim("claimed", from_ddb(resp["Attributes"]), took_over=True)

    def release(self, batch_id: str, idx: int, owner: str, epoch: int) -> str:
        """Hand a claimed item back untouched (queued again, its attempt given back).

        Only while the batch still runs: the item update and a check of the batch's record
        are one transaction, so an item cannot go back to the queue after a cancel or the
        window's end has settled the unstarted ones. Returns ``released``, ``lost`` (this
        worker no longer holds it) or ``stopped`` (the batch no longer runs: end it instead).
        """
        try:
            self._db.transact_write_items(
                TransactItems=[
                    {
                        "Update": {
                            "TableName": self._table,
                            "Key": self._key(batch_id, idx),
                            "UpdateExpression": "SET #st = :queued, attempts = attempts - :one "
                            "REMOVE lease_owner, lease_until",
                            "ConditionExpression": "#st = :running AND lease_owner = :me AND epoch = :epoch",
                            "ExpressionAttributeNames": {"#st": "status"},
                            "ExpressionAttributeValues": _values(
                                {
                                    ":queued": ITEM_QUEUED,
                                    ":running": ITEM_RUNNING,
                                    ":me": owner,
                                    ":epoch": epoch,
                                    ":one": 1,
                                }
                            ),
                        }
                    },
                    {
                        "ConditionCheck": {
                            "TableName": self._jobs,
                            "Key": {"pk": {"S": batch_id}, "sk": {"S": META_SK}},
                            "ConditionExpression": "#st = :in_progress AND attribute_not_exists(expiring)",
                            "ExpressionAttributeNames": {"#st": "status"},
                            "ExpressionAttributeValues": {":in_progress": {"S": IN_PROGRESS}},
                        }
                    },
                ]
            )
        except ClientError as exc:
            if _code(exc) != "TransactionCanceledException":
                raise StorageError(f"could not release {batch_id}/{idx}") from exc
            reasons = [r.get("Code") for r in exc.response.get("CancellationReasons", [])]
            if reasons and reasons[0] == "ConditionalCheckFailed":
                return "lost"
            if len(reasons) > 1 and reasons[1] == "ConditionalCheckFailed":
                return "stopped"
            if "TransactionConflict" in reasons:
                return self.release(batch_id, idx, owner, epoch)
            raise StorageError(f"could not release {batch_id}/{idx}: {reasons}") from exc
        return "released"

    def record_end(
        self,
        batch_id: str,
        idx: int,
        *,
        owner: str,
        epoch: int,
        shard: int,
        fields: dict[str, Any],
        counters: dict[str, Any],
    ) -> Recorded:
        """End a running item and count it in its shard, in one transaction.

        The item write holds only while ``owner`` still has the lease at ``epoch``; the
        shard's ``left`` falls by one. The common case is one call; the last item of a
        shard takes a second, conditional on being last, so exactly one writer learns
        that the shard finished.
        """
        item_update = self._item_end_update(batch_id, idx, owner, epoch, fields, ITEM_RUNNING)
        for last in (False, True):
            shard_update = _shard_update(self._jobs, batch_id, shard, counters, last=last)
            try:
                self._db.transact_write_items(
                    TransactItems=[{"Update": item_update}, {"Update": shard_update}]
                )
                return Recorded("shard_finished" if last else "ok")
            except ClientError as exc:
                if _code(exc) != "TransactionCanceledException":
                    raise StorageError(f"could not record {batch_id}/{idx}") from exc
                reasons = [r.get("Code") for r in exc.response.get("CancellationReasons", [])]
                if reasons and reasons[0] == "ConditionalCheckFailed":
                    return Recorded("lease_lost")
                if len(reasons) > 1 and reasons[1] == "ConditionalCheckFailed":
                    continue  # not "more than one left": try as the shard's last item
                if "TransactionConflict" in reasons:
                    return self.record_end(
                        batch_id, idx, owner=owner, epoch=epoch, shard=shard, fields=fields, counters=counters
                    )
                raise StorageError(f"could not record {batch_id}/{idx}: {reasons}") from exc
        raise StorageError(f"shard {shard} of {batch_id} has no item left to count {idx}")

    def _item_end_update(
        self, batch_id: str, idx: int, owner: str, epoch: int, fields: dict[str, Any], from_state: str
    ) -> dict[str, Any]:
        names = {"#st": "status"}
        values: dict[str, Any] = {":me": owner, ":epoch": epoch, ":from": from_state}
        sets = []
        for i, (name, value) in enumerate(fields.items()):
            placeholder = "#st" if name == "status" else f"#f{i}"
            names[placeholder] = name
            values[f":v{i}"] = value
            sets.append(f"{placeholder} = :v{i}")
        return {
            "TableName": self._table,
            "Key": self._key(batch_id, idx),
            "UpdateExpression": "SET " + ", ".join(sets) + " REMOVE lease_owner, lease_until",
            "ConditionExpression": "#st = :from AND lease_owner = :me AND epoch = :epoch",
            "ExpressionAttributeNames": names,
            "ExpressionAttributeValues": _values(values),
        }

    def schedule_retry(
        self, batch_id: str, idx: int, *, owner: str, epoch: int, fields: dict[str, Any]
    ) -> bool:
        """Put a running item back to wait for its next attempt (no count changes)."""
        update = self._item_end_update(
            batch_id, idx, owner, epoch, {**fields, "status": ITEM_RETRY}, ITEM_RUNNING
        )
        return _conditional(f"could not schedule a retry of {batch_id}/{idx}", self._db.update_item, **update)

    def sweep(
        self,
        batch_id: str,
        *,
        from_states: Sequence[str],
        fields: dict[str, Any],
        counters: dict[str, int],
        shards: int,
        attempted: bool | None = None,
    ) -> set[int]:
        """End every item still in one of ``from_states`` with ``fields``, counting each once.

        ``attempted`` narrows it to items that have (True) or have not (False) used an
        attempt yet (a model_queued wait uses none).

        Used when a batch is cancelled or its window closes: unstarted requests end
        without running. Each chunk is one transaction (its items, conditional on their
        state, and their shard's counters); an item a worker claimed meanwhile drops out of
        the chunk and is left to that worker. Returns the shards touched.
        """
        names = {"#st": "status"}
        states: dict[str, Any] = {f":s{i}": state for i, state in enumerate(from_states)}
        condition = "#st IN (" + ", ".join(states) + ")"
        if attempted is True:
            condition += " AND attempts > :zero"
        elif attempted is False:
            condition += " AND (attribute_not_exists(attempts) OR attempts = :zero)"
        if attempted is not None:
            states[":zero"] = 0
        pending: dict[int, list[int]] = {}
        kwargs: dict[str, Any] = {
            "TableName": self._table,
            "KeyConditionExpression": "pk = :pk",
            "FilterExpression": condition,
            "ProjectionExpression": "idx",
            "ExpressionAttributeNames": names,
            "ExpressionAttributeValues": _values({":pk": batch_id, **states}),
            "ConsistentRead": True,
        }
        while True:
            resp = self._db.query(**kwargs)
            for raw in resp.get("Items", []):
                idx = int(raw["idx"]["N"])
                pending.setdefault(idx % shards, []).append(idx)
            if "LastEvaluatedKey" not in resp:
                break
            kwargs["ExclusiveStartKey"] = resp["LastEvaluatedKey"]
        for shard, indexes in pending.items():
            for start in range(0, len(indexes), 99):
                self._sweep_chunk(
                    batch_id, shard, list(indexes[start : start + 99]), condition, states, fields, counters
                )
        return set(pending)

    def _sweep_chunk(
        self,
        batch_id: str,
        shard: int,
        indexes: list[int],
        condition: str,
        states: dict[str, Any],
        fields: dict[str, Any],
        counters: dict[str, int],
    ) -> None:
        set_names = {f"#f{i}": name for i, name in enumerate(fields)}
        set_values = {f":v{i}": value for i, value in enumerate(fields.values())}
        expression = "SET " + ", ".join(f"#f{i} = :v{i}" for i in range(len(fields)))
        while indexes:
            actions: list[dict[str, Any]] = [
                {
                    "Update": {
                        "TableName": self._table,
                        "Key": self._key(batch_id, idx),
                        "UpdateExpression": expression,
                        "ConditionExpression": condition,
                        "ExpressionAttributeNames": {"#st": "status", **set_names},
                        "ExpressionAttributeValues": _values({**states, **set_values}),
                    }
                }
                for idx in indexes
            ]
            n = len(indexes)
            actions.append(
                {
                    "Update": _shard_add(
                        self._jobs,
                        batch_id,
                        shard,
                        {"left": -n, **{name: amount * n for name, amount in counters.items()}},
                    )
                }
            )
            try:
                self._db.transact_write_items(TransactItems=actions)
                return
            except ClientError as exc:
                if _code(exc) != "TransactionCanceledException":
                    raise StorageError(f"could not end unstarted items of {batch_id}") from exc
                reasons = [r.get("Code") for r in exc.response.get("CancellationReasons", [])]
                taken = {indexes[i] for i, code in enumerate(reasons[:n]) if code == "ConditionalCheckFailed"}
                if not taken and "TransactionConflict" not in reasons:
                    raise StorageError(f"could not end unstarted items of {batch_id}: {reasons}") from exc
                indexes = [idx for idx in indexes if idx not in taken]

    def live_lease(self, batch_id: str, now: float) -> bool:
        """Whether any request of the batch is held by a worker whose lease has not run out."""
        kwargs: dict[str, Any] = {
            "TableName": self._table,
            "KeyConditionExpression": "pk = :pk",
            "FilterExpression": "#st = :running AND lease_until > :now",
            "ProjectionExpression": "idx",
            "ExpressionAttributeNames": {"#st": "status"},
            "ExpressionAttributeValues": _values(
                {":pk": batch_id, ":running": ITEM_RUNNING, ":now": _dec(now)}
            ),
            "ConsistentRead": True,
        }
        while True:
            resp = self._db.query(**kwargs)
            if resp.get("Items"):
                return True
            if "LastEvaluatedKey" not in resp:
                return False
            kwargs["ExclusiveStartKey"] = resp["LastEvaluatedKey"]

    def delete_all(self, batch_id: str) -> None:
        kwargs: dict[str, Any] = {
            "TableName": self._table,
            "KeyConditionExpression": "pk = :pk",
            "ExpressionAttributeValues": {":pk": {"S": batch_id}},
            "ProjectionExpression": "pk, idx",
        }
        while True:
            resp = self._db.query(**kwargs)
            deletes = [
                {"DeleteRequest": {"Key": {"pk": r["pk"], "idx": r["idx"]}}} for r in resp.get("Items", [])
            ]
            for chunk in _chunks(deletes, 25):
                _batch_write(self._db, self._table, list(chunk))
            if "LastEvaluatedKey" not in resp:
                return
            kwargs["ExclusiveStartKey"] = resp["LastEvaluatedKey"]

    def page(self, batch_id: str, *, after_idx: int, limit: int) -> tuple[list[dict[str, Any]], bool]:
        """Up to ``limit`` items after position ``after_idx``, in submission order."""
        found: list[dict[str, Any]] = []
        kwargs: dict[str, Any] = {
            "TableName": self._table,
            "KeyConditionExpression": "pk = :pk AND idx > :after",
            "ExpressionAttributeValues": {":pk": {"S": batch_id}, ":after": {"N": str(after_idx)}},
            "ConsistentRead": True,
        }
        while len(found) <= limit:
            kwargs["Limit"] = limit + 1 - len(found)
            resp = self._db.query(**kwargs)
            found.extend(from_ddb(raw) for raw in resp.get("Items", []))
            if "LastEvaluatedKey" not in resp:
                break
            kwargs["ExclusiveStartKey"] = resp["LastEvaluatedKey"]
        return found[:limit], len(found) > limit


def _shard_update(
    jobs_table: str, batch_id: str, shard: int, counters: dict[str, Any], *, last: bool
) -> dict[str, Any]:
    names = {"#left": "left"}
    values: dict[str, Any] = {":minus": -1, ":one": 1}
    adds = ["#left :minus"]
    for i, (name, amount) in enumerate(counters.items()):
        if not amount:
            continue
        names[f"#c{i}"] = name
        values[f":c{i}"] = amount
        adds.append(f"#c{i} :c{i}")
    return {
        "TableName": jobs_table,
        "Key": {"pk": {"S": batch_id}, "sk": {"S": shard_sk(shard)}},
        "UpdateExpression": "ADD " + ", ".join(adds),
        "ConditionExpression": "#left = :one" if last else "#left > :one",
        "ExpressionAttributeNames": names,
        "ExpressionAttributeValues": _values(values),
    }


def _shard_add(jobs_table: str, batch_id: str, shard: int, amounts: dict[str, int]) -> dict[str, Any]:
    names = {f"#a{i}": name for i, name in enumerate(amounts)}
    values = {f":a{i}": amount for i, amount in enumerate(amounts.values())}
    return {
        "TableName": jobs_table,
        "Key": {"pk": {"S": batch_id}, "sk": {"S": shard_sk(shard)}},
        "UpdateExpression": "ADD " + ", ".join(f"#a{i} :a{i}" for i in range(len(amounts))),
        "ExpressionAttributeNames": names,
        "ExpressionAttributeValues": _values(values),
    }


def _batch_write(client: Any, table: str, requests: list[dict[str, Any]]) -> None:
    pending = {table: requests}
    for _ in range(10):
        resp = client.batch_write_item(RequestItems=pending)
        pending = resp.get("UnprocessedItems") or {}
        if not pending:
            return
    raise StorageError(f"could not write {len(pending.get(table, []))} items to {table}")


class KeyStore:
    """API keys by hash (the control table)."""

    def __init__(self, client: Any, table: str) -> None:
        self._db = client
        self._table = table

    def get(self, key_hash: str) -> dict[str, Any] | None:
        resp = self._db.get_item(
            TableName=self._table, Key={"pk": {"S": f"key#{key_hash}"}, "sk": {"S": "key"}}
        )
        raw = resp.get("Item")
        return None if raw is None else from_ddb(raw)


@dataclass(frozen=True)
class SlotGrant:
    granted: bool
    paused_until: float | None = None


def _dec(value: float) -> Decimal:
    return Decimal(str(round(value, 3)))


class SlotStore:
    """Per-model concurrency slots: self-expiring leases in one map per model.

    ``acquire`` adds this holder's token with an expiry while fewer than ``cap`` tokens are
    present; a holder that dies leaves an entry that expires and is purged by the next
    acquirer that finds the map full. Nothing leaks: every slot is a lease.
    """

    def __init__(self, client: Any, table: str) -> None:
        self._db = client
        self._table = table

    @staticmethod
    def _key(model: str) -> dict[str, Any]:
        return {"pk": {"S": f"slots#{model}"}, "sk": {"S": "slots"}}

    @staticmethod
    def new_token() -> str:
        return secrets.token_hex(8)

    def acquire(self, model: str, token: str, *, cap: int, now: float, lease_seconds: float) -> SlotGrant:
        """Take one of the model's ``cap`` slots, unless they are all held or it is paused."""
        if cap <= 0:
            return SlotGrant(False)
        for _ in range(3):
            try:
                self._db.update_item(
                    TableName=self._table,
                    Key=self._key(model),
                    UpdateExpression="SET s.#t = :until",
                    ConditionExpression=(
                        "attribute_exists(s) AND attribute_not_exists(s.#t) AND size(s) < :cap"
                        " AND (attribute_not_exists(paused_until) OR paused_until < :now)"
                    ),
                    ExpressionAttributeNames={"#t": token},
                    ExpressionAttributeValues=_values(
                        {":until": _dec(now + lease_seconds), ":cap": cap, ":now": _dec(now)}
                    ),
                    ReturnValuesOnConditionCheckFailure="ALL_OLD",
                )
                return SlotGrant(True)
            except ClientError as exc:
                if _code(exc) != "ConditionalCheckFailedException":
                    raise StorageError(f"could not take a slot of {model}") from exc
                old = exc.response.get("Item")
            if old is None or "s" not in old:
                self._create(model)
                continue
            record = from_ddb(old)
            paused_until = float(record.get("paused_until", 0))
            if paused_until >= now:
                return SlotGrant(False, paused_until=paused_until)
            leases = record.get("s", {})
            expired = {t: until for t, until in leases.items() if float(until) < now}
            if not expired:
                return SlotGrant(False)
            self._purge(model, expired)
        return SlotGrant(False)

    def pause(self, model: str, until: float) -> None:
        """Stop the model taking new batch requests until ``until`` (never shortens a pause)."""
        for _ in range(2):
            try:
                self._db.update_item(
                    TableName=self._table,
                    Key=self._key(model),
                    UpdateExpression="SET paused_until = :u",
                    ConditionExpression="attribute_exists(s) AND "
                    "(attribute_not_exists(paused_until) OR paused_until < :u)",
                    ExpressionAttributeValues=_values({":u": _dec(until)}),
                )
                return
            except ClientError as exc:
                if _code(exc) != "ConditionalCheckFailedException":
                    raise StorageError(f"could not pause {model}") from exc
            self._create(model)

    def renew(self, model: str, token: str, *, now: float, lease_seconds: float) -> bool:
        return _conditional(
            f"could not renew a slot of {model}",
            self._db.update_item,
            TableName=self._table,
            Key=self._key(model),
            UpdateExpression="SET s.#t = :until",
            ConditionExpression="attribute_exists(s.#t)",
            ExpressionAttributeNames={"#t": token},
            ExpressionAttributeValues=_values({":until": Decimal(str(round(now + lease_seconds, 3)))}),
        )

    def release(self, model: str, token: str) -> None:
        self._db.update_item(
            TableName=self._table,
            Key=self._key(model),
            UpdateExpression="REMOVE s.#t",
            ExpressionAttributeNames={"#t": token},
        )

    def holders(self, model: str) -> dict[str, float]:
        resp = self._db.get_item(TableName=self._table, Key=self._key(model), ConsistentRead=True)
        raw = resp.get("Item")
        leases = from_ddb(raw).get("s", {}) if raw else {}
        return {t: float(u) for t, u in leases.items()}

    def _create(self, model: str) -> None:
        try:
            self._db.put_item(
                TableName=self._table,
                Item={**self._key(model), "s": {"M": {}}},
                ConditionExpression="attribute_not_exists(s)",
            )
        except ClientError as exc:
            if _code(exc) != "ConditionalCheckFailedException":
                raise StorageError(f"could not create the slots of {model}") from exc

    def _purge(self, model: str, expired: dict[str, Any]) -> None:
        names = {f"#e{i}": token for i, token in enumerate(expired)}
        values = {f":e{i}": until for i, until in enumerate(expired.values())}
        try:
            self._db.update_item(
                TableName=self._table,
                Key=self._key(model),
                UpdateExpression="REMOVE " + ", ".join(f"s.{n}" for n in names),
                ConditionExpression=" AND ".join(f"s.{n} = {v}" for n, v in zip(names, values, strict=True)),
                ExpressionAttributeNames=names,
                ExpressionAttributeValues=_values(values),
            )
        except ClientError as exc:
            if _code(exc) != "ConditionalCheckFailedException":
                raise StorageError(f"could not purge the slots of {model}") from exc


class FileStore:
    """File records (uploaded inputs and result files) and the owner index over them."""

    def __init__(self, client: Any, table: str) -> None:
        self._db = client
        self._table = table

    def put_new(self, record: dict[str, Any]) -> bool:
        """Store a file record; False if one with that id exists (or was deleted) already."""
        return _conditional(
            f"could not store file {record['pk']}",
            self._db.put_item,
            TableName=self._table,
            Item=to_ddb(record),
            ConditionExpression="attribute_not_exists(pk)",
        )

    def get(self, file_id: str) -> dict[str, Any] | None:
        resp = self._db.get_item(TableName=self._table, Key={"pk": {"S": file_id}}, ConsistentRead=True)
        raw = resp.get("Item")
        return None if raw is None else from_ddb(raw)

    def mark_deleted(self, file_id: str, ttl: int) -> None:
        """Keep a tombstone, so a result file once deleted is never written again."""
        self._db.update_item(
            TableName=self._table,
            Key={"pk": {"S": file_id}},
            UpdateExpression="SET deleted = :t, #ttl = :ttl",
            ExpressionAttributeNames={"#ttl": "ttl"},
            ExpressionAttributeValues={":t": {"BOOL": True}, ":ttl": {"N": str(ttl)}},
        )

    def complete(self, file_id: str, digest: str, ttl: int) -> None:
        """A presigned upload arrived: record its SHA-256 and make the file usable."""
        self._db.update_item(
            TableName=self._table,
            Key={"pk": {"S": file_id}},
            UpdateExpression="SET sha256 = :d, #ttl = :ttl REMOVE pending",
            ConditionExpression="attribute_exists(pending)",
            ExpressionAttributeNames={"#ttl": "ttl"},
            ExpressionAttributeValues={":d": {"S": digest}, ":ttl": {"N": str(ttl)}},
        )

    def for_owner(self, owner: str, index: str) -> Iterator[dict[str, Any]]:
        """The owner's live files, newest first."""
        kwargs: dict[str, Any] = {
            "TableName": self._table,
            "IndexName": index,
            "KeyConditionExpression": "#o = :o",
            "FilterExpression": "attribute_not_exists(deleted)",
            "ExpressionAttributeNames": {"#o": "owner"},
            "ExpressionAttributeValues": {":o": {"S": owner}},
            "ScanIndexForward": False,
        }
        while True:
            resp = self._db.query(**kwargs)
            for raw in resp.get("Items", []):
                yield from_ddb(raw)
            if "LastEvaluatedKey" not in resp:
                return
            kwargs["ExclusiveStartKey"] = resp["LastEvaluatedKey"]


class ControlStore:
    """Small records in the control table: uploads and their parts, hourly counters."""

    def __init__(self, client: Any, table: str) -> None:
        self._db = client
        self._table = table

    def put(self, record: dict[str, Any], *, new: bool = False) -> bool:
        condition = {"ConditionExpression": "attribute_not_exists(pk)"} if new else {}
        return _conditional(
            f"could not store {record['pk']}",
            self._db.put_item,
            TableName=self._table,
            Item=to_ddb(record),
            **condition,
        )

    def get(self, pk: str, sk: str) -> dict[str, Any] | None:
        resp = self._db.get_item(
            TableName=self._table, Key={"pk": {"S": pk}, "sk": {"S": sk}}, ConsistentRead=True
        )
        raw = resp.get("Item")
        return None if raw is None else from_ddb(raw)

    def query(self, pk: str, prefix: str) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        kwargs: dict[str, Any] = {
            "TableName": self._table,
            "KeyConditionExpression": "pk = :pk AND begins_with(sk, :p)",
            "ExpressionAttributeValues": {":pk": {"S": pk}, ":p": {"S": prefix}},
            "ConsistentRead": True,
        }
        while True:
            resp = self._db.query(**kwargs)
            out.extend(from_ddb(raw) for raw in resp.get("Items", []))
            if "LastEvaluatedKey" not in resp:
                return out
            kwargs["ExclusiveStartKey"] = resp["LastEvaluatedKey"]

    def transition(self, pk: str, sk: str, fields: dict[str, Any], *, expect: dict[str, Any]) -> bool:
        """Set ``fields`` only if every ``expect`` attribute has the given value."""
        names = {f"#f{i}": n for i, n in enumerate(fields)} | {f"#e{i}": n for i, n in enumerate(expect)}
        values = {f":f{i}": v for i, v in enumerate(fields.values())} | {
            f":e{i}": v for i, v in enumerate(expect.values())
        }
        return _conditional(
            f"could not update {pk}",
            self._db.update_item,
            TableName=self._table,
            Key={"pk": {"S": pk}, "sk": {"S": sk}},
            UpdateExpression="SET " + ", ".join(f"#f{i} = :f{i}" for i in range(len(fields))),
            ConditionExpression=" AND ".join(f"#e{i} = :e{i}" for i in range(len(expect))),
            ExpressionAttributeNames=names,
            ExpressionAttributeValues=_values(values),
        )

    def count_within(self, pk: str, sk: str, *, limit: int, ttl: int) -> bool:
        """Add one to a counter unless it already reached ``limit`` (then False)."""
        return _conditional(
            f"could not count {pk}",
            self._db.update_item,
            TableName=self._table,
            Key={"pk": {"S": pk}, "sk": {"S": sk}},
            UpdateExpression="ADD n :one SET #ttl = :ttl",
            ConditionExpression="attribute_not_exists(n) OR n < :limit",
            ExpressionAttributeNames={"#ttl": "ttl"},
            ExpressionAttributeValues=_values({":one": 1, ":limit": limit, ":ttl": ttl}),
        )
