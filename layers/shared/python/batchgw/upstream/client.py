"""Calling a model's upstream and classifying what came back.

The routes to try (protocol, base URL, key), in order, come from ``upstream.routing``: a route
that refuses the connection (nothing was sent) is failed over to the next. The outcome is
one of:
``success`` (a JSON answer), ``failed`` (permanent), ``retry`` (may pass: 408, 425, 429,
5xx other than 504, a connection that could not be opened) or ``queued`` (the
deployment is waiting for capacity: 503 ``model_queued``, which uses no attempt).

No upstream can exhaust a worker: a request's calls (its failover and a call again after
a 401 included) share one total deadline, ``timeout`` seconds from the first (connecting,
sending and reading the whole answer: a server that trickles bytes cannot hold the call
past it), and an answer is read as a stream, counted as it comes: a 2xx answer larger than
``max_bytes`` fails ``result_too_large`` as soon as it is, before anything parses it (its
cost unknown: the provider ran it); an error answer is read up to ``ERROR_BODY_BYTES``.

Nothing leaks from an answer: a 401 or 403 is reported as the provider refusing the
gateway's credentials (the provider's message is logged, scrubbed, for operators); every
other message an upstream sends is scrubbed of anything shaped like a credential and cut
to ``MAX_UPSTREAM_MESSAGE_CHARS`` (``domain.scrub``); a connection that fails is reported
without the host it tried.

A route's key comes from its environment variable (the local stack) or its Secrets
Manager secret (AWS), the latter kept ``secret_ttl`` seconds, then read again; a 401 reads
it again at once and, when the key changed (it was rotated), calls again, once, within the
same deadline. That call is part of the same attempt: a 401 means the provider refused to
run the request, so it costs nothing, and the attempt is charged what the second call's
answer says (once).
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import time
import weakref
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any, TypeVar

import httpx

from batchgw.config.catalog import ModelSpec, Route
from batchgw.domain import codec
from batchgw.domain.errors import BadRequest
from batchgw.domain.outcome import Outcome
from batchgw.domain.scrub import MAX_UPSTREAM_MESSAGE_CHARS, scrub
from batchgw.observability import logger
from batchgw.storage.aws import get_clients
from batchgw.upstream import translate
from batchgw.validation.jsonbody import parse_json

T = TypeVar("T")

RETRYABLE = frozenset({408, 425, 429})
MAX_TOKENS = 10**12  # more than any answer uses: a larger count is not a count
NOTHING_SENT = (
    httpx.ConnectError,
    httpx.ConnectTimeout,
    httpx.PoolTimeout,
    httpx.WriteError,
    httpx.WriteTimeout,
)
# The defaults of BATCH_MAX_RESULT_KB and BATCH_UPSTREAM_SECRET_TTL_SECONDS, for callers
# without settings; the worker passes the settings in force.
DEFAULT_MAX_ANSWER_BYTES = 4096 * 1024
DEFAULT_SECRET_TTL_SECONDS = 300.0
# What is read of an error answer (its message is kept short anyway).
ERROR_BODY_BYTES = 64 * 1024
CONNECT_TIMEOUT_SECONDS = 10.0

REFUSED_CREDENTIALS = "the upstream provider refused the gateway's credentials"
COULD_NOT_CONNECT = "could not connect to the upstream provider"
TIMED_OUT = "the upstream call timed out"
ANSWER_LOST = "the connection to the upstream provider was lost before its answer arrived"


def answer_lost(exc: httpx.HTTPError) -> str:
    """A request's error when its answer was lost on the way, in words (the exception's name
    and text stay in the log)."""
    if isinstance(exc, httpx.RemoteProtocolError):
        return "the upstream provider closed the connection without a complete answer"
    if isinstance(exc, httpx.ReadError):
        return "the connection to the upstream provider broke while its answer was read"
    return ANSWER_LOST


_PATHS = {
    "/v1/chat/completions": "/chat/completions",
    "/v1/embeddings": "/embeddings",
    "/v1/responses": "/responses",
    "/v1/messages": "/messages",
}

# The spec's error codes. A 401 is the provider refusing the gateway's credentials, as a 403
# is; ``timeout`` is a 504's alone (not retried): a 408 or 425 is retried, and one that still
# fails after every retry ends ``upstream_error`` as any other failure that may pass does.
_ERROR_CODES = {
    400: "invalid_request",
    422: "invalid_request",
    401: "forbidden",
    403: "forbidden",
    404: "model_not_found",
    429: "rate_limited",
    503: "service_unavailable",
    504: "timeout",
}


def error_code_for(status: int) -> str:
    """The error code a request ends with after an upstream ``status``: the spec's table;
    ``upstream_error`` for any other status that is retried (408, 425, 5xx); any other 4xx is
    the model rejecting the request (``invalid_request``)."""
    if status in _ERROR_CODES:
        return _ERROR_CODES[status]
    return "upstream_error" if status >= 500 or status in RETRYABLE else "invalid_request"


def parse_retry_after(value: str | None) -> float | None:
    if value is None:
        return None
    try:
        seconds = float(value)
    except ValueError:
        return None
    return seconds if math.isfinite(seconds) else None


def _read_secret(secret_id: str) -> str:
    value = get_clients().secrets.get_secret_value(SecretId=secret_id)
    return str(value.get("SecretString", ""))


class RouteKeys:
    """The keys routes are called with: a route's environment variable, read each time, or
    its Secrets Manager secret, kept ``ttl`` seconds after it was read and read again then.

    Reads are blocking and rare (once per secret per ``ttl`` per process, and after a
    401), so concurrent calls on one loop never read a secret twice at once.
    """

    def __init__(
        self,
        read_secret: Callable[[str], str] = _read_secret,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._read_secret = read_secret
        self._clock = clock
        self._kept: dict[str, tuple[float, str]] = {}  # secret id: (read at, value)

    def key(self, route: Route, *, ttl: float) -> str | None:
        """The key to call ``route`` with now (None: the route needs none)."""
        if route.api_key_env and os.environ.get(route.api_key_env):
            return os.environ[route.api_key_env]
        if not route.api_key_secret:
            return None
        kept = self._kept.get(route.api_key_secret)
        if kept is not None and self._clock() - kept[0] < ttl:
            return kept[1]
        return self._read(route.api_key_secret)

    def after_refusal(self, route: Route, sent: str | None, *, ttl: float) -> str | None:
        """The route's key after the provider refused ``sent`` (401): read again, unless
        another call already did (what is kept is no longer ``sent``)."""
        secret_id = route.api_key_secret
        if secret_id is None or (route.api_key_env and os.environ.get(route.api_key_env)):
            return self.key(route, ttl=ttl)
        kept = self._kept.get(secret_id)
        if kept is not None and kept[1] != sent:
            return kept[1]
        return self._read(secret_id)

    def forget(self) -> None:
        self._kept.clear()

    def _read(self, secret_id: str) -> str:
        value = self._read_secret(secret_id)
        self._kept[secret_id] = (self._clock(), value)
        return value


# This process's keys (a Lambda execution environment keeps them across invocations).
KEYS = RouteKeys()


# Sent to the gateway's own servers only (never to a provider): whether the request is batch
# work or an interactive request, which a server may schedule apart and measures apart (the
# simulator does).
SOURCE_HEADER = "x-batchgw-source"
BATCH, INTERACTIVE = "batch", "interactive"


def _headers(
    route: Route, key: str | None, anthropic_version: str | None, source: str = BATCH
) -> dict[str, str]:
    headers = {"content-type": "application/json"}
    if route.local:
        headers[SOURCE_HEADER] = source
    if route.protocol == "anthropic":
        headers["anthropic-version"] = anthropic_version or "2023-06-01"
        if key:
            headers["x-api-key"] = key
    elif key:
        headers["authorization"] = f"Bearer {key}"
    return headers


class Malformed(ValueError):
    """A 2xx answer that is JSON but not what the endpoint answers."""


def _usage(body: dict[str, Any]) -> tuple[int, int, int]:
    """(input, output, cached input) tokens from the answer's ``usage`` (zeros without one).
    Anthropic counts its prompt-cache reads and writes apart from ``input_tokens``: they are
    input all the same."""
    usage = body.get("usage")
    if usage is None:
        return 0, 0, 0
    if not isinstance(usage, dict):
        raise Malformed("its usage is not an object")
    if "prompt_tokens" in usage:  # chat completions, embeddings
        cached = _tokens(_details(usage, "prompt_tokens_details"), "cached_tokens")
        return _tokens(usage, "prompt_tokens"), _tokens(usage, "completion_tokens"), cached
    read = _tokens(usage, "cache_read_input_tokens")
    written = _tokens(usage, "cache_creation_input_tokens")
    cached = read or _tokens(_details(usage, "input_tokens_details"), "cached_tokens")
    return _tokens(usage, "input_tokens") + read + written, _tokens(usage, "output_tokens"), cached


def _details(usage: dict[str, Any], name: str) -> dict[str, Any]:
    value = usage.get(name)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise Malformed(f"usage.{name} is not an object")
    return value


def _tokens(usage: dict[str, Any], name: str) -> int:
    value = usage.get(name)
    if value is None:
        return 0
    if type(value) is not int or not 0 <= value <= MAX_TOKENS:
        raise Malformed(f"usage.{name} is not a token count")
    return value


# One client per event loop: its pooled connections belong to the loop that opened them, so a
# client is never used on another loop. The keys are weak, yet an entry would keep its own
# loop alive (the client's connections reference the loop), so the entries of closed loops are
# dropped (``_forget_closed_loops``) and the two are then garbage together.
_http_clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, httpx.AsyncClient] = (
    weakref.WeakKeyDictionary()
)


def http_client() -> httpx.AsyncClient:
    """The running loop's pooled client. Lambda reuses its loop across invocations, so the
    client and its connections are too; a caller that makes a loop per invocation
    (``asyncio.run``) gets a client per loop, and the cache lets go of the closed loops'."""
    loop = asyncio.get_running_loop()
    client = _http_clients.get(loop)
    if client is None:
        _forget_closed_loops()
        client = httpx.AsyncClient(limits=httpx.Limits(max_connections=512, max_keepalive_connections=256))
        _http_clients[loop] = client
    return client


def _forget_closed_loops() -> None:
    """Drop the clients of loops that have closed (nothing can run on them again, nor close
    their clients): what the loop and its client held goes with them at the next collection."""
    for loop in [loop for loop in list(_http_clients.keys()) if loop.is_closed()]:
        _http_clients.pop(loop, None)


async def run_request(
    spec: ModelSpec,
    routes: list[Route],
    endpoint: str,
    body: dict[str, Any],
    *,
    timeout: float,
    anthropic_version: str | None,
    max_bytes: int = DEFAULT_MAX_ANSWER_BYTES,
    secret_ttl: float = DEFAULT_SECRET_TTL_SECONDS,
    stop: asyncio.Event | None = None,
    keys: RouteKeys | None = None,
    source: str = BATCH,
) -> Outcome:
    """Run one request as its endpoint would, on the first of ``routes`` that takes the
    connection, all within ``timeout`` seconds. The outcome names the route that answered
    (or the last one tried) and the routes that refused. ``source``: batch work (the
    default) or an interactive request, as the gateway's own servers are told.

    A Messages request on a route that speaks only chat runs as a chat completion, and
    its answer comes back as a Messages message (``upstream.translate``). ``stop``: when it is
    set, the call in flight is abandoned (``call``).
    """
    translated = spec.translates(endpoint)
    sent_endpoint = "/v1/chat/completions" if translated else endpoint
    payload = translate.messages_to_chat(body) if translated else body
    if not routes:
        raise ValueError("a request needs a route to run on")
    deadline = asyncio.get_running_loop().time() + timeout
    refused: list[str] = []
    for route in routes:
        outcome = await call(
            http_client(),
            spec,
            sent_endpoint,
            payload,
            route=route,
            timeout=timeout,
            deadline=deadline,
            anthropic_version=anthropic_version,
            max_bytes=max_bytes,
            secret_ttl=secret_ttl,
            stop=stop,
            keys=keys,
            source=source,
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
                "message": scrub(
                    f"the answer cannot be given as a Messages message: {exc}",
                    limit=MAX_UPSTREAM_MESSAGE_CHARS,
                ),
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
    deadline: float | None = None,
    anthropic_version: str | None = None,
    max_bytes: int = DEFAULT_MAX_ANSWER_BYTES,
    secret_ttl: float = DEFAULT_SECRET_TTL_SECONDS,
    stop: asyncio.Event | None = None,
    keys: RouteKeys | None = None,
    source: str = BATCH,
) -> Outcome:
    """Send one request to ``route`` (the model's first, by default) and classify the answer.

    ``deadline`` (the loop's clock; by default ``timeout`` from now) bounds everything,
    a call again after a 401 with a rotated key included.
    """
    route = route or spec.route
    keys = keys or KEYS
    loop = asyncio.get_running_loop()
    if deadline is None:
        deadline = loop.time() + timeout
    exchange = _Exchange(
        client,
        url=route.base_url.rstrip("/") + _PATHS[endpoint],
        content=json.dumps({**body, "model": spec.upstream_model_on(route)}, separators=(",", ":")).encode(),
        endpoint=endpoint,
        route=route,
        anthropic_version=anthropic_version,
        timeout=timeout,
        deadline=deadline,
        max_bytes=max_bytes,
        stop=stop,
        source=source,
    )
    key = keys.key(route, ttl=secret_ttl)
    outcome = await exchange.run(key)
    if outcome.status_code != 401 or deadline <= loop.time():
        return outcome
    fresh = keys.after_refusal(route, key, ttl=secret_ttl)
    if fresh is None or fresh == key:
        return outcome
    logger.info("route key re-read after a 401: calling again with it", extra={"route": route.id})
    return await exchange.run(fresh)


class Stopped(Exception):
    """The call was abandoned: its ``stop`` event was set (``run.chain``: the model's slot
    was lost while it ran, and holding on would exceed the model's cap)."""


@dataclass(frozen=True, slots=True)
class _Answer:
    status: int
    headers: httpx.Headers
    content: bytes
    too_large: bool = False


@dataclass(frozen=True, slots=True)
class _Exchange:
    """One request to one route, sent (with a given key) and classified."""

    client: httpx.AsyncClient
    url: str
    content: bytes
    endpoint: str
    route: Route
    anthropic_version: str | None
    timeout: float
    deadline: float
    max_bytes: int
    stop: asyncio.Event | None
    source: str = BATCH

    async def run(self, key: str | None) -> Outcome:
        secrets = (key,) if key else ()
        try:
            async with asyncio.timeout_at(self.deadline):
                answer = await _unless_stopped(self._send(key), self.stop)
        except Stopped:
            return Outcome(
                "retry",
                usage_known=False,
                error={
                    "code": "upstream_error",
                    "status": None,
                    "message": "the call was stopped: its concurrency slot was lost while it ran",
                },
            )
        except NOTHING_SENT as exc:
            # Nothing reached the provider (no connection, none free, or the request could
            # not be written): retried, and it costs nothing. The error's text may name the
            # host: it is logged, not kept.
            logger.warning(
                "upstream unreachable",
                extra={"route": self.route.id, "error": scrub(f"{type(exc).__name__}: {exc}", secrets)},
            )
            error = {"code": "service_unavailable", "message": COULD_NOT_CONNECT, "status": None}
            return Outcome("retry", error=error, unreachable=True)
        except (httpx.TimeoutException, TimeoutError):
            # The deadline passed, or a read waited too long: the provider may be running it still.
            return Outcome(
                "failed", error={"code": "timeout", "message": TIMED_OUT, "status": 504}, usage_known=False
            )
        except httpx.HTTPError as exc:
            # The answer was lost on its way (a dropped connection): may pass, cost unknown.
            logger.warning(
                "upstream answer lost",
                extra={"route": self.route.id, "error": scrub(f"{type(exc).__name__}: {exc}", secrets)},
            )
            error = {"code": "upstream_error", "message": answer_lost(exc), "status": None}
            return Outcome("retry", error=error, usage_known=False)
        if answer.too_large:
            return _too_large(answer, self.max_bytes)
        return classify(
            self.endpoint, answer.status, answer.content, answer.headers, secrets=secrets, route=self.route.id
        )

    async def _send(self, key: str | None) -> _Answer:
        """Send the request and read its answer as a stream, counting the bytes: a 2xx
        answer past ``max_bytes`` is left unread; an error answer is cut."""
        # Opening a connection (or waiting for one of the pool) gives up well before the
        # deadline, so a call that sent nothing is told apart from one that timed out.
        opening = min(CONNECT_TIMEOUT_SECONDS, self.timeout / 2)
        timeout = httpx.Timeout(self.timeout, connect=opening, pool=opening)
        headers = _headers(self.route, key, self.anthropic_version, self.source)
        async with self.client.stream(
            "POST", self.url, content=self.content, headers=headers, timeout=timeout
        ) as resp:
            success = resp.is_success
            limit = self.max_bytes if success else min(self.max_bytes, ERROR_BODY_BYTES)
            if success and _declared_length(resp.headers) > limit:
                return _Answer(resp.status_code, resp.headers, b"", too_large=True)
            content = bytearray()
            async for chunk in resp.aiter_bytes():
                content += chunk
                if len(content) > limit:
                    if success:
                        return _Answer(resp.status_code, resp.headers, b"", too_large=True)
                    del content[limit:]
                    break
            return _Answer(resp.status_code, resp.headers, bytes(content))


async def _unless_stopped(work: Coroutine[Any, Any, T], stop: asyncio.Event | None) -> T:
    """``work``'s result, unless ``stop`` is set first: then ``work`` is cancelled and
    Stopped raised."""
    if stop is None:
        return await work
    task = asyncio.ensure_future(work)
    stopped = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait({task, stopped}, return_when=asyncio.FIRST_COMPLETED)
    except BaseException:  # the deadline passed (or the worker stops): the call ends with it
        await _cancel(task, stopped)
        raise
    if task.done():
        stopped.cancel()
        return task.result()
    await _cancel(task, stopped)
    raise Stopped


async def _cancel(*tasks: asyncio.Future[Any]) -> None:
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


def _declared_length(headers: httpx.Headers) -> int:
    """The answer's Content-Length when it declares one (0 when not, or not a number)."""
    try:
        return int(headers.get("content-length") or 0)
    except ValueError:
        return 0


def _too_large(answer: _Answer, max_bytes: int) -> Outcome:
    """A 2xx answer larger than one request may store: not read further. The provider ran
    the request, so its cost is unknown (counted as such)."""
    return Outcome(
        "failed",
        status_code=answer.status,
        request_id=answer.headers.get("x-request-id") or answer.headers.get("request-id"),
        usage_known=False,
        error={
            "code": "result_too_large",
            "status": None,
            "message": f"the upstream answer is larger than one request may store ({max_bytes} bytes); "
            "it was not read",
        },
    )


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
        cached_tokens=tokens[2] if tokens else 0,
        error={"code": "upstream_error", "status": 502, "message": message},
    )


def _lenient_usage(content: bytes) -> tuple[int, int, int] | None:
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
    route: str | None = None,
) -> Outcome:
    """What an upstream answer means (``secrets``: credentials never to keep in a message;
    ``route``: the route that answered, for the log)."""
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
            prompt, completion, cached = _usage(body)
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
            cached_tokens=cached,
        )
    message, code = _error_message(content, status)
    if status in (401, 403):
        # The provider's own words may quote the key it was sent: operators get them
        # (scrubbed), tenants a generic message.
        logger.warning(
            "upstream refused the gateway's credentials",
            extra={"route": route, "status": status, "detail": scrub(message, secrets)},
        )
        message = REFUSED_CREDENTIALS
    error = {
        "code": error_code_for(status),
        "message": scrub(message, secrets, limit=MAX_UPSTREAM_MESSAGE_CHARS),
        "status": status,
    }
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
