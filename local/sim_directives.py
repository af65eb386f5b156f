"""The ``[[sim ...]]`` directives a request's text carries, parsed (``local.simulator``
lists what each one does).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from local.sim_protocol import RequestError

_DIRECTIVE_RE = re.compile(r"\[\[sim(?:\s+([^\]]*?))?\s*\]\]")
_FLAGS = frozenset({"queued", "garbage", "hang", "tool", "nan", "surrogate", "chunked"})
BROKEN = frozenset({"nan", "surrogate"})  # a 200 whose body the gateway must refuse


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
        return bool(self.flags & {"queued", "garbage", "hang", *BROKEN}) or (
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
