"""The upstream simulator: a small HTTP server that speaks like the models the gateway calls.

It answers the OpenAI chat completions, embeddings and Responses shapes and Anthropic
Messages, so the gateway's real httpx path runs against it in the local stack, the e2e
tests and the benchmark. Standard library only.

Start it with ``python -m local.simulator [--port 8081] [--latency-ms 0]`` (or the
``BATCHGW_SIM_PORT`` / ``BATCHGW_SIM_LATENCY_MS`` environment variables), or in-process::

    sim = Simulator(port=0).start()   # port 0 picks a free port
    httpx.post(f"{sim.url}/v1/chat/completions", json={...})
    sim.stop()

A second listener (``--backup-port``, env ``BATCHGW_SIM_BACKUP_PORT``) serves the same
models as a second route: the local models config gives ``sim-chat`` a ``backup`` route
there. ``POST /_sim/listeners/backup`` with ``{"up": false}`` closes it (connections are
refused, as a route that is down refuses them) and ``{"up": true}`` opens it again; the
stats count each listener's requests under ``"routes"``.

Provider batch APIs
    OpenAI's ``/v1/files`` and ``/v1/batches`` and Anthropic's ``/v1/messages/batches``, each
    line answered as the request alone would be, with controls to hold, advance, partly
    complete, fail or expire a batch and to make submits fail (``local.sim_batches``).

Models
    ``sim-chat`` (chat completions and Responses), ``sim-embed`` (embeddings),
    ``sim-claude`` (Anthropic Messages), ``sim-chat-only`` (chat completions only).
    An unknown model answers 404 ``model_not_found``; a known model on an endpoint it
    does not serve answers 400 ``unsupported_endpoint``.

Endpoints (POST, JSON)
    ``/v1/chat/completions``, ``/v1/embeddings``, ``/v1/responses``, ``/v1/messages``
    (the last one requires an ``anthropic-version`` header). No authentication is
    checked. Besides: ``GET /healthz``; ``GET /_sim/stats`` answers
    ``{"models": {"sim-chat": {"requests": N, "in_flight": K, "max_in_flight": M}, ...},
    "tags": {...}}`` (the same counts per ``tag=`` directive);
    ``"routes": {"primary": N, "backup": N}``;
    ``POST /_sim/reset`` zeroes the request counts and attempt counters, and sets
    ``max_in_flight`` to what is in flight now (``in_flight`` itself stays true).

Capacity (``local.sim_capacity``)
    Each model serves a limited number of sequences at once when told to (``--capacity N``,
    ``BATCHGW_SIM_CAPACITY``, or ``POST /_sim/capacity`` ``{"sim-chat": 16}``; 0 or null:
    no limit, the default): the rest wait in its queue, first come first served, so their
    latency grows with the load. ``/_sim/stats`` adds ``"queues": {MODEL: {"capacity",
    "running", "running_by_source": {"interactive", "batch"}, "waiting"}}`` and ``"latency":
    {MODEL: {"interactive"|"batch": {"count", "p50_ms", "p90_ms", "p99_ms", "answered"}}}`` of
    the recent requests, arrival to answer (``answered``: every one since the last reset; a
    request with ``x-batchgw-source: batch`` is the batch worker's, any other interactive).
    ``GET /metrics`` answers vLLM's ``vllm:num_requests_running`` and ``vllm:num_requests_waiting``
    gauges per ``model_name``.

Answers without directives are deterministic: the text ``"echo: "`` followed by the
last user message's text (content parts joined by a space). Usage counts
whitespace-separated words, at least 1: input over every text of the request
(messages, system, instructions, input), output over the answer. Chat honours ``stop``
and ``max_tokens``/``max_completion_tokens``; Messages honours ``stop_sequences`` and
``max_tokens``; Responses honours ``max_output_tokens`` (status ``incomplete``).
Embeddings are unit vectors derived from a SHA-256 of each input (8 dimensions unless
``dimensions`` says otherwise; ``encoding_format: "base64"`` gives little-endian float32).

Directives, written anywhere in the request's text (``[[sim key=value flag ...]]``;
several tokens per directive and several directives are allowed, later values win)
    ``status=N``       answer HTTP N with an OpenAI-style error body (Anthropic-style on
                       /v1/messages). A 2xx N answers the normal body with that status.
                       A 401 says what OpenAI says of a wrong key, quoting the first 8 and
                       the last 4 characters of the key it was sent (``Incorrect API key
                       provided: sk-sim-l*************-key. You can find...``); Anthropic's
                       is ``invalid x-api-key``.
    ``fail=N``         apply the failure directives (status, queued, garbage, nan, surrogate,
                       hang) to the
                       first N attempts of this same request only (same endpoint and same
                       canonical JSON body), then answer normally. Alone it means status=500.
    ``latency_ms=N``   wait N ms before answering (added to the server's base latency).
    ``trickle_ms=N``   send the answer's head at once, then its body in pieces of
                       ``TRICKLE_PIECE_BYTES`` (16) bytes, N ms apart: a server that keeps
                       the connection busy without ever being idle long enough for a read
                       timeout (stops when the client goes away). The request counts
                       as in flight until its last piece is sent.
    ``retry_after=S``  send ``Retry-After: S`` on error answers.
    ``queued``         answer 503 ``{"error": {"type": "service_unavailable",
                       "code": "model_queued", ...}}``.
    ``garbage``        answer 200 with a body that is not JSON.
    ``nan``            answer 200 with the normal body plus ``"x_sim_value": NaN`` (not JSON).
    ``surrogate``      answer 200 with the normal body plus a string holding a lone surrogate
                       escape (``"\ud800"``: JSON in form, but no UTF-8 text).
    ``bytes=N``        make the successful answer body exactly N bytes long, by padding
                       (or cutting) the answer text with spaces; answers without text
                       (embeddings, tool calls) get a top-level ``x_sim_padding`` string.
                       Usage still counts the unpadded answer. When N is smaller than the
                       answer with an empty text, that smallest answer is sent (longer than
                       N, but still valid JSON).
    ``chunked``        send the answer with ``Transfer-Encoding: chunked`` (pieces of
                       ``CHUNK_BYTES``, 64 KiB) instead of a ``Content-Length``: the client
                       learns its size only by reading it.
    ``hang``           never answer: hold the connection until the client goes away or
                       the server stops.
    ``cached=N``       report N of the answer's input tokens (at most all of them) as served
                       from a prompt cache, as each API says it: chat's
                       ``usage.prompt_tokens_details.cached_tokens``, Responses'
                       ``usage.input_tokens_details.cached_tokens``, Messages'
                       ``usage.cache_read_input_tokens`` (its ``input_tokens`` then the rest,
                       as Anthropic counts). Embeddings report none. Not for use with ``bytes``.
    ``tag=NAME``       count the request under NAME too: ``/_sim/stats`` then also answers
                       ``"tags": {NAME: {"requests", "in_flight", "max_in_flight"}}`` (how
                       many requests of one user, say, were ever in flight at once).
    ``tool``           (in the last user text, when the request has tools) answer with a
                       call of the first tool with ``{}`` arguments, unless the request
                       already ends with a tool result.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import math
import os
import re
import select
import signal
import socket
import struct
import sys
import threading
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import ExitStack, contextmanager, suppress
from dataclasses import dataclass, field, replace
from enum import StrEnum
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from socketserver import TCPServer
from types import TracebackType
from typing import Any, Self

from local.sim_batches import ProviderBatches
from local.sim_capacity import Capacity, Latencies, prometheus, source_of

DEFAULT_PORT = 8081
PROVIDER_BATCH_ROUTE = "provider_batch"  # the route a provider batch's lines count under
DEFAULT_BACKUP_PORT = 8083
PRIMARY, BACKUP = "primary", "backup"  # the listeners, named as the routes that reach them
DEFAULT_HOST = "127.0.0.1"
DEFAULT_DIMENSIONS = 8
MAX_DIMENSIONS = 8192
CREATED = 1_700_000_000  # fixed, so the same request gives the same bytes apart from ids
GARBAGE_BODY = b"\xff\xfenot json{"
HANG_POLL_SECONDS = 0.2
TRICKLE_PIECE_BYTES = 16
CHUNK_BYTES = 64 * 1024
STOP_POLL_SECONDS = 0.05  # how soon stop() is noticed by the accept loop
PROMETHEUS_TEXT = "text/plain; version=0.0.4"


class Endpoint(StrEnum):
    CHAT = "/v1/chat/completions"
    EMBEDDINGS = "/v1/embeddings"
    RESPONSES = "/v1/responses"
    MESSAGES = "/v1/messages"


MODELS: dict[str, frozenset[Endpoint]] = {
    "sim-chat": frozenset({Endpoint.CHAT, Endpoint.RESPONSES}),
    "sim-embed": frozenset({Endpoint.EMBEDDINGS}),
    "sim-claude": frozenset({Endpoint.MESSAGES}),
    "sim-chat-only": frozenset({Endpoint.CHAT}),
}

JsonObject = dict[str, Any]


# --------------------------------------------------------------------------- replies


@dataclass(frozen=True)
class Reply:
    """What the server sends back: a status, extra headers and the body bytes."""

    status: int
    body: bytes
    headers: tuple[tuple[str, str], ...] = ()
    content_type: str = "application/json"
    trickle_ms: float = 0.0  # > 0: the body is sent in small pieces this far apart
    chunked: bool = False  # sent with Transfer-Encoding: chunked, no Content-Length
    sent: Callable[[], None] | None = None  # to call once the body was written (or given up)


def _dumps(obj: object) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


def _json_reply(status: int, obj: object, headers: tuple[tuple[str, str], ...] = ()) -> Reply:
    return Reply(status, _dumps(obj), headers)


_OPENAI_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    409: "conflict_error",
    413: "invalid_request_error",
    422: "invalid_request_error",
    429: "rate_limit_error",
    503: "service_unavailable",
}
_ANTHROPIC_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    529: "overloaded_error",
}


def _error_type(status: int, anthropic: bool) -> str:
    table = _ANTHROPIC_ERROR_TYPES if anthropic else _OPENAI_ERROR_TYPES
    if status in table:
        return table[status]
    if status >= 500:
        return "api_error" if anthropic else "server_error"
    return "invalid_request_error"


def error_reply(
    status: int,
    message: str,
    *,
    anthropic: bool = False,
    type_: str | None = None,
    code: str | None = None,
    retry_after: str | None = None,
) -> Reply:
    """An error answer in the OpenAI shape, or the Anthropic shape (which also keeps ``code``)."""
    error: JsonObject = {"message": message, "type": type_ or _error_type(status, anthropic)}
    if anthropic:
        if code is not None:
            error["code"] = code
        body: JsonObject = {"type": "error", "error": error}
    else:
        error["param"] = None
        error["code"] = code
        body = {"error": error}
    headers = (("Retry-After", retry_after),) if retry_after is not None else ()
    return _json_reply(status, body, headers)


class RequestError(Exception):
    """The request is malformed: answered 400 ``invalid_request_error``."""


# --------------------------------------------------------------------------- directives


_DIRECTIVE_RE = re.compile(r"\[\[sim(?:\s+([^\]]*?))?\s*\]\]")
_FLAGS = frozenset({"queued", "garbage", "hang", "tool", "nan", "surrogate", "chunked"})
_BROKEN = frozenset({"nan", "surrogate"})  # a 200 whose body the gateway must refuse


@dataclass(frozen=True)
class Directives:
    """The ``[[sim ...]]`` directives found in a request's text."""

    status: int | None = None
    fail: int | None = None
    latency_ms: float = 0.0
    trickle_ms: float = 0.0
    retry_after: str | None = None
    bytes: int | None = None
    cached: int | None = None
    tag: str | None = None
    flags: frozenset[str] = field(default_factory=frozenset)

    @property
    def has_failure(self) -> bool:
        """Whether the request asks for anything but a normal answer (before ``fail`` gating)."""
        return bool(self.flags & {"queued", "garbage", "hang", *_BROKEN}) or (
            self.status is not None and self.status >= 400
        )


def _int_value(key: str, raw: str, minimum: int) -> int:
    try:
        value = int(raw)
    except ValueError:
        raise RequestError(f"sim directive {key}={raw!r} needs an integer") from None
    if value < minimum:
        raise RequestError(f"sim directive {key}={raw!r} must be at least {minimum}")
    return value


def _ms_value(key: str, values: Mapping[str, str]) -> float:
    if key not in values:
        return 0.0
    try:
        value = float(values[key])
    except ValueError:
        raise RequestError(f"sim directive {key} needs a number") from None
    if not math.isfinite(value) or value < 0:
        raise RequestError(f"sim directive {key} must be a non-negative number")
    return value


def parse_directives(texts: Iterable[str]) -> Directives:
    """Parse every ``[[sim ...]]`` directive in ``texts``; raises RequestError on a bad one."""
    values: dict[str, str] = {}
    flags: set[str] = set()
    for text in texts:
        if "[[sim" not in text:
            continue
        for match in _DIRECTIVE_RE.finditer(text):
            for token in (match.group(1) or "").split():
                key, sep, value = token.partition("=")
                if sep:
                    values[key] = value
                elif key in _FLAGS:
                    flags.add(key)
                else:
                    raise RequestError(f"unknown sim directive {token!r}")
    unknown = set(values) - {
        "status",
        "fail",
        "latency_ms",
        "trickle_ms",
        "retry_after",
        "bytes",
        "tag",
        "cached",
    }
    if unknown:
        raise RequestError(f"unknown sim directive {sorted(unknown)[0]!r}")
    status = None
    if "status" in values:
        status = _int_value("status", values["status"], 200)
        if not (200 <= status <= 299 or 400 <= status <= 599) or status in (204, 205):
            raise RequestError(f"sim directive status={status} must be a 2xx with a body, 4xx or 5xx")
    return Directives(
        status=status,
        fail=_int_value("fail", values["fail"], 0) if "fail" in values else None,
        latency_ms=_ms_value("latency_ms", values),
        trickle_ms=_ms_value("trickle_ms", values),
        retry_after=values.get("retry_after") or None,
        bytes=_int_value("bytes", values["bytes"], 0) if "bytes" in values else None,
        cached=_int_value("cached", values["cached"], 0) if "cached" in values else None,
        tag=values.get("tag") or None,
        flags=frozenset(flags),
    )


# --------------------------------------------------------------------------- request text

# Keys whose string values (directly, or in a list) are text a model would read.
_TEXT_KEYS = frozenset({"content", "text", "input", "system", "instructions", "output", "prompt"})
# Request parameters that are configuration, not text, even when they contain strings.
_SKIP_KEYS = frozenset(
    {
        "model",
        "tools",
        "tool_choice",
        "functions",
        "function_call",
        "metadata",
        "response_format",
        "stop",
        "stop_sequences",
        "user",
    }
)


def collect_texts(obj: object, is_text: bool = False) -> Iterator[str]:
    """Every text string of a request body: message contents, content parts, system, input..."""
    if isinstance(obj, str):
        if is_text:
            yield obj
    elif isinstance(obj, list):
        for item in obj:
            yield from collect_texts(item, is_text)
    elif isinstance(obj, dict):
        for key, value in obj.items():
            if key not in _SKIP_KEYS:
                yield from collect_texts(value, key in _TEXT_KEYS)


def count_words(texts: Iterable[str]) -> int:
    """Token usage as the simulator counts it: whitespace-separated words, at least 1."""
    return max(1, sum(len(text.split()) for text in texts))


def content_text(content: object) -> str:
    """The text of a message content: a string, or its text parts joined by a space."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(
            part["text"] for part in content if isinstance(part, dict) and isinstance(part.get("text"), str)
        )
    return ""


def last_user_text(messages: list[Any]) -> str:
    for message in reversed(messages):
        if isinstance(message, dict) and message.get("role") == "user":
            return content_text(message.get("content"))
    return ""


def _first_tool_name(tools: object) -> str | None:
    if not isinstance(tools, list) or not tools or not isinstance(tools[0], dict):
        return None
    tool = tools[0]
    function = tool.get("function")
    name = tool.get("name") or (function.get("name") if isinstance(function, dict) else None)
    return name if isinstance(name, str) and name else None


def _wants_tool(tools: object, user_text: str) -> str | None:
    """The tool to call when the request has tools and its last user text says ``[[sim tool]]``."""
    name = _first_tool_name(tools)
    if name is None or "[[sim" not in user_text:
        return None
    try:
        wanted = "tool" in parse_directives([user_text]).flags
    except RequestError:
        return None
    return name if wanted else None


def _stop_list(value: object) -> list[str]:
    if isinstance(value, str):
        return [value] if value else []
    if isinstance(value, list):
        return [s for s in value if isinstance(s, str) and s]
    if value is None:
        return []
    raise RequestError("stop must be a string or a list of strings")


def _max_tokens(body: JsonObject, *keys: str) -> int | None:
    for key in keys:
        value = body.get(key)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise RequestError(f"{key} must be a non-negative integer")
        return value
    return None


@dataclass(frozen=True)
class Completion:
    """The echo after stop sequences and the token limit: ``reason`` is end, stop or length."""

    text: str
    reason: str
    stop_sequence: str | None = None

    @property
    def tokens(self) -> int:
        return count_words([self.text])


def complete(user_text: str, stops: list[str], max_tokens: int | None) -> Completion:
    """The deterministic answer: ``echo: <text>``, cut at the first stop sequence or token limit."""
    text = "echo: " + user_text
    matched: str | None = None
    cut = len(text) + 1
    for stop in stops:
        at = text.find(stop)
        if 0 <= at < cut:
            cut, matched = at, stop
    if matched is not None:
        text = text[:cut]
    if max_tokens is not None:
        words = text.split()
        if len(words) > max_tokens:
            return Completion(" ".join(words[:max_tokens]), "length")
    return Completion(text, "stop" if matched is not None else "end", matched)


def _new_id(prefix: str) -> str:
    return prefix + uuid.uuid4().hex[:24]


# --------------------------------------------------------------------------- answers


@dataclass(frozen=True)
class Draft:
    """A successful answer as a function of its padded text, so ``bytes=N`` can size it."""

    render: Callable[[str], JsonObject]
    text: str = ""


def _padded(obj: JsonObject) -> Callable[[str], JsonObject]:
    """For answers without a text slot: padding goes into a top-level ``x_sim_padding``."""
    return lambda pad: {**obj, "x_sim_padding": pad} if pad else obj


def _json_len(char: str) -> int:
    return len(json.dumps(char)) - 2


def _with_cached(answer: bytes, endpoint: Endpoint, cached: int) -> bytes:
    """``answer`` with ``cached`` of its input tokens (at most all) reported as read from a
    prompt cache, in the endpoint's own words."""
    body = json.loads(answer)
    usage = body.get("usage")
    if not isinstance(usage, dict) or endpoint is Endpoint.EMBEDDINGS:
        return answer
    if endpoint is Endpoint.CHAT:
        usage["prompt_tokens_details"] = {"cached_tokens": min(cached, usage["prompt_tokens"])}
    elif endpoint is Endpoint.RESPONSES:
        usage["input_tokens_details"] = {"cached_tokens": min(cached, usage["input_tokens"])}
    else:  # Anthropic counts cache reads apart from input_tokens
        read = min(cached, usage["input_tokens"])
        usage["input_tokens"] -= read
        usage["cache_read_input_tokens"] = read
    return json.dumps(body).encode()


def fit_to_size(draft: Draft, size: int | None) -> bytes:
    """The answer's bytes; with ``size``, padded or cut with spaces to exactly that length if it can be."""
    text = draft.text
    body = _dumps(draft.render(text))
    if size is None:
        return body
    # A few rounds settle it even when an empty text renders differently (null, missing key).
    for _ in range(4):
        diff = size - len(body)
        if diff == 0:
            return body
        if diff > 0:
            text += " " * diff
        else:
            excess, cut = -diff, len(text)
            while cut > 0 and excess > 0:
                cut -= 1
                excess -= _json_len(text[cut])
            if excess > 0:
                return _dumps(draft.render(""))
            text = text[:cut]
        body = _dumps(draft.render(text))
    return body


def _messages_of(body: JsonObject) -> list[Any]:
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise RequestError("messages must be a non-empty list")
    return messages


def chat_answer(model: str, body: JsonObject, input_tokens: int) -> Draft:
    messages = _messages_of(body)
    user_text = last_user_text(messages)
    last = messages[-1]
    tool = (
        None
        if isinstance(last, dict) and last.get("role") == "tool"
        else _wants_tool(body.get("tools"), user_text)
    )
    answer_id = _new_id("chatcmpl-")

    def chat(
        message: JsonObject, finish_reason: str, output_tokens: int, stop_reason: str | None = None
    ) -> JsonObject:
        choice: JsonObject = {
            "index": 0,
            "message": message,
            "logprobs": None,
            "finish_reason": finish_reason,
        }
        if stop_reason is not None:
            choice["stop_reason"] = stop_reason  # which stop sequence matched, as vLLM says
        return {
            "id": answer_id,
            "object": "chat.completion",
            "created": CREATED,
            "model": model,
            "choices": [choice],
            "usage": {
                "prompt_tokens": input_tokens,
                "completion_tokens": output_tokens,
                "total_tokens": input_tokens + output_tokens,
            },
        }

    if tool is not None:
        call = {"id": _new_id("call_"), "type": "function", "function": {"name": tool, "arguments": "{}"}}
        message = {"role": "assistant", "content": None, "tool_calls": [call]}
        return Draft(_padded(chat(message, "tool_calls", 1)))
    done = complete(
        user_text, _stop_list(body.get("stop")), _max_tokens(body, "max_completion_tokens", "max_tokens")
    )
    finish = "length" if done.reason == "length" else "stop"
    return Draft(
        lambda text: chat({"role": "assistant", "content": text}, finish, done.tokens, done.stop_sequence),
        done.text,
    )


def _responses_user_text(items: object) -> str:
    if isinstance(items, str):
        return items
    if isinstance(items, list):
        return last_user_text(items)
    raise RequestError("input must be a string or a list of input items")


def responses_answer(model: str, body: JsonObject, input_tokens: int) -> Draft:
    items = body.get("input")
    user_text = _responses_user_text(items)
    last = items[-1] if isinstance(items, list) and items else None
    ends_with_tool_output = isinstance(last, dict) and last.get("type") == "function_call_output"
    tool = None if ends_with_tool_output else _wants_tool(body.get("tools"), user_text)
    answer_id = _new_id("resp_")

    def response(output: list[JsonObject], output_tokens: int, incomplete: bool) -> JsonObject:
        return {
            "id": answer_id,
            "object": "response",
            "created_at": CREATED,
            "status": "incomplete" if incomplete else "completed",
            "error": None,
            "incomplete_details": {"reason": "max_output_tokens"} if incomplete else None,
            "model": model,
            "output": output,
            "usage": {
                "input_tokens": input_tokens,
                "input_tokens_details": {"cached_tokens": 0},
                "output_tokens": output_tokens,
                "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": input_tokens + output_tokens,
            },
        }

    if tool is not None:
        call = {
            "type": "function_call",
            "id": _new_id("fc_"),
            "call_id": _new_id("call_"),
            "name": tool,
            "arguments": "{}",
            "status": "completed",
        }
        return Draft(_padded(response([call], 1, incomplete=False)))
    done = complete(user_text, [], _max_tokens(body, "max_output_tokens"))
    incomplete = done.reason == "length"
    message_id = _new_id("msg_")

    def render(text: str) -> JsonObject:
        message = {
            "type": "message",
            "id": message_id,
            "role": "assistant",
            "status": "incomplete" if incomplete else "completed",
            "content": [{"type": "output_text", "text": text, "annotations": []}],
        }
        return response([message], done.tokens, incomplete)

    return Draft(render, done.text)


def messages_answer(model: str, body: JsonObject, input_tokens: int) -> Draft:
    messages = _messages_of(body)
    user_text = last_user_text(messages)
    last_content = messages[-1].get("content") if isinstance(messages[-1], dict) else None
    ends_with_tool_result = isinstance(last_content, list) and any(
        isinstance(block, dict) and block.get("type") == "tool_result" for block in last_content
    )
    tool = None if ends_with_tool_result else _wants_tool(body.get("tools"), user_text)
    answer_id = _new_id("msg_")

    def message(content: list[JsonObject], stop_reason: str, stop: str | None, tokens: int) -> JsonObject:
        return {
            "id": answer_id,
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": content,
            "stop_reason": stop_reason,
            "stop_sequence": stop,
            "usage": {"input_tokens": input_tokens, "output_tokens": tokens},
        }

    if tool is not None:
        use = {"type": "tool_use", "id": _new_id("toolu_"), "name": tool, "input": {}}
        return Draft(_padded(message([use], "tool_use", None, 1)))
    done = complete(user_text, _stop_list(body.get("stop_sequences")), _max_tokens(body, "max_tokens"))
    stop_reason = {"end": "end_turn", "stop": "stop_sequence", "length": "max_tokens"}[done.reason]
    return Draft(
        lambda text: message([{"type": "text", "text": text}], stop_reason, done.stop_sequence, done.tokens),
        done.text,
    )


def embedding_vector(seed: bytes, dimensions: int) -> bytes:
    """A deterministic unit vector for ``seed``, as little-endian float32 bytes."""
    raw = bytearray()
    counter = 0
    while len(raw) < 4 * dimensions:
        raw += hashlib.sha256(seed + counter.to_bytes(4, "little")).digest()
        counter += 1
    values = [u / 2**31 - 1.0 for u in struct.unpack(f"<{dimensions}I", raw[: 4 * dimensions])]
    norm = math.sqrt(sum(v * v for v in values)) or 1.0
    return struct.pack(f"<{dimensions}f", *(v / norm for v in values))


def _is_token(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _embedding_inputs(value: object) -> list[str | list[int]]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and value:
        if all(isinstance(item, str) for item in value):
            return list(value)
        if all(_is_token(item) for item in value):
            return [list(value)]
        if all(isinstance(item, list) and item and all(_is_token(t) for t in item) for item in value):
            return list(value)
    raise RequestError("input must be a string, a list of strings, or token arrays")


def embeddings_answer(model: str, body: JsonObject, input_tokens: int) -> Draft:
    del input_tokens  # embeddings count their own inputs, token arrays included
    inputs = _embedding_inputs(body.get("input"))
    dimensions = body.get("dimensions", DEFAULT_DIMENSIONS)
    if not _is_token(dimensions) or not 1 <= dimensions <= MAX_DIMENSIONS:
        raise RequestError(f"dimensions must be an integer between 1 and {MAX_DIMENSIONS}")
    encoding = body.get("encoding_format") or "float"
    if encoding not in ("float", "base64"):
        raise RequestError("encoding_format must be 'float' or 'base64'")
    data: list[JsonObject] = []
    tokens = 0
    for index, item in enumerate(inputs):
        if isinstance(item, str):
            seed, tokens = item.encode(), tokens + len(item.split())
        else:
            seed, tokens = ("tokens:" + ",".join(map(str, item))).encode(), tokens + len(item)
        packed = embedding_vector(seed, dimensions)
        vector: str | list[float] = (
            base64.b64encode(packed).decode()
            if encoding == "base64"
            else list(struct.unpack(f"<{dimensions}f", packed))
        )
        data.append({"object": "embedding", "index": index, "embedding": vector})
    tokens = max(1, tokens)
    answer = {
        "object": "list",
        "data": data,
        "model": model,
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
    }
    return Draft(_padded(answer))


_ANSWERS: dict[Endpoint, Callable[[str, JsonObject, int], Draft]] = {
    Endpoint.CHAT: chat_answer,
    Endpoint.EMBEDDINGS: embeddings_answer,
    Endpoint.RESPONSES: responses_answer,
    Endpoint.MESSAGES: messages_answer,
}


# --------------------------------------------------------------------------- state


@dataclass
class _ModelCounts:
    requests: int = 0
    in_flight: int = 0
    max_in_flight: int = 0


class Stats:
    """Per-model request counts, in flight now and the most ever in flight; thread-safe."""

    def __init__(self, models: Iterable[str]) -> None:
        self._lock = threading.Lock()
        self._counts = {model: _ModelCounts() for model in models}
        self._tags: dict[str, _ModelCounts] = {}
        self._routes: dict[str, int] = {PRIMARY: 0, BACKUP: 0}

    @contextmanager
    def track(self, model: str, tag: str | None = None, route: str = "primary") -> Iterator[None]:
        with self._lock:
            self._routes[route] = self._routes.get(route, 0) + 1
            tracked = [self._counts[model]]
            if tag is not None:
                tracked.append(self._tags.setdefault(tag, _ModelCounts()))
            for counts in tracked:
                counts.requests += 1
                counts.in_flight += 1
                counts.max_in_flight = max(counts.max_in_flight, counts.in_flight)
        try:
            yield
        finally:
            with self._lock:
                for counts in tracked:
                    counts.in_flight -= 1

    def snapshot(self) -> JsonObject:
        with self._lock:
            return {
                "models": {model: _shown(counts) for model, counts in self._counts.items()},
                "tags": {tag: _shown(counts) for tag, counts in self._tags.items()},
                "routes": dict(self._routes),
            }

    def reset(self) -> None:
        with self._lock:
            for counts in (*self._counts.values(), *self._tags.values()):
                counts.requests = 0
                counts.max_in_flight = counts.in_flight
            self._routes = dict.fromkeys(self._routes, 0)


def _shown(counts: _ModelCounts) -> JsonObject:
    return {"requests": counts.requests, "in_flight": counts.in_flight, "max_in_flight": counts.max_in_flight}


class Attempts:
    """How many times each request identity (endpoint + canonical body) has been seen."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._seen: dict[str, int] = {}

    @staticmethod
    def identity(endpoint: Endpoint, body: JsonObject) -> str:
        canonical = json.dumps(body, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(f"{endpoint.value}\n{canonical}".encode()).hexdigest()

    def next(self, identity: str) -> int:
        """Counts one more attempt of ``identity`` and returns its number, starting at 1."""
        with self._lock:
            attempt = self._seen.get(identity, 0) + 1
            self._seen[identity] = attempt
            return attempt

    def clear(self) -> None:
        with self._lock:
            self._seen.clear()


# --------------------------------------------------------------------------- behaviour


def _tag_of(body: JsonObject) -> str | None:
    """The request's ``tag=`` directive, if it has one (a bad directive is answered later)."""
    try:
        return parse_directives(collect_texts(body)).tag
    except RequestError:
        return None


def _trickled(reply: Reply | None, directives: Directives) -> Reply | None:
    """The reply, sent as the directives say: trickled, chunked, or at once."""
    if reply is None or not (directives.trickle_ms or "chunked" in directives.flags):
        return reply
    return replace(reply, trickle_ms=directives.trickle_ms, chunked="chunked" in directives.flags)


def wrong_key_message(headers: Mapping[str, str], anthropic: bool) -> str:
    """What the provider says of a key it refuses: OpenAI quotes the key, partly masked."""
    if anthropic:
        return "invalid x-api-key"
    authorization = headers.get("authorization", "")
    key = authorization[7:].strip() if authorization.lower().startswith("bearer ") else ""
    if not key:
        return (
            "You didn't provide an API key. You need to provide your API key in an Authorization "
            "header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY)."
        )
    shown = key[:8] + "*" * (len(key) - 12) + key[-4:] if len(key) > 12 else key
    return (
        f"Incorrect API key provided: {shown}. You can find your API key at "
        "https://platform.openai.com/account/api-keys."
    )


class SimulatorCore:
    """Everything the simulator does, apart from HTTP parsing and socket writes.

    ``handle`` returns the reply to send, or None when the connection must be closed
    without an answer (a hang that ended, or a server stopping mid-wait).
    """

    def __init__(self, latency_ms: float = 0.0, capacity: int = 0) -> None:
        self.latency_ms = latency_ms
        self.stats = Stats(MODELS)
        self.capacity = Capacity(MODELS, capacity)
        self.latencies = Latencies(MODELS)
        self.attempts = Attempts()
        self.stopping = threading.Event()
        # Set by ``Simulator`` when it has a backup listener: open (True) or close it.
        self.switch_backup: Callable[[bool], None] | None = None
        self.provider_batches = ProviderBatches(self._line_answer)

    def reset(self) -> None:
        self.stats.reset()
        self.attempts.clear()
        self.latencies.clear()
        self.provider_batches.reset()

    def _line_answer(self, url: str, body: JsonObject, headers: Mapping[str, str]) -> tuple[int, Any] | None:
        """A provider batch's line, answered as the same request sent alone would be, without
        its latency (a batch's lines are answered when it is processed, in the read that finds
        it due: how long the provider took is ``auto_seconds``); a hang gives up at once:
        nobody waits on the line."""
        anthropic = url == Endpoint.MESSAGES.value
        model = body.get("model")
        if not isinstance(model, str) or model not in MODELS:
            return 404, json.loads(
                error_reply(404, f"the model {model!r} does not exist", anthropic=anthropic).body
            )
        # Counted as the model's requests are (under the route ``provider_batch``): the
        # provider ran it, as it runs one sent alone.
        with self.stats.track(model, _tag_of(body), PROVIDER_BATCH_ROUTE):
            reply = self._model_request(Endpoint(url), model, body, headers, lambda: True, delayed=False)
        if reply is None:
            return None
        try:
            return reply.status, json.loads(reply.body)
        except ValueError:
            return 502, {"error": {"message": "the answer was not JSON"}}

    def snapshot(self) -> JsonObject:
        """``/_sim/stats``: the counts, and per model its queue and latencies by source."""
        shown = self.stats.snapshot()
        shown["queues"] = self.capacity.snapshot()
        shown["latency"] = {model: self.latencies.snapshot(model) for model in MODELS}
        return shown

    def handle(
        self,
        method: str,
        path: str,
        headers: Mapping[str, str],
        raw: bytes,
        client_gone: Callable[[], bool] = lambda: False,
        route: str = PRIMARY,
    ) -> Reply | None:
        """Answers one request (that came to the ``route`` listener); ``headers`` has
        lower-case names."""
        path = path.split("?", 1)[0]
        if path == "/healthz":
            return _json_reply(200, {"status": "ok"})
        if path == "/_sim/stats":
            return _json_reply(200, self.snapshot())
        if path == "/metrics":
            return Reply(200, prometheus(self.capacity.snapshot()), content_type=PROMETHEUS_TEXT)
        if path == "/_sim/capacity":
            return self._set_capacity(method, raw)
        if path == "/_sim/reset":
            if method != "POST":
                return error_reply(405, "use POST /_sim/reset")
            self.reset()
            return _json_reply(200, {"status": "ok"})
        if path == f"/_sim/listeners/{BACKUP}":
            return self._switch_backup(method, raw)
        provided = self.provider_batches.handle(method, path, headers, raw)
        if provided is not None:
            status, answer, extra = provided
            if isinstance(answer, bytes):
                return Reply(status, answer, extra, content_type="application/jsonl")
            return _json_reply(status, answer, extra)
        try:
            endpoint = Endpoint(path)
        except ValueError:
            return error_reply(404, f"unknown path {path}", code="unknown_url")
        anthropic = endpoint is Endpoint.MESSAGES
        if method != "POST":
            return error_reply(405, f"use POST {path}", anthropic=anthropic)
        try:
            body = json.loads(raw)
        except ValueError:
            return error_reply(400, "the body is not valid JSON", anthropic=anthropic)
        if not isinstance(body, dict):
            return error_reply(400, "the body must be a JSON object", anthropic=anthropic)
        model = body.get("model")
        if not isinstance(model, str):
            return error_reply(400, "model is required", anthropic=anthropic)
        if model not in MODELS:
            return error_reply(
                404,
                f"the model {model!r} does not exist",
                anthropic=anthropic,
                type_="not_found_error",
                code="model_not_found",
            )
        arrived = self.latencies.clock()
        source = source_of(headers)
        tracked = ExitStack()
        tracked.enter_context(self.stats.track(model, _tag_of(body), route))
        try:
            if not self.capacity.admit(model, lambda: self.stopping.is_set() or client_gone(), source):
                tracked.close()
                return None  # it waited in the queue until its client (or the server) gave up
            try:
                reply = self._model_request(endpoint, model, body, headers, client_gone)
            finally:
                self.capacity.release(model, source)
        except BaseException:
            tracked.close()
            raise
        if reply is not None:
            self.latencies.add(model, source, self.latencies.clock() - arrived)
        if reply is None or not reply.trickle_ms:
            tracked.close()
            return reply
        # A trickled answer stays in flight until its last piece is written (``sent``).
        return replace(reply, sent=tracked.close)

    def _set_capacity(self, method: str, raw: bytes) -> Reply:
        """``GET``: each model's sequences at once (0: no limit); ``POST {"sim-chat": 16}``
        sets them (``null`` or 0 lifts a limit)."""
        if method == "POST":
            try:
                limits = json.loads(raw or b"{}")
            except ValueError:
                limits = None
            if not isinstance(limits, dict) or not all(
                model in MODELS and (n is None or (type(n) is int and n >= 0)) for model, n in limits.items()
            ):
                return error_reply(400, 'send {"<model>": <sequences at once, 0 or null for no limit>, ...}')
            self.capacity.set_limits({model: n or 0 for model, n in limits.items()})
        elif method != "GET":
            return error_reply(405, "use GET or POST /_sim/capacity")
        return _json_reply(200, {"models": self.capacity.limits()})

    def _switch_backup(self, method: str, raw: bytes) -> Reply:
        if method != "POST":
            return error_reply(405, f"use POST /_sim/listeners/{BACKUP}")
        try:
            up = json.loads(raw or b"{}").get("up")
        except (ValueError, AttributeError):
            up = None
        if not isinstance(up, bool):
            return error_reply(400, 'send {"up": true} or {"up": false}')
        if self.switch_backup is None:
            return error_reply(404, "this simulator has no backup listener")
        self.switch_backup(up)
        return _json_reply(200, {"listener": BACKUP, "up": up})

    def _model_request(
        self,
        endpoint: Endpoint,
        model: str,
        body: JsonObject,
        headers: Mapping[str, str],
        client_gone: Callable[[], bool],
        *,
        delayed: bool = True,
    ) -> Reply | None:
        anthropic = endpoint is Endpoint.MESSAGES
        if anthropic and not headers.get("anthropic-version"):
            return error_reply(400, "anthropic-version header is required", anthropic=True)
        if endpoint not in MODELS[model]:
            return error_reply(
                400,
                f"the model {model!r} does not support {endpoint.value}",
                anthropic=anthropic,
                code="unsupported_endpoint",
            )
        texts = list(collect_texts(body))
        try:
            directives = parse_directives(texts)
        except RequestError as exc:
            return error_reply(400, str(exc), anthropic=anthropic)

        delay = self.latency_ms + directives.latency_ms if delayed else 0
        if delay > 0 and self.stopping.wait(delay / 1000):
            return None
        if directives.fail is not None:
            failing = self.attempts.next(Attempts.identity(endpoint, body)) <= directives.fail
        else:
            failing = directives.has_failure
        if failing and not directives.flags & _BROKEN:
            return _trickled(self._failure(directives, anthropic, client_gone, headers), directives)

        try:
            draft = _ANSWERS[endpoint](model, body, count_words(texts))
        except RequestError as exc:
            return error_reply(400, str(exc), anthropic=anthropic)
        status = directives.status if directives.status is not None and directives.status < 300 else 200
        answer = fit_to_size(draft, directives.bytes)
        if directives.cached is not None:
            answer = _with_cached(answer, endpoint, directives.cached)
        if failing:  # the normal answer, usage and all, broken on purpose
            broken = json.loads(answer)
            if "nan" in directives.flags:
                broken["x_sim_value"] = math.nan
            if "surrogate" in directives.flags:
                broken["x_sim_text"] = "\ud800"
            answer = json.dumps(broken).encode()
        return _trickled(Reply(status, answer), directives)

    def _failure(
        self,
        directives: Directives,
        anthropic: bool,
        client_gone: Callable[[], bool],
        headers: Mapping[str, str],
    ) -> Reply | None:
        """The failing answer the directives ask for; None for a hang (after it ends)."""
        if "hang" in directives.flags:
            while not self.stopping.wait(HANG_POLL_SECONDS):
                if client_gone():
                    break
            return None
        if "queued" in directives.flags:
            return error_reply(
                503,
                "the model is queued; retry later",
                anthropic=anthropic,
                type_="service_unavailable",
                code="model_queued",
                retry_after=directives.retry_after,
            )
        if "garbage" in directives.flags:
            return Reply(200, GARBAGE_BODY)
        status = directives.status if directives.status is not None and directives.status >= 400 else 500
        if status == 401:
            code = None if anthropic else "invalid_api_key"
            return error_reply(401, wrong_key_message(headers, anthropic), anthropic=anthropic, code=code)
        return error_reply(
            status,
            f"simulated error {status}",
            anthropic=anthropic,
            code="rate_limit_exceeded" if status == 429 and not anthropic else None,
            retry_after=directives.retry_after,
        )


# --------------------------------------------------------------------------- HTTP


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True
    server: _Server

    def setup(self) -> None:
        super().setup()
        self.server.connection_opened(self.connection)

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            self.server.connection_closed(self.connection)

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def do_DELETE(self) -> None:
        self._dispatch("DELETE")

    def log_message(self, format: str, *args: Any) -> None:
        """Silent: a log line per request would cost more than the simulated model."""

    def _read_body(self) -> bytes:
        if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
            chunks: list[bytes] = []
            while True:
                size = int(self.rfile.readline().split(b";", 1)[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return b"".join(chunks)
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length > 0 else b""

    def _client_gone(self) -> bool:
        try:
            readable, _, _ = select.select([self.connection], [], [], 0)
            return bool(readable) and self.connection.recv(1, socket.MSG_PEEK) == b""
        except (OSError, ValueError):
            return True

    def _dispatch(self, method: str) -> None:
        try:
            raw = self._read_body()
        except ValueError:
            self.close_connection = True
            self._write(error_reply(400, "bad request body framing"))
            return
        headers = {name.lower(): value for name, value in self.headers.items()}
        reply = self.server.core.handle(method, self.path, headers, raw, self._client_gone, self.server.route)
        if reply is None:
            self.close_connection = True
            return
        self._write(reply)

    def _write(self, reply: Reply) -> None:
        try:
            phrase = HTTPStatus(reply.status).phrase
        except ValueError:
            phrase = "Status"
        lines = [
            f"HTTP/1.1 {reply.status} {phrase}",
            f"Content-Type: {reply.content_type}",
            "Transfer-Encoding: chunked" if reply.chunked else f"Content-Length: {len(reply.body)}",
        ]
        lines += [f"{name}: {value}" for name, value in reply.headers]
        if self.close_connection:
            lines.append("Connection: close")
        head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
        if reply.chunked and not reply.trickle_ms:
            self.wfile.write(head)
            for start in range(0, len(reply.body), CHUNK_BYTES):
                self.wfile.write(_chunk(reply.body[start : start + CHUNK_BYTES]))
            self.wfile.write(_chunk(b""))
            return
        if reply.trickle_ms > 0:
            try:
                self._trickle(head, reply.body, reply.trickle_ms / 1000, chunked=reply.chunked)
            finally:
                if reply.sent is not None:
                    reply.sent()
            return
        self.wfile.write(head + reply.body)  # one write: no Nagle/delayed-ACK stall between parts

    def _trickle(self, head: bytes, body: bytes, pause: float, *, chunked: bool) -> None:
        """The head at once, then the body in small pieces ``pause`` seconds apart (until the
        client goes away: a write then fails, which the server ignores)."""
        self.wfile.write(head)
        for start in range(0, len(body), TRICKLE_PIECE_BYTES):
            if self.server.core.stopping.wait(pause):
                self.close_connection = True
                return
            piece = body[start : start + TRICKLE_PIECE_BYTES]
            self.wfile.write(_chunk(piece) if chunked else piece)
        if chunked:
            self.wfile.write(_chunk(b""))


def _chunk(data: bytes) -> bytes:
    """One chunk of a chunked body (an empty one ends it)."""
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False  # stop() releases every handler itself
    request_queue_size = 1024  # a burst of 64+ new connections must not overflow the backlog

    allow_reuse_address = True  # the backup listener opens again on its port at once

    def __init__(self, address: tuple[str, int], core: SimulatorCore, route: str = "primary") -> None:
        self.core = core
        self.route = route
        self._connections: set[socket.socket] = set()
        self._connections_lock = threading.Lock()
        super().__init__(address, _Handler)

    def server_bind(self) -> None:
        TCPServer.server_bind(self)  # skips HTTPServer's reverse DNS lookup of the host
        host, port = self.server_address[:2]
        self.server_name = str(host)
        self.server_port = int(port)

    def connection_opened(self, connection: socket.socket) -> None:
        with self._connections_lock:
            self._connections.add(connection)

    def connection_closed(self, connection: socket.socket) -> None:
        with self._connections_lock:
            self._connections.discard(connection)

    def close_connections(self) -> None:
        """Wakes every handler blocked on an idle keep-alive connection."""
        with self._connections_lock:
            connections = list(self._connections)
        for connection in connections:
            with suppress(OSError):
                connection.shutdown(socket.SHUT_RDWR)

    def handle_error(self, request: Any, client_address: Any) -> None:
        if isinstance(sys.exc_info()[1], OSError):
            return  # a client that went away is not the simulator's problem
        super().handle_error(request, client_address)


class Simulator:
    """The simulator server, run in background threads.

    ``Simulator(port=0).start()`` picks a free port; ``.port``, ``.url``
    (``http://127.0.0.1:PORT``) and ``.base_url`` (``.../v1``) say where it listens. With
    ``backup_port`` (0: a free one) it listens there too, as a model's second route
    (``.backup_port``); ``set_backup(False)`` closes that listener and ``True`` opens it
    again. Usable as a context manager.
    """

    def __init__(
        self,
        port: int = 0,
        *,
        host: str = DEFAULT_HOST,
        latency_ms: float = 0.0,
        backup_port: int | None = None,
        capacity: int = 0,
    ) -> None:
        self.host = host
        self.core = SimulatorCore(latency_ms=latency_ms, capacity=capacity)
        self._requested_port = port
        self._requested_backup = backup_port
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        self._backup: tuple[_Server, threading.Thread] | None = None
        self._backup_port: int | None = None
        self._backup_lock = threading.Lock()

    @property
    def port(self) -> int:
        if self._server is None:
            raise RuntimeError("the simulator is not started")
        return self._server.server_port

    @property
    def backup_port(self) -> int | None:
        return self._backup_port

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def base_url(self) -> str:
        return f"{self.url}/v1"

    def _listen(self, port: int, route: str) -> tuple[_Server, threading.Thread]:
        server = _Server((self.host, port), self.core, route)
        thread = threading.Thread(
            target=server.serve_forever,
            kwargs={"poll_interval": STOP_POLL_SECONDS},
            name=f"simulator:{route}:{server.server_port}",
            daemon=True,
        )
        thread.start()
        return server, thread

    def start(self) -> Self:
        if self._server is not None:
            raise RuntimeError("the simulator is already started")
        self.core.stopping.clear()
        self._server, self._thread = self._listen(self._requested_port, PRIMARY)
        if self._requested_backup is not None:
            self._backup_port = self._requested_backup
            self.set_backup(True)
            self.core.switch_backup = self.set_backup
        return self

    def set_backup(self, up: bool) -> None:
        """Open the backup listener, or close it (its port then refuses connections)."""
        with self._backup_lock:
            if up and self._backup is None:
                assert self._backup_port is not None
                self._backup = self._listen(self._backup_port, BACKUP)
                self._backup_port = self._backup[0].server_port
            elif not up and self._backup is not None:
                _close(*self._backup)
                self._backup = None

    def stop(self) -> None:
        """Stops accepting, releases hung and idle connections, and closes the sockets."""
        server, self._server = self._server, None
        if server is None:
            return
        self.core.stopping.set()
        self.core.switch_backup = None
        self.set_backup(False)
        assert self._thread is not None
        _close(server, self._thread)
        self._thread = None

    def stats(self) -> JsonObject:
        return self.core.snapshot()

    def reset(self) -> None:
        self.core.reset()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


def _close(server: _Server, thread: threading.Thread) -> None:
    server.shutdown()
    server.close_connections()
    server.server_close()
    thread.join(timeout=5)


# --------------------------------------------------------------------------- command line


def parse_args(argv: list[str] | None = None, environ: Mapping[str, str] = os.environ) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m local.simulator", description=__doc__.split("\n")[0])
    parser.add_argument(
        "--port",
        type=int,
        default=int(environ.get("BATCHGW_SIM_PORT") or DEFAULT_PORT),
        help="port to listen on (env BATCHGW_SIM_PORT, default 8081)",
    )
    parser.add_argument(
        "--backup-port",
        type=int,
        default=int(environ.get("BATCHGW_SIM_BACKUP_PORT") or DEFAULT_BACKUP_PORT),
        help="port of the second route's listener (env BATCHGW_SIM_BACKUP_PORT, default 8083)",
    )
    parser.add_argument("--host", default=DEFAULT_HOST, help="address to listen on (default 127.0.0.1)")
    parser.add_argument(
        "--latency-ms",
        type=float,
        default=float(environ.get("BATCHGW_SIM_LATENCY_MS") or 0),
        help="base latency of every model request (env BATCHGW_SIM_LATENCY_MS, default 0)",
    )
    parser.add_argument(
        "--capacity",
        type=int,
        default=int(environ.get("BATCHGW_SIM_CAPACITY") or 0),
        help="sequences a model serves at once, the rest queue (env BATCHGW_SIM_CAPACITY, default 0: none)",
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    done = threading.Event()

    def stop_on(signum: int, _: object) -> None:
        # A stack whose simulator stopped shows its log's tail: it says whether it was told to.
        print(f"simulator stopping on {signal.Signals(signum).name}", flush=True)
        done.set()

    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, stop_on)
    simulator = Simulator(
        args.port,
        host=args.host,
        latency_ms=args.latency_ms,
        backup_port=args.backup_port,
        capacity=args.capacity,
    ).start()
    print(
        f"simulator listening on {simulator.url}, backup route on port {simulator.backup_port} "
        f"(base latency {args.latency_ms:g} ms)",
        flush=True,
    )
    try:
        done.wait()
    finally:
        simulator.stop()


if __name__ == "__main__":
    main()
