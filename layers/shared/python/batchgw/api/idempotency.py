"""Idempotency-Key on create: the same key and request return the batch the first call made.

The key belongs to the account (any of the user's API keys replays it) and to the route
it was used on. A create with a key claims it first (``storage.idempotency``), so of any
number of concurrent creates with one key exactly one creates a batch. The others:

- the same request, once the batch exists: that batch (whatever the quota or role now;
  the batch still runs under the API key that created it);
- the same request while the first create is still under way: they wait for it a few
  seconds, then answer 409 (try again), as the IETF Idempotency-Key draft does;
- a different request (body, or ``anthropic-version`` for a Messages batch): 409;
- after the batch was deleted: 410, for at least a day.

A key is remembered until a day after its batch ends. A create that fails gives its claim
back; a create whose process died leaves a claim whose lease runs out, and the next
caller takes it over, finishing the create or finding the batch it had made.
"""

from __future__ import annotations

import hashlib
import json
import secrets
import time
from collections.abc import Callable
from typing import Any

from batchgw.deps import Deps
from batchgw.domain import codec
from batchgw.domain.batch import CountedBatch
from batchgw.domain.errors import ApiError, BadRequest, Conflict
from batchgw.domain.principal import Principal
from batchgw.storage.idempotency import KEY_KEPT_SECONDS, IdemRecord, IdemState

HEADER = "Idempotency-Key"
MAX_KEY_CHARS = 255
# How long a create may hold its claim before another caller may take it over: longer than
# the API's own timeout, so a claim that lapsed is one whose caller died.
CLAIM_LEASE_SECONDS = 60.0
WAIT_FOR_FIRST_SECONDS = 5.0
_POLL_SECONDS = 0.1
WINDOWLESS_KEEP_SECONDS = 366 * 86400  # a batch without a window: until finalizing shortens it


class Gone(ApiError):
    status = 410
    type = "invalid_request_error"


def check_key(value: str) -> str:
    """The header's value, if it is usable: 1-255 visible ASCII characters."""
    if not value or len(value) > MAX_KEY_CHARS or not all(33 <= ord(c) <= 126 for c in value):
        raise BadRequest(
            f"{HEADER} must be 1-{MAX_KEY_CHARS} visible ASCII characters.",
            code="invalid_idempotency_key",
            param=HEADER,
        )
    return value


def stored_key(route: str, value: str) -> str:
    """How a key is stored: its route and its SHA-256 (never the key itself)."""
    return f"{route}#{hashlib.sha256(value.encode()).hexdigest()}"


def fingerprint(raw: bytes, anthropic_version: str | None) -> str:
    """What makes two creates "the same request": the body (as JSON, whatever its spacing
    or key order) and the ``anthropic-version`` header."""
    try:
        canonical = codec.dumps(_sorted(json.loads(raw))).encode()
    except (ValueError, RecursionError):
        canonical = raw
    digest = hashlib.sha256(canonical)
    digest.update(b"\0" + (anthropic_version or "").encode())
    return digest.hexdigest()


def _sorted(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _sorted(value[k]) for k in sorted(value)}
    if isinstance(value, list):
        return [_sorted(v) for v in value]
    return value


Create = Callable[[str], dict[str, Any]]  # batch id -> the batch object
Replay = Callable[[str], CountedBatch | None]  # batch id -> the batch, if it still exists


def once(
    deps: Deps,
    principal: Principal,
    key: str,
    request: str,
    *,
    new_batch_id: Callable[[], str],
    create: Create,
    replay: Replay,
    show: Callable[[CountedBatch], dict[str, Any]],
) -> dict[str, Any]:
    """Create at most one batch for ``key``: ``create`` under a claim won here, else the
    batch an earlier call with ``key`` made (or why not)."""
    store = deps.idempotency
    user = principal.user_id
    token = secrets.token_hex(8)
    waited_until = time.monotonic() + WAIT_FOR_FIRST_SECONDS
    while True:
        now = deps.clock()
        batch_id = new_batch_id()
        if store.claim(
            user,
            key,
            fingerprint=request,
            batch_id=batch_id,
            token=token,
            now=now,
            lease_seconds=CLAIM_LEASE_SECONDS,
            ttl=int(now + 2 * KEY_KEPT_SECONDS),
        ):
            return _create_claimed(deps, user, key, token, batch_id, create)
        found = store.get(user, key)
        if found is None or found.forgotten(now):
            _wait_or_refuse(waited_until)  # forgotten meanwhile: claim it afresh
            continue
        if found.fingerprint != request:
            raise Conflict(
                f"This {HEADER} was already used with a different request.",
                code="idempotency_key_reused",
                param=HEADER,
            )
        if found.state is IdemState.DELETED:
            raise _gone()
        if found.state is IdemState.DONE:
            batch = replay(found.batch_id)
            if batch is None:
                raise _gone()
            return show(batch)
        if found.lease_until < now and store.take_over(
            user, key, found, token=token, now=now, lease=CLAIM_LEASE_SECONDS
        ):
            return _finish_lapsed(deps, user, key, token, found, create, replay, show)
        _wait_or_refuse(waited_until)


def _wait_or_refuse(waited_until: float) -> None:
    """Wait a moment for the first create with the key, or give up (409) after a while."""
    if time.monotonic() >= waited_until:
        raise Conflict(
            f"A create with this {HEADER} is still under way; try again shortly.",
            code="idempotency_key_in_use",
            param=HEADER,
        )
    time.sleep(_POLL_SECONDS)


def _create_claimed(
    deps: Deps, user: str, key: str, token: str, batch_id: str, create: Create
) -> dict[str, Any]:
    try:
        created = create(batch_id)
    except BaseException:
        deps.idempotency.give_back(user, key, token=token)
        raise
    deps.idempotency.complete(user, key, token=token, ttl=_kept_until(deps, created))
    return created


def _finish_lapsed(
    deps: Deps,
    user: str,
    key: str,
    token: str,
    lapsed: IdemRecord,
    create: Create,
    replay: Replay,
    show: Callable[[CountedBatch], dict[str, Any]],
) -> dict[str, Any]:
    """A claim whose caller died: the batch it was making exists, or is made now."""
    batch = replay(lapsed.batch_id)
    if batch is None:
        return _create_claimed(deps, user, key, token, lapsed.batch_id, create)
    shown = show(batch)
    deps.idempotency.complete(user, key, token=token, ttl=_kept_until(deps, shown))
    return shown


def _kept_until(deps: Deps, batch: dict[str, Any]) -> int:
    """Until when a key is kept while its batch runs: a day past the batch's end at the
    latest (its window and retention; finalizing shortens it to a day after the end)."""
    expires_at = batch.get("expires_at")
    horizon = deps.settings.retention_seconds + KEY_KEPT_SECONDS
    if expires_at is None:
        return int(deps.clock() + WINDOWLESS_KEEP_SECONDS)
    return int(expires_at + horizon)


def _gone() -> Gone:
    return Gone(
        f"The batch this {HEADER} created has been deleted.",
        code="idempotency_key_batch_deleted",
        param=HEADER,
    )
