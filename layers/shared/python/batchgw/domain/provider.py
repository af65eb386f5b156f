"""A batch run on its provider's batch service: its parts, and what each provider answer
means for our requests. Pure.

A provider-mode batch is cut into parts: each part is the requests of one model within a
range of the batch's indexes, at most as many (and as large) as the provider's batch
service takes in one batch. A part is submitted once, polled until it ends, then collected:
each of its lines becomes the end of one of our requests.

Neither our ids nor the user's custom_ids go to the provider: a line's provider-side id
is ``r<index>`` (``line_id``), and the provider's own ids (its batch's, its files') stay in
the part, never in an answer or a result.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any

# Each provider's limits on one batch (OpenAI: 50,000 lines / 200 MB of input file;
# Anthropic: 100,000 requests / 256 MB).
MAX_LINES = {"openai": 50_000, "anthropic": 100_000}
MAX_BYTES = {"openai": 200 * 1024 * 1024, "anthropic": 256 * 1024 * 1024}
# How long a part waits before its next poll: doubled each poll from the first, up to the most.
FIRST_POLL_SECONDS = 1
# A submit the provider refused for its load (queue full, rate limited) is tried again after.
SUBMIT_RETRY_SECONDS = 30
# How long a provider runs a batch at most (both: 24 hours).
PROVIDER_WINDOW_SECONDS = 24 * 3600
# Clocks apart: the provider's creation time of a batch against ours.
ORPHAN_SKEW_SECONDS = 60

_LINE_ID = re.compile(r"^r(\d{1,9})$")


class PartStatus(StrEnum):
    PLANNED = "planned"  # not submitted yet (or its submit refused: tried again at ``retry_at``)
    SUBMITTING = "submitting"  # a submit was sent: its answer may have been lost
    SUBMITTED = "submitted"  # the provider has it: polled until it ends
    COLLECTED = "collected"  # its lines are our requests' ends
    SKIPPED = "skipped"  # never submitted: the batch stopped first
    LOST = "lost"  # the provider no longer knows its batch: what was not collected ended otherwise


@dataclass(frozen=True, slots=True)
class Part:
    """Part ``n``: the requests of ``model`` with indexes in [``start``, ``end``), run on
    ``route``'s batch service."""

    n: int
    model: str
    route: str
    start: int
    end: int
    lines: int
    status: PartStatus = PartStatus.PLANNED
    ref: str | None = None  # our mark on the provider batch (OpenAI's metadata), to find it again
    provider_batch_id: str | None = None
    provider_file_id: str | None = None
    provider_status: str | None = None
    submitted_at: float | None = None
    polls: int = 0
    retry_at: float | None = None  # a refused submit's next try
    error: dict[str, Any] | None = None  # the last refusal (code, message), scrubbed
    version: int = 0  # of its stored item: each write is conditional on it
    rerun: bool = False  # it runs again requests that failed (``omg_retries``): those waiting
    collected: int = 0  # of its ended batch's result lines, how many are recorded
    submit_sent_at: float | None = None  # when its last submit went out
    # Where a submit's answer was lost and the provider keeps no mark to find its batch by
    # (Anthropic): the provider batches made meanwhile, [from, to], may include one of ours
    # that nothing will collect; once no live step can still claim it, it is cancelled.
    suspect_from: float | None = None
    suspect_to: float | None = None
    # A step looked at it since its batch began to stop (cancel, window, owner): it asked
    # the provider to cancel it, or tried to. A stop none of its parts saw yet wakes the
    # workflow from its wait for the next poll (``provider_park``).
    stop_seen: bool = False
    # What its provider batch left at the provider (files, the message batch) is deleted,
    # once every line is recorded (``cleanup.discard``).
    cleaned: bool = False

    @property
    def ended(self) -> bool:
        return self.status in (PartStatus.COLLECTED, PartStatus.SKIPPED, PartStatus.LOST)

    @property
    def live(self) -> bool:
        """Whether a provider batch of this part may run at the provider now: submitted (or
        its submit sent) and not ended there, or one a lost submit may have left that is not
        looked for yet."""
        sent = self.status in (PartStatus.SUBMITTING, PartStatus.SUBMITTED)
        return sent or self.suspect_to is not None

    @property
    def left_at_provider(self) -> bool:
        """Ended, with what its provider batch left there (its files, the message batch) not
        deleted yet."""
        made = self.provider_batch_id is not None or self.provider_file_id is not None
        return self.status in (PartStatus.COLLECTED, PartStatus.LOST) and made and not self.cleaned

    def orphans_due_in(self, now: float, grace: float) -> float | None:
        """Seconds until the provider batches a lost submit may have left are looked for
        (0: now); None when there is nothing to look for."""
        if self.suspect_to is None:
            return None
        return max(0.0, self.suspect_to + grace - now)

    def suspecting(self, sent_at: float, now: float) -> Part:
        """This part, noting that a submit sent at ``sent_at`` may have left a provider batch
        by ``now``."""
        start = sent_at - ORPHAN_SKEW_SECONDS
        return self.replace(
            suspect_from=start if self.suspect_from is None else min(self.suspect_from, start),
            suspect_to=now + ORPHAN_SKEW_SECONDS,
        )

    def next_poll_seconds(self, most: int) -> int:
        return int(min(most, FIRST_POLL_SECONDS * 2 ** min(self.polls, 16)))

    def replace(self, **changes: Any) -> Part:
        return replace(self, **changes)

    def to_item(self) -> dict[str, Any]:
        return {k: v for k, v in _asdict(self).items() if v is not None and v is not False and k != "version"}

    @classmethod
    def from_item(cls, item: dict[str, Any]) -> Part:
        return cls(
            n=int(item["n"]),
            model=str(item["model"]),
            route=str(item["route"]),
            start=int(item["start"]),
            end=int(item["end"]),
            lines=int(item["lines"]),
            status=PartStatus(item.get("status", PartStatus.PLANNED)),
            ref=item.get("ref"),
            provider_batch_id=item.get("provider_batch_id"),
            provider_file_id=item.get("provider_file_id"),
            provider_status=item.get("provider_status"),
            submitted_at=None if item.get("submitted_at") is None else float(item["submitted_at"]),
            polls=int(item.get("polls", 0)),
            retry_at=None if item.get("retry_at") is None else float(item["retry_at"]),
            error=item.get("error"),
            version=int(item.get("version", 0)),
            rerun=bool(item.get("rerun")),
            collected=int(item.get("collected", 0)),
            submit_sent_at=_float(item.get("submit_sent_at")),
            suspect_from=_float(item.get("suspect_from")),
            suspect_to=_float(item.get("suspect_to")),
            stop_seen=bool(item.get("stop_seen")),
            cleaned=bool(item.get("cleaned")),
        )


def _float(value: Any) -> float | None:
    return None if value is None else float(value)


def _asdict(part: Part) -> dict[str, Any]:
    return {name: getattr(part, name) for name in part.__slots__}


class Planner:
    """Cuts a batch's requests, read in index order, into parts: per model, a part closes
    when one more line would take it past its provider's lines or bytes."""

    def __init__(
        self,
        routes: Mapping[str, tuple[str, str]],
        *,
        max_lines: int | None = None,
        first: int = 0,
        rerun: bool = False,
    ) -> None:
        self._routes = routes  # model: (route id, protocol)
        self._max_lines = max_lines  # an operator's lower limit (None: the provider's)
        self._open: dict[str, list[int]] = {}  # model: [start, lines, bytes]
        self._first = first  # the number of its first part
        self._rerun = rerun  # its parts run requests again (``Part.rerun``)
        self.parts: list[Part] = []

    def add(self, index: int, model: str, size: int) -> None:
        protocol = self._routes[model][1]
        most_lines = min(MAX_LINES[protocol], self._max_lines or MAX_LINES[protocol])
        current = self._open.get(model)
        if current is not None and (current[1] + 1 > most_lines or current[2] + size > MAX_BYTES[protocol]):
            self._close(model, end=index)
            current = None
        if current is None:
            current = self._open[model] = [index, 0, 0]
        current[1] += 1
        current[2] += size

    def done(self, total: int) -> list[Part]:
        for model in list(self._open):
            self._close(model, end=total)
        return sorted(self.parts, key=lambda p: (p.start, p.model))

    def _close(self, model: str, *, end: int) -> None:
        start, lines, _ = self._open.pop(model)
        n = self._first + len(self.parts)
        self.parts.append(Part(n, model, self._routes[model][0], start, end, lines, rerun=self._rerun))


def runs_provider_batches(choice: bool | None) -> bool:
    """Whether a route with a batch service and price (``batch_api``) may take provider-run
    batches, given an administrator's batch choice for it (``batch_allowed``; None: none):
    unless they forbade batch work on it. The route's locality plays no part: the operator who
    gave the route a batch service and price allowed it this one use (its default), and an
    administrator's ``false`` withdraws that, for provider mode and ``auto`` alike."""
    return choice is not False


def line_id(index: int) -> str:
    """The provider-side custom id of our request ``index``."""
    return f"r{index}"


def index_of(custom_id: Any) -> int | None:
    """Our request's index from a provider-side custom id (None: not one of ours)."""
    match = _LINE_ID.match(custom_id) if isinstance(custom_id, str) else None
    return None if match is None else int(match.group(1))


# Anthropic's error types as the HTTP statuses its API answers them with.
_ANTHROPIC_STATUS = {
    "invalid_request_error": 400,
    "authentication_error": 401,
    "permission_error": 403,
    "not_found_error": 404,
    "request_too_large": 413,
    "rate_limit_error": 429,
    "api_error": 500,
    "overloaded_error": 529,
}


@dataclass(frozen=True, slots=True)
class LineResult:
    """One line of a provider batch's results: our request's ``index``, and the answer the
    request would have had on its own (``status``, ``content``); ``unrun``: the provider
    never ran it (expired or cancelled there)."""

    index: int
    status: int = 0
    content: bytes = b""
    request_id: str | None = None
    unrun: str | None = None  # "expired" or "cancelled"


def openai_line(line: dict[str, Any]) -> LineResult | None:
    """A line of an OpenAI batch's output or error file."""
    index = index_of(line.get("custom_id"))
    if index is None:
        return None
    response = line.get("response")
    if isinstance(response, dict) and isinstance(response.get("status_code"), int):
        body = response.get("body")
        return LineResult(
            index, response["status_code"], json.dumps(body).encode(), request_id=response.get("request_id")
        )
    found = line.get("error")
    error: dict[str, Any] = found if isinstance(found, dict) else {}
    code = str(error.get("code") or "")
    if code == "batch_expired":
        return LineResult(index, unrun="expired")
    if code == "batch_cancelled":
        return LineResult(index, unrun="cancelled")
    message = str(error.get("message") or "the provider's batch service did not run the request")
    return LineResult(index, 500, json.dumps({"error": {"message": message, "code": code or None}}).encode())


def anthropic_line(line: dict[str, Any]) -> LineResult | None:
    """A line of an Anthropic message batch's results."""
    index = index_of(line.get("custom_id"))
    result = line.get("result")
    if index is None or not isinstance(result, dict):
        return None
    kind = result.get("type")
    if kind == "succeeded":
        return LineResult(index, 200, json.dumps(result.get("message")).encode())
    if kind == "expired":
        return LineResult(index, unrun="expired")
    if kind == "canceled":
        return LineResult(index, unrun="cancelled")
    found = result.get("error")
    envelope: dict[str, Any] = found if isinstance(found, dict) else {}
    inner = envelope.get("error")
    error: dict[str, Any] = inner if isinstance(inner, dict) else envelope
    status = _ANTHROPIC_STATUS.get(str(error.get("type")), 500)
    return LineResult(index, status, json.dumps({"type": "error", "error": error}).encode())


def scrub_ids(text: str, ids: tuple[str | None, ...]) -> str:
    """``text`` without the provider's own ids in it."""
    for provider_id in ids:
        if provider_id:
            text = text.replace(provider_id, "[provider id]")
    return text
