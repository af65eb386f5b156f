"""What the simulator speaks: its models and the endpoints each serves, the ``Reply`` a
request gets, and error bodies in the OpenAI and Anthropic shapes (``local.simulator``
describes the whole server).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

PRIMARY, BACKUP = "primary", "backup"  # the listeners, named as the routes that reach them


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


def dumps(obj: object) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


def json_reply(status: int, obj: object, headers: tuple[tuple[str, str], ...] = ()) -> Reply:
    return Reply(status, dumps(obj), headers)


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
    return json_reply(status, body, headers)


class RequestError(Exception):
    """The request is malformed: answered 400 ``invalid_request_error``."""
