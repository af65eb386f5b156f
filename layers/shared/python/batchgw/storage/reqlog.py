"""The request log across batches, and request volume counts, in the control table.

Every upstream call is one entry, whatever batch made it, or none (an interactive request):

- ``pk`` ``rlog#<source>#<shard>`` (source ``batch`` or ``interactive``; ``SHARDS``
  partitions each, so no one partition takes every write), ``sk`` ``<ended ms, 15
  digits>#<what made it>``: a list newest first reads each shard's newest and merges them,
  ``SHARDS`` queries a page whatever the time range; ``ttl`` its retention.
- A batch's entry is written in the transaction that records its attempt (as its own
  batch's log is); an interactive request's once it is answered.

Counts per hour: ``pk`` ``rmetrics#<shard>``, ``sk`` the hour (hours since the epoch),
``b`` / ``be`` (batch requests, of them errors) and ``i`` / ``ie`` (interactive). Added to
after the entry is written, outside its transaction (a counter every worker adds to would
make transactions conflict): a count lost to a crash between the two is a count, never a
request or a charge. A range of hours is ``SHARDS`` queries.
"""

from __future__ import annotations

import random
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal

from batchgw.domain.attempts import AttemptEntry
from batchgw.storage.dynamo import Table, Update, from_item, to_item

Source = Literal["batch", "interactive"]
SOURCES: tuple[Source, ...] = ("batch", "interactive")
SHARDS = 4
HOUR_SECONDS = 3600
_COUNTERS = {"batch": ("b", "be"), "interactive": ("i", "ie")}
# An entry's id in the list (its sort key): ended ms, then what made it.
ENTRY_ID = re.compile(r"[0-9]{15}#[!-~]{1,300}")


@dataclass(frozen=True, slots=True)
class HourCounts:
    batch: int = 0
    batch_errors: int = 0
    interactive: int = 0
    interactive_errors: int = 0


def entry_id(entry: AttemptEntry) -> str:
    """The entry's sort key: when it ended, then its batch, request and attempt (unique)."""
    made_by = f"{entry.batch_id}#{entry.index}#{entry.attempt}" if entry.batch_id else entry.custom_id
    return f"{int(entry.ended_at * 1000):015d}#{made_by}"


def is_error(entry: AttemptEntry) -> bool:
    return entry.outcome != "success"


class RequestLog:
    def __init__(self, client: Any, table: str) -> None:
        self._table = Table(client, table)

    @staticmethod
    def _pk(source: Source, shard: int) -> str:
        return f"rlog#{source}#{shard}"

    def entry_action(self, source: Source, entry: AttemptEntry, *, ttl: int) -> dict[str, Any]:
        """The write that logs ``entry``, for the transaction that records it."""
        item = {
            "pk": self._pk(source, random.randrange(SHARDS)),
            "sk": entry_id(entry),
            "ttl": ttl,
            **entry.fields(),
        }
        return {"Put": {"TableName": self._table.name, "Item": to_item(item)}}

    def log(self, source: Source, entry: AttemptEntry, *, ttl: int) -> None:
        """Log ``entry`` on its own (an interactive request's)."""
        self._table.client.put_item(**self.entry_action(source, entry, ttl=ttl)["Put"])

    def count(self, source: Source, entries: Iterable[AttemptEntry]) -> None:
        """Add ``entries`` (ended requests of ``source``) to their hours' counts."""
        by_hour: dict[int, list[int]] = {}
        for entry in entries:
            counts = by_hour.setdefault(int(entry.ended_at // HOUR_SECONDS), [0, 0])
            counts[0] += 1
            counts[1] += int(is_error(entry))
        requests, errors = _COUNTERS[source]
        for hour, (n, failed) in by_hour.items():
            self._table.update(
                {"pk": {"S": f"rmetrics#{random.randrange(SHARDS)}"}, "sk": {"S": f"{hour:09d}"}},
                Update(add={requests: n, errors: failed}),
                failure="could not count requests",
            )

    def hours(self, first: int, last: int) -> dict[int, HourCounts]:
        """The counts of each hour from ``first`` to ``last`` (inclusive) that has any."""
        totals: dict[int, list[int]] = {}
        for shard in range(SHARDS):
            for raw in self._table.query(
                KeyConditionExpression="pk = :pk AND sk BETWEEN :lo AND :hi",
                ExpressionAttributeValues={
                    ":pk": {"S": f"rmetrics#{shard}"},
                    ":lo": {"S": f"{first:09d}"},
                    ":hi": {"S": f"{last:09d}"},
                },
            ):
                item = from_item(raw)
                sums = totals.setdefault(int(item["sk"]), [0, 0, 0, 0])
                for position, name in enumerate(("b", "be", "i", "ie")):
                    sums[position] += int(item.get(name, 0))
        return {hour: HourCounts(*sums) for hour, sums in totals.items()}

    def page(
        self, source: Source, *, start_ms: int, end_ms: int, before: str | None, limit: int
    ) -> tuple[list[tuple[str, AttemptEntry]], bool]:
        """``source``'s entries ended in [start_ms, end_ms), newest first, before the id
        ``before``: at most ``limit``, and whether more follow."""
        low = f"{start_ms:015d}#"
        high = f"{end_ms:015d}#"  # every id of end_ms sorts after it: excluded
        if before is not None and before < high:
            high = before
        found: list[tuple[str, AttemptEntry]] = []
        for shard in range(SHARDS):
            items, _ = self._table.query_step(
                limit=limit + 2,  # one more than the page, and the bound BETWEEN includes
                KeyConditionExpression="pk = :pk AND sk BETWEEN :lo AND :hi",
                ExpressionAttributeValues={
                    ":pk": {"S": self._pk(source, shard)},
                    ":lo": {"S": low},
                    ":hi": {"S": high},
                },
                ScanIndexForward=False,
            )
            for raw in items:
                item = from_item(raw)
                if item["sk"] != high:  # BETWEEN includes its bound; the range does not
                    found.append((str(item["sk"]), AttemptEntry.from_fields(item)))
        found.sort(key=lambda pair: pair[0], reverse=True)
        return found[:limit], len(found) > limit
