"""A JSONL batch input file, checked line by line as it streams (a batch "from a file").

Each non-blank physical line is one request ``{"custom_id", "method", "url", "body"}``,
checked by the same ``plan_request`` as a direct request (model by canonical id, one per
file). Every line is checked, one problem per line; the report (``FileReport``) lists the
first ``MAX_ERRORS`` by physical line number, with the spec's line codes, and counts the
rest. ``validate_file`` reads a line through its endpoint's fast path first (``fastlines``);
the report is the same either way. Memory follows the longest line, not the file
(``split_lines``, ``iter_planned``).

The choices the spec leaves open, speed and memory: docs/design/validation.md,
"From the code: validation/file.py".
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Literal, get_args

from batchgw.config.catalog import Catalog, ModelSpec
from batchgw.config.settings import Settings
from batchgw.domain.errors import BadRequest
from batchgw.validation import RequestInvalid, shown
from batchgw.validation.create import CUSTOM_ID_MAX_CHARS, PlannedRequest, batch_model, plan_request
from batchgw.validation.fastlines import FAST_LINE_READERS
from batchgw.validation.jsonbody import parse_json

FileLineCode = Literal[
    "invalid_json",
    "invalid_line",
    "invalid_custom_id",
    "duplicate_custom_id",
    "invalid_method",
    "invalid_url",
    "invalid_body",
    "unsupported_feature",
    "missing_max_tokens",
    "model_not_found",
    "model_unsupported",
    "model_not_priced",
    "max_tokens_too_large",
    "line_too_large",
    "too_many_lines",
    "empty_file",
]

# Problems a report lists (the rest are counted): 100 entries of at most a few hundred bytes
# keep a failed batch's record, where they are stored, far below DynamoDB's 400 KB.
MAX_ERRORS = 100

# The codes a body check may report as they are: the spec's, but for those only the scan of
# the file itself reports. Any other (a validator added later with a code of its own) is
# reported as invalid_body, so the report only uses the spec's codes.
_BODY_CODES: frozenset[str] = frozenset(get_args(FileLineCode)) - {
    "invalid_json",
    "duplicate_custom_id",
    "line_too_large",
    "too_many_lines",
    "empty_file",
}
_LINE_KEYS = ("custom_id", "method", "url", "body")
_LINE_KEY_SET = frozenset(_LINE_KEYS)
_LINE_SHAPE = 'each line is {"custom_id", "method", "url", "body"}'
_JSON_WHITESPACE = b" \t\r\n"
_PRESIZE_MAX_IDS = 65_536  # a 2 MB table
_DIGEST_SIZE = 16
_FREE = bytes(_DIGEST_SIZE)  # an empty slot of the custom_id table
_FREE_STANDIN = b"\x01" + bytes(_DIGEST_SIZE - 1)
_STORE = struct.Struct(f"{_DIGEST_SIZE}s").pack_into
_NEWLINE = 0x0A
_CARRIAGE_RETURN = 0x0D
_FAST_MODELS_KEPT = 8  # model names whose catalog verdict a scan remembers


class LineInvalid(Exception):
    """One line of the file the batch cannot take: a problem of the validation report."""

    def __init__(
        self, code: FileLineCode, message: str, *, line: int | None, param: str | None = None
    ) -> None:
        super().__init__(message)
        self.code: FileLineCode = code
        self.message = message
        self.line = line
        self.param = param

    def problem(self) -> dict[str, Any]:
        """The report entry: ``{"code", "message", "line", "param"}``."""
        return {"code": self.code, "message": self.message, "line": self.line, "param": self.param}


@dataclass(frozen=True, slots=True)
class FileReport:
    """The outcome of ``validate_file``.

    ``ok`` when the whole file was read and every line is a valid request; then ``total``
    is the number of requests and ``model`` the canonical model they all run on.
    ``errors`` holds the first ``max_errors`` problems in line order, ``problem_count``
    how many were found in all (``unlisted`` of them not in ``errors``). ``line_count``
    is the number of physical lines read and ``complete`` whether that is the whole file
    (see the module docstring for when scanning stops early).
    """

    ok: bool
    errors: list[dict[str, Any]]
    total: int
    line_count: int
    models: frozenset[str]
    complete: bool
    problem_count: int = 0

    @property
    def unlisted(self) -> int:
        """Problems found beyond those ``errors`` lists."""
        return self.problem_count - len(self.errors)

    @property
    def model(self) -> str | None:
        """The one canonical model of a valid file; None when no line was valid."""
        return next(iter(self.models), None)


def validate_file(
    lines: Iterable[bytes],
    *,
    endpoint: str,
    settings: Settings,
    catalog: Catalog,
    role: str,
    anthropic_version: str | None = None,
    max_errors: int = MAX_ERRORS,
) -> FileReport:
    """Check a batch input file, streamed as its physical lines, for a caller of ``role``.

    ``lines`` yields each physical line as bytes, with or without its ``\\n``/``\\r\\n``
    (``split_lines`` makes them from a stream of chunks). Every line is checked as a
    request to ``endpoint``; ``anthropic_version``, when given (a Messages batch), is
    passed on to ``plan_request``.
    Never raises for the file's content: every problem is in the report.
    """
    scanner = _Scanner(
        endpoint=endpoint,
        catalog=catalog,
        role=role,
        anthropic_version=anthropic_version,
        expected=settings.batch_max_requests,
    )
    max_line_bytes = settings.batch_max_line_kb * 1024
    max_requests = settings.batch_max_requests
    errors: list[dict[str, Any]] = []
    problems = 0  # found, listed in errors or not
    # Non-blank lines are requests. The counts are kept on blank lines only, so a valid
    # line adds none: the last line a request may be on moves down with each blank one.
    blank = 0
    last_request_line = max_requests
    over_limit: int | None = None  # the line of the first request over the limit
    line_count = 0
    complete = True
    for line_count, raw in enumerate(lines, 1):
        text = raw.strip(_JSON_WHITESPACE)
        if not text:
            blank += 1
            last_request_line += 1
            continue
        if line_count > last_request_line:
            over_limit, complete = line_count, False
            break
        try:
            _check_size(raw, line_count, max_line_bytes)
            scanner.check(text, line_count)
        except LineInvalid as problem:
            problems += 1
            if len(errors) < max_errors:
                errors.append(problem.problem())
    checked = line_count - blank - (over_limit is not None)  # the requests read
    total = checked - problems  # one problem per line read
    # A problem of the file as a whole is always listed, even past max_errors.
    if over_limit is not None:
        problems += 1
        errors.append(_too_many(over_limit, max_requests).problem())
    if checked == 0 and over_limit is None:
        problems += 1
        errors.append(_empty().problem())
    return FileReport(
        ok=not errors,
        errors=errors,
        total=total,
        line_count=line_count,
        models=frozenset(() if scanner.model is None else (scanner.model,)),
        complete=complete,
        problem_count=problems,
    )


def iter_planned(
    lines: Iterable[bytes],
    *,
    endpoint: str,
    catalog: Catalog,
    role: str,
    anthropic_version: str | None = None,
    settings: Settings | None = None,
) -> Iterator[PlannedRequest]:
    """The plan of each non-blank line of a file ``validate_file`` accepted, in order.

    Meant for the second pass over a validated file, so it stops at the first problem
    instead of collecting them: it runs the same checks (the line size and count limits
    too when ``settings`` is given) and raises LineInvalid if the file is not what was
    validated. Nothing is yielded twice for one custom_id.
    """
    scanner = _Scanner(
        endpoint=endpoint,
        catalog=catalog,
        role=role,
        anthropic_version=anthropic_version,
        expected=0 if settings is None else settings.batch_max_requests,
    )
    requests = 0
    for number, raw in enumerate(lines, 1):
        text = raw.strip(_JSON_WHITESPACE)
        if not text:
            continue
        requests += 1
        if settings is not None:
            if requests > settings.batch_max_requests:
                raise _too_many(number, settings.batch_max_requests)
            _check_size(raw, number, settings.batch_max_line_kb * 1024)
        yield scanner.plan(text, number)
    if requests == 0:
        raise _empty()


def report_object(errors: list[dict[str, Any]]) -> dict[str, Any]:
    """A failed file batch's ``errors`` field, as OpenAI shapes it: ``{"object": "list", "data"}``."""
    return {
        "object": "list",
        "data": [
            {"code": e["code"], "message": e["message"], "param": e.get("param"), "line": e.get("line")}
            for e in errors
        ],
    }


def split_lines(chunks: Iterable[bytes], *, max_line_bytes: int) -> Iterator[bytes]:
    """The physical lines of a byte stream given as chunks (``StreamingBody.iter_chunks()``).

    Splits on ``\\n`` only (a JSON line holds no raw newline; a ``\\r`` before it is kept
    and ignored by the checks), so line numbers are those of any editor. Memory stays
    bounded by one chunk plus ``max_line_bytes``: a longer line is cut short, still long
    enough for ``validate_file`` to report it as ``line_too_large``.
    """
    keep = max_line_bytes + 2  # room for a "\r" and for one byte more than the limit
    pending: list[bytes] = []  # the start of a line that continues in the next chunk
    pending_size = 0
    for chunk in chunks:
        parts = chunk.split(b"\n")
        for part in parts[:-1]:
            if pending:
                if pending_size < keep:
                    pending.append(part[: keep - pending_size])
                yield b"".join(pending)
                pending, pending_size = [], 0
            else:
                yield part[:keep]  # the part itself (no copy), unless it is over-long
        rest = parts[-1]
        if rest and pending_size < keep:
            rest = rest[: keep - pending_size]
            pending.append(rest)
            pending_size += len(rest)
    if pending:
        yield b"".join(pending)


class _Scanner:
    """The checks of one file's lines, with what they must remember between lines."""

    def __init__(
        self, *, endpoint: str, catalog: Catalog, role: str, anthropic_version: str | None, expected: int = 0
    ) -> None:
        self.endpoint = endpoint
        self.catalog = catalog
        self.role = role
        self.plan_options: dict[str, Any] = {}
        if anthropic_version is not None:  # only a Messages batch has one; plan_request checks it
            self.plan_options["anthropic_version"] = anthropic_version
        self.seen = _DigestSet(expected)
        self.model: str | None = None  # the batch's canonical model, fixed by its first valid line
        self.model_name = ""
        self.model_line = 0
        # The fast path (see fastlines), for an endpoint that has one; the catalog's verdict
        # on each model name it meets: the spec a line naming it runs on, or None when only
        # the full path can tell.
        self.read_fast = FAST_LINE_READERS.get(endpoint)
        self.fast_models: dict[str, ModelSpec | None] = {}

    def check(self, text: bytes, number: int) -> None:
        """Check one non-blank line (surrounding whitespace stripped), as ``plan`` does, but
        without planning it: a well-formed line takes the fast path. Raises LineInvalid."""
        fast = None if self.read_fast is None else self.read_fast(text)
        if fast is None or fast.url != self.endpoint:
            self.plan(text, number)
            return
        name = fast.model
        spec = self.fast_models[name] if name in self.fast_models else self._fast_model(name)
        if spec is None or (
            fast.output_tokens is not None
            and spec.max_output_tokens is not None
            and fast.output_tokens > spec.max_output_tokens
        ):
            self.plan(text, number)
            return
        # What plan would do once every check before it passed: claim the custom_id, then
        # hold the line to the batch's model.
        self._check_unique(fast.custom_id, number)
        self._check_model(spec.id, name, number)

    def _fast_model(self, name: str) -> ModelSpec | None:
        try:
            spec: ModelSpec | None = batch_model(name, self.endpoint, catalog=self.catalog, role=self.role)
        except RequestInvalid:
            spec = None
        if spec is not None and spec.translates(self.endpoint):  # plan_request checks more then
            spec = None
        if len(self.fast_models) < _FAST_MODELS_KEPT:
            self.fast_models[name] = spec
        return spec

    def plan(self, text: bytes, number: int) -> PlannedRequest:
        """Check one non-blank line (surrounding whitespace stripped); raises LineInvalid."""
        try:
            # A byte-order mark may open the file (only the console refuses one), not a line.
            item = parse_json(text, what="The line", bom=number == 1)
        except BadRequest as exc:
            raise LineInvalid("invalid_json", exc.message, line=number) from exc
        self._check_shape(item, number)
        self._check_unique(item["custom_id"], number)
        if item["method"] != "POST":
            raise LineInvalid(
                "invalid_method",
                f'method must be "POST"; got {shown(item["method"])}',
                line=number,
                param="method",
            )
        if item["url"] != self.endpoint:
            raise LineInvalid(
                "invalid_url",
                f"url must be the batch's endpoint '{self.endpoint}'; got {shown(item['url'])}",
                line=number,
                param="url",
            )
        try:
            planned = plan_request(
                item, endpoint=self.endpoint, catalog=self.catalog, role=self.role, **self.plan_options
            )
        except RequestInvalid as exc:
            code: FileLineCode = exc.code if exc.code in _BODY_CODES else "invalid_body"
            raise LineInvalid(code, exc.message, line=number, param=exc.param) from exc
        self._check_model(planned.model, planned.body.get("model"), number)
        return planned

    def _check_shape(self, item: Any, number: int) -> None:
        if not isinstance(item, dict):
            raise LineInvalid("invalid_line", f"The line must be a JSON object; {_LINE_SHAPE}", line=number)
        if item.keys() != _LINE_KEY_SET:
            missing = [key for key in _LINE_KEYS if key not in item]
            if missing:
                raise LineInvalid(
                    "invalid_line",
                    f"The line has no {missing[0]}; {_LINE_SHAPE}",
                    line=number,
                    param=missing[0],
                )
            unknown = sorted(key for key in item if key not in _LINE_KEYS)[0]
            raise LineInvalid(
                "invalid_line", f"unknown field '{unknown}'; {_LINE_SHAPE}", line=number, param=unknown
            )
        custom_id = item["custom_id"]
        if not isinstance(custom_id, str) or not 1 <= len(custom_id) <= CUSTOM_ID_MAX_CHARS:
            raise LineInvalid(
                "invalid_custom_id",
                f"custom_id must be a string of 1-{CUSTOM_ID_MAX_CHARS} characters",
                line=number,
                param="custom_id",
            )

    def _check_unique(self, custom_id: str, number: int) -> None:
        if not self.seen.add(custom_id):
            # The spec's own wording; the first line is not named, to keep only digests.
            raise LineInvalid("duplicate_custom_id", "custom_id must be unique within the file.", line=number)

    def _check_model(self, model: str, name: Any, number: int) -> None:
        """``model`` (canonical; ``name`` as the line names it) is the batch's, or becomes it."""
        if self.model is None:
            self.model, self.model_name, self.model_line = model, str(name), number
        elif model != self.model:
            raise LineInvalid(
                "invalid_body",
                f"all lines must use the same model: this line uses '{name}', line {self.model_line} "
                f"uses '{self.model_name}'",
                line=number,
                param="body.model",
            )


class _DigestSet:
    """The custom_ids seen so far, as 128-bit digests in one flat table (open addressing).

    A Python set of 50,000 digests takes about 4.5 MB (an object per digest plus the
    table); this takes 2 MB, no object per id. Two ids share a digest with odds of
    2**-128 per pair, so a real file is never refused for a duplicate it does not have.
    A probe compares the digest in place (``startswith`` at an offset) and stores it with
    ``pack_into``: checking an id makes no object but its digest.
    """

    def __init__(self, expected: int = 0) -> None:
        # Sized once for up to ``expected`` ids (growing doubles the table, and for a moment
        # holds old and new), but never more than 2 MB up front; beyond that it grows.
        expected = min(expected, _PRESIZE_MAX_IDS)
        slots = 1024  # a power of two, at most half full
        while slots < 2 * expected:
            slots *= 2
        self._allocate(slots)

    def _allocate(self, slots: int) -> None:
        self._table = bytearray(_DIGEST_SIZE * slots)  # all zeros: the free digest
        self._offset_mask = (slots - 1) * _DIGEST_SIZE  # a hash's bits that make a slot's offset
        self._room = slots // 2  # ids it takes before it must grow

    def add(self, custom_id: str) -> bool:
        """Remember ``custom_id``; False if it was already there."""
        # surrogatepass: parse_json has refused lone surrogates, but a digest must never raise
        digest = hashlib.blake2b(
            custom_id.encode("utf-8", "surrogatepass"), digest_size=_DIGEST_SIZE
        ).digest()
        if digest == _FREE:  # odds 2**-128, but the free digest must stay free
            digest = _FREE_STANDIN
        if not self._insert(digest):
            return False
        self._room -= 1
        if not self._room:
            self._grow()
        return True

    def _insert(self, digest: bytes) -> bool:
        table, mask = self._table, self._offset_mask
        at = hash(digest) & mask  # the first slot to try: any bits of the digest would do
        while not table.startswith(_FREE, at):
            if table.startswith(digest, at):
                return False
            at = (at + _DIGEST_SIZE) & mask
        _STORE(table, at, digest)
        return True

    def _grow(self) -> None:
        old = memoryview(self._table)
        self._allocate(2 * len(old) // _DIGEST_SIZE)
        self._room -= len(old) // _DIGEST_SIZE // 2  # the ids carried over
        for at in range(0, len(old), _DIGEST_SIZE):
            digest = old[at : at + _DIGEST_SIZE].tobytes()
            if digest != _FREE:
                self._insert(digest)


def _check_size(raw: bytes, number: int, max_line_bytes: int) -> None:
    size = len(raw)
    if size > max_line_bytes:  # only then is it worth discounting the line ending
        if size and raw[size - 1] == _NEWLINE:
            size -= 1
        if size and raw[size - 1] == _CARRIAGE_RETURN:
            size -= 1
        if size > max_line_bytes:
            raise LineInvalid(
                "line_too_large",
                f"The line is longer than {max_line_bytes // 1024:,} KiB; each line may be at most "
                f"{max_line_bytes:,} bytes",
                line=number,
            )


def _too_many(number: int, limit: int) -> LineInvalid:
    return LineInvalid(
        "too_many_lines",
        f"The file has more than {limit:,} requests; a batch may have at most {limit:,}. "
        "Split it into several files.",
        line=number,
    )


def _empty() -> LineInvalid:
    return LineInvalid(
        "empty_file", "The file has no requests: it is empty or every line is blank", line=None
    )


__all__ = [
    "MAX_ERRORS",
    "FileLineCode",
    "FileReport",
    "LineInvalid",
    "iter_planned",
    "report_object",
    "split_lines",
    "validate_file",
]
