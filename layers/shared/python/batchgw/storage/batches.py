"""Batches: the store of batch records (``BatchStore``), and what a batch counts in its
owner's usage from its creation to its end or deletion.

``BatchStore`` is made of its parts, each in a module of its own: the record's reads and
verbs (``storage.batch_records``), its counter shards (``storage.batch_shards``), its run
marks (``storage.batch_runs``), prepare's lease (``storage.batch_prepare``) and the owner
index (``storage.batch_index``). This module keeps the writes that change a record and its
owner's usage together, and the retries (child batches) a batch lists.

A batch counts against its owner's limits (``storage.usage``) from the transaction that
stores it (``create``) to the one that ends it (``end``) or deletes it unfinished
(``delete_record``): each of those writes changes the record and the owner's usage
together, so a batch is counted once and released once, whoever retries or races.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from batchgw.domain.batch import BatchRecord
from batchgw.domain.errors import StorageError
from batchgw.domain.files import RESULT_KINDS, result_file_id
from batchgw.domain.states import BatchStatus
from batchgw.domain.usage import OverLimit, Usage, UsageLimits
from batchgw.storage.batch_index import OwnerIndex
from batchgw.storage.batch_prepare import PrepareLease
from batchgw.storage.batch_records import (
    BatchRecords,
    batch_exists,
    batch_key,
    record_update,
    shards_clause,
    status_is,
    total_is,
)
from batchgw.storage.batch_runs import RunMarks
from batchgw.storage.batch_shards import CounterShards
from batchgw.storage.dynamo import Table, Update, to_item
from batchgw.storage.files import FileStore
from batchgw.storage.usage import UsageStore

# The clause of a new batch's record.
batch_not_exists = "attribute_not_exists(pk)"

# The retries (child batches) one batch may have.
MAX_CHILDREN = 20

_USAGE_TRIES = 5  # charges or releases tried again while the owner's usage keeps changing


class ParentChanged(Exception):
    """A retry's parent was gone, another's, or had all the children it may have."""


class OwnerInactive(Exception):
    """The batch's owner was suspended or deleted before its record could be stored."""


class _RecordChanged(Exception):
    """The write of a batch's record joined to a usage charge did not hold its condition."""


class BatchStore(BatchRecords, CounterShards, RunMarks, PrepareLease, OwnerIndex):
    """A batch's record and everything of it in the batches table: its parts (the bases) and
    the writes that count the batch in its owner's usage and release it."""

    def __init__(self, client: Any, table: str, usage: UsageStore, files: FileStore) -> None:
        self._table = Table(client, table)
        self._usage = usage
        self._files = files

    # --- the record's life --------------------------------------------------------------------

    def create(
        self, record: BatchRecord, limits: UsageLimits, *, now: float, owner_active: Mapping[str, Any]
    ) -> OverLimit | None:
        """Store a new batch's record and count it in its owner's usage, in one transaction:
        one unfinished batch more, and its requests (a file batch's are counted once its file
        is read: ``charge_requests``), and its input copy's ``input_bytes`` as input-file bytes,
        under its own entry until it ends (``domain.usage``). OverLimit, with nothing stored, when that
        would take the owner over ``limits``. A retry's child batch is listed on its parent in
        the same transaction: ParentChanged, with nothing stored, when the parent is gone, is
        no longer its owner's, or lists ``MAX_CHILDREN`` already. The transaction holds
        ``owner_active`` too (``AccountStore.active_check``): OwnerInactive, with nothing
        stored, when the owner was suspended or deleted since the caller was authenticated."""
        put = {
            "Put": {
                "TableName": self._table.name,
                "Item": to_item(record.replace(charged=True).to_item()),
                "ConditionExpression": batch_not_exists,
            }
        }
        also = [] if record.parent_batch_id is None else [self._list_child(record.parent_batch_id, record)]
        try:
            return self._charge(
                record.id,
                record.owner,
                put,
                batches=1,
                requests=record.total,
                limits=limits,
                also=also,
                guards=[owner_active],
                copy=record if record.input_bytes else None,
                now=now,
            )
        except _RecordChanged:
            raise StorageError(f"batch {record.id} exists already") from None

    def _list_child(self, parent_id: str, child: BatchRecord) -> dict[str, Any]:
        return {
            "Update": {
                "TableName": self._table.name,
                "Key": batch_key(parent_id),
                "UpdateExpression": "SET retry_batch_ids = "
                "list_append(if_not_exists(retry_batch_ids, :none), :child)",
                "ConditionExpression": f"{batch_exists} AND #owner = :owner AND "
                "(attribute_not_exists(retry_batch_ids) OR size(retry_batch_ids) < :most)",
                "ExpressionAttributeNames": {"#owner": "owner"},
                "ExpressionAttributeValues": to_item(
                    {":none": [], ":child": [child.id], ":owner": child.owner, ":most": MAX_CHILDREN}
                ),
            }
        }

    def charge_requests(
        self,
        batch: BatchRecord,
        *,
        total: int,
        models: Sequence[str],
        limits: UsageLimits,
        from_statuses: Iterable[BatchStatus],
        mode: Mapping[str, Any] | None = None,
    ) -> BatchRecord | OverLimit | None:
        """A file batch's requests, once its file is read: set its ``total`` and ``models``
        and count the requests in its owner's usage, in one transaction, if its status is
        still one of ``from_statuses``. The record after (also when an earlier try counted
        them already), OverLimit with nothing changed, or None when the status changed (or
        the batch is gone). ``mode``: where it runs, decided with its models, set with them."""
        statuses = list(from_statuses)
        fields = {"total": total, "models": list(models), **(mode or {})}
        if not batch.charged:
            return self._change(batch.id, fields, from_statuses=statuses)
        update = record_update(fields, statuses, extra=[(total_is, {"#total": "total"}, {":total": 0})])
        try:
            refused = self._charge(
                batch.id,
                batch.owner,
                {"Update": update.request(self._table.name, batch_key(batch.id))},
                batches=0,
                requests=total,
                limits=limits,
            )
        except _RecordChanged:
            refused = None  # an earlier try may have counted them: the record says
        if refused is not None:
            return refused
        after = self.get_record(batch.id)
        if after is None or after.status not in statuses or after.total != total:
            return None
        return after

    # --- the record's end and deletion ----------------------------------------------------------

    def end(
        self,
        batch_id: str,
        fields: dict[str, Any],
        *,
        from_statuses: Iterable[BatchStatus],
        remove: Sequence[str] = (),
    ) -> BatchRecord | None:
        """Give the batch its final status (``fields``, set as ``_change`` does) if its status
        is one of ``from_statuses`` (unfinished ones), and release what it counts in its
        owner's usage in the same transaction: a step retried, or two racing, release it
        once. The record after, or None when the condition did not hold (or the batch is
        gone)."""
        statuses = list(from_statuses)
        if any(status.is_final for status in statuses):
            raise ValueError("a batch ends from an unfinished status")
        copy_held = True  # until a try finds its input copy's entry gone
        for _ in range(_USAGE_TRIES):
            record = self.get_record(batch_id)
            if record is None or record.status not in statuses:
                return None
            if not record.charged:
                return self._change(batch_id, fields, from_statuses=statuses, remove=remove, halt=True)
            release = UsageStore.release_batch(batch_id, record.total)
            # Its input copy's bytes move to the hour its record may vanish in at the latest.
            until: int | None = fields.get("ttl", record.ttl)
            settle = None  # (held under its own entry while it ran: ``domain.usage``)
            if until is not None and copy_held and record.input_bytes and record.input_until is None:
                settle = UsageStore.settle_copy(batch_id, record.input_bytes, until)
                release = UsageStore.joined(release, settle)
            update = record_update(
                {**fields, "input_until": until} if settle is not None else fields,
                statuses,
                remove,
                extra=[(total_is, {"#total": "total"}, {":total": record.total}), shards_clause(record)],
            )
            cancelled = self._table.transact(
                [
                    {"Update": update.request(self._table.name, batch_key(batch_id))},
                    self._usage.action(record.owner, release),
                    *self._shard_marks(record, halt=True),
                ],
                failure=f"could not end {batch_id}",
            )
            if cancelled is None:
                return self.get_record(batch_id)
            if settle is not None and cancelled.failed(1):
                copy_held = False  # released as vanished meanwhile: nothing left to move
        raise StorageError(f"batch {batch_id} kept changing while it was ended")

    def delete_record(self, batch_id: str, *, now: float) -> bool:
        """Remove the batch's record (it then reads as not found everywhere), and tombstone
        its result files in the same transaction (they read as not found from then on, and
        one its finalize had yet to record is never written: ``FileStore.tombstone_actions``);
        an unfinished batch's count in its owner's usage is released, and its counter shards
        halted, in that transaction too, as is its input copy's count (unless that hour was
        dropped already: its bytes left the count then). False when there was no record to
        remove."""
        copy_counted = True  # until a try finds its hour dropped (or its entry gone)
        for _ in range(_USAGE_TRIES):
            record = self.get_record(batch_id)
            if record is None:
                return False
            copy = UsageStore.release_copy(record.id, record.input_bytes, record.input_until, now)
            copy = copy if copy_counted else None
            usage: Update | None = None
            tombstones = self._files.tombstone_actions(_result_files(record), owner=record.owner, now=now)
            conditions = [batch_exists]
            names: dict[str, str] = {}
            values: dict[str, Any] = {}
            actions: list[dict[str, Any]] = []
            if not record.status.is_final:
                clause, names, values = shards_clause(record)
                conditions += [status_is, total_is, clause]
                names |= {"#status": "status", "#total": "total"}
                values |= {":status": record.status.value, ":total": record.total}
                actions += self._shard_marks(record, halt=True)
                if record.charged:
                    usage = UsageStore.release_batch(batch_id, record.total)
            else:
                # Its status stays final; only its result files (read with it) must not move.
                conditions.append(status_is)
                names["#status"] = "status"
                values[":status"] = record.status.value
            if copy is not None:
                usage = copy if usage is None else UsageStore.joined(usage, copy)
            if usage is not None:
                actions.append(self._usage.action(record.owner, usage))
            delete: dict[str, Any] = {
                "TableName": self._table.name,
                "Key": batch_key(batch_id),
                "ConditionExpression": " AND ".join(conditions),
                "ExpressionAttributeNames": names,
                "ExpressionAttributeValues": to_item(values),
            }
            failure = f"could not delete {batch_id}"
            if not actions and not tombstones:
                condition = delete["ConditionExpression"]
                if self._table.delete(
                    batch_key(batch_id), condition=condition, names=names, params=values, failure=failure
                ):
                    return True
                continue  # gone meanwhile: read again
            cancelled = self._table.transact([{"Delete": delete}, *actions, *tombstones], failure=failure)
            if cancelled is None:
                return True
            if copy is not None and cancelled.failed(len(actions)):
                copy_counted = False  # its hour was dropped meanwhile: nothing left to release
        raise StorageError(f"batch {batch_id} kept changing while it was deleted")

    def delete_all(self, batch_id: str, *, now: float) -> None:
        """Delete the batch's record (as ``delete_record``) and counter shards."""
        self.delete_record(batch_id, now=now)
        keys = [
            {"pk": raw["pk"], "sk": raw["sk"]}
            for raw in self._table.query(
                KeyConditionExpression="pk = :pk",
                ExpressionAttributeValues={":pk": {"S": batch_id}},
                ProjectionExpression="pk, sk",
            )
        ]
        self._table.delete_many(keys)

    # --- the owner's usage --------------------------------------------------------------------

    def _charge(
        self,
        batch_id: str,
        owner: str,
        action: dict[str, Any],
        *,
        batches: int,
        requests: int,
        limits: UsageLimits,
        also: Sequence[dict[str, Any]] = (),
        guards: Sequence[Mapping[str, Any]] = (),
        copy: BatchRecord | None = None,
        now: float = 0.0,
    ) -> OverLimit | None:
        """Run ``action`` (a conditional write of batch ``batch_id``'s record), ``also``
        (writes of other items) and ``guards`` (the owner's ``active_check``, on a create)
        with ``batches`` and ``requests`` charged to ``owner``'s
        usage, in one transaction, and ``copy``'s input copy with them (at ``now``, after
        dropping the owner's expired file hours). OverLimit when the owner would go over
        ``limits``, counting as ended the requests that ended in the batches their usage
        holds (see ``storage.usage``); raises _RecordChanged when ``action``'s own condition
        did not hold, ParentChanged when one of ``also`` did not, OwnerInactive when one of
        ``guards`` did not."""
        read: tuple[Usage, int] | None = None  # the usage as read, and the requests ended of it
        most_bytes = 0
        if copy is not None:
            assert limits.max_file_bytes is not None
            most_bytes = limits.max_file_bytes - copy.input_bytes
        for _ in range(_USAGE_TRIES):
            ended = 0 if read is None else read[1]
            most_requests = limits.max_requests - requests + ended
            if most_requests >= 0 and most_bytes >= 0:
                charge = UsageStore.charge_batch(
                    batch_id,
                    batches=batches,
                    requests=requests,
                    most_batches=limits.max_batches - batches,
                    most_requests=most_requests,
                    releases=None if read is None else read[0].releases,
                )
                if copy is not None:
                    held = UsageStore.charge_copy(
                        batch_id, copy.input_bytes, copy.input_until, most_bytes, now
                    )
                    charge = UsageStore.joined(charge, held)
                cancelled = self._table.transact(
                    [action, *also, *guards, self._usage.action(owner, charge)],
                    failure=f"could not count {batch_id}",
                )
                if cancelled is None:
                    return None
                if cancelled.failed(0):
                    raise _RecordChanged
                if any(cancelled.failed(1 + i) for i in range(len(also))):
                    raise ParentChanged
                if any(cancelled.failed(1 + len(also) + i) for i in range(len(guards))):
                    raise OwnerInactive
            usage = self._usage.read(owner)
            ended_now = self._ended_requests(owner, usage)
            if ended_now is None:
                read = None  # a vanished batch was released: read again
                continue
            if batches and usage.batches + batches > limits.max_batches:
                return OverLimit("batches", usage.batches)
            unfinished = usage.requests - ended_now
            if unfinished + requests > limits.max_requests:
                return OverLimit("requests", unfinished + requests)
            if copy is not None:
                if usage.drop_due(now):
                    self._usage.drop_due_hours(owner, usage, now)
                    read = None
                    continue
                if most_bytes < 0 or usage.file_bytes > most_bytes:
                    return OverLimit("file_bytes", usage.file_bytes + copy.input_bytes)
            read = (usage, ended_now)
        raise StorageError(f"the usage of {owner} kept changing")

    def _ended_requests(self, owner: str, usage: Usage) -> int | None:
        """Requests that ended in the batches ``usage`` holds: counted until their batch ends,
        but no longer unfinished (read from each batch's counters, strongly consistent).
        None when a batch it holds had vanished without its release, which is now made."""
        ended = 0
        vanished = False
        for batch_id, charged in usage.held.items():
            batch = self.get(batch_id)
            if batch is None:
                vanished = True
                self._usage.release_vanished(owner, batch_id, charged, usage.held_bytes.get(batch_id, 0))
                continue
            ended += batch.record.total - batch.unfinished_requests
        return None if vanished else ended


def _result_files(record: BatchRecord) -> list[str]:
    """The result files a batch has or may yet have: those an ended batch names; both ids of
    a file batch still running or finalizing (its finalize may record either)."""
    if record.status.is_final:
        return [f for f in (record.output_file_id, record.error_file_id) if f is not None]
    if record.input_method != "file":
        return []
    return [result_file_id(record.id, kind) for kind in RESULT_KINDS]
