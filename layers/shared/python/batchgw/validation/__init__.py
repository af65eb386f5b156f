"""Pure validation of batch input: request bodies, direct requests and file lines.

Nothing here touches AWS or does I/O. Validators of one request raise ``RequestInvalid``,
which carries the line code of a file's validation report; the create call turns it into
a ``BadRequest`` that names the request.

- ``create``: ``POST /v1/batches`` with direct requests, the whole batch checked;
- ``file``: a JSONL input file checked line by line as it streams; ``fastlines``: its fast
  path for the common line (msgspec); ``strict``: the console's stricter check (preflight);
- ``chat``, ``embeddings``, ``responses`` and ``messages``: each endpoint's request body;
  ``common``: the checks they share; ``jsonbody``: strict JSON parsing;
- ``translatable``: whether a Messages request can run as a chat completion;
- ``media``: media a provider's batch service cannot take;
- ``costs``: what a batch's requests may cost, before it runs;
- ``priority``: a batch's ``priority`` and ``complete_by``, on a create or a PATCH.

May import: ``config``, ``domain``.
"""

from __future__ import annotations

from typing import Any, Literal, NoReturn

RequestInvalidCode = Literal[
    # the request as a whole (a direct request, or a file line)
    "invalid_line",
    "invalid_custom_id",
    "duplicate_custom_id",
    "invalid_method",
    "invalid_url",
    # its body, as the endpoint would check it
    "invalid_body",
    "unsupported_feature",
    "missing_max_tokens",
    "model_not_found",
    "model_unsupported",
    "model_not_priced",
    "max_tokens_too_large",
]


class RequestInvalid(Exception):
    """One request the batch cannot take.

    ``code`` is the spec's line code, ``param`` the dotted path of the offending field
    relative to what was validated (``"messages[0].content"`` for a body,
    ``"body.messages[0].content"`` for a whole request), or None for the value itself.
    """

    def __init__(self, code: RequestInvalidCode, message: str, *, param: str | None = None) -> None:
        super().__init__(message)
        self.code: RequestInvalidCode = code
        self.message = message
        self.param = param

    def under(self, prefix: str) -> RequestInvalid:
        """The same error with ``param`` re-rooted below ``prefix`` (e.g. ``"body"``)."""
        return RequestInvalid(self.code, self.message, param=join_param(prefix, self.param))


def join_param(prefix: str, param: str | None) -> str:
    """``join_param("body", "messages[0]")`` is ``"body.messages[0]"``; ``None`` keeps the prefix."""
    if not param:
        return prefix
    if not prefix:
        return param
    return f"{prefix}{param}" if param.startswith("[") else f"{prefix}.{param}"


def fail(param: str | None, message: str, code: RequestInvalidCode = "invalid_body") -> NoReturn:
    """Raise RequestInvalid for ``param``: the body validators' one way to refuse."""
    raise RequestInvalid(code, message, param=param)


def fail_one_of(param: str, value: Any, choices: tuple[str, ...]) -> NoReturn:
    """Refuse ``param``, whose ``value`` is none of ``choices``."""
    fail(param, f"{param} must be one of {', '.join(choices)}; got {shown(value)}")


def shown(value: Any) -> str:
    """A value as an error message quotes it: its repr, cut to 40 characters."""
    text = repr(value)
    return text if len(text) <= 40 else f"{text[:37]}..."


def is_int(value: Any) -> bool:
    return type(value) is int  # bool is not an integer here


def is_number(value: Any) -> bool:
    return type(value) is int or type(value) is float


__all__ = [
    "RequestInvalid",
    "RequestInvalidCode",
    "fail",
    "fail_one_of",
    "is_int",
    "is_number",
    "join_param",
    "shown",
]
