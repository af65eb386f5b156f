"""The audit log of administrators' reads of users' content, in the control table: one item
per read, under the user whose content was read (``GET /admin/audit?user=``).

- ``pk`` ``audit#<user id>``, ``sk`` ``<milliseconds, 15 digits>#<random>``: newest last;
- ``action`` (``batch.requests.read``), ``actor`` (the administrator's user id), ``key_id``
  (the key they called with), ``target`` (the batch), ``detail`` (what of it: a page's
  first and last request), ``at`` (unix seconds);
- ``ttl``: DynamoDB's expiry of the item, ``KEPT_SECONDS`` later.

An entry is written before the content it records is answered: a read that is not recorded
is not answered.
"""

from __future__ import annotations

import re
import secrets
from dataclasses import dataclass
from typing import Any

from batchgw.storage.dynamo import Table, from_item

KEPT_SECONDS = 400 * 86400  # a year and some: an audit outlives what it audits
_PK = "audit#"
ENTRY_ID = re.compile(r"[0-9]{15}#[0-9a-f]{8}")  # an entry's sort key, its id in the list


@dataclass(frozen=True, slots=True)
class AuditEntry:
    action: str
    actor: str
    key_id: str | None
    target: str
    detail: str
    at: float


class AuditLog:
    def __init__(self, client: Any, table: str) -> None:
        self._table = Table(client, table)

    def record(self, user_id: str, entry: AuditEntry) -> None:
        """Keep ``entry`` against ``user_id``, the user whose content was read."""
        self._table.put(
            {
                "pk": f"{_PK}{user_id}",
                "sk": f"{int(entry.at * 1000):015d}#{secrets.token_hex(4)}",
                "action": entry.action,
                "actor": entry.actor,
                "key_id": entry.key_id,
                "target": entry.target,
                "detail": entry.detail,
                "at": int(entry.at),
                "ttl": int(entry.at) + KEPT_SECONDS,
            },
            failure=f"could not record a read of {entry.target}",
        )

    def entries(
        self, user_id: str, *, limit: int, before: str | None = None
    ) -> tuple[list[tuple[str, AuditEntry]], str | None]:
        """``user_id``'s entries with their ids, newest first: up to ``limit`` before the id
        ``before``, and where the next page starts (None: no more)."""
        condition = "pk = :pk AND sk < :before" if before else "pk = :pk"
        values: dict[str, Any] = {":pk": {"S": f"{_PK}{user_id}"}}
        if before:
            values[":before"] = {"S": before}
        items, more = self._table.query_step(
            limit=limit,
            KeyConditionExpression=condition,
            ExpressionAttributeValues=values,
            ScanIndexForward=False,
        )
        found = [from_item(item) for item in items]
        entries = [
            (
                str(item["sk"]),
                AuditEntry(
                    action=str(item["action"]),
                    actor=str(item["actor"]),
                    key_id=item.get("key_id"),
                    target=str(item["target"]),
                    detail=str(item.get("detail", "")),
                    at=float(item["at"]),
                ),
            )
            for item in found
        ]
        return entries, (str(found[-1]["sk"]) if more and found else None)
