"""Calling a model's upstream and classifying what came back.

The routes to try (protocol, base URL, key), in order, come from ``run.routing``: a route
that refuses the connection (nothing was sent) is failed over to the next. The outcome is
one of:
``success`` (a JSON answer), ``failed`` (permanent), ``retry`` (may pass: 408, 425, 429,
5xx other than 504, a connection that could not be opened) or ``queued`` (the
deployment is waiting for capacity: 503 ``model_queued``, which uses no attempt).
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import weakref
from functools import lru_cache
from typing import Any

import httpx

from batchgw.config.catalog import ModelSpec, Route
from batchgw.domain import codec
from batchgw.domain.errors import BadRequest
from batchgw.domain.outcome import Outcome
from batchgw.domain.request import clean_message
from batchgw.run import translate
from batchgw.storage.aws import get_clients
from batchgw.validation.jsonbody import parse_json

RETRYABLE = frozenset({408, 425, 429})
MAX_TOKENS = 10**12  # more than any answer uses: a larger count is not a count
NOTHING_SENT = (
    httpx.ConnectError,
    httpx.ConnectTimeout,
    httpx.PoolTimeout,
    httpx.WriteError,
    httpx.WriteTimeout,
)

_PATHS = {
    "/v1/chat/completions": "/chat/completions",
    "/v1/embeddings": "/embeddings",
    "/v1/responses": "/responses",
    "/v1/messages": "/messages",
}

_ERROR_CODES = {
    400: "invalid_request",
    422: "invalid_request",
    403: "forbidden",
    404: "model_not_found",
    408: "timeout",
    429: "rate_limited",
    503: "service_unavailable",
    504: "timeout",
}


def error_code_for(status: int) -> str:
    if status in _ERROR_CODES:
        return _ERROR_CODES[status]
    return "upstream_error" if status >= 500 or status == 401 else "invalid_request"


def parse_retry_after(value: str | None) -> float | None:
    if value is None:
        return None
    try:
        seconds = float(value)
    except ValueError:
        return None
    return seconds if math.isfinite(seconds) else None


@lru_cache(maxsize=64)
def _secret(secret_id: str) -> str:
    value = get_clients().secrets.get_secret_value(SecretId=secret_id)
    return str(value.get("SecretString", ""))


def api_key_for(route: Route) -> str | None:
    if route.api_key_env and os.environ.get(route.api_key_env):
        return os.environ[route.api_key_env]
    if route.api_key_secret:
        return _secret(route.api_key_secret)
    return None


def _headers(route: Route, anthropic_version: str | None) -> dict[str, str]:
    key = api_key_for(route)
    headers = {"content-type": "application/json"}
    if route.protocol == "anthropic":
        headers["anthropic-version"] = anthropic_version or "2023-06-01"
        if key:
            headers["x-api-key"] = key
    elif key:
        headers["authorization"] = f"Bearer {key}"
    return headers


class Malformed(ValueError):
    """A 2xx answer that is JSON but not what the endpoint answers."""


def _usage(body: dict[str, Any]) -> tuple[int, int]:
    """(input, output) tokens from the answer's ``usage`` (zeros without one)."""
    usage = body.get("usage")
    if usage is None:
        return 0, 0
    if not isinstance(usage, dict):
        raise Malformed("its usage is not an object")
    if "prompt_tokens" in usage:  # chat completions, embeddings
        return _tokens(usage, "prompt_tokens"), _tokens(usage, "completion_tokens")
    return _tokens(usage, "input_tokens"), _tokens(usage, "output_tokens")


def _tokens(usage: dict[str, Any], name: str) -> int:
    value = usage.get(name)
    if value is None:
        return 0
    if type(value) is not int or not 0 <= value <= MAX_TOKENS:
        raise Malformed(f"usage.{name} is not a token count")
    return value


_http_clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, httpx.AsyncClient] = (
    weakref.WeakKeyDictionary()
)


def http_client() -> httpx.AsyncClient:
    """One pooled client per event loop (Lambda reuses its loop across invocations)."""
    loop = asyncio.get_running_loop()
    client = _http_clients.get(loop)
    if client is None:
        client = httpx.AsyncClient(limits=httpx.Limits(max_connections=512, max_keepalive_connections=256))
        _http_clients[loop] = client
    return client


async def run_request(
    spec: ModelSpec,
    routes: list[Route],
    endpoint: str,
    body: dict[str, Any],
    *,
    timeout: float,
    anthropic_version: str | None,
) -> Outcome:
    """Run one batch request as its endpoint would, on the first of ``routes`` that takes
    the connection. The outcome names the route that answered (or the last one tried) and
    the routes that refused.

    A Messages request on a route that speaks only chat runs as a chat completion, and
    its answer comes back as a Messages message (``run.translate``).
    """
    translated = spec.translates(endpoint)
    sent_endpoint = "/v1/chat/completions" if translated else endpoint
    payload = translate.messages_to_chat(body) if translated else body
    if not routes:
        raise ValueError("a request needs a route to run on")
    refused: list[str] = []
    for route in routes:
        outcome = await call(
            http_client(),
            spec,
            sent_endpoint,
            payload,
            route=route,
            timeout=timeout,
            anthropic_version=anthropic_version,
        )
        if not outcome.unreachable:
            break
        refused.append(route.id)
    outcome = outcome.replace(route=route.id, refused_routes=tuple(refused))
    if not translated:
        return outcome
    if outcome.kind != "success":
        return outcome
    try:
        message = translate.chat_to_message(
            outcome.body, model=str(body["model"]), stop_sequences=body.get("stop_sequences")
        )
    except translate.TranslationError as exc:
        return outcome.replace(
            kind="failed",
            status_code=502,
            body=None,
            body_bytes=0,
            error={
                "code": "upstream_error",
                "status": 502,
                "message": f"the answer cannot be given as a Messages message: {exc}",
            },
        )
    return outcome.replace(body=message, body_bytes=len(codec.dumps(message)))


async def call(
    client: httpx.AsyncClient,
    spec: ModelSpec,
    endpoint: str,
    body: dict[str, Any],
    *,
    route: Route | None = None,
    timeout: float,
    anthropic_version: str | None = None,
) -> Outcome:
    """Send one request to ``route`` (the model's first, by default) and classify the answer."""
    route = route or spec.route
    payload = {**body, "model": spec.upstream_model_on(route)}
    url = route.base_url.rstrip("/") + _PATHS[endpoint]
    secrets = _secrets_of(route)
    try:
        resp = await client.post(
            url,
            content=json.dumps(payload, separators=(",", ":")).encode(),
            headers=_headers(route, anthropic_version),
            timeout=httpx.Timeout(timeout, connect=min(10.0, timeout)),
        )
    except NOTHING_SENT as exc:
        # Nothing reached the provider (no connection, none free, or the request could not
        # be written): retried, and it costs nothing.
        return Outcome(
            "retry",
            error={
                "code": "service_unavailable",
                "message": clean_message(
                    f"the upstream could not be reached: {type(exc).__name__}: {exc}", secrets
                ),
                "status": None,
            },
            unreachable=True,
        )
    except httpx.TimeoutException:
        # The call's own (read) timeout: the provider may be running it still.
        return Outcome(
            "failed",
            error={"code": "timeout", "message": "the upstream call timed out", "status": 504},
            usage_known=False,
        )
    except httpx.HTTPError as exc:
        # The answer was lost on its way (a dropped connection): may pass, cost unknown.
        return Outcome(
            "retry",
            error={
                "code": "upstream_error",
                "message": clean_message(f"upstream error: {type(exc).__name__}: {exc}", secrets),
                "status": None,
            },
            usage_known=False,
        )
    return classify(endpoint, resp.status_code, resp.content, resp.headers, secrets=secrets)


def _secrets_of(route: Route) -> tuple[str, ...]:
    key = api_key_for(route)
    return (key,) if key else ()


def _bad_answer(message: str, request_id: str | None, content: bytes = b"") -> Outcome:
    """A 2xx answer the gateway cannot use: the request fails (permanently) as upstream_error,
    charged what the answer's ``usage`` says if it can still be read."""
    tokens = _lenient_usage(content)
    return Outcome(
        "failed",
        status_code=502,
        request_id=request_id,
        usage_known=tokens is not None,
        input_tokens=tokens[0] if tokens else 0,
        output_tokens=tokens[1] if tokens else 0,
        error={"code": "upstream_error", "status": 502, "message": message},
    )


def _lenient_usage(content: bytes) -> tuple[int, int] | None:
    """The usage of an answer refused for being invalid JSON, read leniently; None if not."""
    try:
        body = json.loads(content.decode("utf-8", errors="replace"))
        return _usage(body) if isinstance(body, dict) and isinstance(body.get("usage"), dict) else None
    except (ValueError, Malformed, RecursionError):
        return None


def classify(
    endpoint: str,
    status: int,
    content: bytes,
    headers: httpx.Headers | dict[str, str],
    *,
    secrets: tuple[str, ...] = (),
) -> Outcome:
    """What an upstream answer means (``secrets``: credentials never to keep in a message)."""
    request_id = headers.get("x-request-id") or headers.get("request-id")
    retry_after = parse_retry_after(headers.get("retry-after"))
    if 200 <= status < 300:
        try:
            # Strict: non-finite or out-of-range numbers and lone surrogates are refused too,
            # so nothing stored or served later can be invalid JSON.
            body = parse_json(content, what="The upstream answer", bom=False)
        except BadRequest:
            return _bad_answer("the upstream answer is not valid JSON or UTF-8", request_id, content)
        if not isinstance(body, dict):
            return _bad_answer("the upstream answer is not a JSON object", request_id)
        try:
            prompt, completion = _usage(body)
        except Malformed as exc:
            return _bad_answer(f"the upstream answer is malformed: {exc}", request_id)
        body_id = body.get("id")
        rid = request_id or (body_id if isinstance(body_id, str) else None)
        return Outcome(
            "success",
            status_code=status,
            body=body,
            body_bytes=len(content),
            request_id=rid,
            input_tokens=prompt,
            output_tokens=completion,
        )
    message, code = _error_message(content, status)
    error = {"code": error_code_for(status), "message": clean_message(message, secrets), "status": status}
    if status == 503 and code == "model_queued":
        return Outcome(
            "queued", status_code=status, error=error, retry_after=retry_after, request_id=request_id
        )
    if status in RETRYABLE or (status >= 500 and status != 504):
        return Outcome(
            "retry", status_code=status, error=error, retry_after=retry_after, request_id=request_id
        )
    return Outcome("failed", status_code=status, error=error, request_id=request_id)


def _error_message(content: bytes, status: int) -> tuple[str, str | None]:
    try:
        body = json.loads(content)
    except ValueError:
        return f"upstream answered {status}", None
    error = body.get("error") if isinstance(body, dict) else None
    if isinstance(error, dict):
        code = error.get("code") or error.get("type")
        return str(error.get("message") or f"upstream answered {status}"), None if code is None else str(code)
    return f"upstream answered {status}", None
