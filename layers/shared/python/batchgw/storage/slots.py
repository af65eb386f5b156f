"""Concurrency slots: self-expiring leases in one map per model, and one per user.

``acquire`` adds this holder's token with an expiry while fewer than ``cap`` tokens are
present; a holder that dies leaves an entry that expires and is purged by the next
acquirer that finds the map full. Nothing leaks: every slot is a lease. Beside its slots, a
model's item keeps each contending batch's tag (``domain.contention``: owner, weight,
priority, ``complete_by``), one attribute per batch, written with the slot or the wait it
rides on and dropped when its batch neither holds nor waits.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import StrEnum
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
# A batch's tag on a model's item: an attribute of its own ("c:<batch id>"), so it is set
# without the map it would otherwise need to exist first.
TAG_PREFIX = "c:"
# A tag already kept is left as it is by a chain's write (an administrator's change of the
# batch, written by ``set_tag``, wins over the batch as the chain last read it).
keep_tag = "#g = if_not_exists(#g, :g)"


@dataclass(frozen=True)
class SlotState:
    holders: dict[str, float]  # token: lease expiry
    paused_until: float
    # When a worker last took or renewed a slot: the model was serving batch requests then
    # (within half a lease of its last request starting). None: never.
    served_at: float | None = None
    # Batches that found the model full and wait for a slot (``domain.fairness``): until when.
    waiting: dict[str, float] = field(default_factory=dict)
    # Each contending batch's tag (``domain.contention``), by batch id.
    tags: dict[str, str] = field(default_factory=dict)

    def running(self, now: float) -> int:
        """Slots held now (a lease that ran out belongs to a holder that is gone)."""
        return sum(1 for until in self.holders.values() if until >= now)

    def waiting_now(self, now: float) -> list[str]:
        return [batch_id for batch_id, until in self.waiting.items() if until >= now]


@dataclass(frozen=True)
class SlotGrant:
    granted: bool
    paused_until: float | None = None
    # The slot map as the grant left it (None when not read).
    state: SlotState | None = None
    # Not granted because another batch waits for the slot (``domain.fairness``).
    gave_way: bool = False


class SlotStore:
    def __init__(self, client: Any, table: str) -> None:
        self._table = Table(client, table)

    @staticmethod
    def _key(model: str) -> dict[str, Any]:
        return {"pk": {"S": f"slots#{model}"}, "sk": {"S": "slots"}}

    @staticmethod
    def new_token() -> str:
        return secrets.token_hex(8)

    def acquire(
        self,
        model: str,
        token: str,
        *,
        cap: int,
        now: float,
        lease_seconds: float,
        tag: tuple[str, str] | None = None,
    ) -> SlotGrant:
        """Take one of the model's ``cap`` slots, unless they are all held or it is paused;
        ``tag`` (batch id, tag) is kept beside it unless its batch has one already."""
        if cap <= 0:
            return SlotGrant(False)
        names, values = (
            {"#t": token},
            {":until": timestamp(now + lease_seconds), ":cap": cap, ":now": timestamp(now)},
        )
        extra_set = ["s.#t = :until", "served_at = :now"]
        if tag is not None:
            names["#g"], values[":g"] = TAG_PREFIX + tag[0], tag[1]
            extra_set.append(keep_tag)
        take = Update(
            extra_set=extra_set,
            condition=f"{slots_exist} AND {token_not_held} AND {room_left} AND {not_paused}",
            names=names,
            values=values,
        )
        for _ in range(3):
            taken, old = self._table.update_returning(
                self._key(model), take, failure=f"could not take a slot of {model}"
            )
            if taken is not None:
                return SlotGrant(True, state=_state_of(taken))
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

    def renew(
        self, model: str, token: str, *, now: float, lease_seconds: float, within: int | None = None
    ) -> bool:
        """Extend this holder's slot; False when it lapsed and was purged. ``within``: only
        while the map holds at most that many slots (a smaller share: False when this holder
        may be one too many)."""
        condition = token_held
        values: dict[str, Any] = {":until": timestamp(now + lease_seconds), ":now": timestamp(now)}
        if within is not None:
            condition, values = f"{token_held} AND size(s) <= :cap", {**values, ":cap": within}
        renew = Update(
            extra_set=["s.#t = :until", "served_at = :now"],
            condition=condition,
            names={"#t": token},
            values=values,
        )
        return self._table.update(self._key(model), renew, failure=f"could not renew a slot of {model}")

    def take_over(
        self, model: str, reserved: str, token: str, *, cap: int, now: float, lease_seconds: float
    ) -> bool:
        """Hold, as ``token``, the slot taken as ``reserved`` (a split took it for the chain it
        sent), in one write, while the map holds at most ``cap`` slots (the share now: it may
        have shrunk since the split) and the model is not paused. False when it is gone (it
        ran out and was purged, or another run of the same message took it over first) or
        no longer fits: the reserved slot is then let go, and the chain asks as any other."""
        swap = Update(
            extra_set=["s.#t = :until", "served_at = :now"],
            extra_remove=["s.#r"],
            condition=f"attribute_exists(s.#r) AND {token_not_held} AND size(s) <= :cap AND {not_paused}",
            names={"#t": token, "#r": reserved},
            values={":until": timestamp(now + lease_seconds), ":now": timestamp(now), ":cap": cap},
        )
        if self._table.update(self._key(model), swap, failure=f"could not take over a slot of {model}"):
            return True
        self.release(model, reserved)
        return False

    def release(self, model: str, token: str) -> None:
        release = Update(extra_remove=["s.#t"], names={"#t": token})
        self._table.update(self._key(model), release, failure=f"could not release a slot of {model}")

    def holders(self, model: str) -> dict[str, float]:
        return self.read(model).holders

    def read(self, model: str) -> SlotState:
        return _state_of(self._table.get(self._key(model)))

    def wait(
        self,
        model: str,
        batch_id: str,
        *,
        until: float,
        expired: Iterable[str] = (),
        tag: str | None = None,
        stale: Iterable[str] = (),
    ) -> None:
        """Note ``batch_id`` as waiting for a slot of ``model`` until ``until`` (dropping the
        ``expired`` waiters a read found, so the map does not grow with batches gone), with
        its ``tag`` unless it has one already; the ``stale`` batches' tags are dropped."""
        gone = [batch for batch in expired if batch != batch_id]
        dropped = [batch for batch in stale if batch != batch_id]
        names = {
            "#b": batch_id,
            **{f"#x{i}": batch for i, batch in enumerate(gone)},
            **{f"#y{i}": TAG_PREFIX + batch for i, batch in enumerate(dropped)},
        }
        tagged: list[str] = []
        tag_values: dict[str, Any] = {}
        if tag is not None:
            names["#g"], tag_values[":g"] = TAG_PREFIX + batch_id, tag
            tagged.append(keep_tag)
        note = Update(
            extra_set=["w.#b = :until", *tagged],
            extra_remove=[f"w.#x{i}" for i in range(len(gone))] + [f"#y{i}" for i in range(len(dropped))],
            condition="attribute_exists(w)",
            names=names,
            values={":until": timestamp(until), **tag_values},
        )
        first_names = {"#g": names["#g"]} if tag is not None else {}
        first = Update(
            extra_set=["w = :w", *tagged],
            condition=f"attribute_not_exists(w) AND {slots_exist}",
            names=first_names,
            values={":w": {batch_id: timestamp(until)}, **tag_values},
        )
        key, failure = self._key(model), f"could not note a batch waiting for {model}"
        for _ in range(3):
            if self._table.update(key, note, failure=failure) or self._table.update(
                key, first, failure=failure
            ):
                return
            self._create(model)  # no slot map yet (or another note made ``w`` meanwhile)

    def set_tag(self, model: str, batch_id: str, tag: str) -> None:
        """Keep ``tag`` as ``batch_id``'s on ``model``'s item, over the one kept (a change of
        the batch's priority or ``complete_by`` reaches the scheduler at once); nothing when
        the model has no slot map yet (its first chain writes the tag)."""
        change = Update(
            extra_set=["#g = :g"],
            condition=slots_exist,
            names={"#g": TAG_PREFIX + batch_id},
            values={":g": tag},
        )
        self._table.update(self._key(model), change, failure=f"could not tag a batch on {model}")

    def stop_waiting(self, model: str, batch_id: str) -> None:
        """``batch_id`` no longer waits for a slot of ``model`` (it holds one)."""
        done = Update(extra_remove=["w.#b"], condition="attribute_exists(w)", names={"#b": batch_id})
        self._table.update(self._key(model), done, failure=f"could not note a batch served by {model}")

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


def _state_of(item: dict[str, Any] | None) -> SlotState:
    if not item:
        return SlotState({}, 0.0)
    served_at = float(item["served_at"]) if "served_at" in item else None
    return SlotState(
        {t: float(u) for t, u in item.get("s", {}).items()},
        float(item.get("paused_until", 0)),
        served_at,
        {b: float(u) for b, u in item.get("w", {}).items()},
        {name.removeprefix(TAG_PREFIX): str(v) for name, v in item.items() if name.startswith(TAG_PREFIX)},
    )


# --- a user's slots, with what their requests may cost ------------------------------------------

# The clauses of a user's slot map's conditional writes.
version_unchanged = "(attribute_not_exists(v) OR v = :v)"
room_or_held = f"({token_held} OR {room_left})"
INTERACTIVE_PREFIX = "i:"  # an interactive request's hold: i:<token>, beside the map of slots
PROVIDER_PREFIX = "p:"  # a provider-run batch's hold: p:<batch id>, beside the map of slots


@dataclass(frozen=True, slots=True)
class Hold:
    """One request's hold on a slot of its owner: until when, what it may cost (reserved,
    in nano-dollars), under which key."""

    until: float
    reserved: int = 0
    key_id: str = ""


@dataclass(frozen=True, slots=True)
class UserSlots:
    """A user's slot map as read: every hold by token, the holds of their interactive
    requests (no slot of the role's cap: reservations only), and the map's version."""

    holds: dict[str, Hold]
    version: int = 0
    interactive: dict[str, Hold] = field(default_factory=dict)
    provider: dict[str, Hold] = field(default_factory=dict)  # by batch id (``storage.spend``)

    def reserved(self, now: float, *, key_id: str | None = None, besides: str | None = None) -> int:
        """What the user's live holds, batch and interactive (only ``key_id``'s, if given),
        may still cost, leaving out the hold ``besides``."""
        return sum(
            hold.reserved
            for token, hold in (*self.holds.items(), *self.interactive.items())
            if hold.until >= now and token != besides and (key_id is None or hold.key_id == key_id)
        )

    def expired_interactive(self, now: float) -> list[str]:
        """The interactive holds whose request is long gone (their process died)."""
        return [token for token, hold in self.interactive.items() if hold.until < now]


class UserTake(StrEnum):
    TAKEN = "taken"
    FULL = "full"  # the user has as many requests running as their role allows
    CHANGED = "changed"  # another request changed the reservations since they were read


def _beside(item: dict[str, Any], prefix: str) -> dict[str, Hold]:
    """The holds kept beside the map of slots under ``prefix``, by what follows it."""
    return {
        name[len(prefix) :]: _hold_of(value)
        for name, value in item.items()
        if name.startswith(prefix) and isinstance(value, dict)
    }


def _hold_of(value: Any) -> Hold:
    return Hold(
        until=float(value.get("u", 0)), reserved=int(value.get("n", 0)), key_id=str(value.get("k", ""))
    )


class UserSlotStore:
    """Per-user concurrency slots (the role's cap across every model and process), each
    carrying the reservation of the request that holds it.

    A hold is a lease like a model's slot: a holder that dies leaves an entry that expires
    and is purged by the next taker that finds the map full. Taking a slot with a
    reservation may be made conditional on the map's ``version`` being the one read, so
    two requests judged against the same reservations cannot both be let through: the
    later one reads again.
    """

    def __init__(self, client: Any, table: str) -> None:
        self._table = Table(client, table)

    @staticmethod
    def key(user_id: str) -> dict[str, Any]:
        return {"pk": {"S": f"uslots#{user_id}"}, "sk": {"S": "slots"}}

    @staticmethod
    def new_token() -> str:
        return secrets.token_hex(8)

    @staticmethod
    def parse(item: dict[str, Any] | None) -> UserSlots:
        """A slot map as read (None: there is none yet)."""
        if item is None:
            return UserSlots({})
        holds = {token: _hold_of(value) for token, value in (item.get("s") or {}).items()}
        return UserSlots(
            holds, int(item.get("v", 0)), _beside(item, INTERACTIVE_PREFIX), _beside(item, PROVIDER_PREFIX)
        )

    def read(self, user_id: str) -> UserSlots:
        return self.parse(self._table.get(self.key(user_id)))

    def take(
        self, user_id: str, token: str, hold: Hold, *, cap: int, now: float, version: int | None = None
    ) -> UserTake:
        """Hold (or renew, with a new reservation) one of the user's ``cap`` slots (0: no
        cap). With ``version``, only if the map is still at that version."""
        condition = slots_exist
        values: dict[str, Any] = {
            ":hold": {"u": timestamp(hold.until), "n": hold.reserved, "k": hold.key_id},
            ":one": 1,
            ":zero": 0,
        }
        if cap > 0:
            condition += f" AND {room_or_held}"
            values[":cap"] = cap
        if version is not None:
            condition += f" AND {version_unchanged}"
            values[":v"] = version
        take = Update(
            extra_set=["s.#t = :hold", "v = if_not_exists(v, :zero) + :one"],
            condition=condition,
            names={"#t": token},
            values=values,
        )
        for _ in range(3):
            taken, old = self._table.update_returning(
                self.key(user_id), take, failure=f"could not take a slot of {user_id}"
            )
            if taken is not None:
                return UserTake.TAKEN
            if old is None or "s" not in old:
                self._create(user_id)
                continue
            if version is not None and int(old.get("v", 0)) != version:
                return UserTake.CHANGED
            expired = {t: value for t, value in old["s"].items() if float(value.get("u", 0)) < now}
            if not expired:
                return UserTake.FULL
            self._purge(user_id, expired)
        return UserTake.FULL

    def release(self, user_id: str, token: str) -> None:
        release = Update(extra_remove=["s.#t"], names={"#t": token})
        self._table.update(self.key(user_id), release, failure=f"could not release a slot of {user_id}")

    # An interactive request's hold is an attribute of its own (i:<token>), beside the map of
    # slots: it takes no slot of the role's cap, but its reservation counts with theirs. A
    # provider-run batch's is too (p:<batch id>), counted only by provider batches' checks.

    def hold_interactive(
        self, user_id: str, token: str, hold: Hold, *, version: int, gone: list[str]
    ) -> bool:
        """Hold ``hold`` for interactive request ``token`` if the map is still at ``version``
        (no reservation was added since it was read), removing the expired interactive holds
        ``gone`` (as read at that version). False when another request changed it first."""
        return self._hold_beside(
            user_id, f"{INTERACTIVE_PREFIX}{token}", hold, version, [f"{INTERACTIVE_PREFIX}{t}" for t in gone]
        )

    def release_interactive(self, user_id: str, token: str) -> None:
        self._release_beside(user_id, f"{INTERACTIVE_PREFIX}{token}")

    def hold_provider(
        self, user_id: str, batch_id: str, hold: Hold, *, version: int, gone: list[str]
    ) -> bool:
        """Hold what provider-run batch ``batch_id`` may cost, as ``hold_interactive`` does,
        removing the holds of the batches ``gone`` (ended, or never stored)."""
        return self._hold_beside(
            user_id, f"{PROVIDER_PREFIX}{batch_id}", hold, version, [f"{PROVIDER_PREFIX}{b}" for b in gone]
        )

    def release_provider(self, user_id: str, batch_id: str) -> None:
        self._release_beside(user_id, f"{PROVIDER_PREFIX}{batch_id}")

    def _hold_beside(self, user_id: str, name: str, hold: Hold, version: int, gone: list[str]) -> bool:
        names = {"#t": name} | {f"#g{i}": g for i, g in enumerate(gone)}
        take = Update(
            extra_set=["#t = :hold", "v = if_not_exists(v, :zero) + :one"],
            extra_remove=[f"#g{i}" for i in range(len(gone))],
            condition=version_unchanged,
            names=names,
            values={
                ":hold": {"u": timestamp(hold.until), "n": hold.reserved, "k": hold.key_id},
                ":one": 1,
                ":zero": 0,
                ":v": version,
            },
        )
        return self._table.update(
            self.key(user_id), take, failure=f"could not hold a reservation of {user_id}"
        )

    def _release_beside(self, user_id: str, name: str) -> None:
        release = Update(extra_remove=["#t"], names={"#t": name})
        self._table.update(
            self.key(user_id), release, failure=f"could not release a reservation of {user_id}"
        )

    def _create(self, user_id: str) -> None:
        # An update, not a put: the item may hold interactive reservations and a version already.
        create = Update(
            extra_set=["s = :empty", "v = if_not_exists(v, :zero)"],
            condition=slots_not_exist,
            values={":empty": {}, ":zero": 0},
        )
        self._table.update(self.key(user_id), create, failure=f"could not create the slots of {user_id}")

    def _purge(self, user_id: str, expired: dict[str, Any]) -> None:
        names = {f"#e{i}": token for i, token in enumerate(expired)}
        values = {f":e{i}": value["u"] for i, value in enumerate(expired.values())}
        still_expired = " AND ".join(f"s.{n}.u = {v}" for n, v in zip(names, values, strict=True))
        purge = Update(
            extra_remove=[f"s.{n}" for n in names], condition=still_expired, names=names, values=values
        )
        self._table.update(self.key(user_id), purge, failure=f"could not purge the slots of {user_id}")
