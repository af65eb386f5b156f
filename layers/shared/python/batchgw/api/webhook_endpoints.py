"""The webhook endpoints of the OpenAI SDK's ``client.webhooks`` (``/v1/webhook_endpoints``
and ``/v1/webhook_event_types``), mapped onto the caller's one batch webhook.

A user has at most one endpoint: the same webhook ``/v1/batch_webhook`` shows, so either API
manages it. Creating one when it exists answers 409 (update or delete it instead). An
endpoint is sent the batch events it names (``event_types``: ``batch.completed``,
``batch.failed``, ``batch.expired``, ``batch.cancelled``; the spec's routes name all four).
Its signing secret is shown when it is made and when it is rotated; a rotation may keep the
old one signing for 24 hours. A test sends one sample event through the webhook function
(the api may seal a secret, never open one), signed as deliveries are and through the same
address rules, and answers the status the endpoint gave (400 ``webhook_test_failed`` when it
gave none: the endpoint is the caller's to fix).

Making, changing, rotating and testing need BATCH_MIN_ROLE; reading, listing and deleting
do not (as for the spec's routes).
"""

from __future__ import annotations

import secrets
import time
from typing import Any

from batchgw.api.auth import require_role
from batchgw.api.webhooks import checked_url
from batchgw.deps import Deps
from batchgw.domain.errors import BadRequest, Conflict, NotFound
from batchgw.domain.principal import Principal
from batchgw.domain.webhooks import (
    ENDPOINT_PREFIX,
    EVENT_PREFIX,
    ROTATION_OVERLAP_SECONDS,
    SECRET_BYTES,
    SENT_EVENT_TYPES,
    EventMessage,
    hint_of,
    new_secret,
)
from batchgw.storage.webhooks import Webhook

MAX_NAME_CHARS = 256
# How long a test waits for the webhook function's answer: the receiver's deadline and this
# much for the queue's hops, at most TEST_WAIT_MOST (the api answers within 29 s).
TEST_HOPS_SECONDS = 5.0
TEST_WAIT_MOST = 25.0
TEST_POLL_SECONDS = 0.1
_CREATE_KEYS = frozenset({"url", "name", "event_types"})


def event_types() -> dict[str, Any]:
    """GET /v1/webhook_event_types: the events this gateway sends."""
    return {"object": "list", "data": list(SENT_EVENT_TYPES)}


def create(deps: Deps, principal: Principal, body: Any) -> dict[str, Any]:
    """POST /v1/webhook_endpoints: the caller's endpoint, with its signing secret."""
    require_role(deps, principal, "set up a batch webhook")
    fields = _fields(body, required=True)
    if deps.webhooks.get(principal.user_id) is not None:
        raise Conflict(
            "You have a webhook endpoint already: update, rotate or delete it (one per user).",
            code="webhook_endpoint_exists",
        )
    url = checked_url(deps, fields["url"])
    now = int(deps.clock())
    shown = new_secret(secrets.token_bytes(SECRET_BYTES))
    hook = Webhook(
        principal.user_id,
        url,
        True,
        now,
        now,
        deps.sealer.seal(shown, user_id=principal.user_id),
        endpoint_id=ENDPOINT_PREFIX + secrets.token_hex(16),
        name=fields["name"],
        event_types=fields["event_types"],
        secret_hint=hint_of(shown),
    )
    deps.webhooks.put(hook)
    return endpoint_object(hook, secret=shown)


def retrieve(deps: Deps, principal: Principal, endpoint_id: str) -> dict[str, Any]:
    return endpoint_object(_own(deps, principal, endpoint_id))


def list_endpoints(deps: Deps, principal: Principal) -> dict[str, Any]:
    """GET /v1/webhook_endpoints: the caller's one endpoint, or none."""
    hook = deps.webhooks.get(principal.user_id)
    data = [] if hook is None else [endpoint_object(hook)]
    first = data[0]["id"] if data else None
    return {"object": "list", "data": data, "first_id": first, "last_id": first, "has_more": False}


def update(deps: Deps, principal: Principal, endpoint_id: str, body: Any) -> dict[str, Any]:
    """POST /v1/webhook_endpoints/{id}: change its url, name or event types (saving it turns
    a disabled endpoint back on, as saving it through /v1/batch_webhook does)."""
    require_role(deps, principal, "change a batch webhook")
    _own(deps, principal, endpoint_id)
    fields = _fields(body, required=False)
    changes: dict[str, Any] = {"enabled": True}
    if "url" in fields:
        changes["url"] = checked_url(deps, fields["url"])
    if "name" in fields:
        changes["name"] = fields["name"]
    if "event_types" in fields:
        changes["event_types"] = list(fields["event_types"])
    if fields:
        changes["updated_at"] = int(deps.clock())
    deps.webhooks.change(principal.user_id, changes, remove=("disabled_reason",))
    return endpoint_object(_own(deps, principal, endpoint_id))


def delete(deps: Deps, principal: Principal, endpoint_id: str) -> dict[str, Any]:
    _own(deps, principal, endpoint_id)
    deps.webhooks.delete(principal.user_id)
    return {"id": endpoint_id, "object": "webhook_endpoint.deleted", "deleted": True}


def rotate_secret(deps: Deps, principal: Principal, endpoint_id: str, body: Any) -> dict[str, Any]:
    """POST /v1/webhook_endpoints/{id}/rotate_secret: a new signing secret; with
    ``keep_old_secret_active_for_24_hours`` the old one still signs for 24 hours (each
    delivery carries both signatures meanwhile), else it stops at once."""
    require_role(deps, principal, "rotate a batch webhook's secret")
    hook = _own(deps, principal, endpoint_id)
    body = {} if body is None else body
    if not isinstance(body, dict) or set(body) - {"keep_old_secret_active_for_24_hours"}:
        raise BadRequest("A rotation takes only keep_old_secret_active_for_24_hours.")
    keep = body.get("keep_old_secret_active_for_24_hours", False)
    if not isinstance(keep, bool):
        raise BadRequest(
            "keep_old_secret_active_for_24_hours must be true or false.",
            param="keep_old_secret_active_for_24_hours",
        )
    now = deps.clock()
    shown = new_secret(secrets.token_bytes(SECRET_BYTES))
    changes: dict[str, Any] = {
        "secret": deps.sealer.seal(shown, user_id=principal.user_id),
        "secret_hint": hint_of(shown),
        "updated_at": int(now),
    }
    if keep:
        changes |= {"previous_secret": hook.secret, "previous_until": now + ROTATION_OVERLAP_SECONDS}
    deps.webhooks.change(
        principal.user_id, changes, remove=() if keep else ("previous_secret", "previous_until")
    )
    return endpoint_object(_own(deps, principal, endpoint_id), secret=shown)


def send_test(deps: Deps, principal: Principal, endpoint_id: str, body: Any) -> dict[str, Any]:
    """POST /v1/webhook_endpoints/{id}/test: one sample event of ``event_type`` (its data names
    no real batch), sent now by the webhook function as it sends every event (only it may
    open a signing secret), behind the user's earlier events; the status the endpoint
    answered, waited for here (400 ``webhook_test_failed`` when it gave none in time)."""
    require_role(deps, principal, "test a batch webhook")
    hook = _own(deps, principal, endpoint_id)
    if not isinstance(body, dict) or set(body) - {"event_type"}:
        raise BadRequest('A test takes {"event_type": "batch.completed"} (or another batch event).')
    event_type = body.get("event_type")
    if event_type not in SENT_EVENT_TYPES:
        raise BadRequest(f"'event_type' must be one of {', '.join(SENT_EVENT_TYPES)}.", param="event_type")
    created_ms = int(deps.clock() * 1000)
    event = EventMessage(
        f"{EVENT_PREFIX}test_{secrets.token_hex(12)}",
        principal.user_id,
        "batch_test",
        event_type,
        created_ms,
        test=True,
    )
    deps.events.send(event)
    # The receiver's deadline, and the queue's hop to the webhook function and back.
    waited = time.monotonic() + min(
        deps.settings.batch_webhook_timeout_seconds + TEST_HOPS_SECONDS, TEST_WAIT_MOST
    )
    while True:
        record = deps.webhooks.delivery(principal.user_id, created_ms, event.event_id)
        if record is not None and (record.attempts or record.last_error):
            break
        if time.monotonic() >= waited:
            raise BadRequest(
                "The test event was not sent in time (the webhook function is busy with your earlier "
                "events); it is sent when its turn comes: see GET /v1/batch_webhook/events.",
                code="webhook_test_failed",
            )
        time.sleep(TEST_POLL_SECONDS)
    if record.last_status is None:
        raise BadRequest(
            f"The webhook endpoint did not answer the test event: {record.last_error}.",
            code="webhook_test_failed",
        )
    return {
        "object": "webhook_endpoint.test",
        "webhook_endpoint_id": hook.id,
        "event_type": event_type,
        "status_code": record.last_status,
        "success": True,
    }


def endpoint_object(hook: Webhook, *, secret: str | None = None) -> dict[str, Any]:
    shown: dict[str, Any] = {
        "id": hook.id,
        "object": "webhook_endpoint",
        "created_at": hook.created_at,
        "updated_at": hook.updated_at,
        "name": hook.name or "batch webhook",
        "url": hook.url,
        "event_types": list(hook.event_types),
        "signing_secret_hint": hook.secret_hint,
        "enabled": hook.enabled,
        "disabled_reason": hook.disabled_reason,
    }
    if secret is not None:
        shown["signing_secret"] = secret
    return shown


def _own(deps: Deps, principal: Principal, endpoint_id: str) -> Webhook:
    hook = deps.webhooks.get(principal.user_id)
    if hook is None or hook.id != endpoint_id:
        raise NotFound(f"No webhook endpoint found with id '{endpoint_id}'.", param="webhook_endpoint_id")
    return hook


def _fields(body: Any, *, required: bool) -> dict[str, Any]:
    """The endpoint fields of a create (``url``, ``name``, ``event_types`` all required) or an
    update (any of them)."""
    if not isinstance(body, dict):
        raise BadRequest('Send {"url": "https://…", "name": "…", "event_types": ["batch.completed"]}.')
    unknown = sorted(set(body) - _CREATE_KEYS)
    if unknown:
        raise BadRequest(f"Unknown field '{unknown[0]}'.", param=unknown[0])
    missing = sorted(_CREATE_KEYS - set(body)) if required else []
    if missing:
        raise BadRequest(f"'{missing[0]}' is required.", param=missing[0])
    fields: dict[str, Any] = {}
    if "url" in body:
        if not isinstance(body["url"], str):
            raise BadRequest("'url' must be an https URL.", param="url")
        fields["url"] = body["url"]
    if "name" in body:
        name = body["name"]
        if not isinstance(name, str) or not name.strip() or len(name) > MAX_NAME_CHARS:
            raise BadRequest(f"'name' must be text of 1 to {MAX_NAME_CHARS} characters.", param="name")
        fields["name"] = name.strip()
    if "event_types" in body:
        types = body["event_types"]
        if not isinstance(types, list) or not types or not all(isinstance(t, str) for t in types):
            raise BadRequest("'event_types' must be a list of event types.", param="event_types")
        other = sorted(set(types) - set(SENT_EVENT_TYPES))
        if other:
            raise BadRequest(
                f"'{other[0]}' is not sent by this gateway: it sends {', '.join(SENT_EVENT_TYPES)}.",
                param="event_types",
                code="unsupported_event_type",
            )
        fields["event_types"] = tuple(t for t in SENT_EVENT_TYPES if t in types)
    return fields
