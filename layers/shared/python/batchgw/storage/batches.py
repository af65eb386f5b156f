"""Batches: each batch's record, its counter shards, and the owner index over records.

Every change of a batch's status is a conditional write that names the statuses it
may leave (``status_is_one_of``), so two steps racing (a cancel and the window's end,
a retried finalize) cannot both apply.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from batchgw.domain.batch import (
    RECORD_SK,
    SHARD_PREFIX,
    BatchRecord,
    CountedBatch,
    Counts,
    ShardRecord,
    created_bound,
    shard_sk,
)
from batchgw.domain.errors import StorageError
from batchgw.domain.states import BatchStatus
from batchgw.storage.dynamo import Table, Update, from_item, one_of, to_item

OWNER_INDEX = "by_owner"

# The clauses of the batch record's conditional writes.
batch_not_exists = "attribute_not_exists(pk)"
batch_exists = "attribute_exists(pk)"
token_is_ours = "task_token = :token"
shard_is_empty = "#left = :zero"
shard_not_counted = "attribute_not_exists(done)"


class BatchStore:
    def __init__(self, client: Any, table: str) -> None:
        self._table = Table(client, table)

    @staticmethod
    def _key(batch_id: str, sk: str = RECORD_SK) -> dict[str, Any]:
        return {"pk": {"S": batch_id}, "sk": {"S": sk}}

    # --- reads --------------------------------------------------------------------------------

    def get(self, batch_id: str) -> CountedBatch | None:
        """The batch with its counters summed (one strongly consistent query)."""
        record: BatchRecord | None = None
        shards: list[ShardRecord] = []
        for raw in self._table.query(
            KeyConditionExpression="pk = :pk",
            ExpressionAttributeValues={":pk": {"S": batch_id}},
            ConsistentRead=True,
        ):
            item = from_item(raw)
            if item["sk"] == RECORD_SK:
                record = BatchRecord.from_item(item)
            elif str(item["sk"]).startswith(SHARD_PREFIX):
                shards.append(ShardRecord.from_item(item))
        return None if record is None else CountedBatch(record, Counts.of_shards(shards))

    def get_record(self, batch_id: str) -> BatchRecord | None:
        """The batch's record alone (strongly consistent)."""
        item = self._table.get(self._key(batch_id))
        return None if item is None else BatchRecord.from_item(item)

    def shards(self, batch_id: str) -> list[ShardRecord]:
        return [
            ShardRecord.from_item(from_item(raw))
            for raw in self._table.query(
                KeyConditionExpression="pk = :pk AND begins_with(sk, :p)",
                ExpressionAttributeValues={":pk": {"S": batch_id}, ":p": {"S": SHARD_PREFIX}},
                ConsistentRead=True,
            )
        ]

    def list_for_owner(
        self,
        owner: str,
        *,
        limit: int,
        before_key: str | None = None,
        created_after: int | None = None,
        created_before: int | None = None,
        statuses: Sequence[str] = (),
    ) -> tuple[list[BatchRecord], bool]:
        """The owner's batches newest first: at most ``limit`` records, and whether more follow.

        ``before_key`` is a cursor (an owner-index key; the list starts after it);
        ``created_after`` / ``created_before`` are exclusive bounds in unix seconds.
        """
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
        request: dict[str, Any] = {
            "IndexName": OWNER_INDEX,
            "KeyConditionExpression": key_condition,
            "ScanIndexForward": False,
        }
        if statuses:
            names["#s"] = "status"
            request["FilterExpression"], status_values = one_of("#s", "s", statuses)
            values.update(status_values)
        request["ExpressionAttributeNames"] = names
        request["ExpressionAttributeValues"] = to_item(values)
        found: list[BatchRecord] = []
        for raw in self._table.query(limit=200 if statuses else limit + 1, **request):
            item = from_item(raw)
            # BETWEEN is inclusive: keep the exclusive upper bound of a cursor.
            if upper is not None and item["created_key"] >= upper:
                continue
            found.append(BatchRecord.from_item(item))
            if len(found) > limit:
                break
        return found[:limit], len(found) > limit

    # --- the record's life --------------------------------------------------------------------

    def create(self, record: BatchRecord) -> None:
        if not self._table.put(
            record.to_item(), condition=batch_not_exists, failure=f"could not store {record.id}"
        ):
            raise StorageError(f"batch {record.id} exists already")

    def change(
        self,
        batch_id: str,
        fields: dict[str, Any],
        *,
        from_statuses: Iterable[BatchStatus] | None = None,
        remove: Sequence[str] = (),
    ) -> BatchRecord | None:
        """Set ``fields`` (BatchRecord field names) on the record, only if its status is one
        of ``from_statuses`` (any, when None). The record after the change, or None when the
        condition did not hold (or the batch is gone)."""
        condition = batch_exists
        values: dict[str, Any] = {}
        names: dict[str, str] = {}
        if from_statuses is not None:
            names["#status"] = "status"
            status_is_one_of, values = one_of("#status", "from", [str(s) for s in from_statuses])
            condition = f"{batch_exists} AND {status_is_one_of}"
        stored = {
            name: value.value if isinstance(value, BatchStatus) else value for name, value in fields.items()
        }
        update = Update(set=stored, remove=remove, condition=condition, names=names, values=values)
        after, _ = self._table.update_returning(
            self._key(batch_id), update, failure=f"could not update {batch_id}"
        )
        return None if after is None else BatchRecord.from_item(after)

    def clear_token(self, batch_id: str, token: str) -> None:
        """Forget a task token once used (only if it is still the one stored)."""
        self._table.update(
            self._key(batch_id),
            Update(remove=["task_token"], condition=token_is_ours, values={":token": token}),
            failure=f"could not update {batch_id}",
        )

    def delete_record(self, batch_id: str) -> bool:
        """Remove the batch's record (it then reads as not found everywhere)."""
        return self._table.delete(
            self._key(batch_id), condition=batch_exists, failure=f"could not delete {batch_id}"
        )

    def delete_all(self, batch_id: str) -> None:
        """Delete the batch's record and counter shards."""
        keys = [
            {"pk": raw["pk"], "sk": raw["sk"]}
            for raw in self._table.query(
                KeyConditionExpression="pk = :pk",
                ExpressionAttributeValues={":pk": {"S": batch_id}},
                ProjectionExpression="pk, sk",
            )
        ]
        self._table.delete_many(keys)

    # --- counter shards -----------------------------------------------------------------------

    def correct_left(self, batch_id: str, shard: int, *, observed: int, actual: int) -> bool:
        """Set a shard's ``left`` to ``actual``, only if it still is ``observed`` (nothing
        was counted in it since it was read). For the reconciler, which found fewer
        unfinished requests in the shard than it counts."""
        return self._table.update(
            self._key(batch_id, shard_sk(shard)),
            Update(
                set={"left": actual},
                condition="#left = :observed",
                names={"#left": "left"},
                values={":observed": observed},
            ),
            failure=f"could not correct shard {shard} of {batch_id}",
        )

    def put_shards(self, batch_id: str, totals: Sequence[int]) -> None:
        """Create the counter shards (idempotent: a retried prepare rewrites the same zeros)."""
        self._table.put_many(
            {"pk": batch_id, "sk": shard_sk(k), "left": left} for k, left in enumerate(totals)
        )

    def count_shard_done(self, batch_id: str, shard: int) -> bool:
        """Count shard ``shard`` as finished in the record, exactly once, if nothing is left in it.

        The shard's ``done`` flag and the record's ``shards_done`` change in one
        transaction, so a crash between them cannot lose or double the count. False when
        the shard still has requests left or was counted already.
        """
        table = self._table.name
        mark_done = Update(
            set={"done": True},
            condition=f"{shard_is_empty} AND {shard_not_counted}",
            names={"#left": "left"},
            values={":zero": 0},
        )
        count_it = Update(add={"shards_done": 1}, condition=batch_exists)
        cancelled = self._table.transact(
            [
                {"Update": mark_done.request(table, self._key(batch_id, shard_sk(shard)))},
                {"Update": count_it.request(table, self._key(batch_id))},
            ],
            failure=f"could not finish shard {shard} of {batch_id}",
        )
        return cancelled is None
