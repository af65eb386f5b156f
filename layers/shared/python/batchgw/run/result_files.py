"""What a batch ends with in S3: ``output.jsonl`` (every result, for every batch) and, for a
file batch, its output file (the successes) and error file (everything else), each in
submission order, in the spec's JSONL line shape.

They are written once, at finalize, straight to S3 as multipart uploads, part by part
(never through the function's disk), with the bodies kept in S3 fetched concurrently. A
finalize that runs out of time saves a cursor in the batch's record (per object: its
upload, its parts, the first request not yet in an uploaded part) and the next one goes
on from there; so does a finalize that died. An object that fits one part is one PUT.

A result file's id is fixed by its batch, so a retried finalize writes the same files; a
file already recorded (or deleted since) is not written again. Its ``sha256`` is the
SHA-256 of its bytes when it is one part; a file written in N parts has, as S3 names its
composite checksums, the SHA-256 of its parts' SHA-256s followed by ``-N`` (each part's
digest is kept in the control table as the part is written, so nothing is read back).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from typing import Any, Literal

from batchgw.deps import Deps
from batchgw.domain.batch import BatchRecord, created_key
from batchgw.domain.files import FileRecord, file_key, result_file_id
from batchgw.domain.request import RequestRecord
from batchgw.domain.results import file_line, line_bytes
from batchgw.domain.states import RequestStatus
from batchgw.observability import logger
from batchgw.storage.blobs import export_key

Kind = Literal["export", "output", "error"]
PAGE = 500  # requests read per query
BODY_FETCHERS = 16  # bodies read from S3 at once
PARTS_PER_DOUBLING = 1000  # part sizes double every this many parts (S3 takes 10,000 at most)
FILE_FIELDS = {"output": "output_file_id", "error": "error_file_id"}


@dataclass
class Target:
    """One object being written; what of it is saved in the cursor."""

    kind: Kind
    upload_id: str | None = None
    parts: int = 0
    next_index: int = 0  # the first request whose line is not in an uploaded part yet
    bytes: int = 0  # in uploaded parts
    sha256: str | None = None  # once done
    done: bool = False

    @classmethod
    def from_cursor(cls, kind: Kind, saved: dict[str, Any] | None) -> Target:
        return cls(kind, **saved) if saved else cls(kind)

    def takes(self, request: RequestRecord, file_batch: bool) -> bool:
        if self.kind == "export":
            return True
        succeeded = request.status is RequestStatus.SUCCEEDED
        return file_batch and (succeeded if self.kind == "output" else not succeeded)


class ResultWriter:
    def __init__(self, deps: Deps, batch: BatchRecord) -> None:
        self.deps = deps
        self.batch = batch
        self.file_batch = batch.input_method == "file"
        saved = batch.finalize_cursor or {}
        kinds: list[Kind] = ["export", "output", "error"] if self.file_batch else ["export"]
        self.targets = {kind: Target.from_cursor(kind, saved.get(kind)) for kind in kinds}
        self.buffers: dict[Kind, bytearray] = {kind: bytearray() for kind in kinds}
        for kind in ("output", "error"):
            # A result file recorded already (or deleted by its owner since) is not written again.
            if kind in self.targets and deps.files.get(result_file_id(batch.id, kind)) is not None:
                self.targets[kind].done = True

    def key(self, kind: Kind) -> str:
        return (
            export_key(self.batch.id) if kind == "export" else file_key(result_file_id(self.batch.id, kind))
        )

    def part_bytes(self, target: Target) -> int:
        return self.deps.settings.batch_result_part_bytes * 2 ** (target.parts // PARTS_PER_DOUBLING)

    def write(self, deadline: float | None) -> dict[str, Any] | None:
        """Write (or go on writing) every object: the batch's result file ids once done, or
        None when ``deadline`` came first (the cursor is saved: call again)."""
        pending = [t for t in self.targets.values() if not t.done]
        if pending:
            start = min(t.next_index for t in pending)
            for requests in self._pages(start):
                for request, body in requests:
                    self._add(request, body)
                if deadline is not None and self.deps.clock() >= deadline:
                    self._save()
                    parts = {kind: target.parts for kind, target in self.targets.items()}
                    logger.info("finalize paused", extra={"batch_id": self.batch.id, "parts": parts})
                    return None
            for target in pending:
                self._finish(target)
        return {FILE_FIELDS[kind]: self._file(kind) for kind in ("output", "error") if kind in self.targets}

    def _pages(self, start: int) -> Iterator[list[tuple[RequestRecord, Any]]]:
        """The requests from ``start`` on, a page at a time, with their response bodies."""
        blobs = self.deps.blobs
        after = start - 1
        with ThreadPoolExecutor(BODY_FETCHERS) as pool:
            while True:
                requests, more = self.deps.requests.page(self.batch.id, after_index=after, limit=PAGE)
                bodies = pool.map(lambda r: blobs.load_body(r.response_packed, r.response_ref), requests)
                yield list(zip(requests, bodies, strict=True))
                if not more or not requests:
                    return
                after = requests[-1].index

    def _add(self, request: RequestRecord, body: Any) -> None:
        line: bytes | None = None
        for target in self.targets.values():
            if target.done or request.index < target.next_index or not target.takes(request, self.file_batch):
                continue
            line = line or line_bytes(file_line(request, body))
            buffer = self.buffers[target.kind]
            buffer += line
            if len(buffer) >= self.part_bytes(target):
                self._upload_part(target, through=request.index)

    def _upload_part(self, target: Target, *, through: int) -> None:
        key = self.key(target.kind)
        if target.upload_id is None:
            target.upload_id = self.deps.blobs.start_multipart(key, "application/jsonl")
        self._part(target, bytes(self.buffers[target.kind]))
        self.buffers[target.kind].clear()
        target.next_index = through + 1
        self._save()

    def _part(self, target: Target, data: bytes) -> None:
        assert target.upload_id is not None
        key = self.key(target.kind)
        target.parts += 1
        self.deps.blobs.upload_part(key, target.upload_id, target.parts, data)
        self.deps.control.put(
            {
                "pk": f"parts#{key}",
                "sk": f"part{target.parts:05d}",
                "sha256": hashlib.sha256(data).hexdigest(),
                "ttl": int(self.deps.clock()) + 30 * 86400,
            }
        )
        target.bytes += len(data)

    def _finish(self, target: Target) -> None:
        blobs, key, rest = self.deps.blobs, self.key(target.kind), bytes(self.buffers[target.kind])
        if target.upload_id is None:
            if rest or target.kind == "export":
                blobs.put(key, rest, "application/jsonl")
            target.bytes, target.sha256 = len(rest), hashlib.sha256(rest).hexdigest()
        else:
            if rest:
                self._part(target, rest)
            blobs.complete_multipart(key, target.upload_id)
            parts = self.deps.control.query(f"parts#{key}", "part")[: target.parts]
            composite = hashlib.sha256(b"".join(bytes.fromhex(str(p["sha256"])) for p in parts))
            target.sha256 = f"{composite.hexdigest()}-{target.parts}"
        target.done = True
        self._save()

    def _file(self, kind: Kind) -> str | None:
        """Record a result file written now (or find it recorded); None when it is empty."""
        file_id = result_file_id(self.batch.id, kind)
        if self.deps.files.get(file_id) is not None:
            return file_id
        target = self.targets[kind]
        if not target.bytes:
            return None
        now = self.deps.clock()
        expires_at = self.batch.results_expires_at
        self.deps.files.create(
            FileRecord(
                id=file_id,
                owner=self.batch.owner,
                bytes=target.bytes,
                created_at=int(now),
                created_key=created_key(int(now * 1000), file_id),
                filename=f"{self.batch.id}_{kind}.jsonl",
                purpose="batch_output",
                expires_at=expires_at,
                sha256=target.sha256,
                ttl=None if expires_at is None else expires_at + 86400,
            )
        )
        return file_id

    def _save(self) -> None:
        cursor: dict[str, Any] = {
            kind: {k: v for k, v in asdict(t).items() if k != "kind"} for kind, t in self.targets.items()
        }
        self.deps.batches.save_finalize_cursor(self.batch.id, cursor)


def write_results(deps: Deps, batch: BatchRecord, deadline: float | None = None) -> dict[str, Any] | None:
    """Write the batch's result objects (see the module's docstring); the result file ids
    once done, None when ``deadline`` came first."""
    return ResultWriter(deps, batch).write(deadline)
