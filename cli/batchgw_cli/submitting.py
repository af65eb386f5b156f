"""``batchgw submit``: upload a JSONL file and create its batch, once, whatever happens.

The Idempotency-Key of the create follows from the file's SHA-256, the options and the API
key's place (base URL and key), and a small state file (``$BATCHGW_CLI_STATE_DIR``, else
``~/.cache/batchgw``) named after it keeps how far the submission went: the upload and its
parts, the file, the batch. Running the same command again after a crash, a dropped
connection or Ctrl-C resumes the upload where its parts stopped, or finds the batch the
first run created (the key replays it), instead of creating another.

A file up to one part is sent with ``POST /v1/files``; a larger one with the Uploads API, in
parts of ``PART_BYTES``, each recorded as it is added. The batch's metadata names the
submission (``batchgw_submit``): a run whose state file was lost finds the batch by it.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from batchgw_cli.client import Api, ApiFailure, CliError

# Within the gateway's default body limit (BATCH_MAX_BODY_MB, 4); BATCHGW_PART_BYTES changes it.
PART_BYTES = 3 * 1024 * 1024
SUBMIT_KEY = "batchgw_submit"  # the metadata that names the submission a batch was made by
SEARCHED = 500  # the newest batches searched for it
ENDPOINTS = ("/v1/chat/completions", "/v1/embeddings", "/v1/responses", "/v1/messages")


@dataclass
class Options:
    endpoint: str | None
    window: str
    name: str | None
    metadata: dict[str, str]
    priority: int | None = None
    complete_by: str | None = None  # as given (``complete_by_of`` reads it when the batch is made)


DURATION_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
COMPLETE_BY_HELP = (
    "When you want the batch done by: unix seconds (1767225600), an ISO 8601 time with a "
    "timezone (2026-01-01T12:00:00Z), or a time from now (+90m, +2h, +1d). At most the window's end."
)


def complete_by_of(text: str, now: float) -> int:
    """``--complete-by`` as unix seconds: unix seconds, an ISO 8601 time with a timezone, or
    ``+<n><s|m|h|d>`` from ``now``. ValueError, saying what it takes, for anything else."""
    given = text.strip()
    if given.isdigit():
        return int(given)
    if given.startswith("+") and given[-1:] in DURATION_UNITS and given[1:-1].isdigit():
        return int(now) + int(given[1:-1]) * DURATION_UNITS[given[-1]]
    try:
        moment = datetime.fromisoformat(given)
    except ValueError:
        moment = None
    if moment is None or moment.tzinfo is None:
        raise ValueError(f"{text!r} is not a time: {COMPLETE_BY_HELP}")
    return int(moment.timestamp())


@dataclass
class State:
    """How far one submission went (saved after every step)."""

    key: str
    sha256: str
    bytes: int
    upload_id: str | None = None
    parts: list[str] = field(default_factory=list)  # part ids, in order
    part_bytes: int = 0  # the size of each part but the last
    file_id: str | None = None
    batch_id: str | None = None

    @classmethod
    def load(cls, path: Path) -> State | None:
        try:
            return cls(**json.loads(path.read_text()))
        except (OSError, ValueError, TypeError):
            return None

    def save(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary = path.with_suffix(".tmp")
        temporary.write_text(json.dumps(asdict(self)))
        temporary.replace(path)  # whole or not at all, whatever dies when


def state_dir() -> Path:
    given = os.environ.get("BATCHGW_CLI_STATE_DIR")
    if given:
        return Path(given)
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "batchgw"


def file_digest(path: Path) -> tuple[str, int]:
    digest = hashlib.sha256()
    size = 0
    with path.open("rb") as stream:
        while chunk := stream.read(1024 * 1024):
            digest.update(chunk)
            size += len(chunk)
    return digest.hexdigest(), size


def endpoint_of(path: Path) -> str:
    """The target the file's first request names (its ``url``)."""
    with path.open("rb") as stream:
        for raw in stream:
            if raw.strip():
                try:
                    url = json.loads(raw).get("url")
                except (ValueError, AttributeError):
                    url = None
                if url in ENDPOINTS:
                    return str(url)
                break
    raise CliError(
        "the file's first request names no endpoint (its 'url'): pass --endpoint", code="endpoint_unknown"
    )


def idempotency_key(api: Api, sha256: str, options: Options, endpoint: str) -> str:
    material = json.dumps(
        [
            api.base_url.rstrip("/"),
            hashlib.sha256(api.api_key.encode()).hexdigest(),
            sha256,
            endpoint,
            options.window,
            options.name,
            sorted(options.metadata.items()),
            # as given, so the same command finds its batch again (``+2h`` included); only when
            # given, so a submission without them keeps the key it always had
            *([options.priority, options.complete_by] if _scheduled(options) else []),
        ],
        separators=(",", ":"),
    )
    return "cli-" + hashlib.sha256(material.encode()).hexdigest()[:40]


def _scheduled(options: Options) -> bool:
    return options.priority is not None or options.complete_by is not None


def submit(
    api: Api, path: Path, options: Options, *, progress: Callable[[int, int], None] | None = None
) -> tuple[dict[str, Any], bool]:
    """The batch of ``path`` (its object), and whether this run asked for it (False: an
    earlier run of the same command had it already; a run that died after asking is
    answered the same batch again, through the Idempotency-Key)."""
    if not path.is_file():
        raise CliError(f"no such file: {path}", code="file_not_found")
    sha256, size = file_digest(path)
    endpoint = options.endpoint or endpoint_of(path)
    key = idempotency_key(api, sha256, options, endpoint)
    where = state_dir() / "submits" / f"{key}.json"
    state = State.load(where)
    if state is None or state.sha256 != sha256:
        state = State(key=key, sha256=sha256, bytes=size)
    if state.batch_id is not None:
        return api.json("GET", f"/batches/{state.batch_id}"), False
    if state.file_id is None:
        state.file_id = _upload(api, path, state, where, progress)
        state.save(where)
    elif progress is not None:
        progress(size, size)
    metadata = {**options.metadata, SUBMIT_KEY: key}
    if options.name:
        metadata.setdefault("name", options.name)
    body: dict[str, Any] = {
        "input_file_id": state.file_id,
        "endpoint": endpoint,
        "completion_window": options.window,
        **({"metadata": metadata} if metadata else {}),
    }
    if options.priority is not None:
        body["priority"] = options.priority
    if options.complete_by is not None:
        body["complete_by"] = complete_by_of(options.complete_by, time.time())
    try:
        batch = api.json("POST", "/batches", json=body, headers={"Idempotency-Key": key})
    except ApiFailure as exc:
        # The key made a batch of another upload of this file: its state was lost after
        # that batch was created. Find that batch; this run's upload is not needed.
        found = _made_by(api, key) if exc.code == "idempotency_key_reused" else None
        if found is None:
            raise
        api.call("DELETE", f"/files/{state.file_id}")
        batch = found
    state.batch_id = batch["id"]
    state.save(where)
    return batch, True


def _made_by(api: Api, key: str) -> dict[str, Any] | None:
    """The batch among the caller's newest that the submission ``key`` made."""
    for count, batch in enumerate(api.pages("/batches", {"limit": 100})):
        if (batch.get("metadata") or {}).get(SUBMIT_KEY) == key:
            return batch
        if count >= SEARCHED:
            return None
    return None


def part_bytes() -> int:
    return int(os.environ.get("BATCHGW_PART_BYTES") or PART_BYTES)


def _upload(
    api: Api, path: Path, state: State, where: Path, progress: Callable[[int, int], None] | None
) -> str:
    """The file's id once its bytes are stored: one POST for a file of one part, else the
    Uploads API, resumed from the parts the state holds."""
    if state.bytes <= part_bytes() and state.upload_id is None:
        data = path.read_bytes()
        made = api.json("POST", "/files", files={"file": (path.name, data)}, data={"purpose": "batch"})
        if progress is not None:
            progress(state.bytes, state.bytes)
        return str(made["id"])
    if state.upload_id is None:
        made = api.json(
            "POST",
            "/uploads",
            json={
                "filename": path.name,
                "purpose": "batch",
                "bytes": state.bytes,
                "mime_type": "application/jsonl",
            },
        )
        state.upload_id, state.parts, state.part_bytes = str(made["id"]), [], part_bytes()
        state.save(where)
    with path.open("rb") as stream:
        size = state.part_bytes or part_bytes()
        stream.seek(len(state.parts) * size)
        while True:
            if progress is not None:
                progress(min(len(state.parts) * size, state.bytes), state.bytes)
            chunk = stream.read(size)
            if not chunk:
                break
            try:
                part = api.json("POST", f"/uploads/{state.upload_id}/parts", files={"data": ("part", chunk)})
            except ApiFailure as exc:
                if exc.status in (404, 409):  # the upload expired or was cancelled: start again
                    state.upload_id, state.parts = None, []
                    state.save(where)
                    return _upload(api, path, state, where, progress)
                raise
            state.parts.append(str(part["id"]))
            state.save(where)
    done = api.json("POST", f"/uploads/{state.upload_id}/complete", json={"part_ids": state.parts})
    return str(done["file"]["id"])
