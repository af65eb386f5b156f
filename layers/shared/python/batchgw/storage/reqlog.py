"""The request log: each batch's attempt log, the log across batches, and request volume
counts.

Every upstream call is one entry: a batch's in its batch's attempt log in the requests table
(``pk`` ``<batch id>#attempts``), written in the attempt's transaction
(``batch_entry_action``) and listed across batches through the ``request_log`` index; an
interactive request's an item of its own (``rlog#interactive#<shard>``). Ids are
``<ended ms, 15 digits>#<what made it>`` over ``SHARDS`` partitions. Counts per hour
(``rmetrics#<shard>``) are summed in the process (``note``) and written at most every
``FLUSH_SECONDS`` (``flush``).

The layout, its write units and why: docs/design/ledger.md, "From the code: storage/reqlog.py".
"""

from __future__ import annotations

import random
import re
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal

from batchgw.domain.attempts import AttemptEntry, key_bound
from batchgw.storage.dynamo import Table, Update, from_item, to_item

Source = Literal["batch", "interactive"]
SOURCES: tuple[Source, ...] = ("batch", "interactive")
SHARDS = 4
HOUR_SECONDS = 3600
FLUSH_SECONDS = 5.0  # a process writes the counts it noted at most this often (and as a run ends)
_COUNTERS = {"batch": ("b", "be"), "interactive": ("i", "ie")}
# An entry's id in the list (its sort key): ended ms, then what made it.
ENTRY_ID = re.compile(r"[0-9]{15}#[!-~]{1,300}")
INDEX = "request_log"  # the requests table's index of batch entries (config.resources.REQUESTS)
INDEX_PARTITION, INDEX_SORT = "rlk", "rls"


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


def attempts_pk(batch_id: str) -> str:
    """The partition of a batch's attempt log, beside its requests."""
    return f"{batch_id}#attempts"


def index_keys(entry: AttemptEntry) -> dict[str, str]:
    """The ``request_log`` index's keys of a batch's entry, for its item in the batch's log."""
    return {INDEX_PARTITION: f"rlog#batch#{random.randrange(SHARDS)}", INDEX_SORT: entry_id(entry)}


class RequestLog:
    def __init__(self, client: Any, table: str, requests_table: str) -> None:
        self._table = Table(client, table)
        self._requests = Table(client, requests_table)
        self._lock = threading.Lock()
        self._pending: dict[tuple[Source, int], list[int]] = {}  # (source, hour): [requests, errors]
        self._flushed_at = 0.0

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

    def note(self, source: Source, entry: AttemptEntry) -> None:
        """Count ``entry`` (an ended call of ``source``), to be written with the next flush."""
        with self._lock:
            counts = self._pending.setdefault((source, int(entry.ended_at // HOUR_SECONDS)), [0, 0])
            counts[0] += 1
            counts[1] += int(is_error(entry))

    @property
    def waiting(self) -> bool:
        """Whether counts were noted that are not written yet."""
        return bool(self._pending)

    def due(self, now: float) -> bool:
        """Whether counts wait, and the last flush was ``FLUSH_SECONDS`` ago or more."""
        return self.waiting and now - self._flushed_at >= FLUSH_SECONDS

    def flush(self, now: float) -> None:
        """Write the counts noted since the last flush: an addition per hour and source, to
        one of its shards. One that cannot be written is kept for the next flush."""
        with self._lock:
            pending, self._pending = self._pending, {}
            self._flushed_at = now
        for done, ((source, hour), (n, failed)) in enumerate(pending.items()):
            requests, errors = _COUNTERS[source]
            try:
                self._table.update(
                    {"pk": {"S": f"rmetrics#{random.randrange(SHARDS)}"}, "sk": {"S": f"{hour:09d}"}},
                    Update(add={requests: n, errors: failed}),
                    failure="could not count requests",
                )
            except Exception:
                with self._lock:  # this one and those not tried yet wait for the next flush
                    for key, (more, more_failed) in list(pending.items())[done:]:
                        counts = self._pending.setdefault(key, [0, 0])
                        counts[0] += more
                        counts[1] += more_failed
                raise

    def count(self, source: Source, entries: Iterable[AttemptEntry], now: float) -> None:
        """Note ``entries`` and write them now (an interactive request's, as it is answered)."""
        for entry in entries:
            self.note(source, entry)
        self.flush(now)

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
        places: list[tuple[Table, str, str, dict[str, Any]]] = [(self._table, "pk", "sk", {})]
        if source == "batch":
            places.append((self._requests, INDEX_PARTITION, INDEX_SORT, {"IndexName": INDEX}))
        found: list[tuple[str, AttemptEntry]] = []
        for table, partition, sort, index in places:
            for shard in range(SHARDS):
                items, _ = table.query_step(
                    limit=limit + 2,  # one more than the page, and the bound BETWEEN includes
                    KeyConditionExpression="#p = :pk AND #s BETWEEN :lo AND :hi",
                    ExpressionAttributeNames={"#p": partition, "#s": sort},
                    ExpressionAttributeValues={
                        ":pk": {"S": self._pk(source, shard)},
                        ":lo": {"S": low},
                        ":hi": {"S": high},
                    },
                    ScanIndexForward=False,
                    **index,
                )
                for raw in items:
                    item = from_item(raw)
                    if item[sort] != high:  # BETWEEN includes its bound; the range does not
                        found.append((str(item[sort]), AttemptEntry.from_fields(item)))
        found.sort(key=lambda pair: pair[0], reverse=True)
        return found[:limit], len(found) > limit

    def batch_entry_action(self, entry: AttemptEntry, *, ttl: int) -> dict[str, Any]:
        """The write that logs one attempt of a batch in its batch's log (and so, through the
        index, in the log across batches), for the transaction that records it (so an attempt
        is logged exactly when its outcome is)."""
        item = {
            "pk": attempts_pk(entry.batch_id),
            "idx": entry.key,
            "ttl": ttl,
            **entry.fields(),
            **index_keys(entry),
        }
        return {"Put": {"TableName": self._requests.name, "Item": to_item(item)}}

    def batch_attempts(
        self,
        batch_id: str,
        *,
        limit: int,
        start_ms: int | None = None,
        end_ms: int | None = None,
        before_key: int | None = None,
        model: str | None = None,
        outcome: str | None = None,
        status_code: int | None = None,
    ) -> tuple[list[tuple[int, AttemptEntry]], bool]:
        """The batch's logged attempts newest first, ended in [start_ms, end_ms) and before
        the cursor ``before_key``, of that model, outcome or status code; at most ``limit``,
        and whether more follow."""
        low = key_bound(start_ms) if start_ms is not None else 0
        high = key_bound(end_ms) - 1 if end_ms is not None else 2**63 - 1
        if before_key is not None:
            high = min(high, before_key - 1)
        names = {"#k": "idx"}
        values: dict[str, Any] = {":pk": attempts_pk(batch_id), ":lo": low, ":hi": high}
        filters = []
        for name, value in (("model", model), ("outcome", outcome), ("status_code", status_code)):
            if value is not None:
                names[f"#{name}"] = name
                values[f":{name}"] = value
                filters.append(f"#{name} = :{name}")
        request: dict[str, Any] = {
            "KeyConditionExpression": "pk = :pk AND #k BETWEEN :lo AND :hi",
            "ExpressionAttributeNames": names,
            "ExpressionAttributeValues": to_item(values),
            "ScanIndexForward": False,
        }
        if filters:
            request["FilterExpression"] = " AND ".join(filters)
        found: list[tuple[int, AttemptEntry]] = []
        for raw in self._requests.query(limit=200 if filters else limit + 1, **request):
            item = from_item(raw)
            found.append((int(item["idx"]), AttemptEntry.from_fields(item)))
            if len(found) > limit:
                break
        return found[:limit], len(found) > limit
