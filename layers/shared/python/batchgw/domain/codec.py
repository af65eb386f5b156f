"""Compact JSON encodings for what DynamoDB and S3 store."""

from __future__ import annotations

import json
import zlib
from decimal import Decimal
from typing import Any


def dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=_default)


def _default(value: Any) -> Any:
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    raise TypeError(f"not JSON serializable: {type(value).__name__}")


def pack(value: Any) -> bytes:
    """JSON, deflated: request and response bodies kept inline in DynamoDB items."""
    return zlib.compress(dumps(value).encode(), 1)


def unpack(blob: bytes) -> Any:
    return json.loads(zlib.decompress(blob))


def plain(value: Any) -> Any:
    """DynamoDB's Decimals back to ints and floats, recursively, for API answers."""
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain(v) for v in value]
    return value


# The most digits a number a client writes may have where a count or a position is meant.
MAX_DECIMAL_DIGITS = 18


def decimal(text: str, *, most_digits: int = MAX_DECIMAL_DIGITS) -> int | None:
    """``text`` as a non-negative integer when it is ASCII decimal digits only, at most
    ``most_digits`` of them (None otherwise): ``str.isdigit`` also takes "²" and other
    scripts' digits, which ``int`` refuses or reads, and any length."""
    if not 0 < len(text) <= most_digits or not text.isascii() or not text.isdigit():
        return None
    return int(text)
