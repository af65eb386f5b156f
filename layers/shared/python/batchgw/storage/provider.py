"""The parts of a batch run on its provider's batch service (``domain.provider``): one item
each beside the batch's record (``prov#<n>``), written only by its workflow's provider step,
each write conditional on the part as that step read it (a retried step that overlaps a
slow one cannot undo what the other recorded)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from batchgw.domain.provider import Part
from batchgw.storage.dynamo import Table, Update, from_item

PART_PREFIX = "prov#"
# An item of its own per provider batch a part submitted (``own``), beside no batch's record.
OWNER_PREFIX = "provider-batch#"


def part_sk(n: int) -> str:
    return f"{PART_PREFIX}{n:05d}"


class ProviderParts:
    def __init__(self, client: Any, table: str) -> None:
        self._table = Table(client, table)

    def parts(self, batch_id: str) -> list[Part]:
        """The batch's parts in order (none: not planned yet)."""
        return [
            Part.from_item({**item["part"], "version": item["v"]})
            for item in map(
                from_item,
                self._table.query(
                    KeyConditionExpression="pk = :pk AND begins_with(sk, :p)",
                    ExpressionAttributeValues={":pk": {"S": batch_id}, ":p": {"S": PART_PREFIX}},
                    ConsistentRead=True,
                ),
            )
        ]

    def part(self, batch_id: str, n: int) -> Part | None:
        """Part ``n`` of the batch as stored now (None: no such part)."""
        item = self._table.get({"pk": {"S": batch_id}, "sk": {"S": part_sk(n)}}, consistent=True)
        return None if item is None else Part.from_item({**item["part"], "version": item["v"]})

    def plan(self, batch_id: str, parts: Sequence[Part]) -> bool:
        """Store the batch's plan, once: False when a plan was stored already (by a step that
        ran before this one; read that one)."""
        for part in parts:
            stored = self._table.put(
                {"pk": batch_id, "sk": part_sk(part.n), "part": part.to_item(), "v": part.version},
                condition="attribute_not_exists(pk)",
                failure=f"could not plan {batch_id}",
            )
            if not stored and part.n == 0:
                return False
        return True

    def add(self, batch_id: str, parts: Sequence[Part]) -> bool:
        """Store parts planned after the first ones (those that run requests again): False
        when another step stored its own in their place first (read those)."""
        for part in parts:
            if not self._table.put(
                {"pk": batch_id, "sk": part_sk(part.n), "part": part.to_item(), "v": part.version},
                condition="attribute_not_exists(pk)",
                failure=f"could not plan {batch_id}",
            ):
                return False
        return True

    def save(self, batch_id: str, part: Part) -> Part | None:
        """Store ``part`` over the version it was read at: the part as stored now, or None
        when it changed meanwhile (another step's write won)."""
        after = part.replace(version=part.version + 1)
        update = Update(
            set={"part": after.to_item(), "v": after.version},
            condition="v = :v",
            values={":v": part.version},
        )
        key = {"pk": {"S": batch_id}, "sk": {"S": part_sk(part.n)}}
        saved = self._table.update(key, update, failure=f"could not save part {part.n} of {batch_id}")
        return after if saved else None

    # --- which provider batches are ours -------------------------------------------------

    @staticmethod
    def _owner_key(provider_batch_id: str) -> dict[str, Any]:
        return {"pk": {"S": f"{OWNER_PREFIX}{provider_batch_id}"}, "sk": {"S": "owner"}}

    def own(self, provider_batch_id: str, batch_id: str, part: Part, *, keep_until: float) -> None:
        """Note ``provider_batch_id`` as the batch of ``part`` (by its mark, ``ref``), before
        the part records it: a provider batch no part owns was left by a lost submit."""
        self._table.put(
            {
                **from_item(self._owner_key(provider_batch_id)),
                "batch_id": batch_id,
                "part": part.n,
                "ref": part.ref or "",
                "ttl": int(keep_until),
            },
            failure=f"could not note provider batch {provider_batch_id} as {batch_id}'s",
        )

    def owner(self, provider_batch_id: str) -> dict[str, Any] | None:
        """Whose ``provider_batch_id`` is (batch_id, part, ref), or None: nobody's."""
        return self._table.get(self._owner_key(provider_batch_id), consistent=True)
