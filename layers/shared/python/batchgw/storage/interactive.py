"""Interactive load reports in the control table, all under one partition so that one
Query reads them: ``pk = "interactive"``, ``sk`` the reporter's id, with

- ``models``: a map of model id to the interactive requests in flight on it (a number);
- ``expires_at``: epoch seconds after which the report counts for nothing;
- ``reported_at``: epoch seconds;
- ``source``: ``shared`` (any gateway process) or ``own`` (this deployment's own routes);
- ``ttl``: DynamoDB's expiry of the item, an hour after ``expires_at`` (housekeeping only:
  readers ignore an expired report whether or not it is still stored).

``PUT /admin/interactive-load/{reporter}`` writes one; another AWS service may write the
same item itself (a ``PutItem`` with those attributes), as the README shows.
"""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal
from typing import Any

from botocore.exceptions import BotoCoreError

from batchgw.domain.errors import StorageError
from batchgw.domain.interactive import SHARED, LoadReport
from batchgw.storage.dynamo import Table, from_item, timestamp

PARTITION = "interactive"
HOUSEKEEPING_SECONDS = 3600  # how long an expired report's item is kept before DynamoDB's TTL


class InteractiveLoadStore:
    def __init__(self, client: Any, table: str) -> None:
        self._table = Table(client, table)

    def report(
        self,
        reporter: str,
        models: Mapping[str, int],
        *,
        now: float,
        ttl_seconds: float,
        source: str = SHARED,
    ) -> LoadReport:
        """Store ``reporter``'s counts, replacing its last report."""
        expires_at = now + ttl_seconds
        self._table.put(
            {
                "pk": PARTITION,
                "sk": reporter,
                "models": dict(models),
                "expires_at": timestamp(expires_at),
                "reported_at": timestamp(now),
                "source": source,
                "ttl": int(expires_at) + HOUSEKEEPING_SECONDS,
            },
            failure=f"could not store the interactive load of {reporter}",
        )
        return LoadReport(reporter, dict(models), expires_at, now, source)

    def remove(self, reporter: str) -> bool:
        """Drop ``reporter``'s report (a reporter that stops cleanly); False when it had none."""
        return self._table.delete(
            {"pk": {"S": PARTITION}, "sk": {"S": reporter}},
            condition="attribute_exists(pk)",
            failure=f"could not remove the interactive load of {reporter}",
        )

    def reports(self) -> list[LoadReport]:
        """Every stored report, live or not (one Query); StorageError when the
        table cannot be read."""
        try:
            raws = list(
                self._table.query(
                    KeyConditionExpression="pk = :pk",
                    ExpressionAttributeValues={":pk": {"S": PARTITION}},
                    ConsistentRead=False,  # a second old at most, read every second: half the cost
                )
            )
        except BotoCoreError as exc:  # no answer at all (the endpoint unreachable, a timeout)
            raise StorageError("could not read the interactive load") from exc
        found = []
        for raw in raws:
            item = from_item(raw)
            models = item.get("models")
            found.append(
                LoadReport(
                    reporter=str(item["sk"]),
                    models={
                        str(m): n
                        for m, v in (models.items() if isinstance(models, dict) else ())
                        if (n := _count(v)) > 0
                    },
                    expires_at=_number(item.get("expires_at")),
                    reported_at=_number(item.get("reported_at")),
                    source=str(item.get("source", SHARED)),
                )
            )
        return found


def _number(value: Any) -> float:
    """A stored number; 0 for anything else (an item another service wrote badly: a report
    with no readable expiry counts for nothing)."""
    return float(value) if isinstance(value, Decimal | int | float) and value == value else 0.0


def _count(value: Any) -> int:
    """A stored count of requests in flight, whole and not negative; 0 for anything else."""
    n = _number(value)
    return int(n) if 0 < n < float("inf") else 0
