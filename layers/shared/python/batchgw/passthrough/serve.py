"""One interactive request, from its body to the answer the caller gets.

1. The body is checked as a batch request's would be (``validation.create.plan_body``: the
   same limits, the same model rules, a priced model); ``stream: true`` is refused, since
   API Gateway's HTTP API and Lambda return an answer whole.
2. The caller's daily and monthly quotas and the key's budgets: a used-up one answers 429,
   as a new batch is refused; the caller's requests still running count at what they may
   cost (``reserve``), so a burst passes a quota or budget by at most one request's most.
3. The request goes to its model's routes (any of them: batch-allowed or not), failing over
   a route that refuses the connection, as batch work does, within
   ``INTERACTIVE_TIMEOUT_SECONDS``; it counts as interactive load on its model the whole
   time (``load.in_flight``), so batch work gives way to it.
4. Its cost, when its usage is known, is charged to the caller and the key once, at the
   model's price: the price a batch request pays; then its reservation is let go.
"""

from __future__ import annotations

import asyncio
import random
import secrets
import time
from typing import Any

from batchgw.deps import Deps
from batchgw.domain.attempts import AttemptEntry
from batchgw.domain.errors import BadRequest, ServiceUnavailable
from batchgw.domain.outcome import Outcome
from batchgw.domain.principal import Principal
from batchgw.domain.spend import reservation_tokens
from batchgw.observability import logger, metrics
from batchgw.passthrough.answers import MESSAGES, Reply, of_outcome
from batchgw.passthrough.load import in_flight
from batchgw.passthrough.reserve import reserved
from batchgw.storage.spend import SPEND_SHARDS, Payer
from batchgw.upstream import client, routing
from batchgw.validation import RequestInvalid
from batchgw.validation.create import plan_body
from batchgw.validation.jsonbody import parse_json
from batchgw.validation.messages import KNOWN_ANTHROPIC_VERSIONS

# API Gateway's HTTP API gives an integration 30 s; the call ends before, with room to answer.
INTERACTIVE_TIMEOUT_SECONDS = 25.0
# Lambda returns at most 6 MB; an answer is passed on whole, with room for its envelope.
MAX_ANSWER_BYTES = 5 * 1024 * 1024

STREAM_REFUSAL = (
    "stream: true is not supported: this gateway answers through API Gateway's HTTP API and "
    "AWS Lambda, which return an answer whole, never as a stream of events; send stream: false "
    "(or leave it out)"
)


async def serve(
    deps: Deps, principal: Principal, endpoint: str, raw: bytes, *, anthropic_version: str | None
) -> Reply:
    """Run one interactive request for ``principal`` and answer it (``ApiError`` when the
    gateway refuses it before any model is called)."""
    body = parse_json(raw)
    if isinstance(body, dict) and body.get("stream") is True:
        raise BadRequest(STREAM_REFUSAL, param="stream", code="stream_unsupported")
    version = _version(endpoint, anthropic_version)
    try:
        spec = plan_body(
            endpoint, body, catalog=deps.catalog, role=principal.role, anthropic_version=version, batch=False
        )
    except RequestInvalid as exc:
        raise BadRequest(exc.message, param=_body_param(exc.param), code=exc.code) from exc
    payer = Payer(principal.user_id, principal.key_id)
    routes = routing.plan(deps, spec, deps.clock(), interactive=True)
    if not routes.routes:
        raise ServiceUnavailable(
            f"Every route of model '{spec.id}' is disabled, weighted 0 or refusing connections; "
            "try again later.",
            code="service_unavailable",
        )
    settings = deps.settings
    timeout = min(settings.batch_upstream_timeout_seconds, INTERACTIVE_TIMEOUT_SECONDS)
    # What it may cost at most: held against the caller's quotas and budgets until charged.
    most = 0
    if spec.price is not None:
        most = spec.price.cost_nano(
            *reservation_tokens(body, endpoint, model_max_output=spec.max_output_tokens)
        )
    async with reserved(deps, payer, most, call_seconds=timeout):
        started = time.monotonic()
        async with in_flight(deps, spec.id):
            outcome = await client.run_request(
                spec,
                routes.routes,
                endpoint,
                body,
                timeout=timeout,
                anthropic_version=version,
                max_bytes=MAX_ANSWER_BYTES,
                secret_ttl=settings.batch_upstream_secret_ttl_seconds,
                source=client.INTERACTIVE,
            )
        latency_ms = round((time.monotonic() - started) * 1000)
        routing.note(deps, spec, outcome, deps.clock())
        cost = None
        if outcome.usage_known and spec.price is not None:
            cost = spec.price.cost_nano(outcome.input_tokens, outcome.output_tokens)
            await _charge(deps, payer, cost)
        elif outcome.route is not None and spec.price is not None:
            # Its cost is unknown (the answer was lost, too large or never came): it counts
            # against the caller's quotas at the most it could have cost.
            await _charge(deps, payer, 0, unknown=most)
    reply = of_outcome(endpoint, outcome)
    _record(principal, endpoint, spec.id, outcome, reply, latency_ms=latency_ms, cost_nano=cost)
    entry = AttemptEntry.of_call(
        outcome,
        batch_id="",
        index=0,
        custom_id=outcome.request_id or f"ireq_{secrets.token_hex(12)}",
        model=spec.id,
        attempt=1,
        ended_at=deps.clock(),
        latency_ms=latency_ms,
        cost_nano=cost,
        user_id=principal.user_id,
    )
    await _log(deps, entry)
    return reply


async def _log(deps: Deps, entry: AttemptEntry) -> None:
    """Keep the request in the request log and its counts (``storage.reqlog``). One that
    cannot be kept is logged: the caller has their answer."""
    ttl = int(entry.ended_at + deps.settings.batch_attempt_log_retention_days * 86400)
    try:
        await asyncio.to_thread(deps.reqlog.log, "interactive", entry, ttl=ttl)
        await asyncio.to_thread(deps.reqlog.count, "interactive", [entry], deps.clock())
    except Exception:
        logger.exception("interactive request not logged", extra={"user_id": entry.user_id})


def _version(endpoint: str, header: str | None) -> str | None:
    """The anthropic-version a /v1/messages request is checked and sent under: required, and
    one the gateway knows; no other endpoint takes one."""
    if endpoint != MESSAGES:
        return None
    if header is None:
        raise BadRequest("anthropic-version header is required", param="anthropic-version")
    if header not in KNOWN_ANTHROPIC_VERSIONS:
        known = ", ".join(KNOWN_ANTHROPIC_VERSIONS)
        raise BadRequest(
            f"anthropic-version '{header}' is not a known version; use one of {known}",
            param="anthropic-version",
        )
    return header


def _body_param(param: str | None) -> str | None:
    """A batch request's ``body.messages[0]`` is this request's ``messages[0]``."""
    if param is None or param == "body":
        return None
    return param.removeprefix("body.")


async def _charge(deps: Deps, payer: Payer, cost: int, *, unknown: int = 0) -> None:
    """Charge the request's cost (or, ``unknown``, the most an attempt of unknown cost could
    have cost), once. A charge that cannot be written is logged, loudly: the caller has their
    answer, and the model ran."""
    try:
        await asyncio.to_thread(
            deps.spend.charge,
            payer,
            cost,
            now=deps.clock(),
            shard=random.randrange(SPEND_SHARDS),
            unknown_nano=unknown,
        )
    except Exception:
        logger.exception(
            "interactive request not charged", extra={"user_id": payer.user_id, "cost_nano": cost}
        )


def _record(
    principal: Principal,
    endpoint: str,
    model: str,
    outcome: Outcome,
    reply: Reply,
    *,
    latency_ms: int,
    cost_nano: int | None,
) -> None:
    """The request's log line (under the caller's account) and metrics."""
    entry: dict[str, Any] = {
        "user_id": principal.user_id,
        "key_id": principal.key_id,
        "endpoint": endpoint,
        "model": model,
        "status": reply.status,
        "route": outcome.route,
        "latency_ms": latency_ms,
        "input_tokens": outcome.input_tokens,
        "output_tokens": outcome.output_tokens,
        "cost_nano": cost_nano,
    }
    if outcome.kind != "success":
        entry["error_code"] = (outcome.error or {}).get("code")
    logger.info("interactive request", extra=entry)
    metrics.count("InteractiveRequests", model=model)
    metrics.value("InteractiveLatency", latency_ms, model=model)
