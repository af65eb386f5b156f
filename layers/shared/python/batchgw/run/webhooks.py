"""Delivering batch events to their owner's webhook.

An event is queued when its batch ends (``ending.finalize``) on a FIFO queue grouped by
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
The delivery record names the next attempt's time, and an event that arrives before it waits
for it untried: a queue re-created from the records (a local stack's restart,
``local.resume``) holds each waiting event as the lost queue did.
A delivery that dies at any line comes back with its message: at least once; receivers
deduplicate on ``webhook-id``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import httpx

from batchgw.deps import Deps
from batchgw.domain.webhooks import EventMessage, event_body
from batchgw.observability import logger
from batchgw.outbound import Answer, post_event
from batchgw.storage.webhooks import Delivery, Webhook

MAX_ATTEMPTS = 8
TIMEOUTS_TO_SUSPEND = 3
# An event arriving this little before its next attempt is on time (the invocation that held
# it and this one read their clocks apart): it is tried, not held for a second more.
EARLY_ARRIVAL_SLACK_SECONDS = 1.0


@dataclass(frozen=True)
class Later:
    seconds: float


def deliver(
    deps: Deps, message: EventMessage, *, transport: httpx.AsyncBaseTransport | None = None
) -> Later | None:
    """Try one event once (None: done with it, delivered or not; Later: try again then)."""
    now = deps.clock()
    hook = deps.webhooks.get(message.user_id)
    record = deps.webhooks.delivery(message.user_id, message.created_at, message.event_id) or Delivery(
        message.event_id, message.type, message.batch_id, message.created_at
    )
    if record.delivered_at is not None:
        return None  # a duplicate of a delivered event
    if message.test:
        _test(deps, hook, message, record, transport)
        return None
    if record.next_attempt_at is not None and record.next_attempt_at - now > EARLY_ARRIVAL_SLACK_SECONDS:
        return Later(record.next_attempt_at - now)  # its backoff or suspension is not over
    if hook is None or not hook.enabled or message.type not in hook.event_types:
        if hook is None:
            why = "no webhook"
        elif not hook.enabled:
            why = f"webhook disabled ({hook.disabled_reason})"
        else:
            why = f"the webhook is not sent {message.type} events"
        _record(deps, message, replace(record, last_error=why, next_attempt_at=None), now)
        return None
    if hook.suspended_until is not None and hook.suspended_until > now:
        _record(deps, message, replace(record, next_attempt_at=hook.suspended_until), now)
        return Later(hook.suspended_until - now)
    answer = _post_event(deps, hook, message, transport)
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


def _test(
    deps: Deps,
    hook: Webhook | None,
    message: EventMessage,
    record: Delivery,
    transport: httpx.AsyncBaseTransport | None,
) -> None:
    """A sample event: sent once to the endpoint as it is (event types, a suspension or a
    410 aside), its answer recorded for the api waiting on it; the endpoint's health is not
    touched, and it is never tried again."""
    if record.attempts:
        return  # a redelivered message: the test was sent
    if hook is None:
        _record(deps, message, replace(record, last_error="no webhook"), deps.clock())
        return
    answer = _post_event(deps, hook, message, transport)
    record = replace(record, attempts=1, last_status=answer.status, last_error=answer.error)
    if answer.status is not None and 200 <= answer.status < 300:
        record = replace(record, delivered_at=deps.clock())
    _record(deps, message, record, deps.clock())


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


def _post_event(
    deps: Deps, hook: Webhook, message: EventMessage, transport: httpx.AsyncBaseTransport | None
) -> Answer:
    body = event_body(message.event_id, message.type, message.created_at // 1000, message.batch_id)
    return post_event(deps, hook, message.event_id, body, transport=transport)
