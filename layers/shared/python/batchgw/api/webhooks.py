"""A user's batch webhook: ``PUT|GET|DELETE /v1/batch_webhook`` and
``GET /v1/batch_webhook/events``.

Setting one up, changing its URL, rotating its secret or turning it back on needs
BATCH_MIN_ROLE, checked before anything is stored or resolved; reading it, its deliveries
and deleting it do not. The URL must pass the address rules (``domain.addresses``) when it
is saved, its host resolved once and every address checked. The signing secret is shown
once, when it is made (``rotate_secret`` makes a new one; the old one still signs for an
overlap), and stored encrypted.
"""

from __future__ import annotations

import secrets
from typing import Any

from batchgw.api.auth import require_role
from batchgw.api.params import list_page
from batchgw.deps import Deps
from batchgw.domain.addresses import Refused, check_addresses, check_url
from batchgw.domain.errors import BadRequest, NotFound
from batchgw.domain.principal import Principal
from batchgw.domain.webhooks import (
    ENDPOINT_PREFIX,
    ROTATION_OVERLAP_SECONDS,
    SECRET_BYTES,
    hint_of,
    new_secret,
)
from batchgw.storage.webhooks import Delivery, Webhook

_FIELDS = {"url", "rotate_secret"}


def put_webhook(deps: Deps, principal: Principal, body: Any) -> dict[str, Any]:
    require_role(deps, principal, "set up a batch webhook")
    if not isinstance(body, dict) or not isinstance(body.get("url"), str):
        raise BadRequest(
            'Send {"url": "https://…"} (and "rotate_secret": true for a new secret).', param="url"
        )
    unknown = sorted(set(body) - _FIELDS)
    if unknown:
        raise BadRequest(f"Unknown field '{unknown[0]}'.", param=unknown[0])
    rotate = body.get("rotate_secret", False)
    if not isinstance(rotate, bool):
        raise BadRequest("rotate_secret must be true or false.", param="rotate_secret")
    url = checked_url(deps, body["url"])
    now = deps.clock()
    existing = deps.webhooks.get(principal.user_id)
    shown: str | None = None
    if existing is None or rotate:
        shown = new_secret(secrets.token_bytes(SECRET_BYTES))
    sealed = None if shown is None else deps.sealer.seal(shown, user_id=principal.user_id)
    hint = None if shown is None else hint_of(shown)
    if existing is None:
        assert sealed is not None
        hook = Webhook(
            principal.user_id,
            url,
            True,
            int(now),
            int(now),
            sealed,
            endpoint_id=ENDPOINT_PREFIX + secrets.token_hex(16),
            secret_hint=hint,
        )
    else:
        hook = Webhook(
            principal.user_id,
            url,
            enabled=True,  # saving it turns it back on
            created_at=existing.created_at,
            updated_at=int(now),
            secret=sealed or existing.secret,
            previous_secret=existing.secret if sealed is not None else existing.previous_secret,
            previous_until=now + ROTATION_OVERLAP_SECONDS if sealed is not None else existing.previous_until,
            endpoint_id=existing.id,
            name=existing.name,
            event_types=existing.event_types,
            secret_hint=hint or existing.secret_hint,
        )
    deps.webhooks.put(hook)
    return webhook_object(hook, secret=shown)


def checked_url(deps: Deps, url: str) -> str:
    allow_private = deps.settings.batch_webhook_allow_private_targets
    try:
        target = check_url(url, allow_private=allow_private)
        if target.literal is None:
            check_addresses(target.host, deps.resolve(target.host, target.port), allow_private=allow_private)
    except Refused as exc:
        raise BadRequest(
            f"This webhook URL is refused: {exc}.", param="url", code="invalid_webhook_url"
        ) from exc
    return target.url.strip()


def get_webhook(deps: Deps, principal: Principal) -> dict[str, Any]:
    return webhook_object(_own(deps, principal))


def delete_webhook(deps: Deps, principal: Principal) -> dict[str, Any]:
    _own(deps, principal)
    deps.webhooks.delete(principal.user_id)
    return {"object": "batch_webhook.deleted", "deleted": True}


def list_events(deps: Deps, principal: Principal) -> dict[str, Any]:
    """The user's recent deliveries, newest first (kept a week)."""
    return list_page(
        [_delivery_object(d) for d in deps.webhooks.deliveries(principal.user_id)], has_more=False
    )


def _own(deps: Deps, principal: Principal) -> Webhook:
    hook = deps.webhooks.get(principal.user_id)
    if hook is None:
        raise NotFound("You have no batch webhook.", code="webhook_not_found")
    return hook


def webhook_object(hook: Webhook, *, secret: str | None = None) -> dict[str, Any]:
    shown: dict[str, Any] = {
        "object": "batch_webhook",
        "url": hook.url,
        "enabled": hook.enabled,
        "disabled_reason": hook.disabled_reason,
        "suspended_until": None if hook.suspended_until is None else int(hook.suspended_until),
        "created_at": hook.created_at,
        "updated_at": hook.updated_at,
    }
    if secret is not None:
        shown["secret"] = secret
    return shown


def _delivery_object(delivery: Delivery) -> dict[str, Any]:
    return {
        "id": delivery.event_id,
        "object": "batch_webhook.delivery",
        "type": delivery.type,
        "batch_id": delivery.batch_id,
        "created_at": delivery.created_at,
        "attempts": delivery.attempts,
        "last_status": delivery.last_status,
        "last_error": delivery.last_error,
        "next_attempt_at": None if delivery.next_attempt_at is None else int(delivery.next_attempt_at),
        "delivered_at": None if delivery.delivered_at is None else int(delivery.delivered_at),
    }
