"""What users and keys spent, per UTC day and month, in the control table.

    pk spend#user#<user id>  sk <YYYY-MM>#<key id>#<shard>   mo (the month), d01 .. d31

One item per user, key, month and shard (``SPEND_SHARDS``, so one busy key's charges do not
contend for one item); a user's spend is one strongly consistent Query of their partition.
A batch's charge joins the transaction that records its attempt (``charge_actions``), or the
roll-up of its shard (``run.charges``); an interactive request is charged on its own
(``charge``). A batch stored without a key is charged under the key id ``-``.

Why the items are laid out so: docs/design/ledger.md, "From the code: storage/spend.py".
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from batchgw.domain.accounts import KeyRecord, UserRecord
from batchgw.domain.errors import StorageError
from batchgw.domain.spend import (
    PauseReason,
    Spend,
    day_of,
    month_of,
    needs_spend,
    next_month,
    room_left,
    used_up,
)
from batchgw.storage.accounts import AccountStore
from batchgw.storage.batches import BatchStore
from batchgw.storage.dynamo import Table, Update, from_item
from batchgw.storage.slots import Hold, UserSlotStore

SPEND_SHARDS = 8
MONTH = "mo"
# Beside each counter, the part of it that attempts of unknown cost hold at their reservation.
UNKNOWN = "x"
_KEEP_SECONDS = 400 * 86400  # a month's counters outlive it by about a year (then TTL)


@dataclass(frozen=True, slots=True)
class Payer:
    """Who an attempt's cost is charged to: the batch's owner and the key it runs under."""

    user_id: str
    key_id: str | None


def _pk(user_id: str) -> str:
    return f"spend#user#{user_id}"


NO_KEY = "-"  # the key id of a batch stored without one


def _sk(month: str, key_id: str | None, shard: int) -> str:
    return f"{month}#{key_id or NO_KEY}#{shard}"


def _key_of(sk: str) -> str:
    return sk.split("#")[1]


def shard_of(batch_id: str, index: int) -> int:
    return zlib.crc32(f"{batch_id}/{index}".encode()) % SPEND_SHARDS


class SpendStore:
    def __init__(self, client: Any, table: str) -> None:
        self._table = Table(client, table)

    def charge_actions(
        self, payer: Payer, nano: int, *, now: float, shard: int, unknown_nano: int = 0
    ) -> list[dict[str, Any]]:
        """The transaction action that charges ``nano`` to the payer's day and month, and
        ``unknown_nano`` (what attempts of unknown cost could have cost) both there and apart."""
        if nano <= 0 and unknown_nano <= 0:
            return []
        key, charge = self._charge(payer, nano, unknown_nano, now, shard)
        return [{"Update": charge.request(self._table.name, key)}]

    def charge(self, payer: Payer, nano: int, *, now: float, shard: int, unknown_nano: int = 0) -> None:
        """Charge ``nano`` (and ``unknown_nano``) to the payer's day and month, on its own (one
        UpdateItem)."""
        if nano > 0 or unknown_nano > 0:
            key, charge = self._charge(payer, nano, unknown_nano, now, shard)
            self._table.update(key, charge, failure=f"could not charge {payer.user_id}")

    @staticmethod
    def _charge(
        payer: Payer, nano: int, unknown: int, now: float, shard: int
    ) -> tuple[dict[str, Any], Update]:
        month, day = month_of(now), day_of(now)
        added = {MONTH: max(0, nano) + max(0, unknown), day: max(0, nano) + max(0, unknown)}
        if unknown > 0:
            added |= {UNKNOWN + MONTH: unknown, UNKNOWN + day: unknown}
        charge = Update(
            add=added,
            extra_set=["#ttl = if_not_exists(#ttl, :ttl)"],
            names={"#ttl": "ttl"},
            values={":ttl": next_month(now) + _KEEP_SECONDS},
        )
        return {"pk": {"S": _pk(payer.user_id)}, "sk": {"S": _sk(month, payer.key_id, shard)}}, charge

    @staticmethod
    def total(items: Sequence[dict[str, Any]], now: float) -> Spend:
        """What the items read add up to, today and this month."""
        day = day_of(now)
        plain = [from_item(raw) for raw in items]

        def summed(name: str) -> int:
            return sum(int(item.get(name, 0)) for item in plain)

        return Spend(
            today=summed(day),
            month=summed(MONTH),
            unknown_today=summed(UNKNOWN + day),
            unknown_month=summed(UNKNOWN + MONTH),
        )

    def read(self, payer: Payer, now: float) -> tuple[Spend, Spend]:
        """What the user and the key were charged today and this month (one Query)."""
        items = list(
            self._table.query(
                KeyConditionExpression="pk = :pk AND begins_with(sk, :month)",
                ExpressionAttributeValues={
                    ":pk": {"S": _pk(payer.user_id)},
                    ":month": {"S": f"{month_of(now)}#"},
                },
                ConsistentRead=True,
            )
        )
        key_id = payer.key_id or NO_KEY
        keys = [raw for raw in items if _key_of(raw["sk"]["S"]) == key_id]
        return self.total(items, now), self.total(keys, now)

    def read_with(
        self, payer: Payer, now: float, extra: Sequence[dict[str, Any]]
    ) -> tuple[Spend, Spend, list[dict[str, Any]]]:
        """The user's and the key's spend, and those of the ``extra`` keys of the same table
        that exist (as plain items): a BatchGetItem, then a Query, both strongly consistent.
        The extras (a slot map's reservations) are read first: a request charged and then
        released between the reads counts in both, never in neither."""
        extras = [from_item(raw) for raw in self._table.get_many(list(extra))] if extra else []
        user, key = self.read(payer, now)
        return user, key, extras


def used_up_now(accounts: AccountStore, spend: SpendStore, payer: Payer, now: float) -> PauseReason | None:
    """The quota or budget the payer's charges have used up (None: none, or none limits
    them): what a new batch, or an interactive request, is refused for."""
    limited = _limited(accounts, spend, payer, now)
    return None if limited is None else used_up(*limited)


def _limited(
    accounts: AccountStore, spend: SpendStore, payer: Payer, now: float
) -> tuple[UserRecord, KeyRecord, Spend, Spend] | None:
    """The payer's account, key and their spend, when a quota or budget limits them."""
    user, keys = accounts.account(payer.user_id)
    key = next((k for k in keys if k.id == payer.key_id), None)
    if user is None or key is None or not needs_spend(user, key):
        return None
    user_spend, key_spend = spend.read(payer, now)
    return user, key, user_spend, key_spend


# --- provider-run batches: accepted, not yet charged -------------------------------------------
#
# A provider-run batch's requests are not stopped one by one once its provider has them, so its
# create (or, for a file batch, its first step) checks their most cost against what is left
# (``room_after_holds``) and holds it (``reserve_provider``): a hold p:<batch id> beside the
# owner's slot map, written conditionally on the map's version, so two creates judged against
# the same holds cannot both pass. A hold counts what its batch may still cost: its most less
# what its lines were charged so far, nothing once the batch has ended or runs on the gateway
# (its requests then reserve one by one), and, for a batch never stored (its create died after
# the hold), nothing after ``PROVIDER_UNSTORED_SECONDS``. Every batch ends (and its record goes
# at last), so no hold counts for ever; one that counts for nothing is removed by the next hold.

PROVIDER_UNSTORED_SECONDS = 300  # a hold whose batch was never stored counts this long (its create died)
_RESERVE_TRIES = 8  # reads and holds while other requests of the payer keep changing the map


@dataclass(frozen=True, slots=True)
class RoomAfterHolds:
    """What the payer may still spend (None: nothing limits them), as read at slot map
    ``version``, and the provider holds that count for nothing now (``gone``)."""

    room: int | None
    version: int = 0
    gone: tuple[str, ...] = ()


def room_after_holds(
    accounts: AccountStore,
    spend: SpendStore,
    slots: UserSlotStore,
    batches: BatchStore,
    payer: Payer,
    now: float,
    *,
    besides: str | None = None,
) -> RoomAfterHolds:
    """What the payer's quotas and budgets leave for new work (a provider-run batch, or the
    console's check of a batch to come): what was charged, less the reservations of their
    requests running and what the provider batches they were accepted (other than
    ``besides``) may still cost. The slot map is read before the spend."""
    user, keys = accounts.account(payer.user_id)
    key = next((k for k in keys if k.id == payer.key_id), None)
    if user is None or key is None or not needs_spend(user, key):
        return RoomAfterHolds(None)
    held = slots.read(payer.user_id)
    user_spend, key_spend = spend.read(payer, now)
    key_id = payer.key_id or ""
    user_held, key_held = held.reserved(now), held.reserved(now, key_id=key_id)
    gone = []
    for batch_id, hold in held.provider.items():
        left = _provider_left(batches, batch_id, hold, now)
        if left is None:
            gone.append(batch_id)
        elif batch_id != besides:
            user_held += left
            key_held += left if hold.key_id == key_id else 0
    room = room_left(
        user,
        key,
        Spend(user_spend.today, user_spend.month, user_held),
        Spend(key_spend.today, key_spend.month, key_held),
    )
    return RoomAfterHolds(room, held.version, tuple(gone))


def _provider_left(batches: BatchStore, batch_id: str, hold: Hold, now: float) -> int | None:
    """What a provider-run batch's hold still counts (None: nothing, ever again)."""
    batch = batches.get(batch_id)
    if batch is None:
        return hold.reserved if hold.until >= now else None  # its create may still store it
    record = batch.record
    if record.status.is_final or not record.on_provider:
        return None
    return max(0, hold.reserved - batch.counts.cost_nano)


def reserve_provider(
    accounts: AccountStore,
    spend: SpendStore,
    slots: UserSlotStore,
    batches: BatchStore,
    payer: Payer,
    batch_id: str,
    most: int,
    now: float,
) -> tuple[bool, int | None]:
    """Hold ``most`` for provider-run batch ``batch_id`` if what is left covers it: (whether
    a hold was written, what is left when it did not cover it). Nothing is held for a payer
    no quota or budget limits: (False, None)."""
    for _ in range(_RESERVE_TRIES):
        left = room_after_holds(accounts, spend, slots, batches, payer, now, besides=batch_id)
        if left.room is None:
            return False, None
        if most > left.room:
            return False, left.room
        hold = Hold(until=now + PROVIDER_UNSTORED_SECONDS, reserved=most, key_id=payer.key_id or "")
        if slots.hold_provider(payer.user_id, batch_id, hold, version=left.version, gone=list(left.gone)):
            return True, None
    raise StorageError(f"the reservations of {payer.user_id} kept changing")
