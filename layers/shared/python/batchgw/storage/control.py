"""The control table's small records: uploads and their parts, and hourly counters. (Model
slots and accounts live there too: see ``storage.slots`` and ``storage.accounts``.)"""

from __future__ import annotations

from typing import Any

from batchgw.storage.dynamo import Table, Update, from_item

# The clauses of the control records' conditional writes.
record_not_exists = "attribute_not_exists(pk)"
below_limit = "attribute_not_exists(n) OR n < :limit"


class ControlStore:
    """Uploads and their parts, and counters, by (pk, sk)."""

    def __init__(self, client: Any, table: str) -> None:
        self._table = Table(client, table)

    @staticmethod
    def _key(pk: str, sk: str) -> dict[str, Any]:
        return {"pk": {"S": pk}, "sk": {"S": sk}}

    def put(self, record: dict[str, Any], *, new: bool = False) -> bool:
        """Store a record; with ``new``, only if none has its key (else False)."""
        return self._table.put(
            record, condition=record_not_exists if new else None, failure=f"could not store {record['pk']}"
        )

    def get(self, pk: str, sk: str) -> dict[str, Any] | None:
        return self._table.get(self._key(pk, sk))

    def query(self, pk: str, prefix: str) -> list[dict[str, Any]]:
        """Every record under ``pk`` whose sort key starts with ``prefix``."""
        return [
            from_item(raw)
            for raw in self._table.query(
                KeyConditionExpression="pk = :pk AND begins_with(sk, :p)",
                ExpressionAttributeValues={":pk": {"S": pk}, ":p": {"S": prefix}},
                ConsistentRead=True,
            )
        ]

    def transition(self, pk: str, sk: str, fields: dict[str, Any], *, expect: dict[str, Any]) -> bool:
        """Set ``fields`` only if every ``expect`` attribute has the given value."""
        names = {f"#e{i}": name for i, name in enumerate(expect)}
        values = {f":e{i}": value for i, value in enumerate(expect.values())}
        all_as_expected = " AND ".join(f"#e{i} = :e{i}" for i in range(len(expect)))
        return self._table.update(
            self._key(pk, sk),
            Update(set=fields, condition=all_as_expected, names=names, values=values),
            failure=f"could not update {pk}",
        )

    def count_within(self, pk: str, sk: str, *, limit: int, ttl: int) -> bool:
        """Add one to a counter unless it already reached ``limit`` (then False)."""
        return self._table.update(
            self._key(pk, sk),
            Update(add={"n": 1}, set={"ttl": ttl}, condition=below_limit, values={":limit": limit}),
            failure=f"could not count {pk}",
        )
