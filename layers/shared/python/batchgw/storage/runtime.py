"""Runtime overrides in the control table, all under one partition so that one Query reads
them: ``setting#<NAME>`` (value as text), ``model#<id>`` (a model's cap),
``route#<model>#<route>`` (whether batch work may use the route) and ``accounts`` (how many
changes administrators made to accounts: ``Overrides.accounts_version``)."""

from __future__ import annotations

from typing import Any

from batchgw.domain.runtime import Overrides
from batchgw.storage.dynamo import Table, Update, from_item

PARTITION = "runtime"


class RuntimeStore:
    def __init__(self, client: Any, table: str) -> None:
        self._table = Table(client, table)

    @staticmethod
    def _key(sk: str) -> dict[str, Any]:
        return {"pk": {"S": PARTITION}, "sk": {"S": sk}}

    def read(self) -> Overrides:
        """Every override, as one consistent Query."""
        found = Overrides()
        for raw in self._table.query(
            KeyConditionExpression="pk = :pk",
            ExpressionAttributeValues={":pk": {"S": PARTITION}},
            ConsistentRead=True,
        ):
            item = from_item(raw)
            kind, _, rest = str(item["sk"]).partition("#")
            if kind == "setting":
                found.settings[rest] = str(item["value"])
            elif kind == "model":
                found.caps[rest] = int(item["cap"])
            elif kind == "accounts":
                found.accounts_version = int(item.get("version", 0))
            elif kind == "route":
                model, _, route = rest.rpartition("#")
                found.routes[(model, route)] = bool(item["allowed"])
        return found

    def note_accounts_changed(self) -> None:
        """Count one more change to accounts (every process forgets its cached keys)."""
        self._table.update(
            self._key("accounts"), Update(add={"version": 1}), failure="could not count an account change"
        )

    def set_setting(self, name: str, text: str, *, by: str, now: float) -> None:
        self._put(f"setting#{name}", {"value": text, "updated_by": by, "updated_at": int(now)})

    def reset_setting(self, name: str) -> bool:
        """Remove a setting's override; False when it had none."""
        return self._table.delete(
            self._key(f"setting#{name}"), condition="attribute_exists(pk)", failure=f"could not reset {name}"
        )

    def set_cap(self, model: str, cap: int | None, *, by: str, now: float) -> None:
        """A model's own cap, or none (it takes BATCH_MODEL_CONCURRENCY)."""
        if cap is None:
            self._table.delete(self._key(f"model#{model}"), failure=f"could not reset the cap of {model}")
        else:
            self._put(f"model#{model}", {"cap": cap, "updated_by": by, "updated_at": int(now)})

    def set_route(self, model: str, route: str, allowed: bool | None, *, by: str, now: float) -> None:
        """Allow or forbid batch work on a route, or let it follow its locality (None)."""
        sk = f"route#{model}#{route}"
        if allowed is None:
            self._table.delete(self._key(sk), failure=f"could not reset route {route} of {model}")
        else:
            self._put(sk, {"allowed": allowed, "updated_by": by, "updated_at": int(now)})

    def _put(self, sk: str, attrs: dict[str, Any]) -> None:
        self._table.put({"pk": PARTITION, "sk": sk, **attrs}, failure=f"could not store {sk}")
