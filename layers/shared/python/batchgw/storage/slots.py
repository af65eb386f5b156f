"""Per-model concurrency slots: self-expiring leases in one map per model.

``acquire`` adds this holder's token with an expiry while fewer than ``cap`` tokens are
present; a holder that dies leaves an entry that expires and is purged by the next
acquirer that finds the map full. Nothing leaks: every slot is a lease.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from typing import Any

from batchgw.storage.dynamo import Table, Update, timestamp

# The clauses of the slot map's conditional writes.
slots_exist = "attribute_exists(s)"
slots_not_exist = "attribute_not_exists(s)"
token_not_held = "attribute_not_exists(s.#t)"
token_held = "attribute_exists(s.#t)"
room_left = "size(s) < :cap"
not_paused = "(attribute_not_exists(paused_until) OR paused_until < :now)"
pause_is_shorter = "(attribute_not_exists(paused_until) OR paused_until < :u)"


@dataclass(frozen=True)
class SlotGrant:
    granted: bool
    paused_until: float | None = None


class SlotStore:
    def __init__(self, client: Any, table: str) -> None:
        self._table = Table(client, table)

    @staticmethod
    def _key(model: str) -> dict[str, Any]:
        return {"pk": {"S": f"slots#{model}"}, "sk": {"S": "slots"}}

    @staticmethod
    def new_token() -> str:
        return secrets.token_hex(8)

    def acquire(self, model: str, token: str, *, cap: int, now: float, lease_seconds: float) -> SlotGrant:
        """Take one of the model's ``cap`` slots, unless they are all held or it is paused."""
        if cap <= 0:
            return SlotGrant(False)
        take = Update(
            extra_set=["s.#t = :until"],
            condition=f"{slots_exist} AND {token_not_held} AND {room_left} AND {not_paused}",
            names={"#t": token},
            values={":until": timestamp(now + lease_seconds), ":cap": cap, ":now": timestamp(now)},
        )
        for _ in range(3):
            taken, old = self._table.update_returning(
                self._key(model), take, failure=f"could not take a slot of {model}"
            )
            if taken is not None:
                return SlotGrant(True)
            if old is None or "s" not in old:
                self._create(model)
                continue
            paused_until = float(old.get("paused_until", 0))
            if paused_until >= now:
                return SlotGrant(False, paused_until=paused_until)
            expired = {t: until for t, until in old.get("s", {}).items() if float(until) < now}
            if not expired:
                return SlotGrant(False)
            self._purge(model, expired)
        return SlotGrant(False)

    def pause(self, model: str, until: float) -> None:
        """Stop the model taking new batch requests until ``until`` (never shortens a pause)."""
        pause = Update(
            extra_set=["paused_until = :u"],
            condition=f"{slots_exist} AND {pause_is_shorter}",
            values={":u": timestamp(until)},
        )
        for _ in range(2):
            if self._table.update(self._key(model), pause, failure=f"could not pause {model}"):
                return
            self._create(model)

    def renew(self, model: str, token: str, *, now: float, lease_seconds: float) -> bool:
        """Extend this holder's slot; False when it lapsed and was purged."""
        renew = Update(
            extra_set=["s.#t = :until"],
            condition=token_held,
            names={"#t": token},
            values={":until": timestamp(now + lease_seconds)},
        )
        return self._table.update(self._key(model), renew, failure=f"could not renew a slot of {model}")

    def release(self, model: str, token: str) -> None:
        release = Update(extra_remove=["s.#t"], names={"#t": token})
        self._table.update(self._key(model), release, failure=f"could not release a slot of {model}")

    def holders(self, model: str) -> dict[str, float]:
        item = self._table.get(self._key(model))
        leases = item.get("s", {}) if item else {}
        return {t: float(u) for t, u in leases.items()}

    def _create(self, model: str) -> None:
        self._table.put(
            {"pk": f"slots#{model}", "sk": "slots", "s": {}},
            condition=slots_not_exist,
            failure=f"could not create the slots of {model}",
        )

    def _purge(self, model: str, expired: dict[str, Any]) -> None:
        names = {f"#e{i}": token for i, token in enumerate(expired)}
        values = {f":e{i}": until for i, until in enumerate(expired.values())}
        still_expired = " AND ".join(f"s.{n} = {v}" for n, v in zip(names, values, strict=True))
        purge = Update(
            extra_remove=[f"s.{n}" for n in names], condition=still_expired, names=names, values=values
        )
        self._table.update(self._key(model), purge, failure=f"could not purge the slots of {model}")
