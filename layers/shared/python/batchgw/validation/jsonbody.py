"""Strict JSON parsing for request bodies: UTF-8, valid JSON, finite numbers only."""

from __future__ import annotations

import json
import math
import re
from typing import Any

from batchgw.domain.errors import BadRequest

# A lone surrogate can only come from a ``\uD800``-``\uDFFF`` escape (or a str that already
# holds one); such text cannot be stored or forwarded as UTF-8.
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
_SURROGATE = re.compile("[\ud800-\udfff]")


class _NonFinite(ValueError):
    def __init__(self, literal: str) -> None:
        super().__init__(literal)
        self.literal = literal


def _refuse_constant(literal: str) -> Any:
    raise _NonFinite(literal)


def _finite_float(literal: str) -> float:
    value = float(literal)
    if not math.isfinite(value):
        raise _NonFinite(literal)
    return value


# One decoder for every call: building one per call costs more than many small parses.
_DECODER = json.JSONDecoder(parse_constant=_refuse_constant, parse_float=_finite_float)


_BOM = "\ufeff"


def parse_json(raw: bytes | str, *, what: str = "The request body", bom: bool = True) -> Any:
    """Parse ``raw`` as one JSON document, or raise BadRequest saying why not.

    Guarantees: the input is UTF-8 (a byte-order mark at its start is dropped, unless
    ``bom`` is False, when it is refused as JSON would refuse it), every number is finite
    (``NaN``, ``Infinity``, ``-Infinity`` and floats that overflow, such as ``1e999``, are
    refused wherever they are nested), and every string is encodable as UTF-8 (lone
    surrogate escapes are refused). ``what`` names the input in the error message.
    """
    if isinstance(raw, bytes | bytearray):
        try:
            text = bytes(raw).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise BadRequest(f"{what} is not valid JSON: it is not UTF-8 (byte {exc.start})") from exc
    else:
        text = raw
        if _SURROGATE.search(text):
            raise BadRequest(f"{what} is not valid JSON: it is not valid UTF-8 text")
    if bom and text.startswith(_BOM):
        text = text[1:]
    try:
        value = _DECODER.decode(text)
    except _NonFinite as exc:
        raise BadRequest(f"{what} is not valid JSON: every number must be finite, got {exc.literal}") from exc
    except json.JSONDecodeError as exc:
        raise BadRequest(
            f"{what} is not valid JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})"
        ) from exc
    except RecursionError as exc:
        raise BadRequest(f"{what} is not valid JSON: it is nested too deeply") from exc
    except ValueError as exc:  # e.g. an integer longer than Python's digit limit
        raise BadRequest(f"{what} is not valid JSON: {exc}") from exc
    if _SURROGATE_ESCAPE.search(text):
        try:
            json.dumps(value, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError as exc:
            raise BadRequest(
                f"{what} is not valid JSON: a \\u escape names a lone surrogate, not a character"
            ) from exc
    return value
