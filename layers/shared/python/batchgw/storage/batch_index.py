"""The owner index over batch records: an owner's batches, newest first, page by page."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from batchgw.domain.batch import KEYS_END, RESPONSE_KEYS, BatchRecord, created_bound
from batchgw.storage.dynamo import Table, from_item, one_of, to_item

OWNER_INDEX = "by_owner"


@dataclass(frozen=True, slots=True)
class OwnerPage:
    """A page of an owner's batches, newest first, and whether more follow. ``read_to`` is
    set when the page stopped at its read bound before it was full: the owner-index key of
    the last batch read, where the next page goes on (the cursor a batch id makes)."""

    records: list[BatchRecord]
    more: bool
    read_to: str | None = None


class OwnerIndex:
    """The part of ``BatchStore`` that lists an owner's batches (the ``by_owner`` index)."""

    _table: Table

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
        responses: bool = False,
    ) -> OwnerPage:
        """The owner's batches newest first: at most ``limit`` records, and whether more follow.

        ``before_key`` is a cursor (an owner-index key; the list starts after it);
        ``created_after`` / ``created_before`` are exclusive bounds in unix seconds. With
        ``most_read``, a status filter reads at most about that many of the owner's batches
        (DynamoDB reads every batch the filter drops): a page that stops there says where
        the next one goes on (``OwnerPage.read_to``). With ``responses``, the owner's
        background responses instead (``domain.batch.RESPONSE_KEYS``)."""
        names = {"#o": "owner", "#k": "created_key"}
        values: dict[str, Any] = {":o": owner}
        first = RESPONSE_KEYS if responses else None
        upper = before_key or (first or "") + KEYS_END
        if created_before is not None:
            bound = created_bound(created_before, responses=responses)  # strictly before
            upper = min(bound, upper)
        lower = first  # strictly after created_after:
        if created_after is not None:
            lower = created_bound(created_after + 1, responses=responses)
        values[":hi"] = upper
        if lower is not None:
            key_condition = "#o = :o AND #k BETWEEN :lo AND :hi"
            values[":lo"] = lower
        else:
            key_condition = "#o = :o AND #k < :hi"
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
                if item["created_key"] >= upper:
                    continue
                found.append(BatchRecord.from_item(item))
                if len(found) > limit:
                    return OwnerPage(found[:limit], True)
            if start is None:
                return OwnerPage(found, False)
            if most_read is not None and statuses and read >= most_read:
                return OwnerPage(found, True, read_to=str(from_item(start)["created_key"]))
