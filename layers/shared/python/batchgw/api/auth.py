"""Who is calling: the API key in ``Authorization: Bearer``, resolved to a principal; or a
console session (its cookie, and for a call that changes something its CSRF header), which
calls as the key it signed in with."""

from __future__ import annotations

import hmac
from collections import OrderedDict
from dataclasses import dataclass

from batchgw.deps import Deps
from batchgw.domain.accounts import UserStatus
from batchgw.domain.errors import AccountSuspended, Forbidden, NotFound, RateLimited, Unauthorized
from batchgw.domain.principal import Principal, hash_key
from batchgw.domain.rates import RateRule


@dataclass(frozen=True, slots=True)
class _Remembered:
    until: float  # when it must be looked up again
    principal: Principal | None  # None: the key names nobody who may call


class _KeyCache:
    """What a process remembers of keys, by hash: at most ``size`` entries (the least
    recently used go first), each until its own expiry."""

    def __init__(self) -> None:
        self._entries: OrderedDict[str, _Remembered] = OrderedDict()

    def get(self, digest: str, now: float) -> _Remembered | None:
        entry = self._entries.get(digest)
        if entry is None or entry.until < now:
            return None
        self._entries.move_to_end(digest)
        return entry

    def put(self, digest: str, entry: _Remembered, size: int) -> None:
        self._entries[digest] = entry
        self._entries.move_to_end(digest)
        while len(self._entries) > size:
            self._entries.popitem(last=False)

    def clear(self) -> None:
        self._entries.clear()

    def __len__(self) -> int:
        return len(self._entries)


# Keys that exist (with what they name), and keys that do not: apart, so a flood of made-up
# keys cannot push the callers' own keys out of this process's memory.
_known_keys = _KeyCache()
_unknown_keys = _KeyCache()


def authenticate(deps: Deps, authorization: str | None, *, admin_plane: bool = False) -> Principal:
    """The principal behind ``Authorization: Bearer <key>``, once it took its turn of the
    key's request rate: 401 when missing or unknown, 403 when its account is suspended,
    429 ``rate_limited`` (with ``Retry-After``) over BATCH_API_RATE_PER_KEY. On the admin
    routes (``admin_plane``) an administrator's key takes no turn: no value of the setting
    keeps an administrator from changing it back.

    What a key names is cached per process for BATCH_OWNER_CACHE_SECONDS (a change made
    through this process's admin API applies at once); that a key does not exist, for
    BATCH_AUTH_UNKNOWN_KEY_SECONDS, so a caller with made-up keys reaches DynamoDB once per
    key in that time, and never touches any key's request rate.
    """
    principal = _identify(deps, authorization)
    if not (admin_plane and principal.is_admin):
        _take_turn(deps, principal)
    return principal


def forget_keys() -> None:
    """Drop what this process cached of keys (after an administrator changed an account)."""
    _known_keys.clear()
    _unknown_keys.clear()


# The accounts version (``LiveConfig.accounts_version``) the cached keys were read under.
_cached_under: list[int] = [0]


def _forget_if_accounts_changed(deps: Deps) -> None:
    """An administrator changed an account anywhere (the admin function is another process on
    AWS): what this process cached of keys may be stale; forget it. So a revoked key, or a
    suspended or demoted user, is refused everywhere within a refresh of the runtime
    overrides (BATCHGW_RUNTIME_REFRESH_SECONDS), whatever BATCH_OWNER_CACHE_SECONDS says."""
    version = deps.live.accounts_version
    if version != _cached_under[0]:
        forget_keys()
        _cached_under[0] = version


def cached_keys() -> tuple[int, int]:
    """How many keys this process remembers: (known, unknown)."""
    return len(_known_keys), len(_unknown_keys)


# A suspended account's key is recognised but refused (403, not 401).
SUSPENDED = Principal(user_id="", role="", key_id="suspended")


def _identify(deps: Deps, authorization: str | None) -> Principal:
    if not authorization or not authorization.lower().startswith("bearer "):
        raise Unauthorized("Missing API key: send 'Authorization: Bearer <key>'.", code="invalid_api_key")
    digest = hash_key(authorization[7:].strip())
    now = deps.clock()
    settings = deps.settings
    _forget_if_accounts_changed(deps)
    remembered = _known_keys.get(digest, now) or _unknown_keys.get(digest, now)
    if remembered is None:
        found = deps.accounts.by_hash(digest)
        if found is None:
            remembered = _Remembered(now + settings.batch_auth_unknown_key_seconds, None)
            _unknown_keys.put(digest, remembered, settings.batch_auth_cache_keys)
        else:
            principal = _principal_of(deps, found[0], found[1], now)
            remembered = _Remembered(now + settings.batch_owner_cache_seconds, principal)
            _known_keys.put(digest, remembered, settings.batch_auth_cache_keys)
    principal = remembered.principal
    if principal is None:
        raise Unauthorized("Invalid API key: unknown, revoked or expired.", code="invalid_api_key")
    if principal == SUSPENDED:
        raise AccountSuspended()
    return principal


def _principal_of(deps: Deps, user_id: str, key_id: str, now: float) -> Principal | None:
    """Who a key names: its user, if the key is usable and the account active."""
    user, keys = deps.accounts.account(user_id)
    key = next((k for k in keys if k.id == key_id), None)
    if user is None or key is None or not key.usable(now) or user.status is UserStatus.DELETED:
        return None
    if user.status is UserStatus.SUSPENDED:
        return SUSPENDED
    return Principal(user_id=user.id, role=user.role, key_id=key.id)


def _take_turn(deps: Deps, principal: Principal) -> None:
    """Take one request of the key's rate (BATCH_API_RATE_PER_KEY; 0: unlimited)."""
    per_second = deps.settings.batch_api_rate_per_key
    if per_second <= 0:
        return
    wait = deps.rates.take(principal.key_id, RateRule(per_second), deps.clock)
    if wait is not None:
        raise RateLimited(wait)


def ensure_enabled(deps: Deps) -> None:
    """With BATCH_ENABLED off, every batch route answers 404."""
    if not deps.settings.batch_enabled:
        raise NotFound("Batch inference is not available on this gateway.", code="batch_disabled")


def require_role(deps: Deps, principal: Principal, what: str) -> None:
    """403 unless the caller's role is at least BATCH_MIN_ROLE."""
    if not principal.at_least(deps.settings.batch_min_role):
        raise Forbidden(f"Your role may not {what} (needs {deps.settings.batch_min_role} or above).")


# --- the console's sessions ---------------------------------------------------------------------

SESSION_COOKIE = "batchgw_session"
CSRF_HEADER = "x-csrf-token"
# Methods that change nothing: a session calls them without its CSRF header.
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


def session_token_hash(token: str) -> str:
    return hash_key(token)


def session_caller(deps: Deps, token: str, *, method: str, csrf: str | None) -> Principal:
    """The principal of a console session: the API key it signed in with, as that key would
    call now (401 once the session ended or the key was revoked, 403 for a suspended account),
    after its turn of the key's request rate. A call that may change something must carry the
    session's CSRF token in ``X-CSRF-Token`` (403 ``csrf_failed``): the cookie alone, which a
    browser sends with any request, is not enough."""
    session = deps.sessions.get(session_token_hash(token), now=deps.clock())
    if session is None:
        raise Unauthorized("Your console session has ended: sign in again.", code="session_expired")
    if method.upper() not in SAFE_METHODS and not (
        csrf and hmac.compare_digest(csrf.encode(), session.csrf.encode())  # any text: bytes
    ):
        raise Forbidden(
            "This call changes something: send the session's CSRF token in X-CSRF-Token.", code="csrf_failed"
        )
    principal = _principal_of(deps, session.user_id, session.key_id, deps.clock())
    if principal is None:
        raise Unauthorized(
            "The key this session signed in with is revoked or expired.", code="invalid_api_key"
        )
    if principal == SUSPENDED:
        raise AccountSuspended()
    _take_turn(deps, principal)
    return principal
