"""The console's sign-in: an API key entered once becomes a session.

``POST /console/session`` ``{"api_key": "sk-..."}`` checks the key as any call would and
answers the session (the user, the key's id and prefix, its CSRF token, when it ends) with
an HttpOnly, SameSite=Strict cookie (Secure unless the console is served from this machine).
From then on the browser's calls carry the cookie, and those that may change something the
CSRF token in ``X-CSRF-Token`` (``api.auth.session_caller``): the key never reaches the
page's JavaScript or its storage, and the page shows its prefix only. ``GET`` answers the
session again (after a reload); ``DELETE`` ends it on the server, whatever the browser keeps.
"""

from __future__ import annotations

import secrets
from typing import Any

from batchgw.api import auth
from batchgw.deps import Deps
from batchgw.domain.errors import BadRequest, Unauthorized
from batchgw.domain.principal import Principal
from batchgw.storage.sessions import Session

SESSION_SECONDS = 12 * 3600
LOCAL_HOSTS = frozenset({"localhost", "127.0.0.1", "[::1]"})


def sign_in(deps: Deps, body: Any) -> tuple[dict[str, Any], str]:
    """A new session for the key in ``body``: what the page is shown, and the cookie's token."""
    if not isinstance(body, dict) or set(body) != {"api_key"} or not isinstance(body["api_key"], str):
        raise BadRequest('Sign in with {"api_key": "<your API key>"}.', param="api_key")
    principal = auth.authenticate(deps, f"Bearer {body['api_key']}")
    token = secrets.token_urlsafe(32)
    session = Session(
        principal.user_id, principal.key_id, secrets.token_urlsafe(24), deps.clock() + SESSION_SECONDS
    )
    deps.sessions.create(auth.session_token_hash(token), session)
    return shown(deps, principal, session), token


def current(deps: Deps, token: str | None, *, method: str, csrf: str | None) -> tuple[Principal, Session]:
    """The session of ``token`` and who it calls as (401 without one)."""
    if token is None:
        raise Unauthorized("Not signed in to the console.", code="session_expired")
    principal = auth.session_caller(deps, token, method=method, csrf=csrf)
    session = deps.sessions.get(auth.session_token_hash(token), now=deps.clock())
    if session is None:  # ended between the two reads
        raise Unauthorized("Your console session has ended: sign in again.", code="session_expired")
    return principal, session


def sign_out(deps: Deps, token: str) -> None:
    deps.sessions.delete(auth.session_token_hash(token))


def shown(deps: Deps, principal: Principal, session: Session) -> dict[str, Any]:
    _, keys = deps.accounts.account(principal.user_id)
    key = next((k for k in keys if k.id == principal.key_id), None)
    return {
        "object": "console.session",
        "user_id": principal.user_id,
        "role": principal.role,
        "key_id": principal.key_id,
        "key_prefix": None if key is None else key.prefix,
        "csrf_token": session.csrf,
        "expires_at": int(session.expires_at),
    }


def secure_cookie(host: str | None) -> bool:
    """Whether the cookie is Secure: always, but for a console served from this machine over
    plain HTTP (``make run``)."""
    name = (host or "").strip().lower()
    bracketed = name.startswith("[")  # an IPv6 address, then perhaps a port
    return (name[: name.find("]") + 1] if bracketed else name.split(":")[0]) not in LOCAL_HOSTS
