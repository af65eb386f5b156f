"""The console's stricter check of a batch input file, before anything runs (``preflight``).

``POST /v1/batches/preflight`` (``batchgw.console.preflight``) reads a JSONL file the way the
console's create page does: lines whose ``url`` and ``method`` may be left out, a type
recognised from each line's ``url`` or, without one, from its body (``messages``: Chat;
``input``: Embeddings), one model and Chat's ``temperature`` and ``max_tokens`` chosen for
every request. Then every line, as it would be stored, goes through the same checks as a
request of ``POST /v1/batches`` (``validation.create.plan_request``), and more:

- a field the gateway would not forward is an error rather than passed on silently:
  ``max_completion_tokens`` (rename it to ``max_tokens``), ``user``, or any field outside
  the endpoint's documented ones (``CHAT_FIELDS``, ``EMBEDDINGS_FIELDS``);
- so are a byte-order mark, a key repeated within an object, and ``NaN`` or ``Infinity``;
- a file mixing both types, a ``url`` its body contradicts, and any other endpoint are
  errors that no choice overrides.

Each problem names its line, ``custom_id`` and field, never the request's content: the
validators' wording is kept without the value they quote (``; got ...``).

Two passes over the lines (``lines`` is called twice): the first reads every line and learns
the file's type and models, the second checks each line as it would be stored. One check
finds every problem: a line that cannot be read, or a file whose type or model is not
settled, does not hold back the other lines' checks (each line is then checked as its own
type, on its own model; only a line whose type or model is the problem already reported
is not checked further). Up to ``MAX_PROBLEMS`` are listed, the rest counted. Memory
follows the longest line, not the file. Pure: no AWS, no HTTP.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from batchgw.config.catalog import Catalog
from batchgw.validation import RequestInvalid
from batchgw.validation.costs import CostBounds
from batchgw.validation.create import CUSTOM_ID_MAX_CHARS, batch_model, plan_request

CHAT, EMBEDDINGS = "/v1/chat/completions", "/v1/embeddings"
TYPES = (CHAT, EMBEDDINGS)
# The body fields the console passes on, per endpoint: those the gateway checks and forwards.
CHAT_FIELDS = frozenset(
    {
        "model",
        "messages",
        "max_tokens",
        "temperature",
        "top_p",
        "n",
        "stop",
        "presence_penalty",
        "frequency_penalty",
        "seed",
        "logprobs",
        "top_logprobs",
        "logit_bias",
        "tools",
        "tool_choice",
        "parallel_tool_calls",
        "response_format",
        "stream",
    }
)
EMBEDDINGS_FIELDS = frozenset({"model", "input", "dimensions", "encoding_format"})
_FIELDS = {CHAT: CHAT_FIELDS, EMBEDDINGS: EMBEDDINGS_FIELDS}
_HINTS = {
    "max_completion_tokens": "rename it to max_tokens",
    "user": "the gateway does not forward it",
}
_LINE_KEYS = frozenset({"custom_id", "method", "url", "body"})
_BOM = b"\xef\xbb\xbf"
_WHITESPACE = b" \t\r\n"
_QUOTED = re.compile(r"[;,]\s*got\s.*$", re.DOTALL)  # the value a validator's message quotes
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")
FIRST_SHOWN = 3  # stored requests shown when the file is valid
# Problems a check lists (the rest are counted): the answer is not stored, and 1,000 entries
# of a few hundred bytes stay far below the 6 MB a Lambda may answer.
MAX_PROBLEMS = 1000
MAX_MODELS_NAMED = 10


@dataclass(frozen=True)
class Choices:
    """What the user chose on the create page: the type when no line says, one model for
    every request, and Chat's temperature and max_tokens for every request."""

    endpoint: str | None = None
    model: str | None = None
    temperature: float | None = None
    max_tokens: int | None = None


@dataclass(frozen=True)
class Limits:
    max_requests: int
    max_line_bytes: int
    max_stored_bytes: int  # the stored requests, as an upload of the same size


@dataclass
class Report:
    """What the check found: the batch the file makes (``endpoint``, canonical ``model``,
    ``requests``, the first stored ones) or its problems."""

    endpoint: str | None = None
    endpoint_from: str | None = None  # url, body or choice
    model: str | None = None  # the canonical model every request runs on
    models_named: list[str] = field(default_factory=list)  # as the file names them
    requests: int = 0
    stored_bytes: int = 0
    first: list[dict[str, Any]] = field(default_factory=list)
    problems: list[dict[str, Any]] = field(default_factory=list)
    truncated: bool = False  # more problems than MAX_PROBLEMS: the rest are not listed
    unlisted: int = 0  # how many problems were found past MAX_PROBLEMS
    costs: CostBounds | None = None  # what its valid requests may cost (once the model is known)

    @property
    def valid(self) -> bool:
        return not self.problems

    def add(
        self,
        code: str,
        message: str,
        *,
        line: int | None = None,
        custom_id: str | None = None,
        field: str | None = None,
    ) -> None:
        if len(self.problems) >= MAX_PROBLEMS:
            self.truncated = True
            self.unlisted += 1
            return
        self.problems.append(
            {"line": line, "custom_id": custom_id, "field": field, "code": code, "message": message}
        )


class _Repeated(dict[str, Any]):
    """An object in which ``key`` was written more than once."""

    key: str = ""


class _NonFinite:
    def __init__(self, literal: str) -> None:
        self.literal = literal


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    repeated = None
    for key, value in pairs:
        if key in out and repeated is None:
            repeated = key
        out[key] = value
    if repeated is None:
        return out
    marked = _Repeated(out)
    marked.key = repeated
    return marked


def _finite_float(literal: str) -> Any:
    value = float(literal)
    return value if math.isfinite(value) else _NonFinite(literal)


_DECODER = json.JSONDecoder(object_pairs_hook=_pairs, parse_constant=_NonFinite, parse_float=_finite_float)


class _Bad(Exception):
    def __init__(self, code: str, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.code, self.message, self.field = code, message, field
        self.custom_id: str | None = None  # the line's, once it could be read


def _flaw(value: Any, path: str) -> _Bad | None:
    """The first repeated key or non-finite number in ``value`` (at ``path``), if any."""
    stack: list[tuple[Any, str]] = [(value, path)]
    while stack:
        item, where = stack.pop()
        if isinstance(item, _NonFinite):
            return _Bad(
                "non_finite_number", f"{item.literal} is not a JSON number; numbers must be finite", where
            )
        if isinstance(item, dict):
            if isinstance(item, _Repeated):
                at = _join(where, item.key)
                return _Bad(
                    "repeated_key", f"the key '{item.key}' is written more than once in one object", at
                )
            stack += [(v, _join(where, k)) for k, v in reversed(list(item.items()))]
        elif isinstance(item, list):
            stack += [(v, f"{where}[{i}]") for i, v in reversed(list(enumerate(item)))]
    return None


def _join(prefix: str, key: str) -> str:
    return f"{prefix}.{key}" if prefix else key


def _read(raw: bytes, number: int, limits: Limits) -> dict[str, Any] | None:
    """One line read strictly: the request object, None for a blank line; raises _Bad."""
    if number == 1 and raw.startswith(_BOM):
        raise _Bad("bom", "the file starts with a byte-order mark; save it as UTF-8 without one")
    text = raw.strip(_WHITESPACE)
    if not text:
        return None
    if len(text) > limits.max_line_bytes:
        raise _Bad("line_too_large", f"the line is longer than {limits.max_line_bytes:,} bytes")
    try:
        item = _DECODER.decode(text.decode("utf-8"))
    except UnicodeDecodeError:
        raise _Bad("invalid_json", "the line is not UTF-8 text") from None
    except (ValueError, RecursionError):
        raise _Bad("invalid_json", "the line is not one JSON object") from None
    if not isinstance(item, dict):
        raise _Bad("invalid_line", 'each line is an object {"custom_id", "body"} (url and method optional)')
    try:
        return _shaped(item, text)
    except _Bad as bad:
        bad.custom_id = _custom_id(item)
        raise


def _shaped(item: dict[str, Any], text: bytes) -> dict[str, Any]:
    """A decoded line, once it has no flaw, the line's keys and an object body."""
    flaw = _flaw(item, "")
    if flaw is not None:
        raise flaw
    if _SURROGATE_ESCAPE.search(text):
        try:
            json.dumps(item, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError:
            raise _Bad("invalid_json", "a \\u escape names a lone surrogate, not a character") from None
    unknown = sorted(item.keys() - _LINE_KEYS)
    if unknown:
        raise _Bad(
            "invalid_line",
            f"unknown field '{unknown[0]}'; a line has custom_id, method, url and body",
            unknown[0],
        )
    if not isinstance(item.get("body"), dict):
        raise _Bad("invalid_body", "body is required and must be an object", "body")
    return item


def _custom_id(item: dict[str, Any] | None) -> str | None:
    value = None if item is None else item.get("custom_id")
    return value if isinstance(value, str) and 0 < len(value) <= CUSTOM_ID_MAX_CHARS else None


def _type_of(item: dict[str, Any]) -> tuple[str | None, str | None]:
    """The line's type and what said it (``url`` or ``body``); raises _Bad when its url
    names another endpoint or its body contradicts it."""
    body = item["body"]
    by_body = CHAT if "messages" in body and "input" not in body else None
    if "input" in body and "messages" not in body:
        by_body = EMBEDDINGS
    url = item.get("url")
    if url is None:
        return by_body, None if by_body is None else "body"
    if url not in TYPES:
        raise _Bad(
            "invalid_url",
            f"the console creates Chat Completions ({CHAT}) and Embeddings ({EMBEDDINGS}) batches only",
            "url",
        )
    if by_body is not None and by_body != url:
        raise _Bad("url_contradicts_body", f"the url says {url} but the body is a {by_body} request", "url")
    return url, "url"


def check(
    lines: Callable[[], Iterable[bytes]],
    choices: Choices,
    *,
    catalog: Catalog,
    role: str,
    limits: Limits,
) -> Report:
    """Check the file ``lines()`` yields (its physical lines, called once per pass) as the
    console would submit it with ``choices``, for a caller of ``role``. Never raises for the
    file's content: every problem is in the report."""
    report = Report()
    types: dict[str, int] = {}  # type: its first line
    said_by: dict[str, str] = {}
    named: dict[str, int] = {}  # model name: its first line
    read_ok = 0
    for number, raw in enumerate(lines(), 1):
        item: dict[str, Any] | None = None
        try:
            item = _read(raw, number, limits)
            if item is None:
                continue
            kind, by = _type_of(item)
        except _Bad as bad:
            custom_id = bad.custom_id if bad.custom_id is not None else _custom_id(item)
            report.add(bad.code, bad.message, line=number, field=bad.field, custom_id=custom_id)
            continue
        read_ok += 1
        if kind is not None and by is not None:
            types.setdefault(kind, number)
            said_by.setdefault(kind, by)
        model = item["body"].get("model")
        if isinstance(model, str) and model not in named and len(named) < MAX_MODELS_NAMED:
            named[model] = number
    report.models_named = list(named)
    if read_ok == 0:
        if not report.problems:
            report.add("empty_file", "the file has no requests: it is empty or every line is blank")
        return report
    endpoint = _endpoint(report, types, said_by, choices)
    unusable: set[str] = set()  # model names already reported as the problem of their lines
    model = _model(report, endpoint, named, choices, catalog=catalog, role=role, unusable=unusable)
    choices = _check_overrides(report, endpoint, choices)
    if endpoint is not None and model is not None:
        report.endpoint, report.model = endpoint, model
    _check_lines(
        report, lines, endpoint, model, choices, catalog=catalog, role=role, limits=limits, unusable=unusable
    )
    if report.problems:
        report.first = []
        # The file's own problems first, then by line (the passes found them out of order).
        report.problems.sort(key=lambda p: -1 if p["line"] is None else p["line"])
    return report


def _endpoint(report: Report, types: dict[str, int], said_by: dict[str, str], choices: Choices) -> str | None:
    if choices.endpoint is not None and choices.endpoint not in TYPES:
        report.add("invalid_endpoint", f"choose {CHAT} or {EMBEDDINGS}", field="endpoint")
        return None
    if len(types) > 1:
        later = max(types, key=lambda kind: types[kind])
        report.add(
            "mixed_types",
            f"the file mixes Chat and Embeddings requests (this is the first {later} one); "
            "a batch has one type",
            line=types[later],
        )
        return None
    if types:
        [(kind, _)] = types.items()
        if choices.endpoint is not None and choices.endpoint != kind:
            report.add("endpoint_contradicts_file", f"the file's lines are {kind} requests", field="endpoint")
            return None
        report.endpoint_from = said_by[kind]
        return kind
    if choices.endpoint is None:
        report.add("endpoint_needed", "no line says its type: choose Chat or Embeddings", field="endpoint")
        return None
    report.endpoint_from = "choice"
    return choices.endpoint


def _model(
    report: Report,
    endpoint: str | None,
    named: dict[str, int],
    choices: Choices,
    *,
    catalog: Catalog,
    role: str,
    unusable: set[str],
) -> str | None:
    """The canonical model every request runs on (None: the file's lines keep their own,
    and the problem is reported). A name the caller cannot use goes into ``unusable``."""
    if endpoint is None:
        return None
    if choices.model is not None:
        try:
            return batch_model(choices.model, endpoint, catalog=catalog, role=role).id
        except RequestInvalid as exc:
            report.add(exc.code, _unquoted(exc.message), field="model")
            return None
    canonical: dict[str, int] = {}  # canonical model: the first line naming it
    for name, line in named.items():
        try:
            spec = batch_model(name, endpoint, catalog=catalog, role=role)
        except RequestInvalid as exc:
            unusable.add(name)
            report.add(
                "model_choice_required",
                f"{_unquoted(exc.message)}: choose a model for every request",
                line=line,
                field="body.model",
            )
            continue
        canonical[spec.id] = min(line, canonical.get(spec.id, line))
    if unusable:
        return None
    if not canonical:
        report.add(
            "model_choice_required",
            "no line names a model: choose one model for every request",
            field="model",
        )
        return None
    if len(canonical) > 1:
        first, *others = sorted(canonical.values())
        report.add(
            "model_choice_required",
            f"the file names several models (this line's is not line {first}'s): choose one model for "
            "every request",
            line=others[0],
            field="body.model",
        )
        return None
    [model] = canonical
    return model


def _check_overrides(report: Report, endpoint: str | None, choices: Choices) -> Choices:
    """Report the overrides that cannot apply; the choices without them (each is reported
    once, not again on every line it would be applied to)."""
    dropped: dict[str, None] = {}
    for name, value in (("temperature", choices.temperature), ("max_tokens", choices.max_tokens)):
        if value is not None and endpoint is not None and endpoint != CHAT:
            report.add("override_not_applicable", f"{name} applies to Chat batches only", field=name)
            dropped[name] = None
    if choices.temperature is not None and not 0 <= choices.temperature <= 2:
        report.add("invalid_override", "temperature must be between 0 and 2", field="temperature")
        dropped["temperature"] = None
    if choices.max_tokens is not None and choices.max_tokens < 1:
        report.add("invalid_override", "max_tokens must be a positive integer", field="max_tokens")
        dropped["max_tokens"] = None
    return replace(choices, **dropped)


def _check_lines(
    report: Report,
    lines: Callable[[], Iterable[bytes]],
    endpoint: str | None,
    model: str | None,
    choices: Choices,
    *,
    catalog: Catalog,
    role: str,
    limits: Limits,
    unusable: set[str],
) -> None:
    """Check each line as it would be stored. Without one ``endpoint`` or ``model`` (a
    problem already reported), a line is checked as its own type, on its own model; a line
    whose type or model is that problem is not checked further."""
    overrides = _overrides(choices)
    report.costs = costs = CostBounds(catalog, endpoint or CHAT)
    seen: set[bytes] = set()
    too_large = False
    for number, raw in enumerate(lines(), 1):
        try:
            item = _read(raw, number, limits)
            if item is None:
                continue
            kind = endpoint or _type_of(item)[0]
        except _Bad:
            continue  # reported by the first pass
        if kind is None:
            continue  # no type: reported once (endpoint_needed)
        own_model = item["body"].get("model")
        if model is None and (not isinstance(own_model, str) or own_model in unusable):
            continue  # its model is the problem reported for it
        allowed = _FIELDS[kind]
        custom_id = _custom_id(item)
        report.requests += 1
        if report.requests > limits.max_requests:
            report.add(
                "too_many_lines",
                f"the file has more than {limits.max_requests:,} requests; split it into several files",
                line=number,
            )
            return
        body = item["body"]
        extra = sorted(body.keys() - allowed)
        if extra:
            hint = _HINTS.get(extra[0], "the console passes on only the endpoint's documented fields")
            report.add(
                "unforwarded_field",
                f"'{extra[0]}' is not forwarded by the gateway: {hint}",
                line=number,
                custom_id=custom_id,
                field=f"body.{extra[0]}",
            )
            continue
        stored = _stored(item, kind, model or own_model, overrides)
        try:
            plan_request(stored, endpoint=kind, catalog=catalog, role=role)
        except RequestInvalid as exc:
            report.add(exc.code, _unquoted(exc.message), line=number, custom_id=custom_id, field=exc.param)
            continue
        assert custom_id is not None  # plan_request checked it
        digest = hashlib.blake2b(custom_id.encode(), digest_size=16).digest()
        if digest in seen:
            report.add(
                "duplicate_custom_id",
                "this custom_id is used by an earlier line",
                line=number,
                custom_id=custom_id,
                field="custom_id",
            )
            continue
        seen.add(digest)
        text = json.dumps(stored, ensure_ascii=False, separators=(",", ":"))
        report.stored_bytes += len(text.encode()) + 1
        if report.stored_bytes > limits.max_stored_bytes and not too_large:
            too_large = True
            report.add(
                "too_large",
                f"the stored requests, chosen fields included, pass {limits.max_stored_bytes:,} bytes, "
                "the most a file may hold",
                line=number,
            )
        if model is not None and kind == endpoint:
            costs.add(model, stored["body"])
        if len(report.first) < FIRST_SHOWN:
            report.first.append(stored)


def _overrides(choices: Choices) -> dict[str, Any]:
    """The fields chosen for every request (Chat's temperature and max_tokens)."""
    chosen = (("temperature", choices.temperature), ("max_tokens", choices.max_tokens))
    return {name: value for name, value in chosen if value is not None}


def _stored(item: dict[str, Any], endpoint: str, model: str, overrides: dict[str, Any]) -> dict[str, Any]:
    """A line as the batch stores it: its url, the canonical model and the chosen fields."""
    body = {**item["body"], "model": model, **overrides}
    return {"custom_id": item.get("custom_id"), "method": "POST", "url": endpoint, "body": body}


def _unquoted(message: str) -> str:
    """A validator's message without the value it quotes: a problem never shows content."""
    return _QUOTED.sub("", message).rstrip(" ;,")


def stored_lines(
    lines: Callable[[], Iterable[bytes]], report: Report, choices: Choices, *, limits: Limits
) -> Iterable[bytes]:
    """The stored requests of a file ``check`` found valid, one JSONL line each."""
    assert report.valid and report.endpoint is not None and report.model is not None
    overrides = _overrides(choices)
    for number, raw in enumerate(lines(), 1):
        item = _read(raw, number, limits)
        if item is None:
            continue
        stored = _stored(item, report.endpoint, report.model, overrides)
        yield json.dumps(stored, ensure_ascii=False, separators=(",", ":")).encode() + b"\n"
