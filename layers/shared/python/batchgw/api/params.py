"""What every route shares: query parameters, list pages, and file answers."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, tzinfo
from typing import Any

from batchgw.domain import codec
from batchgw.domain.errors import BadRequest

# What the function answers is the JSON of the response (``{"statusCode", "headers",
# "body"}``), and Lambda refuses one over 6 MB. A body is measured as it goes out in that
# JSON: a text body with its escaping, a binary one base64-encoded. Lambda's Python runtimes
# write that JSON two ways: 3.12 and later (what the stack deploys) keep non-ASCII characters
# as UTF-8 (a CJK character 3 bytes, an emoji 4), earlier ones escape them (\uXXXX: 6 bytes,
# 12 for an emoji, a surrogate pair). Each character's escape is at least as long as its UTF-8,
# so a body is measured escaped: what fits then fits either way. A list page stops before it
# would not fit; a file or a first result that would not fit answers 302 to a presigned URL.
LAMBDA_RESPONSE_LIMIT = 6 * 1024 * 1024
ENVELOPE_ALLOWANCE = 16 * 1024  # the status, headers and the JSON around the body
ANSWER_LIMIT = LAMBDA_RESPONSE_LIMIT - ENVELOPE_ALLOWANCE
PAGE_ENVELOPE = 512  # a list page's own keys and ids around its items


def text_out_bytes(text: str) -> int:
    """The most bytes ``text`` takes in the function's JSON response, whichever runtime
    writes it: its JSON string with every non-ASCII character escaped (the longest form)."""
    return len(json.dumps(text))  # ASCII only: one byte a character


def binary_out_bytes(size: int) -> int:
    """The bytes ``size`` bytes of binary take in the function's JSON response (base64)."""
    return 4 * ((size + 2) // 3) + 2


Params = dict[str, list[str]]


@dataclass(frozen=True)
class Download:
    """A file answer: bytes inline (``text``: sent as text, else binary), or a redirect to a
    presigned URL when it would not fit the response."""

    body: bytes | None = None
    location: str | None = None
    content_type: str = "application/jsonl"
    sha256: str | None = None
    text: bool = False


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
    refused = BadRequest(f"'{name}' must be unix seconds or an ISO 8601 time.", param=name)
    return int(_seconds(value, refused, naive=UTC))


def aware_time_ms(params: Params, name: str) -> int | None:
    """Unix seconds, or an ISO 8601 time with its timezone (a naive one is refused: it could
    be any zone), in milliseconds; None when absent."""
    value = last(params, name)
    if value is None:
        return None
    refused = BadRequest(f"'{name}' must be unix seconds or an ISO 8601 time with a timezone.", param=name)
    return round(_seconds(value, refused, naive=None) * 1000)


def _seconds(value: str, refused: BadRequest, *, naive: tzinfo | None) -> float:
    """``value`` as unix seconds; a naive ISO time is in ``naive`` (None: refused)."""
    text = value.strip()
    try:
        seconds = float(text)
    except ValueError:
        try:
            parsed = datetime.fromisoformat(text.replace("Z", "+00:00"))
        except ValueError:
            raise refused from None
        if parsed.tzinfo is None:
            if naive is None:
                raise refused from None
            parsed = parsed.replace(tzinfo=naive)
        seconds = parsed.timestamp()
    if not 0 <= seconds <= MAX_UNIX_SECONDS:  # NaN fails this too
        raise refused
    return seconds


def time_range(params: Params, after: str, before: str) -> tuple[int | None, int | None]:
    """Two time bounds; 400 when they are reversed (nothing could lie between them)."""
    low, high = time_param(params, after), time_param(params, before)
    if low is not None and high is not None and low >= high:
        raise BadRequest(f"'{after}' must be earlier than '{before}'.", param=after)
    return low, high


def fitted_page(data: Sequence[dict[str, Any]], *, has_more: bool) -> dict[str, Any]:
    """The list envelope with as many of ``data``, in order, as fit the answer, measured as
    they go out; ``has_more`` when any were left out (the next page starts after the last one
    here). At least one: every listed object is bounded by its own fields' limits, far below."""
    size = PAGE_ENVELOPE
    for kept, item in enumerate(data):
        size += text_out_bytes(codec.dumps(item)) + 1  # and its comma
        if size > ANSWER_LIMIT and kept:
            return list_page(data[:kept], has_more=True)
    return list_page(data, has_more=has_more)


def list_page(data: Sequence[dict[str, Any]], *, has_more: bool) -> dict[str, Any]:
    """The list envelope every list route answers with."""
    return {
        "object": "list",
        "data": list(data),
        "first_id": data[0]["id"] if data else None,
        "last_id": data[-1]["id"] if data else None,
        "has_more": has_more,
    }
