"""Batches: each batch's record, its counter shards, and the owner index over records.

Every change of a batch's status is a conditional write that names the statuses it
may leave (``status_is_one_of``), so two steps racing (a cancel and the window's end,
a retried finalize) cannot both apply.

Each change of the record is a verb of the store (``cancel``, ``pause``,
``fail_for_owner``, ``mark_results_full``, ...; the generic ``_change`` is private), and
each verb says whether it stops the batch's requests from starting. One that does
(``cancel``, ``fail_for_owner``, ``start_failing``, ``start_expiring``,
``mark_results_full``, ``start_finalizing``, ``end``, ``delete_record``) also marks each
of its counter shards ``halt`` in the same transaction, and ``set_generation`` writes a
new generation of its chains to them as ``gen``: a worker that records a request's end in its shard, checking
the shard as it counts, learns in that one write whether it may start the next request
(``storage.requests.RunGuard``), without reading the batch.

A worker running a chain of the batch keeps a run mark in its partition (``run#<token>``,
with the time it lasts until, renewed while the chain runs, removed when it stops): "is
any of this batch's work running?" reads those few marks, whatever the batch's size, and
no request's claim or end writes anything for it.

A batch counts against its owner's limits (``storage.usage``) from the transaction that
stores it (``create``) to the one that ends it (``end``) or deletes it unfinished
(``delete_record``): each of those writes changes the record and the owner's usage
together, so a batch is counted once and released once, whoever retries or races.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from batchgw.domain.batch import (
    RECORD_SK,
    SHARD_PREFIX,
    BatchRecord,
    CountedBatch,
    Counts,
    ShardRecord,
    Tally,
    created_bound,
    shard_sk,
)
from batchgw.domain.errors import StorageError
from batchgw.domain.files import RESULT_KINDS, result_file_id
from batchgw.domain.states import UNFINISHED_STATUSES, BatchStatus
from batchgw.domain.usage import OverLimit, Usage, UsageLimits
from batchgw.storage.dynamo import Table, Update, from_item, one_of, timestamp, to_item
from batchgw.storage.files import FileStore
from batchgw.storage.usage import UsageStore

OWNER_INDEX = "by_owner"

# The clauses of the batch record's conditional writes.
batch_not_exists = "attribute_not_exists(pk)"
batch_exists = "attribute_exists(pk)"
token_is_ours = "task_token = :token"
shard_is_empty = "#left = :zero"
shard_not_counted = "attribute_not_exists(done)"
unwritten_not_counted = "attribute_not_exists(unwritten_counted)"
status_is = "#status = :status"
total_is = "#total = :total"
shards_unset = "attribute_not_exists(#shards)"
shards_are = "#shards = :shards"
prepare_free = "(attribute_not_exists(prep_until) OR prep_until < :now)"
prepare_is_mine = "prep_owner = :me"

RUN_PREFIX = "run#"  # the sort keys of the batch's run marks
_RUN_MARK_KEPT_SECONDS = 86400  # a dead worker's mark, long ended, is left to TTL after this

# The retries (child batches) one batch may have.
MAX_CHILDREN = 20

_USAGE_TRIES = 5  # charges or releases tried again while the owner's usage keeps changing


def _shards_clause(record: BatchRecord) -> tuple[str, dict[str, str], dict[str, Any]]:
    """The condition that the record still has the counter shards it was read with."""
    if record.shards is None:
        return shards_unset, {"#shards": "shards"}, {}
    return shards_are, {"#shards": "shards"}, {":shards": record.shards}


@dataclass(frozen=True, slots=True)
class OwnerPage:
    """A page of an owner's batches, newest first, and whether more follow. ``read_to`` is
    set when the page stopped at its read bound before it was full: the owner-index key of
    the last batch read, where the next page goes on (the cursor a batch id makes)."""

    records: list[BatchRecord]
    more: bool
    read_to: str | None = None


class ParentChanged(Exception):
    """A retry's parent was gone, another's, or had all the children it may have."""


class _RecordChanged(Exception):
    """The write of a batch's record joined to a usage charge did not hold its condition."""


class BatchStore:
    def __init__(self, client: Any, table: str, usage: UsageStore, files: FileStore) -> None:
        self._table = Table(client, table)
        self._usage = usage
        self._files = files

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

    def list_for_owner(self, owner: str, *, limit: int, **filters: Any) -> tuple[list[BatchRecord], bool]:
        """The owner's batches newest first: at most ``limit`` records, and whether more
        follow (``owner_page``'s, with the same filters)."""
        page = self.owner_page(owner, limit=limit, **filters)
        return page.records, page.more

    def owner_page(
        self,
        owner: str,
        *,
        limit: int,
        before_key: str | None = None,
        created_after: int | None = None,
        created_before: int | None = None,
        statuses: Sequence[str] = (),
        most_read: int | None = None,
    ) -> OwnerPage:
        """The owner's batches newest first: at most ``limit`` records, and whether more follow.

        ``before_key`` is a cursor (an owner-index key; the list starts after it);
        ``created_after`` / ``created_before`` are exclusive bounds in unix seconds. With
        ``most_read``, a status filter reads at most about that many of the owner's batches
        (DynamoDB reads every batch the filter drops): a page that stops there says where
        the next one goes on (``OwnerPage.read_to``)."""
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
        step = min(200, most_read or 200) if statuses else limit + 1
        found: list[BatchRecord] = []
        start: dict[str, Any] | None = None
        read = 0
        while True:
            items, start = self._table.query_step(limit=step, start=start, **request)
            read += step
            for raw in items:
                item = from_item(raw)
                # BETWEEN is inclusive: keep the exclusive upper bound of a cursor.
                if upper is not None and item["created_key"] >= upper:
                    continue
                found.append(BatchRecord.from_item(item))
                if len(found) > limit:
                    return OwnerPage(found[:limit], True)
            if start is None:
                return OwnerPage(found, False)
            if most_read is not None and statuses and read >= most_read:
                return OwnerPage(found, True, read_to=str(from_item(start)["created_key"]))

    # --- the record's life --------------------------------------------------------------------

    def create(self, record: BatchRecord, limits: UsageLimits, *, now: float) -> OverLimit | None:
        """Store a new batch's record and count it in its owner's usage, in one transaction:
        one unfinished batch more, and its requests (a file batch's are counted once its file
        is read: ``charge_requests``), and its input copy's ``input_bytes`` as input-file bytes,
        under its own entry until it ends (``domain.usage``). OverLimit, with nothing stored, when that
        would take the owner over ``limits``. A retry's child batch is listed on its parent in
        the same transaction: ParentChanged, with nothing stored, when the parent is gone, is
        no longer its owner's, or lists ``MAX_CHILDREN`` already."""
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
                copy=record if record.input_bytes else None,
                now=now,
            )
        except _RecordChanged:
            raise StorageError(f"batch {record.id} exists already") from None

    def _list_child(self, parent_id: str, child: BatchRecord) -> dict[str, Any]:
        return {
            "Update": {
                "TableName": self._table.name,
                "Key": self._key(parent_id),
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
        update = self._update(fields, statuses, extra=[(total_is, {"#total": "total"}, {":total": 0})])
        try:
            refused = self._charge(
                batch.id,
                batch.owner,
                {"Update": update.request(self._table.name, self._key(batch.id))},
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

    # --- the record's changes, one verb each ----------------------------------------------------
    # Each verb names the statuses it may change the batch from (checked in its conditional
    # write) and whether it stops the batch's requests from starting: one that does halts
    # every counter shard in the same transaction (``_change(..., halt=True)``), so a worker
    # recording a request's end learns of it in that write (``storage.requests.RunGuard``).

    def start(self, batch_id: str, *, at: int) -> BatchRecord | None:
        """Validating to in progress (its requests may start: no halt)."""
        fields = {"status": BatchStatus.IN_PROGRESS, "in_progress_at": at}
        return self._change(batch_id, fields, from_statuses=[BatchStatus.VALIDATING])

    def note_prepared(
        self, batch_id: str, *, shards: int, chains: int, written: int, from_statuses: Iterable[BatchStatus]
    ) -> BatchRecord | None:
        """Note the batch's counter shards, its chains and the requests written so far, if
        its status is one of ``from_statuses`` (no halt)."""
        fields = {"shards": shards, "chains": chains, "written": written}
        return self._change(batch_id, fields, from_statuses=from_statuses)

    def move_written(self, batch_id: str, written: int) -> BatchRecord | None:
        """Move the frontier of the requests written on to ``written`` (any status, no halt)."""
        return self._change(batch_id, {"written": written})

    def set_token(self, batch_id: str, token: str) -> BatchRecord | None:
        """Keep the parked workflow task's token (any status, no halt)."""
        return self._change(batch_id, {"task_token": token})

    def cancel(self, batch_id: str, *, at: int) -> BatchRecord | None:
        """Validating or in progress to cancelling: no request starts from now on (halts)."""
        fields = {"status": BatchStatus.CANCELLING, "cancelling_at": at}
        cancellable = [BatchStatus.VALIDATING, BatchStatus.IN_PROGRESS]
        return self._change(batch_id, fields, from_statuses=cancellable, halt=True)

    def pause(self, batch_id: str, paused: dict[str, Any]) -> BatchRecord | None:
        """Say on a running batch why its owner's account holds it back and until when
        (``paused``: reason, until, check_at). No halt: a chain checks the owner itself."""
        return self._change(batch_id, {"paused": paused}, from_statuses=[BatchStatus.IN_PROGRESS])

    def resume(self, batch_id: str) -> BatchRecord | None:
        """Forget a running batch's pause (no halt)."""
        return self._change(batch_id, {"paused": None}, from_statuses=[BatchStatus.IN_PROGRESS])

    def fail_for_owner(self, batch_id: str, error: dict[str, Any]) -> BatchRecord | None:
        """A running batch whose key or owner may no longer run it starts failing with
        ``error``: no request starts from now on (halts); running ones finish."""
        fields = {"owner_failed": True, "error": error}
        return self._change(batch_id, fields, from_statuses=[BatchStatus.IN_PROGRESS], halt=True)

    def start_failing(self, batch_id: str, error: dict[str, Any] | None) -> BatchRecord | None:
        """An unfinished batch starts failing (a workflow step failed), with ``error`` (None:
        the one it has stays): no request starts from now on (halts)."""
        fields: dict[str, Any] = {"owner_failed": True}
        if error is not None:
            fields["error"] = error
        return self._change(batch_id, fields, from_statuses=UNFINISHED_STATUSES, halt=True)

    def start_expiring(self, batch_id: str) -> BatchRecord | None:
        """The window of a batch in progress or cancelling closed: no request starts from now
        on (halts)."""
        expirable = [BatchStatus.IN_PROGRESS, BatchStatus.CANCELLING]
        return self._change(batch_id, {"expiring": True}, from_statuses=expirable, halt=True)

    def run_on_gateway(self, batch_id: str, *, reason: str) -> BatchRecord | None:
        """An ``auto`` batch its provider refused runs on the gateway's chains after all, if it
        is still in progress and was to run on the provider (no halt: it goes on)."""
        update = self._update(
            {"execution_mode": "gateway", "mode_reason": reason, "batch_prices": None},
            [BatchStatus.IN_PROGRESS],
            (),
            extra=[("#em = :provider", {"#em": "execution_mode"}, {":provider": "provider"})],
        )
        after, _ = self._table.update_returning(
            self._key(batch_id), update, failure=f"could not update {batch_id}"
        )
        return None if after is None else BatchRecord.from_item(after)

    def mark_results_full(self, batch_id: str) -> BatchRecord | None:
        """The batch's results reached their storage limit: no request starts from now on
        (any status; halts)."""
        return self._change(batch_id, {"results_full": True}, halt=True)

    def mark_swept(self, batch_id: str, *, status: BatchStatus) -> BatchRecord | None:
        """Note that the unstarted requests of a batch stopping in ``status`` (cancelling, or
        in progress and failing) are being ended, if it is still in ``status`` (no halt: the
        stop that led here halted it)."""
        return self._change(batch_id, {"cancel_swept": True}, from_statuses=[status])

    def start_finalizing(
        self,
        batch_id: str,
        *,
        final_status: BatchStatus,
        at: int,
        results_expires_at: int,
        ttl: int,
        from_status: BatchStatus,
    ) -> BatchRecord | None:
        """Move the batch, if still in ``from_status``, to finalizing, bound for
        ``final_status``, its results kept until ``results_expires_at`` (halts)."""
        fields = {
            "status": BatchStatus.FINALIZING,
            "finalizing_at": at,
            "final_status": final_status,
            "results_expires_at": results_expires_at,
            "ttl": ttl,
        }
        return self._change(batch_id, fields, from_statuses=[from_status], halt=True)

    def set_generation(self, batch_id: str, generation: int) -> BatchRecord | None:
        """Start a new ``generation`` of a running batch's chains, written to its counter
        shards (``gen``) in the same transaction, so the older chains learn they are
        superseded in their next write. No halt: the batch runs on."""
        return self._change(batch_id, {"generation": generation}, from_statuses=[BatchStatus.IN_PROGRESS])

    def note_reconciled(
        self, batch_id: str, *, left: int, progress_at: float, ttl: int | None = None
    ) -> BatchRecord | None:
        """Note what the reconciler found in an unfinished batch (its requests ``left``, when
        it last saw progress, the backstop ``ttl`` if given). No halt."""
        fields: dict[str, Any] = {"reconciled_left": left, "progress_at": progress_at}
        if ttl is not None:
            fields["ttl"] = ttl
        return self._change(batch_id, fields, from_statuses=UNFINISHED_STATUSES)

    def clear_event_pending(self, batch_id: str) -> BatchRecord | None:
        """Forget that the batch's end event is to be sent (it was; any status, no halt)."""
        return self._change(batch_id, {}, remove=["event_pending"])

    def save_finalize_cursor(self, batch_id: str, cursor: Mapping[str, Any]) -> BatchRecord | None:
        """Keep how far finalize has written the result files (any status, no halt)."""
        return self._change(batch_id, {"finalize_cursor": cursor})

    def _change(
        self,
        batch_id: str,
        fields: dict[str, Any],
        *,
        from_statuses: Iterable[BatchStatus] | None = None,
        remove: Sequence[str] = (),
        halt: bool = False,
    ) -> BatchRecord | None:
        """Set ``fields`` (BatchRecord field names) on the record, only if its status is one
        of ``from_statuses`` (any, when None). The record after the change, or None when the
        condition did not hold (or the batch is gone). With ``halt``, or a new
        ``generation``, the change reaches the batch's counter shards in the same
        transaction."""
        if halt or "generation" in fields:
            return self._change_with_shards(batch_id, fields, from_statuses, remove, halt=halt)
        update = self._update(fields, from_statuses, remove)
        after, _ = self._table.update_returning(
            self._key(batch_id), update, failure=f"could not update {batch_id}"
        )
        return None if after is None else BatchRecord.from_item(after)

    def _change_with_shards(
        self,
        batch_id: str,
        fields: dict[str, Any],
        from_statuses: Iterable[BatchStatus] | None,
        remove: Sequence[str],
        *,
        halt: bool,
    ) -> BatchRecord | None:
        """``_change``, written with the marks it leaves on the batch's counter shards (``halt``,
        and the new ``generation`` it sets, if any): the record is read first (how many
        shards), then changed on condition that it still has them, with every shard, in one
        transaction; then read again."""
        statuses = None if from_statuses is None else list(from_statuses)
        for _ in range(_USAGE_TRIES):
            record = self.get_record(batch_id)
            if record is None or (statuses is not None and record.status not in statuses):
                return None
            update = self._update(fields, statuses, remove, extra=[_shards_clause(record)])
            cancelled = self._table.transact(
                [
                    {"Update": update.request(self._table.name, self._key(batch_id))},
                    *self._shard_marks(record, halt=halt, generation=fields.get("generation")),
                ],
                failure=f"could not update {batch_id}",
            )
            if cancelled is None:
                return self.get_record(batch_id)
            if not cancelled.failed(0):
                raise StorageError(f"could not update {batch_id}: {list(cancelled.reasons)}")
        raise StorageError(f"batch {batch_id} kept changing while it was updated")

    def _shard_marks(
        self, record: BatchRecord, *, halt: bool, generation: int | None = None
    ) -> list[dict[str, Any]]:
        """The updates of the record's counter shards that stop its requests (``halt``) or
        start a new ``generation`` of its chains (``gen``)."""
        if record.shards is None:
            return []
        marks: dict[str, Any] = {}
        if halt:
            marks["halt"] = True
        if generation is not None:
            marks["gen"] = generation
        if not marks:
            return []
        update = Update(set=marks, condition=batch_exists)
        return [
            {"Update": update.request(self._table.name, self._key(record.id, shard_sk(k)))}
            for k in range(record.shards)
        ]

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
            update = self._update(
                {**fields, "input_until": until} if settle is not None else fields,
                statuses,
                remove,
                extra=[(total_is, {"#total": "total"}, {":total": record.total}), _shards_clause(record)],
            )
            cancelled = self._table.transact(
                [
                    {"Update": update.request(self._table.name, self._key(batch_id))},
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

    def _update(
        self,
        fields: dict[str, Any],
        from_statuses: Iterable[BatchStatus] | None,
        remove: Sequence[str] = (),
        *,
        extra: Sequence[tuple[str, dict[str, str], dict[str, Any]]] = (),
    ) -> Update:
        """The update of a batch's record setting ``fields`` if its status is one of
        ``from_statuses`` (and each ``extra`` clause holds, with its names and values)."""
        condition = batch_exists
        values: dict[str, Any] = {}
        names: dict[str, str] = {}
        if from_statuses is not None:
            names["#status"] = "status"
            status_is_one_of, values = one_of("#status", "from", [str(s) for s in from_statuses])
            condition = f"{batch_exists} AND {status_is_one_of}"
        for clause, extra_names, extra_values in extra:
            condition = f"{condition} AND {clause}"
            names.update(extra_names)
            values.update(extra_values)
        stored = {
            name: value.value if isinstance(value, BatchStatus) else value for name, value in fields.items()
        }
        return Update(set=stored, remove=remove, condition=condition, names=names, values=values)

    # --- prepare's lease on the writes of its requests ------------------------------------------

    def take_prepare(self, batch_id: str, owner: str, *, now: float, until: float) -> BatchRecord | None:
        """Give ``owner`` (one prepare invocation) the lease on the batch's request writes
        until ``until``, if no other holds it: the record after, or None (held by another,
        or the batch is gone)."""
        update = self._update(
            {"prep_owner": owner, "prep_until": timestamp(until)},
            None,
            extra=[(prepare_free, {}, {":now": timestamp(now)})],
        )
        after, _ = self._table.update_returning(
            self._key(batch_id), update, failure=f"could not take the prepare lease of {batch_id}"
        )
        return None if after is None else BatchRecord.from_item(after)

    def renew_prepare(self, batch_id: str, owner: str, *, until: float) -> bool:
        """Hold the lease on to ``until``: False when ``owner`` no longer holds it (another
        invocation took it once it ran out)."""
        update = self._update(
            {"prep_until": timestamp(until)}, None, extra=[(prepare_is_mine, {}, {":me": owner})]
        )
        return self._table.update(
            self._key(batch_id), update, failure=f"could not renew the prepare lease of {batch_id}"
        )

    def release_prepare(self, batch_id: str, owner: str) -> bool:
        """Give the lease up, if ``owner`` holds it (its writes are over)."""
        update = self._update(
            {}, None, remove=["prep_owner", "prep_until"], extra=[(prepare_is_mine, {}, {":me": owner})]
        )
        return self._table.update(
            self._key(batch_id), update, failure=f"could not release the prepare lease of {batch_id}"
        )

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
        copy: BatchRecord | None = None,
        now: float = 0.0,
    ) -> OverLimit | None:
        """Run ``action`` (a conditional write of batch ``batch_id``'s record) and ``also``
        (writes of other items) with ``batches`` and ``requests`` charged to ``owner``'s
        usage, in one transaction, and ``copy``'s input copy with them (at ``now``, after
        dropping the owner's expired file hours). OverLimit when the owner would go over
        ``limits``, counting as ended the requests that ended in the batches their usage
        holds (see ``storage.usage``); raises _RecordChanged when ``action``'s own condition
        did not hold, ParentChanged when one of ``also`` did not."""
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
                    [action, *also, self._usage.action(owner, charge)], failure=f"could not count {batch_id}"
                )
                if cancelled is None:
                    return None
                if cancelled.failed(0):
                    raise _RecordChanged
                if any(cancelled.failed(1 + i) for i in range(len(also))):
                    raise ParentChanged
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

    def clear_token(self, batch_id: str, token: str) -> None:
        """Forget a task token once used (only if it is still the one stored)."""
        self._table.update(
            self._key(batch_id),
            Update(remove=["task_token"], condition=token_is_ours, values={":token": token}),
            failure=f"could not update {batch_id}",
        )

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
                clause, names, values = _shards_clause(record)
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
                "Key": self._key(batch_id),
                "ConditionExpression": " AND ".join(conditions),
                "ExpressionAttributeNames": names,
                "ExpressionAttributeValues": to_item(values),
            }
            failure = f"could not delete {batch_id}"
            if not actions and not tombstones:
                condition = delete["ConditionExpression"]
                if self._table.delete(
                    self._key(batch_id), condition=condition, names=names, params=values, failure=failure
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

    # --- run marks ----------------------------------------------------------------------------

    def mark_run(self, batch_id: str, token: str, *, until: float) -> None:
        """Say that a worker runs some of the batch's work until ``until`` (or renew that)."""
        self._table.put(
            {
                "pk": batch_id,
                "sk": f"{RUN_PREFIX}{token}",
                "until": timestamp(until),
                "ttl": int(until) + _RUN_MARK_KEPT_SECONDS,
            },
            failure=f"could not mark a run of {batch_id}",
        )

    def unmark_run(self, batch_id: str, token: str) -> None:
        self._table.delete(
            self._key(batch_id, f"{RUN_PREFIX}{token}"), failure=f"could not unmark {batch_id}"
        )

    def runs_live(self, batch_id: str, now: float) -> bool:
        """Whether a worker runs some of the batch's work now: a mark not yet run out. Reads
        the marks alone (one per running chain, and those of workers that died within a
        day), strongly consistent, so a mark written before this read is seen."""
        for raw in self._table.query(
            KeyConditionExpression="pk = :pk AND begins_with(sk, :run)",
            ExpressionAttributeValues={":pk": {"S": batch_id}, ":run": {"S": RUN_PREFIX}},
            ProjectionExpression="#until",
            ExpressionAttributeNames={"#until": "until"},
            ConsistentRead=True,
        ):
            if float(from_item(raw)["until"]) > now:
                return True
        return False

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

    def count_unwritten(self, batch: BatchRecord, tally: Tally) -> bool:
        """Count, with ``tally`` each, the requests prepare never wrote: those of a batch that
        failed before they all were. Each shard's share and the record's note of it (the
        attribute ``unwritten_counted``, which only this condition reads) are one transaction,
        so they are counted once. False when
        they were counted already, or none are missing."""
        per_shard = Counter(batch.shard_of(index) for index in range(batch.written_count, batch.total))
        if not batch.prepared or not per_shard:
            return False
        table = self._table.name
        noted = Update(
            set={"unwritten_counted": True}, condition=f"{batch_exists} AND {unwritten_not_counted}"
        )
        actions = [{"Update": noted.request(table, self._key(batch.id))}]
        for shard, n in sorted(per_shard.items()):
            count = Update(add={"left": -n, **tally.counters(n)})
            actions.append({"Update": count.request(table, self._key(batch.id, shard_sk(shard)))})
        return (
            self._table.transact(actions, failure=f"could not count the unwritten requests of {batch.id}")
            is None
        )

    def put_shards(self, batch_id: str, totals: Sequence[int]) -> None:
        """Create the counter shards (idempotent: a retried prepare rewrites the same zeros)."""
        self._table.put_many(
            {"pk": batch_id, "sk": shard_sk(k), "left": left} for k, left in enumerate(totals)
        )

    def put_first_shards(
        self,
        batch_id: str,
        totals: Sequence[int],
        fields: dict[str, Any],
        *,
        from_statuses: Iterable[BatchStatus],
    ) -> bool:
        """Create the counter shards and note them in the record (``shards``, with
        ``fields``) in one transaction, only if the record notes none yet and its status is
        one of ``from_statuses``: however many steps try at once, the shards are created
        once, and nothing counted in them is ever written over. False when the record's
        condition did not hold."""
        noted = self._update(
            {"shards": len(totals), **fields},
            from_statuses,
            extra=[(shards_unset, {"#shards": "shards"}, {})],
        )
        table = self._table.name
        actions: list[dict[str, Any]] = [{"Update": noted.request(table, self._key(batch_id))}]
        actions += [
            {"Put": {"TableName": table, "Item": to_item({"pk": batch_id, "sk": shard_sk(k), "left": left})}}
            for k, left in enumerate(totals)
        ]
        return (
            self._table.transact(actions, failure=f"could not create the counter shards of {batch_id}")
            is None
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


def _result_files(record: BatchRecord) -> list[str]:
    """The result files a batch has or may yet have: those an ended batch names; both ids of
    a file batch still running or finalizing (its finalize may record either)."""
    if record.status.is_final:
        return [f for f in (record.output_file_id, record.error_file_id) if f is not None]
    if record.input_method != "file":
        return []
    return [result_file_id(record.id, kind) for kind in RESULT_KINDS]
