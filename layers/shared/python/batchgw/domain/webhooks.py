"""Batch webhooks: the events, and how a delivery is signed (the Standard Webhooks scheme).

A delivery carries ``webhook-id`` (the event's id, the same on every retry),
``webhook-timestamp`` (the attempt's, unix seconds) and ``webhook-signature``: ``v1,`` and
the base64 HMAC-SHA256 of ``"{id}.{timestamp}.{body}"`` keyed with the secret's base64
part. After a rotation, deliveries carry the old secret's signature too, for an overlap,
space-separated, so a receiver can switch secrets without losing an event.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

SECRET_PREFIX = "whsec_"
SECRET_BYTES = 32  # 24 to 64 random bytes is what receivers accept
ROTATION_OVERLAP_SECONDS = 24 * 3600  # the old secret still signs this long after a rotation
EVENT_PREFIX = "evt_"
ENDPOINT_PREFIX = "we_"

# What a batch's final status sends.
EVENT_TYPES = {
    "completed": "batch.completed",
    "failed": "batch.failed",
    "expired": "batch.expired",
    "cancelled": "batch.cancelled",
}
BATCH_EVENT_TYPES = tuple(EVENT_TYPES.values())
# What a background response's end sends (``domain.background.event_type``).
RESPONSE_EVENT_TYPES = ("response.completed", "response.failed", "response.cancelled", "response.incomplete")
SENT_EVENT_TYPES = BATCH_EVENT_TYPES + RESPONSE_EVENT_TYPES  # every event a webhook may be sent


def new_secret(random_bytes: bytes) -> str:
    """A signing secret, ``whsec_`` and the base64 of ``random_bytes``."""
    if not 24 <= len(random_bytes) <= 64:
        raise ValueError("a webhook secret is 24 to 64 random bytes")
    return SECRET_PREFIX + base64.b64encode(random_bytes).decode()


def hint_of(secret: str) -> str:
    """A masked hint of a signing secret: its prefix and last four characters."""
    return f"{secret[:6]}…{secret[-4:]}"


def _key(secret: str) -> bytes:
    return base64.b64decode(secret.removeprefix(SECRET_PREFIX))


def signature(secret: str, event_id: str, timestamp: int, body: bytes) -> str:
    """``v1,<base64 HMAC-SHA256 of "{id}.{timestamp}.{body}">``."""
    signed = f"{event_id}.{timestamp}.".encode() + body
    digest = hmac.new(_key(secret), signed, hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode()


def signature_header(secrets: Sequence[str], event_id: str, timestamp: int, body: bytes) -> str:
    """The ``webhook-signature`` header: one signature per secret in force, space-separated."""
    return " ".join(signature(secret, event_id, timestamp, body) for secret in secrets)


def event_body(event_id: str, event_type: str, created_at: int, batch_id: str) -> dict[str, Any]:
    """The event, thin and in OpenAI's shape: it names the batch only."""
    return {
        "id": event_id,
        "object": "event",
        "type": event_type,
        "created_at": created_at,
        "data": {"id": batch_id},
    }


@dataclass(frozen=True)
class EventMessage:
    """What the webhook queue carries: the event of one batch's end, for its owner."""

    event_id: str
    user_id: str
    batch_id: str
    type: str
    created_at: int  # ms: when the batch ended (also the delivery record's place)
    # A sample event an endpoint's owner asked for (``api.webhook_endpoints``): sent once,
    # whatever its event types, suspension or state, and never tried again.
    test: bool = False

    def encode(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"))

    @classmethod
    def decode(cls, text: str) -> EventMessage:
        return cls(**json.loads(text))

    @classmethod
    def of_batch(
        cls, batch_id: str, user_id: str, final_status: str, ended_ms: int, event_type: str | None = None
    ) -> EventMessage:
        """The event of a batch's end (``event_type``, when given: a background response's).
        Its id follows from the batch, so a retried step makes the same event, which the FIFO
        queue's deduplication and the delivery record drop."""
        return cls(
            EVENT_PREFIX + batch_id.removeprefix("batch_"),
            user_id,
            batch_id,
            event_type or EVENT_TYPES[final_status],
            ended_ms,
        )
