"""What every route shares: query parameters, list pages, and file answers."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from batchgw.domain.errors import BadRequest

# An answer given inline stays under Lambda's 6 MB response limit; larger ones are
# a 302 to a presigned S3 URL.
INLINE_ANSWER_LIMIT = 5 * 1024 * 1024

Params = dict[str, list[str]]


@dataclass(frozen=True)
class Download:
    """A file answer: bytes inline, or a redirect to a presigned URL when too large."""

    body: bytes | None = None
    location: str | None = None
    content_type: str = "application/jsonl"
    sha256: str | None = None


def last(params: Params, name: str) -> str | None:
    """A query parameter's last value (None when absent)."""
    values = params.get(name) or []
    return values[-1] if values else None


def int_param(params: Params, name: str, *, default: int, low: int, high: int) -> int:
    value = last(params, name)
    if value is None or value == "":
        return default
    try:
        number = int(value)
    except ValueError:
        raise BadRequest(f"'{name}' must be an integer from {low} to {high}.", param=name) from None
    if not low <= number <= high:
        raise BadRequest(f"'{name}' must be an integer from {low} to {high}.", param=name)
    return number


MAX_UNIX_SECONDS = 253_402_300_799  # 9999-12-31T23:59:59Z


def time_param(params: Params, name: str) -> int | None:
    """Unix seconds or ISO 8601 (a naive time is UTC), up to the year 9999; None when absent."""
    value = last(params, name)
    if value is None:
        return None
    text = value.strip()
    refused = BadRequest(f"'{name}' must be unix seconds or an ISO 8601 time.", param=name)
    try:
        seconds = float(text)
    except ValueError:
        try:
            parsed = datetime.fromisoformat(text.replace("Z", "+00:00"))
        except ValueError:
            raise refused from None
        if parsed.tzinfo is None:
            parsed = parsed.replace(tzinfo=UTC)
        seconds = parsed.timestamp()
    if not 0 <= seconds <= MAX_UNIX_SECONDS:  # NaN fails this too
        raise refused
    return int(seconds)


def time_range(params: Params, after: str, before: str) -> tuple[int | None, int | None]:
    """Two time bounds; 400 when they are reversed (nothing could lie between them)."""
    low, high = time_param(params, after), time_param(params, before)
    if low is not None and high is not None and low >= high:
        raise BadRequest(f"'{after}' must be earlier than '{before}'.", param=after)
    return low, high


def list_page(data: Sequence[dict[str, Any]], *, has_more: bool) -> dict[str, Any]:
    """The list envelope every list route answers with."""
    return {
        "object": "list",
        "data": list(data),
        "first_id": data[0]["id"] if data else None,
        "last_id": data[-1]["id"] if data else None,
        "has_more": has_more,
    }
