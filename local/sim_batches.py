"""The simulator's provider batch APIs: OpenAI's (``/v1/files`` and ``/v1/batches``) and
Anthropic's (``/v1/messages/batches``), so a gateway that hands work to a provider's batch
service can be run and broken offline.

Each line of a provider batch is answered as the same request sent on its own would be
(``[[sim ...]]`` directives included), when the batch is processed. A batch is processed:

- by itself, on the first read at least ``auto_seconds`` after it was created (0 by default:
  its first read finds it ended), unless ``auto_seconds`` is null;
- or on a control: ``POST /_sim/provider-batches/{id}`` ``{"action": "complete"}`` (every
  line), ``{"action": "partial", "lines": N}`` (the first N lines; the rest stay in
  progress), ``{"action": "fail"}`` (OpenAI: failed, no line run), ``{"action": "expire"}``
  (the lines not run expire), or ``{"action": "start"}`` (validating to in progress).
  ``{"action": "lose"}`` makes the provider forget the batch, its files with it: from then on
  it answers 404 for it, as a provider that lost it does (or this simulator after a restart).

``POST /_sim/provider-batches`` ``{"auto_seconds": S | null, "submit_failure":
"queue_full" | "rate_limited" | null, "retry_after": S | null, "max_lines": N}`` sets how
batches behave: a ``submit_failure`` makes creates fail as the provider does when its queue
is full (OpenAI: a batch created failed at once, ``errors.data[0].code``
``batch_queue_full``; Anthropic: 529 ``overloaded_error``) or when it rate-limits them (429,
with ``Retry-After: S`` when ``retry_after`` is set); ``max_lines`` lowers the lines a batch
may have. ``GET /_sim/provider-batches`` lists every batch (id, provider, status, custom ids,
metadata, reads by id (``polls``), times, whether deleted) and file (and the files deleted),
and ``lines``: how many lines the provider has taken in batches since its last reset (its own
count of what was submitted to it, lost batches included); ``POST /_sim/reset`` forgets them.
``DELETE /v1/files/{id}`` deletes a file; ``DELETE /v1/messages/batches/{id}`` an ended
message batch (400 before it ended).
"""

from __future__ import annotations

import json
import re
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from email.parser import BytesParser
from email.policy import HTTP
from typing import Any, Literal

OPENAI_MAX_LINES = 50_000
OPENAI_MAX_BYTES = 200 * 1024 * 1024
ANTHROPIC_MAX_REQUESTS = 100_000
ANTHROPIC_MAX_BYTES = 256 * 1024 * 1024
WINDOW_SECONDS = 24 * 3600
_CUSTOM_ID = re.compile(r"[a-zA-Z0-9_-]{1,64}")
_OPENAI_TARGETS = ("/v1/chat/completions", "/v1/embeddings", "/v1/responses")

Provider = Literal["openai", "anthropic"]
# What a path of these APIs answers: status, JSON body or bytes, and extra headers.
Handled = tuple[int, Any, tuple[tuple[str, str], ...]]
# One line answered: (status, body) of the same request sent on its own (None: it hung).
Answer = Callable[[str, dict[str, Any], Mapping[str, str]], tuple[int, Any] | None]


@dataclass
class Line:
    custom_id: str
    url: str
    body: dict[str, Any]
    result: dict[str, Any] | None = None  # set once run, cancelled or expired


@dataclass
class ProviderBatch:
    id: str
    provider: Provider
    created_at: float
    lines: list[Line]
    endpoint: str = "/v1/messages"
    input_file_id: str | None = None
    metadata: dict[str, Any] | None = None
    anthropic_version: str | None = None
    status: str = "validating"  # OpenAI's statuses; Anthropic's are derived (``processing_status``)
    times: dict[str, float] = field(default_factory=dict)
    errors: list[dict[str, Any]] = field(default_factory=list)
    output_file_id: str | None = None
    error_file_id: str | None = None
    polls: int = 0  # reads of the batch by its id
    deleted: bool = False  # Anthropic: deleted after it ended (listed here, not by the API)

    @property
    def ended(self) -> bool:
        return self.status in ("completed", "failed", "expired", "cancelled")


class ProviderBatches:
    def __init__(self, answer: Answer) -> None:
        self._answer = answer
        self._lock = threading.RLock()
        self.batches: dict[str, ProviderBatch] = {}
        self.files: dict[str, tuple[str, bytes]] = {}  # id -> (purpose, bytes)
        self.deleted_files: set[str] = set()
        self.auto_seconds: float | None = 0.0
        self.submit_failure: str | None = None
        self.retry_after: float | None = None
        self.max_lines: int | None = None
        self.lines_taken = 0  # lines of every batch created (the provider's own count)

    def reset(self) -> None:
        with self._lock:
            self.batches.clear()
            self.files.clear()
            self.deleted_files.clear()
            self.auto_seconds, self.submit_failure, self.max_lines = 0.0, None, None
            self.retry_after, self.lines_taken = None, 0

    # --- routing ----------------------------------------------------------------------------

    def handle(self, method: str, path: str, headers: Mapping[str, str], raw: bytes) -> Handled | None:
        """(status, JSON body or bytes, extra headers) for a path of these APIs; None for any
        other path."""
        parts = path.strip("/").split("/")
        with self._lock:
            if parts[:2] == ["_sim", "provider-batches"]:
                answered = self._control(method, parts[2:], raw)
            elif parts[:2] == ["v1", "files"]:
                answered = self._files(method, parts[2:], headers, raw)
            elif parts[:3] == ["v1", "messages", "batches"]:
                answered = self._anthropic(method, parts[3:], headers, raw)
            elif parts[:2] == ["v1", "batches"]:
                answered = self._openai(method, parts[2:], raw)
            else:
                return None
        status, body = answered
        refused_for_load = status in (429, 529) and self.retry_after is not None
        extra = (("Retry-After", f"{self.retry_after:g}"),) if refused_for_load else ()
        return status, body, extra

    # --- controls ---------------------------------------------------------------------------

    def _control(self, method: str, rest: list[str], raw: bytes) -> tuple[int, Any]:
        if not rest and method == "GET":
            return 200, {
                "batches": [
                    {
                        "id": b.id,
                        "provider": b.provider,
                        "status": b.status,
                        "custom_ids": [line.custom_id for line in b.lines],
                        "metadata": b.metadata,
                        "polls": b.polls,
                        "times": b.times,
                        "deleted": b.deleted,
                    }
                    for b in self.batches.values()
                ],
                "files": sorted(self.files),
                "deleted_files": sorted(self.deleted_files),
                "lines": self.lines_taken,
            }
        body = _json(raw)
        if not rest and method == "POST" and isinstance(body, dict):
            if "auto_seconds" in body:
                self.auto_seconds = body["auto_seconds"]
            if "submit_failure" in body:
                self.submit_failure = body["submit_failure"]
            if "retry_after" in body:
                self.retry_after = body["retry_after"]
            if "max_lines" in body:
                self.max_lines = body["max_lines"]
            return 200, {"auto_seconds": self.auto_seconds, "submit_failure": self.submit_failure}
        batch = self.batches.get(rest[0]) if len(rest) == 1 else None
        if batch is None or method != "POST" or not isinstance(body, dict):
            return 404, _openai_error("no such batch, or not a control", "not_found")
        action = body.get("action")
        if action == "start":
            self._start(batch)
        elif action == "complete":
            self._run(batch, len(batch.lines))
        elif action == "partial":
            self._run(batch, int(body.get("lines", 0)), finish=False)
        elif action == "fail":
            self._fail(batch, "simulated_failure", "the provider failed the batch")
        elif action == "expire":
            self._close(batch, "expired", {"type": "expired"})
        elif action == "lose":
            return 200, self._lose(batch)
        else:
            return 400, _openai_error(
                "action must be start, complete, partial, fail, expire or lose", "bad_action"
            )
        return 200, {"id": batch.id, "status": batch.status}

    def _lose(self, batch: ProviderBatch) -> dict[str, Any]:
        """Forget ``batch`` and its files, as a provider that lost them: 404 from now on."""
        del self.batches[batch.id]
        for file_id in (batch.input_file_id, batch.output_file_id, batch.error_file_id):
            if file_id is not None:
                self.files.pop(file_id, None)
        return {"id": batch.id, "status": "lost"}

    # --- OpenAI: files ----------------------------------------------------------------------

    def _files(self, method: str, rest: list[str], headers: Mapping[str, str], raw: bytes) -> tuple[int, Any]:
        if not rest and method == "POST":
            fields = _multipart(headers.get("content-type", ""), raw)
            purpose = fields.get("purpose", b"").decode()
            data = fields.get("file")
            if data is None or purpose != "batch":
                return 400, _openai_error("send a file with purpose batch (multipart/form-data)", None)
            if len(data) > OPENAI_MAX_BYTES:
                return 400, _openai_error("the file is larger than 200 MB", "file_too_large")
            file_id = _new_id("file-")
            self.files[file_id] = (purpose, data)
            return 200, _file_object(file_id, purpose, data)
        file = self.files.get(rest[0]) if rest else None
        if file is None:
            return 404, _openai_error(f"No such File object: {rest[0] if rest else ''}", None)
        if len(rest) == 2 and rest[1] == "content" and method == "GET":
            return 200, file[1]
        if len(rest) == 1 and method == "GET":
            return 200, _file_object(rest[0], *file)
        if len(rest) == 1 and method == "DELETE":
            del self.files[rest[0]]
            self.deleted_files.add(rest[0])
            return 200, {"id": rest[0], "object": "file", "deleted": True}
        return 405, _openai_error("not supported", None)

    # --- OpenAI: batches --------------------------------------------------------------------

    def _openai(self, method: str, rest: list[str], raw: bytes) -> tuple[int, Any]:
        if not rest and method == "POST":
            return self._openai_create(_json(raw))
        if not rest and method == "GET":
            listed = [b for b in self.batches.values() if b.provider == "openai"]
            listed.sort(key=lambda b: b.created_at, reverse=True)
            return 200, {
                "object": "list",
                "data": [self._openai_object(b) for b in listed],
                "has_more": False,
            }
        batch = self.batches.get(rest[0])
        if batch is None or batch.provider != "openai":
            return 404, _openai_error(f"No batch found with id '{rest[0]}'.", "batch_not_found")
        if len(rest) == 2 and rest[1] == "cancel" and method == "POST":
            self._cancel(batch)
            return 200, self._openai_object(batch)
        if len(rest) == 1 and method == "GET":
            batch.polls += 1
            self._maybe_auto(batch)
            return 200, self._openai_object(batch)
        return 405, _openai_error("not supported", None)

    def _openai_create(self, body: Any) -> tuple[int, Any]:
        if self.submit_failure == "rate_limited":
            return 429, _openai_error("Rate limit reached for batch creation.", "rate_limit_exceeded")
        if not isinstance(body, dict):
            return 400, _openai_error("the body must be a JSON object", None)
        endpoint, file_id = body.get("endpoint"), body.get("input_file_id")
        if endpoint not in _OPENAI_TARGETS or body.get("completion_window") != "24h":
            return 400, _openai_error("endpoint or completion_window is not supported", "invalid_request")
        file = self.files.get(file_id) if isinstance(file_id, str) else None
        if file is None:
            return 400, _openai_error(f"No such File object: {file_id}", "invalid_input_file")
        batch = ProviderBatch(
            id=_new_id("batch_"),
            provider="openai",
            created_at=time.time(),
            lines=[],
            endpoint=endpoint,
            input_file_id=file_id,
            metadata=body.get("metadata"),
        )
        self.batches[batch.id] = batch
        if self.submit_failure == "queue_full":
            self._fail(batch, "batch_queue_full", "The provider's batch queue is full; try again later.")
            return 200, self._openai_object(batch)
        lines, problems = _openai_lines(file[1], endpoint, self.max_lines or OPENAI_MAX_LINES)
        if problems:
            batch.errors = problems
            batch.status, batch.times["failed_at"] = "failed", time.time()
        else:
            batch.lines = lines
            self.lines_taken += len(lines)
        return 200, self._openai_object(batch)

    def _openai_object(self, batch: ProviderBatch) -> dict[str, Any]:
        done = [line for line in batch.lines if line.result is not None]
        failed = sum(1 for line in done if line.result and line.result.get("error") is not None)
        times = {name: int(batch.times[name]) if name in batch.times else None for name in _OPENAI_TIMES}
        return {
            "id": batch.id,
            "object": "batch",
            "endpoint": batch.endpoint,
            "errors": {"object": "list", "data": batch.errors} if batch.errors else None,
            "input_file_id": batch.input_file_id,
            "completion_window": "24h",
            "status": batch.status,
            "output_file_id": batch.output_file_id,
            "error_file_id": batch.error_file_id,
            "created_at": int(batch.created_at),
            "expires_at": int(batch.created_at + WINDOW_SECONDS),
            **times,
            "request_counts": {"total": len(batch.lines), "completed": len(done) - failed, "failed": failed},
            "metadata": batch.metadata,
        }

    # --- Anthropic: message batches ---------------------------------------------------------

    def _anthropic(
        self, method: str, rest: list[str], headers: Mapping[str, str], raw: bytes
    ) -> tuple[int, Any]:
        version = headers.get("anthropic-version")
        if not version:
            return 400, _anthropic_error("invalid_request_error", "anthropic-version header is required")
        if not rest and method == "POST":
            return self._anthropic_create(_json(raw), version)
        if not rest and method == "GET":
            listed = sorted(
                (b for b in self.batches.values() if b.provider == "anthropic" and not b.deleted),
                key=lambda b: b.created_at,
                reverse=True,
            )
            return 200, {"data": [self._anthropic_object(b) for b in listed], "has_more": False}
        batch = self.batches.get(rest[0])
        if batch is None or batch.provider != "anthropic" or batch.deleted:
            return 404, _anthropic_error("not_found_error", f"No message batch with id {rest[0]}")
        if len(rest) == 2 and rest[1] == "cancel" and method == "POST":
            self._cancel(batch)
            return 200, self._anthropic_object(batch)
        if len(rest) == 2 and rest[1] == "results" and method == "GET":
            if not batch.ended:
                return 400, _anthropic_error("invalid_request_error", "the batch is still processing")
            results = [
                {"custom_id": line.custom_id, "result": line.result or {"type": "expired"}}
                for line in batch.lines
            ]
            return 200, "".join(json.dumps(result) + "\n" for result in results).encode()
        if len(rest) == 1 and method == "GET":
            batch.polls += 1
            self._maybe_auto(batch)
            return 200, self._anthropic_object(batch)
        if len(rest) == 1 and method == "DELETE":
            if not batch.ended:
                return 400, _anthropic_error("invalid_request_error", "only an ended batch can be deleted")
            batch.deleted = True
            return 200, {"id": batch.id, "type": "message_batch_deleted"}
        return 405, _anthropic_error("invalid_request_error", "not supported")

    def _anthropic_create(self, body: Any, version: str) -> tuple[int, Any]:
        if self.submit_failure == "rate_limited":
            return 429, _anthropic_error(
                "rate_limit_error", "Number of batch requests has exceeded your rate limit"
            )
        if self.submit_failure == "queue_full":
            return 529, _anthropic_error("overloaded_error", "Overloaded")
        requests = body.get("requests") if isinstance(body, dict) else None
        limit = self.max_lines or ANTHROPIC_MAX_REQUESTS
        if not isinstance(requests, list) or not 1 <= len(requests) <= limit:
            return 400, _anthropic_error("invalid_request_error", f"requests: 1 to {limit} requests")
        if len(json.dumps(body)) > ANTHROPIC_MAX_BYTES:
            return 413, _anthropic_error("request_too_large", "the batch is larger than 256 MB")
        lines, seen = [], set()
        for index, request in enumerate(requests):
            custom_id = request.get("custom_id") if isinstance(request, dict) else None
            params = request.get("params") if isinstance(request, dict) else None
            if not isinstance(custom_id, str) or not _CUSTOM_ID.fullmatch(custom_id) or custom_id in seen:
                return 400, _anthropic_error(
                    "invalid_request_error", f"requests.{index}.custom_id is invalid"
                )
            if not isinstance(params, dict):
                return 400, _anthropic_error("invalid_request_error", f"requests.{index}.params is required")
            seen.add(custom_id)
            lines.append(Line(custom_id, "/v1/messages", params))
        batch = ProviderBatch(
            id=_new_id("msgbatch_"),
            provider="anthropic",
            created_at=time.time(),
            lines=lines,
            anthropic_version=version,
            status="in_progress",
        )
        batch.times["in_progress_at"] = batch.created_at
        self.batches[batch.id] = batch
        self.lines_taken += len(lines)
        return 200, self._anthropic_object(batch)

    def _anthropic_object(self, batch: ProviderBatch) -> dict[str, Any]:
        counts = {"processing": 0, "succeeded": 0, "errored": 0, "canceled": 0, "expired": 0}
        for line in batch.lines:
            kind = (line.result or {}).get("type", "processing" if not batch.ended else "expired")
            counts[kind] += 1
        processing = (
            "ended" if batch.ended else ("canceling" if batch.status == "cancelling" else "in_progress")
        )
        ended_at = batch.times.get(f"{batch.status}_at") if batch.ended else None
        return {
            "id": batch.id,
            "type": "message_batch",
            "processing_status": processing,
            "request_counts": counts,
            "ended_at": _iso(ended_at),
            "created_at": _iso(batch.created_at),
            "expires_at": _iso(batch.created_at + WINDOW_SECONDS),
            "archived_at": None,
            "cancel_initiated_at": _iso(batch.times.get("cancelling_at")),
            "results_url": f"/v1/messages/batches/{batch.id}/results" if batch.ended else None,
        }

    # --- processing ------------------------------------------------------------------------

    def _maybe_auto(self, batch: ProviderBatch) -> None:
        if batch.ended or self.auto_seconds is None or batch.status == "cancelling":
            return
        if time.time() - batch.created_at >= self.auto_seconds:
            self._run(batch, len(batch.lines))

    def _start(self, batch: ProviderBatch) -> None:
        if batch.status == "validating":
            batch.status, batch.times["in_progress_at"] = "in_progress", time.time()

    def _run(self, batch: ProviderBatch, count: int, *, finish: bool = True) -> None:
        """Answer the first ``count`` lines not answered yet; with ``finish``, end the batch."""
        if batch.ended:
            return
        self._start(batch)
        for line in [line for line in batch.lines if line.result is None][:count]:
            line.result = self._result(batch, line)
        if finish:
            self._close(batch, "completed", {"type": "expired"})

    def _result(self, batch: ProviderBatch, line: Line) -> dict[str, Any]:
        headers = {"anthropic-version": batch.anthropic_version} if batch.anthropic_version else {}
        answered = self._answer(line.url, line.body, headers)
        status, body = answered if answered is not None else (500, {"error": {"message": "no answer"}})
        if batch.provider == "anthropic":
            if status < 300:
                return {"type": "succeeded", "message": body}
            return {"type": "errored", "error": body}
        request_id = _new_id("req_")
        return {
            "id": _new_id("batch_req_"),
            "custom_id": line.custom_id,
            "response": {"status_code": status, "request_id": request_id, "body": body},
            "error": None if status < 300 else {"code": "request_failed", "message": f"status {status}"},
        }

    def _fail(self, batch: ProviderBatch, code: str, message: str) -> None:
        batch.errors = [{"code": code, "message": message, "param": None, "line": None}]
        batch.status, batch.times["failed_at"] = "failed", time.time()

    def _cancel(self, batch: ProviderBatch) -> None:
        if batch.ended:
            return
        batch.times["cancelling_at"] = time.time()
        self._close(batch, "cancelled", {"type": "canceled"})

    def _close(self, batch: ProviderBatch, status: str, unrun: dict[str, Any]) -> None:
        """End the batch in ``status``: lines not run end as ``unrun`` (Anthropic), or are
        left out of the output (OpenAI, which writes the lines that ran)."""
        now = time.time()
        for line in batch.lines:
            if line.result is None and batch.provider == "anthropic":
                line.result = dict(unrun)
        batch.status, batch.times[f"{status}_at"] = status, now
        if batch.provider == "openai":
            batch.times.setdefault("finalizing_at", now)
            ran = [line.result for line in batch.lines if line.result is not None]
            good = [r for r in ran if r["error"] is None]
            bad = [r for r in ran if r["error"] is not None]
            if status in ("expired", "cancelled"):
                code = "batch_expired" if status == "expired" else "batch_cancelled"
                bad += [
                    {
                        "id": _new_id("batch_req_"),
                        "custom_id": line.custom_id,
                        "response": None,
                        "error": {"code": code, "message": f"This request was not run: {code}."},
                    }
                    for line in batch.lines
                    if line.result is None
                ]
            batch.output_file_id = self._result_file(good)
            batch.error_file_id = self._result_file(bad)

    def _result_file(self, results: list[dict[str, Any]]) -> str | None:
        if not results:
            return None
        file_id = _new_id("file-")
        self.files[file_id] = ("batch_output", "".join(json.dumps(r) + "\n" for r in results).encode())
        return file_id


_OPENAI_TIMES = (
    "in_progress_at",
    "finalizing_at",
    "completed_at",
    "failed_at",
    "expired_at",
    "cancelling_at",
    "cancelled_at",
)


def _openai_lines(data: bytes, endpoint: str, most: int) -> tuple[list[Line], list[dict[str, Any]]]:
    """The file's lines, or its problems (OpenAI's validation: each line a JSON request to
    ``endpoint`` with a unique custom_id)."""
    lines: list[Line] = []
    problems: list[dict[str, Any]] = []
    seen: set[str] = set()
    for number, raw in enumerate(data.splitlines(), 1):
        if not raw.strip():
            continue
        try:
            item = json.loads(raw)
        except ValueError:
            item = None
        if (
            not isinstance(item, dict)
            or item.get("url") != endpoint
            or item.get("method") != "POST"
            or not isinstance(item.get("body"), dict)
            or not isinstance(item.get("custom_id"), str)
        ):
            problems.append(
                {"code": "invalid_request", "message": "not a request to the endpoint", "line": number}
            )
            continue
        if item["custom_id"] in seen:
            problems.append(
                {"code": "duplicate_custom_id", "message": "custom_id is repeated", "line": number}
            )
            continue
        seen.add(item["custom_id"])
        lines.append(Line(item["custom_id"], endpoint, item["body"]))
    if not lines and not problems:
        problems.append({"code": "empty_file", "message": "the file has no requests", "line": None})
    if len(lines) > most:
        problems.append({"code": "too_many_requests", "message": f"at most {most} requests", "line": None})
    return lines, problems


def _multipart(content_type: str, raw: bytes) -> dict[str, bytes]:
    message = BytesParser(policy=HTTP).parsebytes(
        b"Content-Type: " + content_type.encode() + b"\r\nMIME-Version: 1.0\r\n\r\n" + raw
    )
    fields: dict[str, bytes] = {}
    if message.is_multipart():
        for part in message.iter_parts():
            name = part.get_param("name", header="content-disposition")
            if isinstance(name, str):
                payload = part.get_payload(decode=True)
                fields[name] = payload if isinstance(payload, bytes) else b""
    return fields


def _file_object(file_id: str, purpose: str, data: bytes) -> dict[str, Any]:
    return {
        "id": file_id,
        "object": "file",
        "bytes": len(data),
        "created_at": int(time.time()),
        "filename": "batch.jsonl",
        "purpose": purpose,
    }


def _json(raw: bytes) -> Any:
    try:
        return json.loads(raw or b"null")
    except ValueError:
        return None


def _iso(epoch: float | None) -> str | None:
    if epoch is None:
        return None
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))


def _new_id(prefix: str) -> str:
    return prefix + uuid.uuid4().hex[:24]


def _openai_error(message: str, code: str | None) -> dict[str, Any]:
    return {"error": {"message": message, "type": "invalid_request_error", "param": None, "code": code}}


def _anthropic_error(kind: str, message: str) -> dict[str, Any]:
    return {"type": "error", "error": {"type": kind, "message": message}}
