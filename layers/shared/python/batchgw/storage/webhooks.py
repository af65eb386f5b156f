"""A user's batch webhook and its deliveries, in the control table.

- ``webhook#<user>`` / ``webhook``: the endpoint (url, enabled, why disabled), its signing
  secret and, for an overlap after a rotation, the previous one — both encrypted (``Sealer``:
  KMS on AWS) — and the endpoint's health (timeouts in a row, suspended until).
- ``whevents#<user>`` / ``<created ms>#<event id>``: one delivery record per event, kept
  ``EVENTS_KEPT_SECONDS`` (DynamoDB TTL).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any, Protocol

from batchgw.domain.webhooks import ENDPOINT_PREFIX, SENT_EVENT_TYPES
from batchgw.storage.dynamo import Table, Update, from_item

EVENTS_KEPT_SECONDS = 7 * 86400
EVENTS_SHOWN = 100
DELIVERIES_PREFIX = "whevents#"  # the partition of one user's delivery records: this and the user id


class Sealer(Protocol):
    """Encrypts secrets at rest (KMS on AWS and locally, through moto)."""

    def seal(self, plaintext: str, *, user_id: str) -> bytes: ...

    def open(self, sealed: bytes, *, user_id: str) -> str: ...


@dataclass(frozen=True)
class Webhook:
    user_id: str
    url: str
    enabled: bool
    created_at: int
    updated_at: int
    secret: bytes  # sealed
    previous_secret: bytes | None = None  # sealed; signs too until ``previous_until``
    previous_until: float | None = None
    disabled_reason: str | None = None
    timeouts_in_row: int = 0
    suspended_until: float | None = None
    suspensions: int = 0  # in a row: each longer than the last
    # As the OpenAI SDK's webhook endpoints show it (``api.webhook_endpoints``): its id, its
    # name, and the event types it is sent (none stored: every event sent).
    endpoint_id: str = ""
    name: str = ""
    event_types: tuple[str, ...] = SENT_EVENT_TYPES
    secret_hint: str | None = None  # its prefix and last characters, to tell secrets apart

    @property
    def id(self) -> str:
        """Its endpoint id: the one stored, else one that follows from the webhook (one set
        up before endpoint ids were)."""
        if self.endpoint_id:
            return self.endpoint_id
        digest = hashlib.sha256(f"{self.user_id}:{self.created_at}".encode()).hexdigest()
        return ENDPOINT_PREFIX + digest[:32]

    @classmethod
    def from_item(cls, item: dict[str, Any]) -> Webhook:
        def opt(name: str) -> Any:
            return item.get(name)

        return cls(
            user_id=str(item["pk"]).removeprefix("webhook#"),
            url=str(item["url"]),
            enabled=bool(item["enabled"]),
            created_at=int(item["created_at"]),
            updated_at=int(item["updated_at"]),
            secret=bytes(item["secret"]),
            previous_secret=None if opt("previous_secret") is None else bytes(item["previous_secret"]),
            previous_until=None if opt("previous_until") is None else float(item["previous_until"]),
            disabled_reason=opt("disabled_reason"),
            timeouts_in_row=int(item.get("timeouts_in_row", 0)),
            suspended_until=None if opt("suspended_until") is None else float(item["suspended_until"]),
            suspensions=int(item.get("suspensions", 0)),
            endpoint_id=str(item.get("endpoint_id") or ""),
            name=str(item.get("name") or ""),
            secret_hint=opt("secret_hint"),
            event_types=tuple(str(t) for t in item["event_types"])
            if item.get("event_types")
            else SENT_EVENT_TYPES,
        )


@dataclass(frozen=True)
class Delivery:
    """What became of one event's delivery.

    ``created_ms`` is the event's time in milliseconds, as the queue message carries it and
    the record's key sorts on (stored as ``created_at``); answers show ``created_at``, in
    seconds, as every other time.
    """

    event_id: str
    type: str
    batch_id: str
    created_ms: int
    attempts: int = 0
    last_status: int | None = None
    last_error: str | None = None
    next_attempt_at: float | None = None
    delivered_at: float | None = None

    @property
    def created_at(self) -> int:
        """When the event was made, in Unix seconds."""
        return self.created_ms // 1000


class WebhookStore:
    def __init__(self, client: Any, table: str) -> None:
        self._table = Table(client, table)

    @staticmethod
    def _key(user_id: str) -> dict[str, Any]:
        return {"pk": {"S": f"webhook#{user_id}"}, "sk": {"S": "webhook"}}

    def get(self, user_id: str) -> Webhook | None:
        item = self._table.get(self._key(user_id))
        return None if item is None else Webhook.from_item(item)

    def put(self, hook: Webhook) -> None:
        values: dict[str, Any] = {
            "pk": f"webhook#{hook.user_id}",
            "sk": "webhook",
            "url": hook.url,
            "enabled": hook.enabled,
            "created_at": hook.created_at,
            "updated_at": hook.updated_at,
            "secret": hook.secret,
            "previous_secret": hook.previous_secret,
            "previous_until": hook.previous_until,
            "disabled_reason": hook.disabled_reason,
            "timeouts_in_row": hook.timeouts_in_row,
            "suspended_until": hook.suspended_until,
            "suspensions": hook.suspensions,
            "endpoint_id": hook.endpoint_id or None,
            "name": hook.name or None,
            "event_types": list(hook.event_types),
            "secret_hint": hook.secret_hint,
        }
        self._table.put(values, failure=f"could not store the webhook of {hook.user_id}")

    def change(self, user_id: str, fields: dict[str, Any], *, remove: tuple[str, ...] = ()) -> bool:
        """Set ``fields`` of an existing webhook (False: there is none)."""
        update = Update(set=fields, remove=list(remove), condition="attribute_exists(pk)")
        return self._table.update(
            self._key(user_id), update, failure=f"could not change the webhook of {user_id}"
        )

    def delete(self, user_id: str) -> bool:
        return self._table.delete(
            self._key(user_id),
            condition="attribute_exists(pk)",
            failure=f"could not delete the webhook of {user_id}",
        )

    # --- deliveries ---------------------------------------------------------------------------

    @staticmethod
    def _event_key(user_id: str, created_ms: int, event_id: str) -> dict[str, Any]:
        return {"pk": {"S": f"{DELIVERIES_PREFIX}{user_id}"}, "sk": {"S": f"{created_ms:013d}#{event_id}"}}

    def record(
        self, user_id: str, created_ms: int, delivery: Delivery, *, now: float, only_new: bool = False
    ) -> bool:
        """Store what became of a delivery (created or updated whole); with ``only_new``, only
        if it has no record yet (False: it had one, left as it was)."""
        return self._table.put(
            {
                "pk": f"{DELIVERIES_PREFIX}{user_id}",
                "sk": f"{created_ms:013d}#{delivery.event_id}",
                "event_id": delivery.event_id,
                "type": delivery.type,
                "batch_id": delivery.batch_id,
                "created_at": delivery.created_ms,  # ms, as records have always kept it
                "attempts": delivery.attempts,
                "last_status": delivery.last_status,
                "last_error": delivery.last_error,
                "next_attempt_at": delivery.next_attempt_at,
                "delivered_at": delivery.delivered_at,
                "ttl": int(now + EVENTS_KEPT_SECONDS),
            },
            condition="attribute_not_exists(pk)" if only_new else None,
            failure=f"could not record event {delivery.event_id}",
        )

    def delivery(self, user_id: str, created_ms: int, event_id: str) -> Delivery | None:
        item = self._table.get(self._event_key(user_id, created_ms, event_id))
        return None if item is None else _delivery_of(item)

    def deliveries(self, user_id: str, limit: int = EVENTS_SHOWN) -> list[Delivery]:
        """The user's recent deliveries, newest first."""
        found = []
        for raw in self._table.query(
            limit=limit,
            KeyConditionExpression="pk = :pk",
            ExpressionAttributeValues={":pk": {"S": f"whevents#{user_id}"}},
            ScanIndexForward=False,
        ):
            found.append(_delivery_of(from_item(raw)))
            if len(found) >= limit:
                break
        return found

    def delete_all(self, user_id: str) -> None:
        """The webhook and every delivery record of the user."""
        self.delete(user_id)
        keys = [
            {"pk": raw["pk"], "sk": raw["sk"]}
            for raw in self._table.query(
                KeyConditionExpression="pk = :pk",
                ExpressionAttributeValues={":pk": {"S": f"whevents#{user_id}"}},
                ProjectionExpression="pk, sk",
            )
        ]
        self._table.delete_many(keys)


def waiting_delivery(item: dict[str, Any]) -> tuple[str, Delivery] | None:
    """A control table item (plain values: ``from_item``) as (its user's id, the delivery) if
    it is a delivery record waiting for its next attempt (queued and not yet tried, or tried
    and neither delivered nor given up: ``next_attempt_at`` is set); else None. A waiting
    delivery's event is in the webhook queue: what a queue that lost it must hold again."""
    pk = str(item.get("pk", ""))
    if not pk.startswith(DELIVERIES_PREFIX) or "event_id" not in item:
        return None
    delivery = _delivery_of(item)
    if delivery.delivered_at is not None or delivery.next_attempt_at is None:
        return None
    return pk.removeprefix(DELIVERIES_PREFIX), delivery


def _delivery_of(item: dict[str, Any]) -> Delivery:
    def num(name: str) -> float | None:
        return None if item.get(name) is None else float(item[name])

    status = num("last_status")
    return Delivery(
        event_id=str(item["event_id"]),
        type=str(item["type"]),
        batch_id=str(item["batch_id"]),
        created_ms=_milliseconds(item["created_at"]),
        attempts=int(item.get("attempts", 0)),
        last_status=None if status is None else int(status),
        last_error=item.get("last_error"),
        next_attempt_at=num("next_attempt_at"),
        delivered_at=num("delivered_at"),
    )


# Below this a stored event time can only be seconds: as milliseconds it is March 1973,
# before any event, and as seconds the year 5138.
SECONDS_BEFORE = 10**11


def _milliseconds(value: Any) -> int:
    """A stored event time, in milliseconds as records keep it (a value in seconds is scaled)."""
    number = int(value)
    return number * 1000 if number < SECONDS_BEFORE else number
