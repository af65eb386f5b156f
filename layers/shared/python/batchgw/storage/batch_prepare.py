"""Prepare's lease on a batch's request writes: one prepare invocation writes them at a time.

The lease is two attributes of the batch's record (``prep_owner``, ``prep_until``), taken
when free or run out, renewed by its holder while it writes, given up when it is done
(``run.prepare_lease`` holds it).
"""

from __future__ import annotations

from batchgw.domain.batch import BatchRecord
from batchgw.storage.batch_records import batch_key, record_update
from batchgw.storage.dynamo import Table, timestamp

# The clauses of the lease's conditional writes.
prepare_free = "(attribute_not_exists(prep_until) OR prep_until < :now)"
prepare_is_mine = "prep_owner = :me"


class PrepareLease:
    """The part of ``BatchStore`` that takes, renews and gives up prepare's lease."""

    _table: Table

    def take_prepare(self, batch_id: str, owner: str, *, now: float, until: float) -> BatchRecord | None:
        """Give ``owner`` (one prepare invocation) the lease on the batch's request writes
        until ``until``, if no other holds it: the record after, or None (held by another,
        or the batch is gone)."""
        update = record_update(
            {"prep_owner": owner, "prep_until": timestamp(until)},
            None,
            extra=[(prepare_free, {}, {":now": timestamp(now)})],
        )
        after, _ = self._table.update_returning(
            batch_key(batch_id), update, failure=f"could not take the prepare lease of {batch_id}"
        )
        return None if after is None else BatchRecord.from_item(after)

    def renew_prepare(self, batch_id: str, owner: str, *, until: float) -> bool:
        """Hold the lease on to ``until``: False when ``owner`` no longer holds it (another
        invocation took it once it ran out)."""
        update = record_update(
            {"prep_until": timestamp(until)}, None, extra=[(prepare_is_mine, {}, {":me": owner})]
        )
        return self._table.update(
            batch_key(batch_id), update, failure=f"could not renew the prepare lease of {batch_id}"
        )

    def release_prepare(self, batch_id: str, owner: str) -> bool:
        """Give the lease up, if ``owner`` holds it (its writes are over)."""
        update = record_update(
            {}, None, remove=["prep_owner", "prep_until"], extra=[(prepare_is_mine, {}, {":me": owner})]
        )
        return self._table.update(
            batch_key(batch_id), update, failure=f"could not release the prepare lease of {batch_id}"
        )
