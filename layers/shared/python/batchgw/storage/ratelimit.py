"""Each API key's request bucket, in the control table: one conditional update per request.

    pk rate#<key id>   sk bucket   tat (see ``domain.rates``), ttl

A bucket is in one of two shapes, and each has its write:

- busy (``tat`` at or after ``now``): ``tat = tat + interval`` if ``now <= tat <= now +
  tolerance`` (``tat_within_tolerance``);
- idle (no item, or ``tat`` before ``now``): ``tat = now + interval`` if the bucket is still
  idle (``bucket_idle``).

This process remembers where it last saw each key's bucket and writes the shape it
expects, so a request makes one call. When the guess is wrong (another process moved the
bucket, or it went idle) the refused write returns the bucket as it is, which says
whether the request is over the rate (no further call) or which write to make instead.
Every process and Lambda instance shares the one bucket; nothing is kept per process but
the guess.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from decimal import Decimal
from typing import Any

from batchgw.domain.rates import RateRule
from batchgw.storage.dynamo import Table, Update

# The clauses of a bucket's conditional writes.
tat_within_tolerance = "tat BETWEEN :now AND :latest"
bucket_idle = "attribute_not_exists(tat) OR tat < :now"

_REMEMBERED_KEYS = 4096  # where this process last saw a bucket: a guess, bounded
_TRIES = 4  # writes per request at most, when other processes keep moving the bucket
_KEEP_SECONDS = 3600  # an idle bucket's item outlives it by this much (then TTL)


def _number(seconds: float) -> Decimal:
    return Decimal(str(round(seconds, 6)))


class RateLimiter:
    def __init__(self, client: Any, table: str) -> None:
        self._table = Table(client, table)
        self._seen: OrderedDict[str, float] = OrderedDict()  # key id -> the bucket's tat

    @staticmethod
    def _key(key_id: str) -> dict[str, Any]:
        return {"pk": {"S": f"rate#{key_id}"}, "sk": {"S": "bucket"}}

    def take(self, key_id: str, rule: RateRule, clock: Callable[[], float]) -> int | None:
        """Take one token of ``key_id``'s bucket: None when taken, else the whole seconds
        (at least one) until the bucket takes a request again.

        A refused write is judged by the clock read after it came back, not the one it was
        sent with: under load a write can wait behind others that moved the bucket on, and
        a request must not be refused for time it spent queued."""
        now = clock()
        busy = self._seen.get(key_id, now - 1) >= now
        for _ in range(_TRIES):
            update = self._busy_write(rule, now) if busy else self._idle_write(rule, now)
            after, before = self._table.update_returning(
                self._key(key_id), update, failure=f"could not take a request of key {key_id}"
            )
            if after is not None:
                self._remember(key_id, float(after["tat"]))
                return None
            now = clock()
            tat = None if before is None or "tat" not in before else float(before["tat"])
            if tat is not None:
                self._remember(key_id, tat)
                if not rule.taken(tat, now):
                    return rule.retry_after(tat, now)
            busy = tat is not None and tat >= now
        return 1  # the bucket moved under every write: as good as full

    @staticmethod
    def _busy_write(rule: RateRule, now: float) -> Update:
        return Update(
            extra_set=["tat = tat + :interval"],
            set={"ttl": int(now + rule.tolerance) + _KEEP_SECONDS},
            condition=tat_within_tolerance,
            values={
                ":interval": _number(rule.interval),
                ":now": _number(now),
                ":latest": _number(now + rule.tolerance),
            },
        )

    @staticmethod
    def _idle_write(rule: RateRule, now: float) -> Update:
        return Update(
            set={"tat": _number(rule.next_tat(None, now)), "ttl": int(now) + _KEEP_SECONDS},
            condition=bucket_idle,
            values={":now": _number(now)},
        )

    def _remember(self, key_id: str, tat: float) -> None:
        self._seen[key_id] = tat
        self._seen.move_to_end(key_id)
        while len(self._seen) > _REMEMBERED_KEYS:
            self._seen.popitem(last=False)
