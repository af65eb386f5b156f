"""Users and API keys: the admin API (administrators only) and a user's own profile.

Routes: ``POST|GET /admin/users``, ``GET|PATCH|DELETE /admin/users/{id}``,
``POST|GET /admin/users/{id}/keys``, ``PATCH /admin/keys/{id}``,
``POST /admin/keys/{id}/revoke``, ``POST /admin/keys/{id}/regenerate``. A key's secret is
shown once, when it is made; afterwards only its prefix. Amounts are USD (null: unlimited),
stored as integer nano-dollars.
"""

from __future__ import annotations

import functools
import secrets
from collections.abc import Callable
from decimal import Decimal, InvalidOperation
from typing import Any

from batchgw.api import batches, files
from batchgw.api.auth import forget_keys
from batchgw.api.ids import new_id
from batchgw.api.params import MAX_UNIX_SECONDS
from batchgw.deps import Deps
from batchgw.domain import money
from batchgw.domain.accounts import DEFAULT_WEIGHT, KeyRecord, UserRecord, UserStatus
from batchgw.domain.errors import ApiError, BadRequest, Forbidden, NotFound
from batchgw.domain.principal import ROLES, Principal, hash_key
from batchgw.domain.spend import Spend
from batchgw.storage.spend import Payer

USER_PREFIX = "user_"
KEY_PREFIX = "key_"
SECRET_PREFIX = "sk-"
VISIBLE_PREFIX_CHARS = 12
_MAX_TEXT = 200
MAX_WEIGHT = 100
WEIGHT_STEP = Decimal("0.000001")


def _changes_accounts(change: Callable[..., dict[str, Any]]) -> Callable[..., dict[str, Any]]:
    """An administrator's change to an account: once it is written (or failed part way), this
    process forgets its cached keys, and every other one at its next read of the runtime
    overrides (``LiveConfig.note_accounts_changed``): a revoked key, a suspended, demoted or
    deleted user is refused everywhere within BATCHGW_RUNTIME_REFRESH_SECONDS."""

    def spread(deps: Deps) -> None:
        forget_keys()
        deps.live.note_accounts_changed()

    @functools.wraps(change)
    def changed(deps: Deps, *args: Any, **kwargs: Any) -> dict[str, Any]:
        try:
            done = change(deps, *args, **kwargs)
        except ApiError:
            raise  # refused before anything was written
        except Exception:
            spread(deps)  # it may have been written in part
            raise
        spread(deps)
        return done

    return changed


def require_admin(principal: Principal) -> None:
    if not principal.is_admin:
        raise Forbidden("Only an administrator may do this.", code="admin_only")


# --- shapes --------------------------------------------------------------------------------------


def _usd(nano: int | None) -> float | None:
    return None if nano is None else money.usd_float(nano)


def user_object(user: UserRecord) -> dict[str, Any]:
    return {
        "id": user.id,
        "object": "user",
        "name": user.name,
        "email": user.email,
        "role": user.role,
        "status": user.status.value,
        "daily_quota_usd": _usd(user.daily_quota_nano),
        "monthly_quota_usd": _usd(user.monthly_quota_nano),
        "created_at": user.created_at,
        "weight": float(user.weight),
    }


def key_object(key: KeyRecord, secret: str | None = None) -> dict[str, Any]:
    shown: dict[str, Any] = {
        "id": key.id,
        "object": "api_key",
        "user_id": key.user_id,
        "name": key.name,
        "prefix": key.prefix,
        "created_at": key.created_at,
        "expires_at": key.expires_at,
        "revoked_at": key.revoked_at,
        "daily_budget_usd": _usd(key.daily_budget_nano),
        "monthly_budget_usd": _usd(key.monthly_budget_nano),
    }
    if secret is not None:
        shown["key"] = secret  # shown once
    return shown


# --- bodies ------------------------------------------------------------------------------------


def _object(body: Any) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise BadRequest("The body must be a JSON object.")
    return body


def _only(body: dict[str, Any], allowed: set[str]) -> None:
    unknown = sorted(set(body) - allowed)
    if unknown:
        raise BadRequest(f"Unknown field '{unknown[0]}'.", param=unknown[0])


def _text(body: dict[str, Any], name: str, *, required: bool, email: bool = False) -> str | None:
    value = body.get(name)
    if value is None and not required:
        return None
    if (
        not isinstance(value, str)
        or not value.strip()
        or len(value) > _MAX_TEXT
        or (email and "@" not in value)
    ):
        what = "an email address" if email else f"a string of 1-{_MAX_TEXT} characters"
        raise BadRequest(f"'{name}' must be {what}.", param=name)
    return value.strip()


def _role(body: dict[str, Any], *, required: bool) -> str | None:
    role = body.get("role")
    if role is None and not required:
        return None
    if role not in ROLES:
        raise BadRequest(f"'role' must be one of {', '.join(ROLES)}.", param="role")
    return str(role)


def nano_of(body: dict[str, Any], name: str) -> int | None:
    """A USD amount (a non-negative number, or null for unlimited) as nano-dollars."""
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise BadRequest(f"'{name}' must be a non-negative number of USD, or null.", param=name)
    try:
        amount = Decimal(str(value))
    except InvalidOperation:
        raise BadRequest(f"'{name}' must be a non-negative number of USD, or null.", param=name) from None
    if not amount.is_finite() or amount < 0 or amount > 10**9:
        raise BadRequest(f"'{name}' must be a non-negative number of USD, or null.", param=name)
    return int(amount * money.NANO_PER_USD)


def _weight(body: dict[str, Any]) -> Decimal:
    """A user's weight: a number above 0, at most ``MAX_WEIGHT``, kept to ``WEIGHT_STEP`` (their
    share of batch capacity against other users'; the engine does not use it yet)."""
    value = body["weight"]
    amount = None
    if not isinstance(value, bool) and isinstance(value, int | float):
        try:
            amount = Decimal(str(value))
        except InvalidOperation:
            amount = None
    if amount is not None and amount.is_finite() and 0 < amount <= MAX_WEIGHT:
        amount = amount.quantize(WEIGHT_STEP).normalize()  # 1e-300 is no weight DynamoDB keeps
        if amount > 0:
            return amount
    raise BadRequest(
        f"'weight' must be a number above 0 (to {WEIGHT_STEP} at the finest) and at most {MAX_WEIGHT}.",
        param="weight",
    )


def _time(body: dict[str, Any], name: str) -> int | None:
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_UNIX_SECONDS:
        raise BadRequest(f"'{name}' must be unix seconds (up to the year 9999), or null.", param=name)
    return value


# --- users -------------------------------------------------------------------------------------


def _visible_user(deps: Deps, user_id: str) -> UserRecord:
    user = deps.accounts.user(user_id)
    if user is None or user.status is UserStatus.DELETED:
        raise NotFound(f"No user '{user_id}'.", code="user_not_found")
    return user


def create_user(deps: Deps, principal: Principal, body: Any) -> dict[str, Any]:
    require_admin(principal)
    body = _object(body)
    _only(body, {"name", "email", "role", "daily_quota_usd", "monthly_quota_usd", "weight"})
    user = UserRecord(
        id=new_id(USER_PREFIX, deps.clock()),
        name=str(_text(body, "name", required=True)),
        email=str(_text(body, "email", required=True, email=True)),
        role=str(_role(body, required=True)),
        daily_quota_nano=nano_of(body, "daily_quota_usd"),
        monthly_quota_nano=nano_of(body, "monthly_quota_usd"),
        created_at=int(deps.clock()),
        weight=DEFAULT_WEIGHT if body.get("weight") is None else _weight(body),
    )
    deps.accounts.create(user)
    return user_object(user)


def list_users(deps: Deps, principal: Principal) -> dict[str, Any]:
    require_admin(principal)
    users = [user_object(u) for u in deps.accounts.users() if u.status is not UserStatus.DELETED]
    return {"object": "list", "data": users, "has_more": False}


def get_user(deps: Deps, principal: Principal, user_id: str) -> dict[str, Any]:
    require_admin(principal)
    return user_object(_visible_user(deps, user_id))


@_changes_accounts
def update_user(deps: Deps, principal: Principal, user_id: str, body: Any) -> dict[str, Any]:
    require_admin(principal)
    body = _object(body)
    _only(body, {"name", "email", "role", "status", "daily_quota_usd", "monthly_quota_usd", "weight"})
    _visible_user(deps, user_id)
    fields: dict[str, Any] = {}
    if "name" in body:
        fields["name"] = _text(body, "name", required=True)
    if "email" in body:
        fields["email"] = _text(body, "email", required=True, email=True)
    if "role" in body:
        fields["role"] = _role(body, required=True)
    if "status" in body:
        if body["status"] not in (UserStatus.ACTIVE.value, UserStatus.SUSPENDED.value):
            raise BadRequest(
                "'status' must be 'active' or 'suspended' (DELETE removes a user).", param="status"
            )
        fields["status"] = body["status"]
    if "weight" in body:
        fields["weight"] = _weight(body)
    for name, stored in (
        ("daily_quota_usd", "daily_quota_nano"),
        ("monthly_quota_usd", "monthly_quota_nano"),
    ):
        if name in body:
            fields[stored] = nano_of(body, name)
    changed = deps.accounts.change_user(user_id, fields) if fields else deps.accounts.user(user_id)
    if changed is None:
        raise NotFound(f"No user '{user_id}'.", code="user_not_found")
    return user_object(changed)


@_changes_accounts
def delete_user(deps: Deps, principal: Principal, user_id: str) -> dict[str, Any]:
    """Delete a user: their keys are revoked and the account reads as gone at once; their
    files, Idempotency-Keys and webhook are deleted, and their batches purged in the
    background. A batch with requests running under a live lease is cancelled instead and
    kept until they end, so what they cost is still recorded (``batches_pending``): the
    same DELETE again (it may be repeated, whatever failed part way) removes it then."""
    require_admin(principal)
    user = deps.accounts.user(user_id)
    if user is None:
        raise NotFound(f"No user '{user_id}'.", code="user_not_found")
    now = deps.clock()
    _, keys = deps.accounts.account(user_id)
    for key in keys:
        if key.revoked_at is None:
            deps.accounts.change_key(user_id, key.id, {"revoked_at": int(now)})
    if user.status is not UserStatus.DELETED:
        deps.accounts.change_user(user_id, {"status": UserStatus.DELETED.value})
    pending = []
    for batch in batches.batches_of(deps, user_id):
        if deps.batches.runs_live(batch.id, deps.clock()):
            if not batch.status.is_final:
                batches.cancel_batch(deps, principal, batch.id)
            pending.append(batch.id)
            continue
        batches.remove(deps, batch)
    files.delete_all_of(deps, user_id)
    deps.idempotency.delete_all_of(user_id)
    deps.webhooks.delete_all(user_id)
    return {"id": user_id, "object": "user.deleted", "deleted": True, "batches_pending": pending}


def me(deps: Deps, principal: Principal) -> dict[str, Any]:
    """GET /v1/me: the caller's profile, role, quotas and spend, their stored inputs' bytes
    against their limit, the key they called with
    (its budgets and spend) and every key of theirs (prefix only)."""
    user, keys = deps.accounts.account(principal.user_id)
    key = next((k for k in keys if k.id == principal.key_id), None)
    if user is None or key is None:
        raise NotFound("No such user.", code="user_not_found")
    now = deps.clock()
    user_spend, key_spend = deps.spend.read(Payer(user.id, key.id), now)
    return {
        **user_object(user),
        **_spent(user_spend),
        # Input files and the batches' copies of their inputs (``domain.usage``).
        "stored_input_bytes": deps.usage.read(user.id).live_file_bytes(now),
        "stored_input_limit_bytes": files.storage_limit(deps),
        "key": {
            "id": key.id,
            "prefix": key.prefix,
            "name": key.name,
            "expires_at": key.expires_at,
            "daily_budget_usd": _usd(key.daily_budget_nano),
            "monthly_budget_usd": _usd(key.monthly_budget_nano),
            **_spent(key_spend),
        },
        "keys": [key_object(k) for k in keys],
    }


def _spent(spend: Spend) -> dict[str, float]:
    """What counts against quotas and budgets today and this month: known costs, and each
    attempt of unknown cost at the most it could have cost (``unknown_cost_*``, part of it)."""
    return {
        "spend_today_usd": money.usd_float(spend.today),
        "spend_month_usd": money.usd_float(spend.month),
        "unknown_cost_today_usd": money.usd_float(spend.unknown_today),
        "unknown_cost_month_usd": money.usd_float(spend.unknown_month),
    }


# --- keys --------------------------------------------------------------------------------------


def new_key(deps: Deps, user_id: str, *, name: str = "", **fields: Any) -> tuple[KeyRecord, str]:
    """A new key of ``user_id`` (stored), and its secret."""
    secret = SECRET_PREFIX + secrets.token_urlsafe(32)
    key = KeyRecord(
        id=new_id(KEY_PREFIX, deps.clock()),
        user_id=user_id,
        key_hash=hash_key(secret),
        prefix=secret[:VISIBLE_PREFIX_CHARS],
        name=name,
        created_at=int(deps.clock()),
        **fields,
    )
    deps.accounts.add_key(key)
    return key, secret


def create_key(deps: Deps, principal: Principal, user_id: str, body: Any) -> dict[str, Any]:
    require_admin(principal)
    body = _object(body if body is not None else {})
    _only(body, {"name", "expires_at", "daily_budget_usd", "monthly_budget_usd"})
    _visible_user(deps, user_id)
    key, secret = new_key(
        deps,
        user_id,
        name=_text(body, "name", required=False) or "",
        expires_at=_time(body, "expires_at"),
        daily_budget_nano=nano_of(body, "daily_budget_usd"),
        monthly_budget_nano=nano_of(body, "monthly_budget_usd"),
    )
    return key_object(key, secret)


def list_keys(deps: Deps, principal: Principal, user_id: str) -> dict[str, Any]:
    require_admin(principal)
    _visible_user(deps, user_id)
    _, keys = deps.accounts.account(user_id)
    return {"object": "list", "data": [key_object(k) for k in keys], "has_more": False}


def _visible_key(deps: Deps, key_id: str) -> KeyRecord:
    owner = deps.accounts.owner_of_key(key_id) if key_id.startswith(KEY_PREFIX) else None
    key = None if owner is None else deps.accounts.key(owner, key_id)
    if key is None:
        raise NotFound(f"No key '{key_id}'.", code="key_not_found")
    return key


@_changes_accounts
def update_key(deps: Deps, principal: Principal, key_id: str, body: Any) -> dict[str, Any]:
    require_admin(principal)
    body = _object(body)
    _only(body, {"name", "expires_at", "daily_budget_usd", "monthly_budget_usd"})
    key = _visible_key(deps, key_id)
    fields: dict[str, Any] = {}
    if "name" in body:
        fields["name"] = _text(body, "name", required=False) or ""
    if "expires_at" in body:
        fields["expires_at"] = _time(body, "expires_at")
    for name, stored in (
        ("daily_budget_usd", "daily_budget_nano"),
        ("monthly_budget_usd", "monthly_budget_nano"),
    ):
        if name in body:
            fields[stored] = nano_of(body, name)
    changed = deps.accounts.change_key(key.user_id, key.id, fields) if fields else key
    assert changed is not None
    return key_object(changed)


@_changes_accounts
def revoke_key(deps: Deps, principal: Principal, key_id: str) -> dict[str, Any]:
    require_admin(principal)
    key = _visible_key(deps, key_id)
    if key.revoked_at is not None:
        return key_object(key)
    revoked = deps.accounts.change_key(key.user_id, key.id, {"revoked_at": int(deps.clock())})
    assert revoked is not None
    return key_object(revoked)


@_changes_accounts
def regenerate_key(deps: Deps, principal: Principal, key_id: str) -> dict[str, Any]:
    """A new secret in place of the key: the old key is revoked (batches it created fail)
    and a new one with its name, expiry and budgets is made."""
    require_admin(principal)
    old = _visible_key(deps, key_id)
    if old.revoked_at is None:
        deps.accounts.change_key(old.user_id, old.id, {"revoked_at": int(deps.clock())})
    key, secret = new_key(
        deps,
        old.user_id,
        name=old.name,
        expires_at=old.expires_at,
        daily_budget_nano=old.daily_budget_nano,
        monthly_budget_nano=old.monthly_budget_nano,
    )
    return key_object(key, secret)
