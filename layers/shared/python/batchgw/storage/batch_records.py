"""A batch's record as read, and its changes: one named verb each, over conditional writes.

Every change of a batch's status is a conditional write that names the statuses it
may leave (``status_is_one_of``), so two steps racing (a cancel and the window's end,
a retried finalize) cannot both apply.

Each change of the record is a verb of the store (``cancel``, ``pause``,
``fail_for_owner``, ``reschedule``, ``mark_results_full``, ...; the generic ``_change`` is
private), and each verb says whether it stops the batch's requests from starting. One that does
(``cancel``, ``fail_for_owner``, ``start_failing``, ``start_expiring``,
``mark_results_full``, ``start_finalizing``, and ``end`` and ``delete_record`` in
``storage.batches``) also marks each of its counter shards ``halt`` in the same
transaction, and ``set_generation`` writes a new generation of its chains to them as
``gen``: a worker that records a request's end in its shard, checking the shard as it
counts, learns in that one write whether it may start the next request
(``storage.requests.RunGuard``), without reading the batch.

The named clauses of the record's conditional writes, its key and the update under them
(``record_update``) live here, for the other parts of the store (``storage.batches``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from batchgw.domain.batch import (
    RECORD_SK,
    SHARD_PREFIX,
    BatchRecord,
    CountedBatch,
    Counts,
    ScheduleChange,
    ShardRecord,
    shard_sk,
)
from batchgw.domain.errors import StorageError
from batchgw.domain.states import UNFINISHED_STATUSES, BatchStatus
from batchgw.storage.dynamo import Table, Update, from_item, one_of

# The clauses of the batch record's conditional writes.
batch_exists = "attribute_exists(pk)"
token_is_ours = "task_token = :token"
status_is = "#status = :status"
total_is = "#total = :total"
shards_unset = "attribute_not_exists(#shards)"
shards_are = "#shards = :shards"

_TRIES = 5  # a change with its shards tried again while the record's shards keep changing


def batch_key(batch_id: str, sk: str = RECORD_SK) -> dict[str, Any]:
    return {"pk": {"S": batch_id}, "sk": {"S": sk}}


def shards_clause(record: BatchRecord) -> tuple[str, dict[str, str], dict[str, Any]]:
    """The condition that the record still has the counter shards it was read with."""
    if record.shards is None:
        return shards_unset, {"#shards": "shards"}, {}
    return shards_are, {"#shards": "shards"}, {":shards": record.shards}


def record_update(
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


class BatchRecords:
    """The part of ``BatchStore`` that reads a batch's record and changes it, one verb each."""

    _table: Table

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
        item = self._table.get(batch_key(batch_id))
        return None if item is None else BatchRecord.from_item(item)

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
        update = record_update(
            {"execution_mode": "gateway", "mode_reason": reason, "batch_prices": None},
            [BatchStatus.IN_PROGRESS],
            (),
            extra=[("#em = :provider", {"#em": "execution_mode"}, {":provider": "provider"})],
        )
        after, _ = self._table.update_returning(
            batch_key(batch_id), update, failure=f"could not update {batch_id}"
        )
        return None if after is None else BatchRecord.from_item(after)

    def reschedule(self, batch_id: str, change: ScheduleChange) -> BatchRecord | None:
        """Set a batch's ``priority`` and/or ``complete_by`` (None clears it) while it has not
        reached a final status, checked in the same write: a batch that ended meanwhile is
        not written (None, as for a batch gone). No halt: it runs on."""
        return self._change(batch_id, dict(change), from_statuses=UNFINISHED_STATUSES)

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

    def clear_token(self, batch_id: str, token: str) -> None:
        """Forget a task token once used (only if it is still the one stored)."""
        self._table.update(
            batch_key(batch_id),
            Update(remove=["task_token"], condition=token_is_ours, values={":token": token}),
            failure=f"could not update {batch_id}",
        )

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
        update = record_update(fields, from_statuses, remove)
        after, _ = self._table.update_returning(
            batch_key(batch_id), update, failure=f"could not update {batch_id}"
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
        for _ in range(_TRIES):
            record = self.get_record(batch_id)
            if record is None or (statuses is not None and record.status not in statuses):
                return None
            update = record_update(fields, statuses, remove, extra=[shards_clause(record)])
            cancelled = self._table.transact(
                [
                    {"Update": update.request(self._table.name, batch_key(batch_id))},
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
            {"Update": update.request(self._table.name, batch_key(record.id, shard_sk(k)))}
            for k in range(record.shards)
        ]
