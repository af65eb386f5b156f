"""Delivering batch events to their owner's webhook.

An event is queued when its batch ends (``lifecycle.finalize``) on a FIFO queue grouped by
user, so one user's events go out one at a time and in order, beside other users'. Here one
event is tried: signed (``domain.webhooks``), POSTed through ``safe_post`` (every address
checked when resolved, on every redirect, and connected to as checked), and judged:

- a 2xx within BATCH_WEBHOOK_TIMEOUT_SECONDS: delivered;
- 410: the receiver is gone: the endpoint is disabled (saving it again turns it back on);
- anything else is tried again after the next delay of BATCH_WEBHOOK_RETRY_SCHEDULE_SECONDS
  (a longer Retry-After wins), 8 attempts in all;
- three timeouts in a row suspend the endpoint for BATCH_WEBHOOK_SUSPEND_SECONDS, doubling
  each further time up to BATCH_WEBHOOK_SUSPEND_MAX_SECONDS; events wait meanwhile (an
  attempt is not used up by a suspension).

``deliver`` answers ``Later(seconds)`` when the event must wait: the handler keeps the
message invisible that long (the group waits behind it), so a wait needs no delay queue.
A delivery that dies at any line comes back with its message: at least once; receivers
deduplicate on ``webhook-id``.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, replace
from urllib.parse import urljoin, urlsplit, urlunsplit

import httpx

from batchgw.deps import Deps
from batchgw.domain.addresses import Refused, check_addresses, check_url
from batchgw.domain.webhooks import EventMessage, event_body, signature_header
from batchgw.observability import logger
from batchgw.storage.dns import Resolver
from batchgw.storage.webhooks import Delivery, Webhook

MAX_ATTEMPTS = 8
MAX_REDIRECTS = 3
TIMEOUTS_TO_SUSPEND = 3
_REDIRECTS = frozenset({301, 302, 303, 307, 308})


@dataclass(frozen=True)
class Later:
    seconds: float


@dataclass(frozen=True)
class Answer:
    status: int | None  # None: no answer (timed out, refused, unreachable)
    timed_out: bool = False
    retry_after: float | None = None
    error: str | None = None


def deliver(deps: Deps, message: EventMessage, *, http: httpx.Client) -> Later | None:
    """Try one event once (None: done with it, delivered or not; Later: try again then)."""
    now = deps.clock()
    hook = deps.webhooks.get(message.user_id)
    record = deps.webhooks.delivery(message.user_id, message.created_at, message.event_id) or Delivery(
        message.event_id, message.type, message.batch_id, message.created_at
    )
    if record.delivered_at is not None:
        return None  # a duplicate of a delivered event
    if hook is None or not hook.enabled:
        why = "no webhook" if hook is None else f"webhook disabled ({hook.disabled_reason})"
        _record(deps, message, replace(record, last_error=why, next_attempt_at=None), now)
        return None
    if hook.suspended_until is not None and hook.suspended_until > now:
        _record(deps, message, replace(record, next_attempt_at=hook.suspended_until), now)
        return Later(hook.suspended_until - now)
    answer = _post_event(deps, hook, message, http)
    record = replace(record, attempts=record.attempts + 1, last_status=answer.status, last_error=answer.error)
    now = deps.clock()
    if answer.status is not None and 200 <= answer.status < 300:
        _healthy(deps, hook)
        _record(deps, message, replace(record, delivered_at=now, next_attempt_at=None, last_error=None), now)
        return None
    if answer.status == 410:
        deps.webhooks.change(
            hook.user_id, {"enabled": False, "disabled_reason": "receiver answered 410 Gone"}
        )
        _record(deps, message, replace(record, next_attempt_at=None), now)
        logger.warning("webhook disabled: 410", extra={"user_id": hook.user_id})
        return None
    wait = _after_failure(deps, hook, answer, now)
    if record.attempts >= MAX_ATTEMPTS:
        _record(deps, message, replace(record, next_attempt_at=None), now)
        logger.warning(
            "webhook event not delivered", extra={"event_id": message.event_id, "error": answer.error}
        )
        return None
    schedule = deps.settings.webhook_retry_schedule
    delay = max(schedule[min(record.attempts, len(schedule)) - 1], answer.retry_after or 0.0, wait)
    _record(deps, message, replace(record, next_attempt_at=now + delay), now)
    return Later(delay)


def _after_failure(deps: Deps, hook: Webhook, answer: Answer, now: float) -> float:
    """Count a timeout against the endpoint; the suspension it starts, if any (seconds)."""
    if not answer.timed_out:
        if hook.timeouts_in_row:
            deps.webhooks.change(hook.user_id, {"timeouts_in_row": 0})
        return 0.0
    timeouts = hook.timeouts_in_row + 1
    if timeouts < TIMEOUTS_TO_SUSPEND:
        deps.webhooks.change(hook.user_id, {"timeouts_in_row": timeouts})
        return 0.0
    settings = deps.settings
    seconds = min(
        settings.batch_webhook_suspend_seconds * 2**hook.suspensions,
        settings.batch_webhook_suspend_max_seconds,
    )
    deps.webhooks.change(
        hook.user_id,
        {"timeouts_in_row": 0, "suspended_until": now + seconds, "suspensions": hook.suspensions + 1},
    )
    logger.warning("webhook suspended", extra={"user_id": hook.user_id, "seconds": seconds})
    return seconds


def _healthy(deps: Deps, hook: Webhook) -> None:
    if hook.timeouts_in_row or hook.suspensions or hook.suspended_until is not None:
        deps.webhooks.change(
            hook.user_id, {"timeouts_in_row": 0, "suspensions": 0}, remove=("suspended_until",)
        )


def _record(deps: Deps, message: EventMessage, record: Delivery, now: float) -> None:
    deps.webhooks.record(message.user_id, message.created_at, record, now=now)


def _post_event(deps: Deps, hook: Webhook, message: EventMessage, http: httpx.Client) -> Answer:
    now = deps.clock()
    keys = [deps.sealer.open(hook.secret, user_id=hook.user_id)]
    if hook.previous_secret is not None and (hook.previous_until or 0) > now:
        keys.append(deps.sealer.open(hook.previous_secret, user_id=hook.user_id))
    body = json.dumps(
        event_body(message.event_id, message.type, message.created_at // 1000, message.batch_id),
        separators=(",", ":"),
    ).encode()
    stamp = int(now)
    headers = {
        "content-type": "application/json",
        "user-agent": "batchgw-webhooks/1",
        "webhook-id": message.event_id,
        "webhook-timestamp": str(stamp),
        "webhook-signature": signature_header(keys, message.event_id, stamp, body),
    }
    settings = deps.settings
    return safe_post(
        http,
        hook.url,
        headers,
        body,
        timeout=settings.batch_webhook_timeout_seconds,
        allow_private=settings.batch_webhook_allow_private_targets,
        resolve=deps.resolve,
    )


def safe_post(
    http: httpx.Client,
    url: str,
    headers: dict[str, str],
    body: bytes,
    *,
    timeout: float,
    allow_private: bool,
    resolve: Resolver,
) -> Answer:
    """POST ``body`` to ``url``, reaching only addresses the rules allow: the host is resolved
    once per hop, every address checked, and the connection made to a checked address with
    TLS still verifying the name. Redirects are followed by hand (at most MAX_REDIRECTS, each
    re-checked, https kept). The whole exchange has ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    for _ in range(MAX_REDIRECTS + 1):
        try:
            target = check_url(url, allow_private=allow_private)
            addresses = (
                [target.literal]
                if target.literal is not None
                else check_addresses(
                    target.host, resolve(target.host, target.port), allow_private=allow_private
                )
            )
        except Refused as exc:
            return Answer(None, error=f"refused: {exc}")
        address = addresses[0]
        parts = urlsplit(target.url)
        literal = f"[{address}]" if address.version == 6 else str(address)
        pinned = urlunsplit((target.scheme, f"{literal}:{target.port}", parts.path or "/", parts.query, ""))
        left = deadline - time.monotonic()
        if left <= 0:
            return Answer(None, timed_out=True, error="timed out")
        host_header = target.host if parts.port is None else f"{target.host}:{target.port}"
        try:
            response = http.post(
                pinned,
                content=body,
                headers={**headers, "host": host_header},
                timeout=httpx.Timeout(left),
                extensions={"sni_hostname": target.host} if target.scheme == "https" else {},
                follow_redirects=False,
            )
        except httpx.TimeoutException:
            return Answer(None, timed_out=True, error="timed out")
        except httpx.HTTPError as exc:
            return Answer(None, error=f"{type(exc).__name__}: {exc}"[:300])
        location = response.headers.get("location")
        if response.status_code in _REDIRECTS and location:
            url = urljoin(target.url, location)
            if target.scheme == "https" and not url.lower().startswith("https://"):
                return Answer(response.status_code, error="a redirect left https")
            continue
        return Answer(response.status_code, retry_after=_retry_after(response.headers.get("retry-after")))
    return Answer(None, error=f"more than {MAX_REDIRECTS} redirects")


def _retry_after(value: str | None) -> float | None:
    try:
        seconds = float(value) if value is not None else None
    except ValueError:
        return None
    return seconds if seconds is not None and 0 <= seconds <= 86400 else None
