"""What the interactive path answers: the model's answer as it came, or an error in the
shape the caller's SDK reads — OpenAI's ``{"error": {...}}``, or on ``/v1/messages``
Anthropic's ``{"type": "error", "error": {"type", "message"}}``."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from batchgw.domain.errors import ApiError
from batchgw.domain.outcome import Outcome

MESSAGES = "/v1/messages"

# Error types by status, as both APIs name them (the gateway's own errors carry theirs:
# ``ApiError.type``), and each one's own.
_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    422: "invalid_request_error",
    429: "rate_limit_error",
}
_OPENAI_TYPES = {**_TYPES, 503: "service_unavailable"}
_ANTHROPIC_TYPES = {**_TYPES, 529: "overloaded_error"}  # https://docs.anthropic.com/en/api/errors


@dataclass(frozen=True, slots=True)
class Reply:
    status: int
    body: Any
    headers: dict[str, str] = field(default_factory=dict)


def error_reply(
    endpoint: str,
    status: int,
    message: str,
    *,
    code: str | int | None = None,
    param: str | None = None,
    type_: str | None = None,
    headers: dict[str, str] | None = None,
) -> Reply:
    """An error of ``status`` in ``endpoint``'s shape."""
    if endpoint == MESSAGES:
        kind = _ANTHROPIC_TYPES.get(status, "api_error" if status >= 500 else "invalid_request_error")
        return Reply(status, {"type": "error", "error": {"type": kind, "message": message}}, headers or {})
    kind = type_ or _OPENAI_TYPES.get(status, "server_error" if status >= 500 else "invalid_request_error")
    error = {"message": message, "type": kind, "param": param, "code": status if code is None else code}
    return Reply(status, {"error": error}, headers or {})


def refused(endpoint: str, exc: ApiError) -> Reply:
    """The gateway's own refusal (a bad body, a used-up quota...) in ``endpoint``'s shape."""
    return error_reply(
        endpoint,
        exc.status,
        exc.message,
        code=exc.code,
        param=exc.param,
        type_=exc.type,
        headers=exc.headers(),
    )


def of_outcome(endpoint: str, outcome: Outcome) -> Reply:
    """What the caller is answered for the model's ``outcome``: its answer as it came, or
    its error with the upstream's status, except where that status would speak of the
    gateway rather than the caller: a provider refusing the gateway's credentials (401,
    403) or not knowing the model it was configured with (404) is a 502, and no status at
    all (a timeout, a connection lost) a 504 or a 502."""
    request_id = {"x-request-id": outcome.request_id} if outcome.request_id else {}
    if outcome.kind == "success":
        return Reply(outcome.status_code or 200, outcome.body, request_id)
    error = outcome.error or {}
    code = error.get("code") or "upstream_error"
    message = str(error.get("message") or "the upstream call failed")
    status = outcome.status_code
    if status is None:
        status = 504 if code == "timeout" else 502
    elif status in (401, 403, 404):
        status = 502
    headers = dict(request_id)
    if outcome.retry_after is not None:
        headers["Retry-After"] = str(max(1, round(outcome.retry_after)))
    return error_reply(endpoint, status, message, code=code, headers=headers)
