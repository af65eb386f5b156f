"""The DynamoDB kernel: what every adapter does with the low-level client, written once.

- ``to_item`` / ``from_item``: Python values to DynamoDB's typed attributes and back
  (``serialize`` / ``deserialize``, boto3's ``TypeSerializer`` rules, written here so that a
  process needs botocore only: importing ``boto3.dynamodb.types`` imports all of boto3);
  ``timestamp`` rounds a clock reading to the millisecond stored.
- ``Update``: an update expression from SET / ADD / REMOVE parts and a condition, with
  its placeholders made here (adapters name their condition clauses; see each adapter).
- ``Table``: get, put, update, query (every page, or one step sized by its reader),
  batch writes in chunks of 25, and transactions whose cancellation reasons come back as
  a value.

A conditional write answers whether it applied; every other SDK error becomes a
``StorageError`` saying what failed, raised from the SDK's own (``StoreNotReady`` when a
query or batch call finds no table).
"""

from __future__ import annotations

import random
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from decimal import Clamped, Context, Decimal, Inexact, Overflow, Rounded, Underflow
from typing import Any

from botocore.exceptions import ClientError

from batchgw.domain.errors import StorageError, StoreNotReady

CONDITION_FAILED = "ConditionalCheckFailedException"
TABLE_MISSING = "ResourceNotFoundException"
TRANSACTION_CANCELLED = "TransactionCanceledException"
BATCH_WRITE_LIMIT = 25
BATCH_GET_LIMIT = 100
TRANSACTION_LIMIT = 100
# A transaction that conflicts with another in flight is tried this many times in all,
# pausing between tries for an exponential, fully jittered while (so transactions that
# conflicted together do not try again together): under 1.7 s in all at worst.
_CONFLICT_TRIES = 8
# Tries of a batch call whose items DynamoDB left unprocessed (throughput), paused as conflicts.
_BATCH_TRIES = 10
# Cancellation codes that say nothing about the conditions: another transaction in flight on
# an item, or the table's (or an index's) throughput exceeded, which on-demand tables can hit
# too (a burst past twice the previous peak, a hot partition). Tried again like a conflict.
_THROTTLED_REASONS = frozenset({"ThrottlingError", "ProvisionedThroughputExceeded"})
_PASSING_REASONS = _THROTTLED_REASONS | {"TransactionConflict"}
_CONFLICT_BASE_SECONDS = 0.02
_CONFLICT_MAX_SECONDS = 0.5
# Throughput comes back in seconds (a second's capacity, auto scaling): longer pauses, under
# 5.2 s in all at worst over a transaction's tries.
_THROTTLED_BASE_SECONDS = 0.05
_THROTTLED_MAX_SECONDS = 2.0
_sleep = time.sleep  # tests replace it


def conflict_pause(tries: int, rng: Callable[[], float] = random.random, *, throttled: bool = False) -> float:
    """The pause after the ``tries``-th try of a transaction conflicted, or of a batch call
    that left items unprocessed: up to 20 ms, doubling with each try, at most 0.5 s;
    uniformly jittered from zero. A transaction refused for throughput (``throttled``):
    up to 50 ms, doubling, at most 2 s."""
    base, most = (
        (_THROTTLED_BASE_SECONDS, _THROTTLED_MAX_SECONDS)
        if throttled
        else (_CONFLICT_BASE_SECONDS, _CONFLICT_MAX_SECONDS)
    )
    return rng() * min(most, base * 2 ** max(0, tries - 1))


# --- values -------------------------------------------------------------------------------------


def to_ddb(value: Any) -> Any:
    """A Python value as boto3 serializes it: floats become Decimals, recursively."""
    if isinstance(value, float):
        return Decimal(str(value))
    if isinstance(value, dict):
        return {k: to_ddb(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [to_ddb(v) for v in value]
    return value


# DynamoDB's numbers: 38 significant digits, exponents -130 to +125; anything a number
# would lose on the way in is an error, never a silent rounding.
NUMBER_CONTEXT = Context(Emin=-128, Emax=126, prec=38, traps=[Clamped, Overflow, Inexact, Rounded, Underflow])


def _number(value: int | Decimal) -> str:
    text = str(NUMBER_CONTEXT.create_decimal(value))
    if text in ("Infinity", "-Infinity", "NaN", "sNaN"):
        raise TypeError(f"DynamoDB stores no {text}")
    return text


def _is_number(value: Any) -> bool:
    if isinstance(value, float):
        raise TypeError("Float types are not supported. Use Decimal types instead.")
    return isinstance(value, int | Decimal) and not isinstance(value, bool)


def serialize(value: Any) -> dict[str, Any]:
    """One Python value as a DynamoDB typed attribute, by boto3's ``TypeSerializer`` rules:
    None is NULL, bool BOOL, int and Decimal N (a float is a TypeError), str S, bytes B,
    a set of numbers / strings / bytes NS / SS / BS, a mapping M, a list or tuple L."""
    if value is None:
        return {"NULL": True}
    if isinstance(value, bool):
        return {"BOOL": value}
    if _is_number(value):
        return {"N": _number(value)}
    if isinstance(value, str):
        return {"S": value}
    if isinstance(value, bytes | bytearray):
        return {"B": value}
    if isinstance(value, AbstractSet):
        if all(_is_number(v) for v in value):
            return {"NS": [_number(v) for v in value]}
        if all(isinstance(v, str) for v in value):
            return {"SS": list(value)}
        if all(isinstance(v, bytes | bytearray) for v in value):
            return {"BS": list(value)}
    if isinstance(value, Mapping):
        return {"M": {k: serialize(v) for k, v in value.items()}}
    if isinstance(value, list | tuple):
        return {"L": [serialize(v) for v in value]}
    raise TypeError(f'Unsupported type "{type(value)}" for value "{value}"')


def deserialize(attribute: Mapping[str, Any]) -> Any:
    """One DynamoDB typed attribute as a Python value: numbers as Decimal, binary as bytes,
    sets as sets."""
    if len(attribute) != 1:
        raise TypeError(f"not one DynamoDB typed value: {sorted(attribute)}")
    ((kind, value),) = attribute.items()
    if kind == "S" or kind == "BOOL":
        return value
    if kind == "N":
        return NUMBER_CONTEXT.create_decimal(value)
    if kind == "M":
        return {k: deserialize(v) for k, v in value.items()}
    if kind == "L":
        return [deserialize(v) for v in value]
    if kind == "NULL":
        return None
    if kind == "B":
        return bytes(value)
    if kind == "SS":
        return set(value)
    if kind == "NS":
        return {NUMBER_CONTEXT.create_decimal(v) for v in value}
    if kind == "BS":
        return {bytes(v) for v in value}
    raise TypeError(f"DynamoDB type {kind} is not supported")


def to_item(values: Mapping[str, Any]) -> dict[str, Any]:
    """A record's attributes as DynamoDB's typed map (None values left out)."""
    return {k: serialize(to_ddb(v)) for k, v in values.items() if v is not None}


def from_item(raw: Mapping[str, Any]) -> dict[str, Any]:
    """DynamoDB's typed map as Python values (binary as bytes, numbers as Decimal)."""
    return {k: deserialize(v) for k, v in raw.items()}


def timestamp(seconds: float) -> Decimal:
    """A clock reading as stored: seconds, to the millisecond."""
    return Decimal(str(round(seconds, 3)))


def error_code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


# --- update expressions -------------------------------------------------------------------------


@dataclass
class Update:
    """One update expression and its condition, with generated placeholders.

    ``set``, ``add`` and ``remove`` name attributes plainly (setting None removes the
    attribute); ``extra_set`` and
    ``extra_remove`` hold parts written by hand (``epoch = if_not_exists(epoch, :zero) +
    :one``, ``s.#t``) whose placeholders, like the condition's, are given in ``names`` and
    ``values``.
    """

    set: Mapping[str, Any] = field(default_factory=dict)
    add: Mapping[str, int | Decimal] = field(default_factory=dict)
    remove: Sequence[str] = ()
    extra_set: Sequence[str] = ()
    extra_remove: Sequence[str] = ()
    condition: str | None = None
    names: Mapping[str, str] = field(default_factory=dict)
    values: Mapping[str, Any] = field(default_factory=dict)

    def request(self, table: str, key: Mapping[str, Any]) -> dict[str, Any]:
        """The parameters of ``update_item`` (or of a transaction's ``Update``)."""
        names = dict(self.names)
        values = dict(self.values)
        placeholder_of = {attribute: placeholder for placeholder, attribute in names.items()}

        def name(prefix: str, attribute: str) -> str:
            # An attribute the condition already names keeps its one placeholder.
            if attribute not in placeholder_of:
                placeholder_of[attribute] = names_key = f"#{prefix}{len(names)}"
                names[names_key] = attribute
            return placeholder_of[attribute]

        sets = list(self.extra_set)
        cleared = []  # setting an attribute to None removes it
        for i, (attribute, value) in enumerate(self.set.items()):
            if value is None:
                cleared.append(name("r", attribute))
                continue
            values[f":s{i}"] = value
            sets.append(f"{name('s', attribute)} = :s{i}")
        adds = []
        for i, (attribute, amount) in enumerate(self.add.items()):
            values[f":a{i}"] = amount
            adds.append(f"{name('a', attribute)} :a{i}")
        removes = [*self.extra_remove, *cleared, *(name("r", attribute) for attribute in self.remove)]
        parts = [
            f"{verb} {', '.join(clauses)}"
            for verb, clauses in (("SET", sets), ("ADD", adds), ("REMOVE", removes))
            if clauses
        ]
        request: dict[str, Any] = {"TableName": table, "Key": dict(key), "UpdateExpression": " ".join(parts)}
        if self.condition:
            request["ConditionExpression"] = self.condition
        if names:
            request["ExpressionAttributeNames"] = names
        if values:
            request["ExpressionAttributeValues"] = to_item(values)
        return request


def one_of(name_placeholder: str, prefix: str, choices: Iterable[str]) -> tuple[str, dict[str, str]]:
    """A condition ``#n IN (:p0, :p1...)`` and its values."""
    values = {f":{prefix}{i}": choice for i, choice in enumerate(choices)}
    return f"{name_placeholder} IN ({', '.join(values)})", values


def _add_condition(
    request: dict[str, Any],
    condition: str | None,
    names: Mapping[str, str] | None,
    params: Mapping[str, Any] | None,
) -> None:
    if condition:
        request["ConditionExpression"] = condition
    if names:
        request["ExpressionAttributeNames"] = dict(names)
    if params:
        request["ExpressionAttributeValues"] = to_item(params)


# --- transactions -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Cancelled:
    """A transaction that did not apply: one cancellation code per action, in order, and
    the item as it was for each action whose refused condition asked for it
    (``ReturnValuesOnConditionCheckFailure: ALL_OLD``)."""

    reasons: Sequence[str]
    items: Sequence[Mapping[str, Any] | None] = ()

    def old(self, action: int) -> dict[str, Any] | None:
        """The item action ``action`` found, when its condition failed and asked for it."""
        item = self.items[action] if action < len(self.items) else None
        return None if item is None else from_item(dict(item))

    def failed(self, action: int) -> bool:
        """Whether action ``action``'s condition did not hold."""
        return action < len(self.reasons) and self.reasons[action] == "ConditionalCheckFailed"

    @property
    def failed_actions(self) -> list[int]:
        return [i for i in range(len(self.reasons)) if self.failed(i)]


# --- tables -------------------------------------------------------------------------------------


class Table:
    """One table through the low-level client."""

    def __init__(self, client: Any, name: str) -> None:
        self.client = client
        self.name = name

    def get(self, key: Mapping[str, Any], *, consistent: bool = True) -> dict[str, Any] | None:
        raw = self.client.get_item(TableName=self.name, Key=dict(key), ConsistentRead=consistent).get("Item")
        return None if raw is None else from_item(raw)

    def put(
        self,
        values: Mapping[str, Any],
        *,
        condition: str | None = None,
        names: Mapping[str, str] | None = None,
        params: Mapping[str, Any] | None = None,
        failure: str,
    ) -> bool:
        """Store an item; False when ``condition`` (with its ``names`` and ``params``
        placeholders) did not hold."""
        request: dict[str, Any] = {"TableName": self.name, "Item": to_item(values)}
        _add_condition(request, condition, names, params)
        return self._conditional(failure, self.client.put_item, request)

    def update(self, key: Mapping[str, Any], update: Update, *, failure: str) -> bool:
        """Apply ``update``; False when its condition did not hold."""
        return self._conditional(failure, self.client.update_item, update.request(self.name, key))

    def update_returning(
        self, key: Mapping[str, Any], update: Update, *, failure: str
    ) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
        """Apply ``update``: (the item after it, None), or (None, the item as it was) when
        its condition did not hold (None too if there was no item)."""
        request = update.request(self.name, key)
        request["ReturnValues"] = "ALL_NEW"
        request["ReturnValuesOnConditionCheckFailure"] = "ALL_OLD"
        try:
            resp = self.client.update_item(**request)
        except ClientError as exc:
            if error_code(exc) != CONDITION_FAILED:
                raise StorageError(failure) from exc
            old = exc.response.get("Item")
            return None, None if old is None else from_item(old)
        return from_item(resp["Attributes"]), None

    def delete(
        self,
        key: Mapping[str, Any],
        *,
        condition: str | None = None,
        names: Mapping[str, str] | None = None,
        params: Mapping[str, Any] | None = None,
        failure: str,
    ) -> bool:
        request: dict[str, Any] = {"TableName": self.name, "Key": dict(key)}
        _add_condition(request, condition, names, params)
        return self._conditional(failure, self.client.delete_item, request)

    def query(self, *, limit: int | None = None, **request: Any) -> Iterator[dict[str, Any]]:
        """Every item a query finds, page after page (raw typed maps: see ``from_item``).

        With ``limit``, each page asks for at most that many; the caller stops reading
        when it has enough.
        """
        request = {"TableName": self.name, **request}
        while True:
            if limit is not None:
                request["Limit"] = limit
            resp = self._call("could not query " + self.name, self.client.query, request)
            yield from resp.get("Items", [])
            if "LastEvaluatedKey" not in resp:
                return
            request["ExclusiveStartKey"] = resp["LastEvaluatedKey"]

    def query_step(
        self, *, limit: int, start: Mapping[str, Any] | None = None, **request: Any
    ) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
        """One Query call, for a reader that sizes each step by what it still needs: the
        items found (raw typed maps) among at most ``limit`` evaluated (fewer when DynamoDB's
        1 MB per call comes first; a filter drops items after they count), and the key the
        next step starts after (None: nothing follows). ``start`` is such a key."""
        request = {"TableName": self.name, **request, "Limit": limit}
        if start is not None:
            request["ExclusiveStartKey"] = dict(start)
        resp = self._call("could not query " + self.name, self.client.query, request)
        return resp.get("Items", []), resp.get("LastEvaluatedKey")

    def get_many(self, keys: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
        """Every item of ``keys`` that exists (raw typed maps), strongly consistent, in one
        BatchGetItem per hundred keys; keys left unprocessed are asked for again."""
        found: list[dict[str, Any]] = []
        for start in range(0, len(keys), BATCH_GET_LIMIT):
            pending = list(keys[start : start + BATCH_GET_LIMIT])
            for tries in range(1, _BATCH_TRIES + 1):
                if not pending:
                    break
                if tries > 1:
                    _sleep(conflict_pause(tries - 1))
                resp = self._call(
                    f"could not read from {self.name}",
                    self.client.batch_get_item,
                    {"RequestItems": {self.name: {"Keys": pending, "ConsistentRead": True}}},
                )
                found += resp.get("Responses", {}).get(self.name, [])
                pending = resp.get("UnprocessedKeys", {}).get(self.name, {}).get("Keys", [])
            if pending:
                raise StorageError(f"could not read {len(pending)} items from {self.name}")
        return found

    def put_many(self, items: Iterable[Mapping[str, Any]]) -> None:
        self._write_many([{"PutRequest": {"Item": to_item(item)}} for item in items])

    def delete_many(self, keys: Iterable[Mapping[str, Any]]) -> None:
        self._write_many([{"DeleteRequest": {"Key": dict(key)}} for key in keys])

    def transact(self, actions: Sequence[Mapping[str, Any]], *, failure: str) -> Cancelled | None:
        """Run one transaction: None when it applied, else why it was cancelled.

        Each try carries a client request token, so the SDK's own retry of a try whose
        answer was lost is recognised by DynamoDB as the same transaction. A conflict with
        another transaction in flight, or with the throughput the table has, is retried
        (``_CONFLICT_TRIES`` tries in all, with jittered exponential pauses): it says nothing
        about the conditions.
        """
        throttled = False
        for tries in range(1, _CONFLICT_TRIES + 1):
            try:
                self.client.transact_write_items(
                    TransactItems=list(actions), ClientRequestToken=uuid.uuid4().hex
                )
                return None
            except ClientError as exc:
                if error_code(exc) != TRANSACTION_CANCELLED:
                    raise StorageError(failure) from exc
                found = exc.response.get("CancellationReasons", [])
                reasons = [str(r.get("Code")) for r in found]
                cancelled = Cancelled(reasons, [r.get("Item") for r in found])
                if cancelled.failed_actions or _PASSING_REASONS.isdisjoint(reasons):
                    return cancelled
                throttled = not _THROTTLED_REASONS.isdisjoint(reasons)
                if tries < _CONFLICT_TRIES:
                    _sleep(conflict_pause(tries, throttled=throttled))
        raise StorageError(
            f"{failure}: {'throughput refusals' if throttled else 'transaction conflicts'} persisted"
        )

    def _write_many(self, requests: list[dict[str, Any]]) -> None:
        for start in range(0, len(requests), BATCH_WRITE_LIMIT):
            pending = {self.name: requests[start : start + BATCH_WRITE_LIMIT]}
            for tries in range(1, _BATCH_TRIES + 1):
                if tries > 1:
                    _sleep(conflict_pause(tries - 1))
                resp = self._call(
                    f"could not write to {self.name}", self.client.batch_write_item, {"RequestItems": pending}
                )
                pending = resp.get("UnprocessedItems") or {}
                if not pending:
                    break
            else:
                raise StorageError(f"could not write {len(pending.get(self.name, []))} items to {self.name}")

    @staticmethod
    def _conditional(failure: str, call: Any, request: dict[str, Any]) -> bool:
        try:
            call(**request)
        except ClientError as exc:
            if error_code(exc) == CONDITION_FAILED:
                return False
            raise StorageError(failure) from exc
        return True

    @staticmethod
    def _call(failure: str, call: Any, request: dict[str, Any]) -> Any:
        try:
            return call(**request)
        except ClientError as exc:
            if error_code(exc) == TABLE_MISSING:
                raise StoreNotReady(failure) from exc
            raise StorageError(failure) from exc
