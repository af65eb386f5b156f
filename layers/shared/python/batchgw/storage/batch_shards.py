"""A batch's counter shards: created when its requests are written, counted as they end.

A batch's requests are counted in shards (``ctr#<k>``), each the ``left`` of its share of
the requests, so that many workers count at once without contending on one item. The
record's verbs that stop the batch mark every shard ``halt`` (``storage.batch_records``),
so a worker counting a request's end learns of it in that one write.

A shard also keeps the charges its requests' ends deferred (``domain.spend.Deferred``:
``dcost``, ``dunk``, added in the transaction that records each attempt, with whom they
charge: ``du``, ``dk``) and what of them was rolled up into that payer's spend (``rcost``,
``runk``). ``roll_up`` charges the difference and moves the rolled marks to the deferred
totals it read in one transaction, conditional on the marks it read: whoever rolls up,
however often and after whatever crash, each deferred charge reaches the spend exactly once.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from batchgw.domain.batch import SHARD_PREFIX, BatchRecord, ShardRecord, Tally, shard_of_sk, shard_sk
from batchgw.domain.errors import StorageError
from batchgw.domain.spend import Deferred
from batchgw.domain.states import BatchStatus
from batchgw.storage.batch_records import batch_exists, batch_key, record_update, shards_unset
from batchgw.storage.dynamo import Table, Update, from_item, timestamp, to_item

# A shard's deferred charges and what of them was rolled up: (known cost, unknown at its most).
DEFERRED = ("dcost", "dunk")
ROLLED = ("rcost", "runk")
PAYER = ("du", "dk")  # the batch's owner and key ("" for none)
ROLLED_AT = "rat"  # when the shard was last rolled up
# The spend's updates that charge what shards kept (user, key, known, unknown at its most).
Charge = Callable[[str, str | None, int, int], Sequence[dict[str, Any]]]
_ROLL_TRIES = 4  # reads and rolls while others roll the same shards up at once
ROLL_GROUP = 40  # shards per roll-up transaction, beside one spend update per payer (100 actions at most)


def kept_charge(deferred: Deferred | None) -> tuple[dict[str, int], dict[str, str]]:
    """What a shard's counter update adds to keep an attempt's ``deferred`` charge, and whom it
    charges (for its ``set``)."""
    if not deferred:
        return {}, {}
    amounts = (deferred.known_nano, deferred.unknown_nano)
    added = {name: amount for name, amount in zip(DEFERRED, amounts, strict=True) if amount > 0}
    return added, {PAYER[0]: deferred.user_id, PAYER[1]: deferred.key_id or ""}


# The clauses of the counter shards' conditional writes.
shard_is_empty = "#left = :zero"
shard_not_counted = "attribute_not_exists(done)"
unwritten_not_counted = "attribute_not_exists(unwritten_counted)"


class CounterShards:
    """The part of ``BatchStore`` that writes and reads the batch's counter shards."""

    _table: Table

    def shards(self, batch_id: str) -> list[ShardRecord]:
        return [
            ShardRecord.from_item(from_item(raw))
            for raw in self._table.query(
                KeyConditionExpression="pk = :pk AND begins_with(sk, :p)",
                ExpressionAttributeValues={":pk": {"S": batch_id}, ":p": {"S": SHARD_PREFIX}},
                ConsistentRead=True,
            )
        ]

    def correct_left(self, batch_id: str, shard: int, *, observed: int, actual: int) -> bool:
        """Set a shard's ``left`` to ``actual``, only if it still is ``observed`` (nothing
        was counted in it since it was read). For the reconciler, which found fewer
        unfinished requests in the shard than it counts."""
        return self._table.update(
            batch_key(batch_id, shard_sk(shard)),
            Update(
                set={"left": actual},
                condition="#left = :observed",
                names={"#left": "left"},
                values={":observed": observed},
            ),
            failure=f"could not correct shard {shard} of {batch_id}",
        )

    def count_unwritten(self, batch: BatchRecord, tally: Tally) -> bool:
        """Count, with ``tally`` each, the requests prepare never wrote: those of a batch that
        failed before they all were. Each shard's share and the record's note of it (the
        attribute ``unwritten_counted``, which only this condition reads) are one transaction,
        so they are counted once. False when
        they were counted already, or none are missing."""
        per_shard = Counter(batch.shard_of(index) for index in range(batch.written_count, batch.total))
        if not batch.prepared or not per_shard:
            return False
        table = self._table.name
        noted = Update(
            set={"unwritten_counted": True}, condition=f"{batch_exists} AND {unwritten_not_counted}"
        )
        actions = [{"Update": noted.request(table, batch_key(batch.id))}]
        for shard, n in sorted(per_shard.items()):
            count = Update(add={"left": -n, **tally.counters(n)})
            actions.append({"Update": count.request(table, batch_key(batch.id, shard_sk(shard)))})
        return (
            self._table.transact(actions, failure=f"could not count the unwritten requests of {batch.id}")
            is None
        )

    def put_shards(self, batch_id: str, totals: Sequence[int]) -> None:
        """Create the counter shards (idempotent: a retried prepare rewrites the same zeros)."""
        self._table.put_many(
            {"pk": batch_id, "sk": shard_sk(k), "left": left} for k, left in enumerate(totals)
        )

    def put_first_shards(
        self,
        batch_id: str,
        totals: Sequence[int],
        fields: dict[str, Any],
        *,
        from_statuses: Iterable[BatchStatus],
    ) -> bool:
        """Create the counter shards and note them in the record (``shards``, with
        ``fields``) in one transaction, only if the record notes none yet and its status is
        one of ``from_statuses``: however many steps try at once, the shards are created
        once, and nothing counted in them is ever written over. False when the record's
        condition did not hold."""
        noted = record_update(
            {"shards": len(totals), **fields},
            from_statuses,
            extra=[(shards_unset, {"#shards": "shards"}, {})],
        )
        table = self._table.name
        actions: list[dict[str, Any]] = [{"Update": noted.request(table, batch_key(batch_id))}]
        actions += [
            {"Put": {"TableName": table, "Item": to_item({"pk": batch_id, "sk": shard_sk(k), "left": left})}}
            for k, left in enumerate(totals)
        ]
        return (
            self._table.transact(actions, failure=f"could not create the counter shards of {batch_id}")
            is None
        )

    def count_shard_done(self, batch_id: str, shard: int) -> bool:
        """Count shard ``shard`` as finished in the record, exactly once, if nothing is left in it.

        The shard's ``done`` flag and the record's ``shards_done`` change in one
        transaction, so a crash between them cannot lose or double the count. False when
        the shard still has requests left or was counted already.
        """
        table = self._table.name
        mark_done = Update(
            set={"done": True},
            condition=f"{shard_is_empty} AND {shard_not_counted}",
            names={"#left": "left"},
            values={":zero": 0},
        )
        count_it = Update(add={"shards_done": 1}, condition=batch_exists)
        cancelled = self._table.transact(
            [
                {"Update": mark_done.request(table, batch_key(batch_id, shard_sk(shard)))},
                {"Update": count_it.request(table, batch_key(batch_id))},
            ],
            failure=f"could not finish shard {shard} of {batch_id}",
        )
        return cancelled is None

    def roll_up(
        self,
        shards: Sequence[tuple[str, int]],
        charge: Charge,
        *,
        now: float,
        unless_since: float | None = None,
        items: Sequence[dict[str, Any]] | None = None,
    ) -> tuple[int, list[tuple[str, int]]]:
        """Charge what the shards (``(batch id, k)``) deferred and was not rolled up yet:
        ``ROLL_GROUP`` of them to a transaction that moves their rolled marks (and notes
        ``now`` as when: ``rat``) with one of ``charge``'s spend updates per payer
        (``items``: the shards as just read, strongly). ``unless_since``: a shard that owes
        but was rolled up since then is left for later. Returns the nano-dollars this call
        charged (none for a shard another roll-up came first to), and the shards left."""
        charged, left = 0, []
        for start in range(0, len(shards), ROLL_GROUP):
            group = shards[start : start + ROLL_GROUP]
            read = None if items is None else items[start : start + ROLL_GROUP]
            done, skipped = self._roll_up_group(group, charge, now, unless_since, read)
            charged += done
            left += skipped
        return charged, left

    def _roll_up_group(
        self,
        group: Sequence[tuple[str, int]],
        charge: Charge,
        now: float,
        unless_since: float | None,
        items: Sequence[dict[str, Any]] | None,
    ) -> tuple[int, list[tuple[str, int]]]:
        keys = [batch_key(batch_id, shard_sk(shard)) for batch_id, shard in group]
        for _ in range(_ROLL_TRIES):
            found = items if items is not None else [from_item(raw) for raw in self._table.get_many(keys)]
            items = None
            moves: list[dict[str, Any]] = []
            left: list[tuple[str, int]] = []
            owed: dict[tuple[str, str | None], list[int]] = {}
            for item in found:
                move, payer, amounts = _roll_move(self._table.name, item, now)
                if move is None:
                    continue
                if unless_since is not None and float(item.get(ROLLED_AT, -1)) > unless_since:
                    left.append((str(item["pk"]), shard_of_sk(str(item["sk"]))))
                    continue
                moves.append(move)
                sums = owed.setdefault(payer, [0, 0])
                sums[0] += amounts[0]
                sums[1] += amounts[1]
            if not moves:
                return 0, left
            spend = [
                action
                for (user, key), (known, unknown) in owed.items()
                for action in charge(user, key, known, unknown)
            ]
            cancelled = self._table.transact(
                [*moves, *spend], failure=f"could not roll up the charges of {len(moves)} counter shards"
            )
            if cancelled is None:
                return sum(known + unknown for known, unknown in owed.values()), left
        raise StorageError(f"the charges of {len(group)} counter shards kept being rolled up by others")

    def roll_up_all(self, batch_id: str, charge: Charge, *, now: float) -> int:
        """Roll up every shard of the batch that owes its payer (``roll_up``)."""
        items = [
            from_item(raw)
            for raw in self._table.query(
                KeyConditionExpression="pk = :pk AND begins_with(sk, :p)",
                ExpressionAttributeValues={":pk": {"S": batch_id}, ":p": {"S": SHARD_PREFIX}},
                ConsistentRead=True,
            )
        ]
        shards = [(batch_id, shard_of_sk(str(item["sk"]))) for item in items]
        return self.roll_up(shards, charge, now=now, items=items)[0]


def _roll_move(
    table: str, item: dict[str, Any], now: float
) -> tuple[dict[str, Any] | None, tuple[str, str | None], tuple[int, int]]:
    """What a shard owes its payer (known, unknown), the payer, and the update that moves its
    rolled marks to what it deferred, conditional on the marks read (None: it owes nothing)."""
    deferred = [int(item.get(name, 0)) for name in DEFERRED]
    rolled = [int(item.get(name, 0)) for name in ROLLED]
    owed = (deferred[0] - rolled[0], deferred[1] - rolled[1])
    payer = str(item.get(PAYER[0], "")), str(item.get(PAYER[1], "")) or None
    if owed[0] <= 0 and owed[1] <= 0:
        return None, payer, owed
    clauses, values = [], {}
    for k, name in enumerate(ROLLED):
        if name in item:
            clauses.append(f"{name} = :was{k}")
            values[f":was{k}"] = rolled[k]
        else:
            clauses.append(f"attribute_not_exists({name})")
    marks = {**dict(zip(ROLLED, deferred, strict=True)), ROLLED_AT: timestamp(now)}
    moved = Update(set=marks, condition=" AND ".join(clauses), values=values)
    key = {"pk": {"S": str(item["pk"])}, "sk": {"S": str(item["sk"])}}
    return {"Update": moved.request(table, key)}, payer, owed
