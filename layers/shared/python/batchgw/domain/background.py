"""A background response as the OpenAI Responses API shows it, from the batch of one
request that runs it (``batchgw.deferred.background``).

Its status follows the batch and its request, first match wins:

- the batch cancelling or cancelled: ``cancelled`` (a call still running finishes, and its
  answer is not shown);
- the request ended: ``completed`` with the upstream's response (its ``id``, ``status``,
  ``background`` and ``created_at`` the background response's own), ``failed`` with its
  error, ``incomplete`` when the window closed first;
- the batch ended without it (its window closed: ``incomplete``; it failed: ``failed``);
- the request started (running, or waiting to be tried again): ``in_progress``;
- else ``queued``.
"""

from __future__ import annotations

from typing import Any

from batchgw.domain.batch import BatchRecord
from batchgw.domain.request import RequestRecord
from batchgw.domain.states import BatchStatus, RequestStatus

# The error code of a background response whose window closed before it ran to its end.
WINDOW_CLOSED = "background_window_expired"
# What the response object echoes of the request, as the Responses API does.
ECHOED = (
    "instructions",
    "max_output_tokens",
    "metadata",
    "parallel_tool_calls",
    "previous_response_id",
    "reasoning",
    "service_tier",
    "temperature",
    "text",
    "tool_choice",
    "tools",
    "top_p",
    "truncation",
    "user",
)
_ENDED = {
    RequestStatus.SUCCEEDED: "completed",
    RequestStatus.FAILED: "failed",
    RequestStatus.EXPIRED: "incomplete",
    RequestStatus.CANCELLED: "cancelled",
}
_BATCH_ENDED = {BatchStatus.EXPIRED: "incomplete", BatchStatus.FAILED: "failed"}
_OWN = ("id", "object", "created_at", "background")  # the background response's, not the answer's
STATUSES = ("queued", "in_progress", "completed", "failed", "cancelled", "incomplete")


def status_of(record: BatchRecord, request: RequestRecord | None) -> str:
    """The background response's status (see the module's docstring)."""
    if record.status in (BatchStatus.CANCELLING, BatchStatus.CANCELLED):
        return "cancelled"
    if request is not None and request.status in _ENDED:
        return _ENDED[request.status]
    if record.status in _BATCH_ENDED:
        return _BATCH_ENDED[record.status]
    if request is not None and (request.status is not RequestStatus.QUEUED or request.attempts > 0):
        return "in_progress"
    return "queued"


def is_settled(status: str) -> bool:
    """Whether a response in ``status`` has ended for good (cancel answers it unchanged)."""
    return status not in ("queued", "in_progress")


def response_object(
    record: BatchRecord,
    request: RequestRecord | None,
    asked: dict[str, Any],
    answer: Any = None,
) -> dict[str, Any]:
    """The response object: what was ``asked`` (the request's body) echoed, the status, and
    once completed the upstream's ``answer`` (a Responses object) as the output."""
    status = status_of(record, request)
    shown: dict[str, Any] = {
        "id": record.id,
        "object": "response",
        "created_at": record.created_at,
        "status": status,
        "background": True,
        "model": asked.get("model"),
        "output": [],
        "usage": None,
        "error": None,
        "incomplete_details": None,
        "tools": [],
        "tool_choice": "auto",
        "parallel_tool_calls": True,
        "metadata": {},
    }
    shown.update({name: asked[name] for name in ECHOED if name in asked})
    if status == "completed" and isinstance(answer, dict):
        shown.update({k: v for k, v in answer.items() if k not in _OWN})
        shown["status"] = "completed"
        shown["completed_at"] = None if record.ended_at is None else int(record.ended_at)
    elif status == "failed":
        shown["error"] = _error_of(record, request)
    elif status == "incomplete":
        shown["incomplete_details"] = {"reason": WINDOW_CLOSED}
        shown["error"] = {
            "code": WINDOW_CLOSED,
            "message": "The background response did not end within its window "
            "(BATCH_BACKGROUND_WINDOW_SECONDS); it was not run to its end.",
        }
    if record.complete_by is not None:
        shown["complete_by"] = record.complete_by
    shown["priority"] = record.priority
    return shown


def _error_of(record: BatchRecord, request: RequestRecord | None) -> dict[str, Any]:
    """A failed response's error, in the Responses API's shape (``code``, ``message``)."""
    error = (request.error if request is not None else None) or record.error or {}
    return {
        "code": error.get("code") or "server_error",
        "message": error.get("message") or "The background response failed.",
    }


def event_type(status: str) -> str:
    """The webhook event of a background response that ended in ``status`` (OpenAI's names)."""
    return f"response.{status}"
