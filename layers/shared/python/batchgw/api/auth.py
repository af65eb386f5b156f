"""Who is calling: the API key in ``Authorization: Bearer``, resolved to a principal."""

from __future__ import annotations

from batchgw.deps import Deps
from batchgw.domain.errors import Forbidden, NotFound, Unauthorized
from batchgw.domain.principal import Principal, hash_key

_KEY_CACHE_SECONDS = 30.0
_key_cache: dict[str, tuple[float, Principal | None]] = {}


def authenticate(deps: Deps, authorization: str | None) -> Principal:
    """The principal behind ``Authorization: Bearer <key>``; 401 when missing or unknown.

    A key's record is cached for 30 seconds per process.
    """
    if not authorization or not authorization.lower().startswith("bearer "):
        raise Unauthorized("Missing API key: send 'Authorization: Bearer <key>'.", code="invalid_api_key")
    digest = hash_key(authorization[7:].strip())
    now = deps.clock()
    cached = _key_cache.get(digest)
    if cached is None or cached[0] < now:
        record = deps.keys.get(digest)
        principal = None
        if record is not None and not record.get("revoked"):
            principal = Principal(
                user_id=str(record["user_id"]),
                role=str(record["role"]),
                key_id=str(record.get("key_id", digest[:16])),
            )
        cached = (now + _KEY_CACHE_SECONDS, principal)
        _key_cache[digest] = cached
    if cached[1] is None:
        raise Unauthorized("Invalid API key.", code="invalid_api_key")
    return cached[1]


def ensure_enabled(deps: Deps) -> None:
    """With BATCH_ENABLED off, every batch route answers 404."""
    if not deps.settings.batch_enabled:
        raise NotFound("Batch inference is not available on this gateway.", code="batch_disabled")


def require_role(deps: Deps, principal: Principal, what: str) -> None:
    """403 unless the caller's role is at least BATCH_MIN_ROLE."""
    if not principal.at_least(deps.settings.batch_min_role):
        raise Forbidden(f"Your role may not {what} (needs {deps.settings.batch_min_role} or above).")
