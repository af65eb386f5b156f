"""File records (uploaded inputs and result files) and the owner index over them."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from batchgw.domain.files import FileRecord
from batchgw.storage.dynamo import Table, Update, from_item

OWNER_INDEX = "by_owner"

# The clauses of a file record's conditional writes.
file_not_exists = "attribute_not_exists(pk)"
upload_pending = "attribute_exists(pending)"


class FileStore:
    def __init__(self, client: Any, table: str) -> None:
        self._table = Table(client, table)

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
        """Keep a tombstone, so a result file once deleted is never written again."""
        self._table.update(
            self._key(file_id),
            Update(set={"deleted": True, "ttl": ttl}),
            failure=f"could not delete {file_id}",
        )

    def complete(self, file_id: str, digest: str, ttl: int) -> bool:
        """A presigned upload arrived: record its SHA-256 and make the file usable."""
        return self._table.update(
            self._key(file_id),
            Update(set={"sha256": digest, "ttl": ttl}, remove=["pending"], condition=upload_pending),
            failure=f"could not complete {file_id}",
        )

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
