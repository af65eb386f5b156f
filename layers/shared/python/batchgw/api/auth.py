"""Who is calling: the API key in ``Authorization: Bearer``, resolved to a principal."""

from __future__ import annotations

from batchgw.deps import Deps
from batchgw.domain.accounts import UserStatus
from batchgw.domain.errors import Forbidden, NotFound, Unauthorized
from batchgw.domain.principal import Principal, hash_key

_key_cache: dict[str, tuple[float, Principal | None]] = {}


def authenticate(deps: Deps, authorization: str | None) -> Principal:
    """The principal behind ``Authorization: Bearer <key>``; 401 when missing or unknown.

    What a key names is cached per process for BATCH_OWNER_CACHE_SECONDS (a change made
    through this process's admin API applies at once).
    """
    if not authorization or not authorization.lower().startswith("bearer "):
        raise Unauthorized("Missing API key: send 'Authorization: Bearer <key>'.", code="invalid_api_key")
    digest = hash_key(authorization[7:].strip())
    now = deps.clock()
    cached = _key_cache.get(digest)
    if cached is None or cached[0] < now:
        cached = (now + deps.settings.batch_owner_cache_seconds, _principal_of(deps, digest, now))
        _key_cache[digest] = cached
    principal = cached[1]
    if principal is None:
        raise Unauthorized("Invalid API key: unknown, revoked or expired.", code="invalid_api_key")
    if principal == SUSPENDED:
        raise Forbidden("Your account is suspended.", code="account_suspended")
    return principal


def forget_keys() -> None:
    """Drop what this process cached of keys (after an administrator changed an account)."""
    _key_cache.clear()


# A suspended account's key is recognised but refused (403, not 401).
SUSPENDED = Principal(user_id="", role="", key_id="suspended")


def _principal_of(deps: Deps, digest: str, now: float) -> Principal | None:
    """Who a key's hash names: its user, if the key is usable and the account active."""
    found = deps.accounts.by_hash(digest)
    if found is None:
        return None
    user, keys = deps.accounts.account(found[0])
    key = next((k for k in keys if k.id == found[1]), None)
    if user is None or key is None or not key.usable(now) or user.status is UserStatus.DELETED:
        return None
    if user.status is UserStatus.SUSPENDED:
        return SUSPENDED
    return Principal(user_id=user.id, role=user.role, key_id=key.id)


def ensure_enabled(deps: Deps) -> None:
    """With BATCH_ENABLED off, every batch route answers 404."""
    if not deps.settings.batch_enabled:
        raise NotFound("Batch inference is not available on this gateway.", code="batch_disabled")


def require_role(deps: Deps, principal: Principal, what: str) -> None:
    """403 unless the caller's role is at least BATCH_MIN_ROLE."""
    if not principal.at_least(deps.settings.batch_min_role):
        raise Forbidden(f"Your role may not {what} (needs {deps.settings.batch_min_role} or above).")
