"""Making a message safe to store and show: no credential in it, and not too long.

Every message that reaches a result, a request's error or a log line about an upstream
answer goes through ``scrub``: the exact ``secrets`` given (the key a route was called
with), then anything shaped like a credential, are replaced by ``[redacted]``, and the
text is cut to a bound. What is shaped like a credential:

- ``Bearer <token>`` and ``x-api-key: <token>`` (and ``api_key=``, ``key=``, ``token=``,
  ``secret=``, ``password=`` assignments, in JSON or query strings);
- OpenAI- and Anthropic-style keys (``sk-…``, ``sk-ant-…``, ``rk-…``, ``pk-…``), masked
  ones included (``sk-proj-****…abcd``, as OpenAI echoes a wrong key);
- AWS access key ids (``AKIA…``, ``ASIA…``);
- user:password in URLs;
- long runs of hex (32+) or of base64 / base64url (40+, with letters and digits).

Pure: no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

REDACTED = "[redacted]"
# A stored error message is at most this long.
MAX_MESSAGE_CHARS = 4096
# Text an upstream sent (its error message) is kept shorter: enough to say what went wrong.
MAX_UPSTREAM_MESSAGE_CHARS = 1024

_PATTERNS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"(?i)(bearer\s+)[^\s\"',;]+"), rf"\1{REDACTED}"),
    (
        re.compile(
            r"(?i)\b((?:x-api-key|api[_-]?key|access[_-]?key(?:[_-]?id)?|secret(?:[_-]?key)?|client[_-]?secret"
            r"|password|passwd|access[_-]?token|token)[\"']?\s*[:=]\s*[\"']?)[^\s\"',;&]+"
        ),
        rf"\1{REDACTED}",
    ),
    (re.compile(r"(?i)\b(key=)[^\s\"',;&]+"), rf"\1{REDACTED}"),
    (re.compile(r"\b(sk|rk|pk)-[A-Za-z0-9_\-*.\u2026]{6,}"), rf"\1-{REDACTED}"),
    (re.compile(r"\b(?:AKIA|ASIA|AGPA|AIDA|AROA)[A-Z0-9]{12,}\b"), REDACTED),
    (re.compile(r"(://)[^/@\s]+@"), rf"\1{REDACTED}@"),
    (re.compile(r"\b[0-9a-fA-F]{32,}\b"), REDACTED),
    # base64 / base64url: 40+ characters with at least one letter and one digit
    (
        re.compile(
            r"(?<![A-Za-z0-9+/=_\-])(?=[A-Za-z0-9+/_\-]*[0-9])(?=[A-Za-z0-9+/_\-]*[A-Za-z])"
            r"[A-Za-z0-9+/_\-]{40,}={0,2}"
        ),
        REDACTED,
    ),
)


def scrub(text: str, secrets: Iterable[str] = (), *, limit: int = MAX_MESSAGE_CHARS) -> str:
    """``text`` with ``secrets`` and anything shaped like a credential replaced by
    ``[redacted]``, cut to ``limit`` characters (ending ``...`` when cut)."""
    # Only what can be kept is read: a long answer costs no more than a short one.
    text = text[: 4 * limit]
    for secret in secrets:
        if len(secret) >= 4:
            text = text.replace(secret, REDACTED)
    for pattern, replacement in _PATTERNS:
        text = pattern.sub(replacement, text)
    if len(text) > limit:
        text = text[: max(0, limit - 3)] + "..."
    return text
