"""Each model's adaptive limit (``domain.adaptive``) in the control table, one item per
constrained model under one partition so that one Query reads them all: ``pk = "adaptive"``,
``sk`` the model, with ``limit`` (a number), ``decreased_at`` and ``why``. A model with no
item is unconstrained.

A decrease is a conditional put (none within the cooldown of the last, whichever process
made it); an increase adds to the stored limit (increases from several processes add up),
and the item goes once the limit reaches the cap.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from batchgw.domain.adaptive import COOLDOWN_SECONDS, RECOVERING, Adaptive
from batchgw.storage.dynamo import Table, Update, from_item, timestamp

PARTITION = "adaptive"


def _number(value: float) -> Decimal:
    return Decimal(str(round(value, 6)))


class AdaptiveStore:
    def __init__(self, client: Any, table: str) -> None:
        self._table = Table(client, table)

    @staticmethod
    def _key(model: str) -> dict[str, Any]:
        return {"pk": {"S": PARTITION}, "sk": {"S": model}}

    def read(self) -> dict[str, Adaptive]:
        """Every constrained model's limit (StorageError when unreadable)."""
        found = {}
        for raw in self._table.query(
            KeyConditionExpression="pk = :pk",
            ExpressionAttributeValues={":pk": {"S": PARTITION}},
            ConsistentRead=False,  # a second old at most, read every second: half the cost
        ):
            item = from_item(raw)
            if isinstance(item.get("limit"), Decimal):
                found[str(item["sk"])] = Adaptive(
                    float(item["limit"]), float(item.get("decreased_at", 0)), str(item.get("why", ""))
                )
        return found

    def decrease(self, model: str, to: Adaptive, *, now: float, cooldown: float = COOLDOWN_SECONDS) -> bool:
        """Store a decrease; False when another came within ``cooldown`` seconds (it stands)."""
        assert to.limit is not None
        return self._table.put(
            {
                "pk": PARTITION,
                "sk": model,
                "limit": _number(to.limit),
                "decreased_at": timestamp(to.decreased_at),
                "why": to.why,
                "updated_at": timestamp(now),
            },
            condition="attribute_not_exists(pk) OR #d < :edge",
            names={"#d": "decreased_at"},
            params={":edge": timestamp(now - cooldown)},
            failure=f"could not lower the adaptive limit of {model}",
        )

    def increase(self, model: str, by: float, *, now: float) -> bool:
        """Add ``by`` to a constrained model's limit (increases from several processes add up);
        False when it has none (it was lifted meanwhile)."""
        grow = Update(
            set={"updated_at": timestamp(now), "why": RECOVERING},
            add={"limit": _number(by)},
            condition="attribute_exists(#l)",
            names={"#l": "limit"},
        )
        return self._table.update(self._key(model), grow, failure=f"could not raise the limit of {model}")

    def lift(self, model: str, *, decreased_at: float) -> bool:
        """Remove a model's limit once it has grown back to its cap, unless it was lowered
        again meanwhile (its ``decreased_at`` moved)."""
        return self._table.delete(
            self._key(model),
            condition="#d = :d",
            names={"#d": "decreased_at"},
            params={":d": timestamp(decreased_at)},
            failure=f"could not lift the adaptive limit of {model}",
        )
