"""File records (uploaded inputs and result files) and the owner index over them.

An input file's bytes count against its owner's storage limit (``storage.usage``) from
the transaction that makes it usable (``create_counted``, ``complete_counted``) to the one
that deletes it (``delete_counted``) or, with no write, the end of its expiry hour.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import replace
from typing import Any

from batchgw.domain.errors import StorageError
from batchgw.domain.files import UNLISTED_KEY, FileRecord
from batchgw.domain.usage import OverLimit
from batchgw.storage.dynamo import Table, Update, from_item, to_item
from batchgw.storage.usage import UsageStore

OWNER_INDEX = "by_owner"
_LISTED_KEY = "created_key"  # the owner index's sort key
_LISTED, _UNLISTED = "#listed", "#unlisted"
# A page reads one more file than it shows (to know whether more follow); a step that found
# records it cannot show reads at least this many next.
FILTERED_STEP = 100

# The clauses of a file record's conditional writes.
file_not_exists = "attribute_not_exists(pk)"
upload_pending = "attribute_exists(pending)"
file_not_deleted = "attribute_not_exists(deleted)"
# ... and of a list page's filter: a file the owner can read.
not_deleted = "attribute_not_exists(#d)"  # an older tombstone, still in the owner index
completed = "attribute_not_exists(#p)"
not_expired = "(attribute_not_exists(#e) OR #e > :now)"


_USAGE_TRIES = 5  # charges tried again while the owner's usage keeps changing
TOMBSTONE_KEPT_SECONDS = 30 * 86400  # a deleted file's id is not used again for this long


class FileStore:
    def __init__(self, client: Any, table: str, usage: UsageStore) -> None:
        self._table = Table(client, table)
        self._usage = usage

    @staticmethod
    def _key(file_id: str) -> dict[str, Any]:
        return {"pk": {"S": file_id}}

    def create(self, record: FileRecord) -> bool:
        """Store a file record; False if one with that id exists (or was deleted) already."""
        return self._table.put(
            record.to_item(), condition=file_not_exists, failure=f"could not store {record.id}"
        )

    def get(self, file_id: str) -> FileRecord | None:
        item = self._table.get(self._key(file_id))
        return None if item is None else FileRecord.from_item(item)

    def mark_deleted(self, file_id: str, ttl: int) -> None:
        """Keep a tombstone, so a result file once deleted is never written again.

        The tombstone leaves the owner index: its ``created_key`` moves to ``unlisted_key``
        (the index skips an item without its sort key), so deleted files never lie in the way
        of a list page. Deleting again leaves it as it is."""
        self._table.update(self._key(file_id), _tombstone(ttl), failure=f"could not delete {file_id}")

    def tombstone_actions(self, file_ids: Sequence[str], *, owner: str, now: float) -> list[dict[str, Any]]:
        """The transaction actions that make each of ``file_ids`` (a batch's result files) a
        tombstone, to join the write that deletes their batch: from that write on they read
        as not found on every route and are out of the owner's list.

        A live record becomes a tombstone (as ``mark_deleted``); a record that is not there
        yet is put as one, only while it is still not there: a result file that its batch's
        finalize records meanwhile fails the transaction (read again, tried again), and one
        it records later finds the tombstone (``create``) and is never written. A file
        tombstoned already needs nothing."""
        ttl = int(now) + TOMBSTONE_KEPT_SECONDS
        actions: list[dict[str, Any]] = []
        for file_id in file_ids:
            record = self.get(file_id)
            if record is not None and record.deleted:
                continue
            if record is not None:
                update = _tombstone(ttl, condition="attribute_exists(pk)")
                actions.append({"Update": update.request(self._table.name, self._key(file_id))})
                continue
            tombstone = FileRecord(
                id=file_id,
                owner=owner,
                bytes=0,
                created_at=int(now),
                created_key="",
                filename="",
                purpose="batch_output",
                deleted=True,
                ttl=ttl,
            ).to_item()
            tombstone[UNLISTED_KEY] = tombstone.pop("created_key")  # out of the owner index
            actions.append(
                {
                    "Put": {
                        "TableName": self._table.name,
                        "Item": to_item(tombstone),
                        "ConditionExpression": file_not_exists,
                    }
                }
            )
        return actions

    # --- input files counted in their owner's usage ---------------------------------------------

    def create_counted(self, record: FileRecord, *, limit: int, now: float) -> OverLimit | None:
        """Store a new input file's record with its bytes counted in its owner's usage, in one
        transaction; OverLimit (nothing stored) when they would take the owner's input files
        over ``limit`` bytes. Raises StorageError if a record with its id exists."""
        counted = replace(record, counted=True)
        put = {
            "Put": {
                "TableName": self._table.name,
                "Item": to_item(counted.to_item()),
                "ConditionExpression": file_not_exists,
            }
        }
        refused = self._charge(record, put, limit=limit, now=now)
        if refused is False:
            raise StorageError(f"file {record.id} exists already")
        return refused if isinstance(refused, OverLimit) else None

    def complete_counted(
        self, record: FileRecord, digest: str, ttl: int, *, limit: int, now: float
    ) -> OverLimit | None:
        """A presigned upload arrived: record its SHA-256 and make the file usable, with its
        bytes counted in its owner's usage, in one transaction (once: only while the upload is
        pending: a second completion finds it done and changes nothing). OverLimit (nothing
        changed) when they would take the owner's input files over ``limit`` bytes."""
        complete = Update(
            set={"sha256": digest, "ttl": ttl, "counted": True}, remove=["pending"], condition=upload_pending
        )
        refused = self._charge(
            record, {"Update": complete.request(self._table.name, self._key(record.id))}, limit=limit, now=now
        )
        return refused if isinstance(refused, OverLimit) else None

    def delete_counted(self, record: FileRecord, ttl: int) -> None:
        """Keep a tombstone (as ``mark_deleted``), and take the file's bytes off its owner's
        usage in the same transaction, once: only if it was not deleted already, and only if
        its expiry hour was not dropped already (its bytes left the count then)."""
        if not record.counted or record.expires_at is None:
            self.mark_deleted(record.id, ttl)
            return
        tombstone = _tombstone(ttl, condition=file_not_deleted)
        release = UsageStore.release_file(size=record.bytes, expires_at=record.expires_at)
        cancelled = self._table.transact(
            [
                {"Update": tombstone.request(self._table.name, self._key(record.id))},
                self._usage.action(record.owner, release),
            ],
            failure=f"could not delete {record.id}",
        )
        if cancelled is not None and not cancelled.failed(0):
            self.mark_deleted(record.id, ttl)  # its hour was dropped: nothing left to release

    def _charge(
        self, record: FileRecord, action: dict[str, Any], *, limit: int, now: float
    ) -> OverLimit | bool:
        """Run ``action`` (a conditional write of ``record``) with its bytes charged to its
        owner's usage, in one transaction, dropping the expired hours first when there are
        any. True when done, OverLimit when over ``limit``, False when ``action``'s own
        condition did not hold."""
        assert record.expires_at is not None  # an input file expires
        most_bytes = limit - record.bytes
        for _ in range(_USAGE_TRIES):
            if most_bytes >= 0:
                charge = UsageStore.charge_file(
                    size=record.bytes, expires_at=record.expires_at, most_bytes=most_bytes, now=now
                )
                cancelled = self._table.transact(
                    [action, self._usage.action(record.owner, charge)],
                    failure=f"could not count {record.id}",
                )
                if cancelled is None:
                    return True
                if cancelled.failed(0):
                    return False
            usage = self._usage.read(record.owner)
            if usage.drop_due(now):
                self._usage.drop_due_hours(record.owner, usage, now)
                continue
            if most_bytes < 0 or usage.file_bytes > most_bytes:
                return OverLimit("file_bytes", usage.file_bytes + record.bytes)
        raise StorageError(f"the usage of {record.owner} kept changing")

    def for_owner(self, owner: str) -> Iterator[FileRecord]:
        """The owner's files not deleted (pending and expired ones included), newest first."""
        for raw in self._table.query(
            IndexName=OWNER_INDEX,
            KeyConditionExpression="#o = :o",
            FilterExpression="attribute_not_exists(deleted)",
            ExpressionAttributeNames={"#o": "owner"},
            ExpressionAttributeValues={":o": {"S": owner}},
            ScanIndexForward=False,
        ):
            yield FileRecord.from_item(from_item(raw))

    def listed(
        self,
        owner: str,
        *,
        limit: int,
        now: float,
        ascending: bool = False,
        after_key: str | None = None,
        purpose: str | None = None,
    ) -> tuple[list[FileRecord], bool]:
        """A page of the owner's files that can be read at ``now`` (completed, not deleted, not
        expired; of ``purpose`` if given), newest first (oldest first if ``ascending``), after
        the owner-index key ``after_key``: at most ``limit``, and whether more follow.

        Reads the owner index in steps, each asking for what the page still needs plus one;
        the filter drops what cannot be shown. Deleted files are not in the index
        (``mark_deleted``); what else may lie in the way is bounded by the retention rules (an
        expired file until DynamoDB's TTL removes it a day later, an upload never completed
        for a day), or is a file of another purpose than the one asked for.
        """
        names = {"#o": "owner", "#d": "deleted", "#p": "pending", "#e": "expires_at"}
        values: dict[str, Any] = {":o": owner, ":now": now}
        key_condition = "#o = :o"
        if after_key is not None:
            names["#k"] = _LISTED_KEY
            values[":k"] = after_key
            key_condition += f" AND #k {'>' if ascending else '<'} :k"
        shown = f"{not_deleted} AND {completed} AND {not_expired}"
        if purpose is not None:
            names["#pu"] = "purpose"
            values[":pu"] = purpose
            shown += " AND #pu = :pu"
        request: dict[str, Any] = {
            "IndexName": OWNER_INDEX,
            "KeyConditionExpression": key_condition,
            "FilterExpression": shown,
            "ExpressionAttributeNames": names,
            "ExpressionAttributeValues": to_item(values),
            "ScanIndexForward": ascending,
        }
        found: list[FileRecord] = []
        start: dict[str, Any] | None = None
        step = limit + 1
        while True:
            items, start = self._table.query_step(limit=step, start=start, **request)
            found += (FileRecord.from_item(from_item(raw)) for raw in items)
            if len(found) > limit or start is None:
                return found[:limit], len(found) > limit
            step = max(limit + 1 - len(found), FILTERED_STEP)


def _tombstone(ttl: int, *, condition: str | None = None) -> Update:
    """A file's tombstone (see ``FileStore.mark_deleted``), under ``condition`` if given."""
    return Update(
        set={"deleted": True, "ttl": ttl},
        extra_set=[f"{_UNLISTED} = if_not_exists({_LISTED}, {_UNLISTED})"],
        remove=[_LISTED_KEY],
        condition=condition,
        names={_UNLISTED: UNLISTED_KEY, _LISTED: _LISTED_KEY},
    )
