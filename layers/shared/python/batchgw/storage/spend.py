"""What users and keys spent, per UTC day and month, in the control table.

One item per user (or key), month and shard holds the month's total and one counter per
day. A charge lands in one of ``SPEND_SHARDS`` shards (chosen by the request), so the
charges of one busy user spread over several items instead of contending for one inside
their transactions; a read sums the shards (one BatchGetItem for a user and a key).

    pk spend#user#<user id>  sk <YYYY-MM>#<shard>   mo (the month), d01 .. d31 (each day)
    pk spend#key#<key id>    sk <YYYY-MM>#<shard>

A charge is not written here on its own: ``charge_actions`` gives the updates that join
the transaction recording the attempt (``storage.requests``), so each attempt's cost is
charged exactly once, with the attempt.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from batchgw.domain.spend import Spend, day_of, month_of, next_month
from batchgw.storage.dynamo import Table, Update, from_item

SPEND_SHARDS = 8
MONTH = "mo"
_KEEP_SECONDS = 400 * 86400  # a month's counters outlive it by about a year (then TTL)


@dataclass(frozen=True, slots=True)
class Payer:
    """Who an attempt's cost is charged to: the batch's owner and the key it runs under."""

    user_id: str
    key_id: str | None


def _pk(kind: str, owner: str) -> str:
    return f"spend#{kind}#{owner}"


def _owners(payer: Payer) -> list[tuple[str, str]]:
    owners = [("user", payer.user_id)]
    if payer.key_id:
        owners.append(("key", payer.key_id))
    return owners


def shard_of(batch_id: str, index: int) -> int:
    return zlib.crc32(f"{batch_id}/{index}".encode()) % SPEND_SHARDS


class SpendStore:
    def __init__(self, client: Any, table: str) -> None:
        self._table = Table(client, table)

    def charge_actions(self, payer: Payer, nano: int, *, now: float, shard: int) -> list[dict[str, Any]]:
        """The transaction actions that charge ``nano`` to the payer's day and month."""
        if nano <= 0:
            return []
        month, day = month_of(now), day_of(now)
        ttl = next_month(now) + _KEEP_SECONDS
        actions = []
        for kind, owner in _owners(payer):
            charge = Update(
                add={MONTH: nano, day: nano},
                extra_set=["#ttl = if_not_exists(#ttl, :ttl)"],
                names={"#ttl": "ttl"},
                values={":ttl": ttl},
            )
            key = {"pk": {"S": _pk(kind, owner)}, "sk": {"S": f"{month}#{shard}"}}
            actions.append({"Update": charge.request(self._table.name, key)})
        return actions

    def keys(self, kind: str, owner: str, now: float) -> list[dict[str, Any]]:
        """The keys of every shard of the owner's month (for a BatchGetItem)."""
        month = month_of(now)
        return [
            {"pk": {"S": _pk(kind, owner)}, "sk": {"S": f"{month}#{shard}"}} for shard in range(SPEND_SHARDS)
        ]

    @staticmethod
    def total(items: Sequence[dict[str, Any]], now: float) -> Spend:
        """What the shards read add up to, today and this month."""
        day = day_of(now)
        today = sum(int(from_item(raw).get(day, 0)) for raw in items)
        month = sum(int(from_item(raw).get(MONTH, 0)) for raw in items)
        return Spend(today=today, month=month)

    def read(self, payer: Payer, now: float) -> tuple[Spend, Spend]:
        """What the user and the key were charged today and this month (one call)."""
        found = self.read_with(payer, now, [])
        return found[0], found[1]

    def read_with(
        self, payer: Payer, now: float, extra: Sequence[dict[str, Any]]
    ) -> tuple[Spend, Spend, list[dict[str, Any]]]:
        """The user's and the key's spend, and those of the ``extra`` keys of the same table
        that exist (as plain items), in one strongly consistent BatchGetItem."""
        user_keys = self.keys("user", payer.user_id, now)
        key_keys = self.keys("key", payer.key_id, now) if payer.key_id else []
        wanted = [*user_keys, *key_keys, *extra]
        items = self._table.get_many(wanted)
        by_key = {_id(raw): raw for raw in items}

        def found(keys: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
            return [by_key[_id(k)] for k in keys if _id(k) in by_key]

        extras = [from_item(raw) for raw in found(extra)]
        return self.total(found(user_keys), now), self.total(found(key_keys), now), extras


def _id(raw: dict[str, Any]) -> tuple[str, str]:
    return raw["pk"]["S"], raw["sk"]["S"]
