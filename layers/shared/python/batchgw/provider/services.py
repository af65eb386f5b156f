"""The providers' batch services, as the provider step calls them: OpenAI's (a JSONL file
uploaded with purpose ``batch``, then ``POST /batches``) and Anthropic's message batches
(``POST /messages/batches`` with each request's ``params``). Blocking calls (the step runs
in the lifecycle function), each within ``CALL_TIMEOUT_SECONDS``.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import httpx

from batchgw.config.catalog import Route
from batchgw.domain.provider import LineResult, anthropic_line, openai_line
from batchgw.upstream.client import KEYS, parse_retry_after

CALL_TIMEOUT_SECONDS = 120.0
# The metadata key our mark on an OpenAI batch goes under (``Part.ref``): how a submit whose
# answer was lost is found again instead of being submitted twice.
REF_KEY = "batchgw_ref"
_ENDED = frozenset({"completed", "failed", "expired", "cancelled", "ended"})


class Refused(Exception):
    """The provider refused a submit: ``code`` queue_full or rate_limited (try again later)
    or rejected (it will not take it)."""

    def __init__(self, code: str, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.retry_after = retry_after

    @property
    def later(self) -> bool:
        return self.code in ("queue_full", "rate_limited")


class Gone(Exception):
    """The provider no longer knows a batch it made for us (404 on it, or on its results):
    lost on its side, or forgotten, as a restarted simulator forgets."""


@dataclass(frozen=True, slots=True)
class Submitted:
    batch_id: str
    file_id: str | None = None


@dataclass(frozen=True, slots=True)
class Listed:
    """A provider batch as its service's list shows it."""

    batch_id: str
    created_at: float
    lines: int
    ended: bool


@dataclass(frozen=True, slots=True)
class Polled:
    status: str  # the provider's own word
    ended: bool
    error: dict[str, Any] | None = None  # why an OpenAI batch failed whole (its first error)
    output_file_id: str | None = None
    error_file_id: str | None = None


class BatchService:
    """One route's batch service."""

    def __init__(self, route: Route, *, secret_ttl: float, anthropic_version: str | None = None) -> None:
        self.route = route
        self._base = route.base_url.rstrip("/")
        self._secret_ttl = secret_ttl
        self._anthropic_version = anthropic_version or "2023-06-01"

    @property
    def _batches(self) -> str:
        return "/messages/batches" if self.route.protocol == "anthropic" else "/batches"

    def _headers(self) -> dict[str, str]:
        key = KEYS.key(self.route, ttl=self._secret_ttl)
        if self.route.protocol == "anthropic":
            headers = {"anthropic-version": self._anthropic_version}
            return {**headers, "x-api-key": key} if key else headers
        return {"authorization": f"Bearer {key}"} if key else {}

    def _call(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        with httpx.Client(timeout=CALL_TIMEOUT_SECONDS) as client:
            return client.request(method, f"{self._base}{path}", headers=self._headers(), **kwargs)

    # --- submit -----------------------------------------------------------------------------

    def submit(self, lines: Sequence[tuple[str, dict[str, Any]]], *, endpoint: str, ref: str) -> Submitted:
        """Submit ``lines`` (provider-side custom id, body with the provider's model name):
        the provider's batch; raises Refused."""
        if self.route.protocol == "anthropic":
            requests = [{"custom_id": custom_id, "params": body} for custom_id, body in lines]
            answer = self._call("POST", "/messages/batches", json={"requests": requests})
            _refused(answer)
            return Submitted(str(answer.json()["id"]))
        data = "".join(
            json.dumps({"custom_id": custom_id, "method": "POST", "url": endpoint, "body": body}) + "\n"
            for custom_id, body in lines
        ).encode()
        upload = self._call(
            "POST",
            "/files",
            files={"file": ("batch.jsonl", data, "application/jsonl")},
            data={"purpose": "batch"},
        )
        _refused(upload)
        file_id = str(upload.json()["id"])
        try:
            created = self._call(
                "POST",
                "/batches",
                json={
                    "input_file_id": file_id,
                    "endpoint": endpoint,
                    "completion_window": "24h",
                    "metadata": {REF_KEY: ref},
                },
            )
            _refused(created)
        except Refused:
            self._drop_file(file_id)  # the prompts it uploaded do not stay at the provider
            raise
        batch = created.json()
        polled = _openai_polled(batch)
        if polled.status == "failed" and (polled.error or {}).get("code") == "batch_queue_full":
            raise Refused("queue_full", str((polled.error or {}).get("message") or "batch queue full"))
        return Submitted(str(batch["id"]), file_id)

    def _drop_file(self, file_id: str) -> None:
        """Delete an uploaded file no batch took, if the provider can be reached now."""
        # Unreachable now: the provider's own retention of unused files removes it.
        with contextlib.suppress(httpx.HTTPError):
            _deleted(self._call("DELETE", f"/files/{file_id}"))

    def find(self, ref: str) -> Submitted | None:
        """The batch a submit marked ``ref`` made, if the provider can say (OpenAI's metadata;
        Anthropic keeps none: None)."""
        if self.route.protocol == "anthropic":
            return None
        answer = self._call("GET", "/batches", params={"limit": 100})
        answer.raise_for_status()
        for batch in answer.json().get("data", []):
            if (batch.get("metadata") or {}).get(REF_KEY) == ref:
                return Submitted(str(batch["id"]), batch.get("input_file_id"))
        return None

    @property
    def finds_by_mark(self) -> bool:
        """Whether ``find`` can say which batch a submit made (else ``made_since`` lists the
        candidates, and the caller knows its own)."""
        return self.route.protocol != "anthropic"

    def made_since(self, since: float) -> list[Listed]:
        """The Anthropic message batches created at ``since`` or later, newest first (its
        list, a page of 100 at a time, read until older ones come)."""
        found: list[Listed] = []
        params: dict[str, Any] = {"limit": 100}
        for _ in range(MAX_LIST_PAGES):
            answer = self._call("GET", "/messages/batches", params=params)
            answer.raise_for_status()
            body = answer.json()
            for batch in body.get("data", []):
                created = _epoch(batch.get("created_at"))
                if created is None:
                    continue
                if created < since:
                    return found
                counts = batch.get("request_counts") or {}
                lines = sum(int(counts.get(kind, 0)) for kind in _ANTHROPIC_COUNTS)
                found.append(
                    Listed(str(batch["id"]), created, lines, batch.get("processing_status") in _ENDED)
                )
            if not body.get("has_more") or not body.get("last_id"):
                return found
            params = {"limit": 100, "after_id": body["last_id"]}
        return found

    # --- poll, cancel, collect --------------------------------------------------------------

    def poll(self, batch_id: str) -> Polled:
        """The batch as the provider has it now; raises Gone when it no longer knows it."""
        path = (
            f"/messages/batches/{batch_id}" if self.route.protocol == "anthropic" else f"/batches/{batch_id}"
        )
        answer = self._call("GET", path)
        _known(answer)
        body = answer.json()
        if self.route.protocol == "anthropic":
            status = str(body.get("processing_status"))
            return Polled(status, status in _ENDED)
        return _openai_polled(body)

    def cancel(self, batch_id: str) -> None:
        """Ask the provider to cancel the batch (what it finished stays). Ended meanwhile
        (409) or unknown to it (404: nothing left to cancel) is done."""
        answer = self._call("POST", f"{self._batches}/{batch_id}/cancel")
        if answer.status_code >= 400 and answer.status_code not in (404, 409):
            answer.raise_for_status()

    def results(self, batch_id: str, polled: Polled) -> Iterator[LineResult]:
        """The ended batch's lines, as our requests' answers, read as they arrive (a result
        file of 200 MB is never held whole), in the provider's order (the same each time).
        Raises Gone when the provider no longer has them."""
        if self.route.protocol == "anthropic":
            yield from _lines(self._stream(f"/messages/batches/{batch_id}/results"), anthropic_line)
            return
        for file_id in (polled.output_file_id, polled.error_file_id):
            if file_id:
                yield from _lines(self._stream(f"/files/{file_id}/content"), openai_line)

    def _stream(self, path: str) -> Iterator[str]:
        with (
            httpx.Client(timeout=CALL_TIMEOUT_SECONDS) as client,
            client.stream("GET", f"{self._base}{path}", headers=self._headers()) as answer,
        ):
            _known(answer)
            yield from answer.iter_lines()

    def discard(self, batch_id: str, input_file_id: str | None) -> None:
        """Delete what an ended and collected batch left at the provider: OpenAI's input,
        output and error files; Anthropic's message batch (its results with it). Gone
        already (a step that died after deleting, a batch the provider lost) is deleted."""
        if self.route.protocol == "anthropic":
            _deleted(self._call("DELETE", f"/messages/batches/{batch_id}"))
            return
        try:
            polled: Polled | None = self.poll(batch_id)
        except Gone:
            polled = None  # its input file may be left all the same
        made = () if polled is None else (polled.output_file_id, polled.error_file_id)
        for file_id in (input_file_id, *made):
            if file_id:
                _deleted(self._call("DELETE", f"/files/{file_id}"))


# Anthropic's request counts: together, the batch's requests.
_ANTHROPIC_COUNTS = ("processing", "succeeded", "errored", "canceled", "expired")
# Pages of a provider's batch list read at most when looking for lost submits' batches.
MAX_LIST_PAGES = 20


def _epoch(value: Any) -> float | None:
    if not isinstance(value, str):
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def _openai_polled(batch: dict[str, Any]) -> Polled:
    status = str(batch.get("status"))
    errors = (batch.get("errors") or {}).get("data") or []
    return Polled(
        status,
        status in _ENDED,
        error=errors[0] if errors and isinstance(errors[0], dict) else None,
        output_file_id=batch.get("output_file_id"),
        error_file_id=batch.get("error_file_id"),
    )


def _refused(answer: httpx.Response) -> None:
    if answer.status_code < 400:
        return
    try:
        error = answer.json().get("error") or {}
        message = str(error.get("message") or f"status {answer.status_code}")
    except (ValueError, AttributeError):
        message = f"status {answer.status_code}"
    retry_after = parse_retry_after(answer.headers.get("retry-after"))
    if answer.status_code == 429:
        raise Refused("rate_limited", message, retry_after)
    if answer.status_code in (503, 529) or answer.status_code >= 500:
        raise Refused("queue_full", message, retry_after)
    raise Refused("rejected", message)


def _known(answer: httpx.Response) -> None:
    """Raise Gone for a 404 (the provider does not know the batch), the error of any other
    failed answer (looked at again later)."""
    if answer.status_code == 404:
        raise Gone(f"the provider answered 404 for {answer.request.url.path}")
    answer.raise_for_status()


def _deleted(answer: httpx.Response) -> None:
    if answer.status_code != 404:
        answer.raise_for_status()


def _lines(content: Iterator[str], read: Any) -> Iterator[LineResult]:
    for raw in content:
        if not raw.strip():
            continue
        try:
            line = json.loads(raw)
        except ValueError:
            continue
        result = read(line) if isinstance(line, dict) else None
        if result is not None:
            yield result
