"""The files a file batch ends with: its output file (the successes) and its error file
(everything else), in submission order, in the spec's JSONL line shape.

Each file's id is fixed by its batch, so a retried finalize writes the same files; a file
already written (or deleted since) is not written again.
"""

from __future__ import annotations

import hashlib
import tempfile
from dataclasses import dataclass, field
from typing import IO, Any

from batchgw.deps import Deps
from batchgw.domain.batch import BatchRecord, created_key
from batchgw.domain.files import FileRecord, file_key
from batchgw.domain.results import file_line, line_bytes
from batchgw.domain.states import RequestStatus


def result_file_id(batch_id: str, kind: str) -> str:
    return "file-" + hashlib.sha256(f"{batch_id}/{kind}".encode()).hexdigest()[:32]


@dataclass
class SpooledFile:
    """A result file being written: bytes on disk, their size and SHA-256 on the way."""

    stream: IO[bytes] = field(default_factory=lambda: tempfile.TemporaryFile())  # noqa: SIM115
    size: int = 0
    digest: Any = field(default_factory=hashlib.sha256)

    def write(self, data: bytes) -> None:
        self.stream.write(data)
        self.size += len(data)
        self.digest.update(data)

    def rewind(self) -> IO[bytes]:
        self.stream.seek(0)
        return self.stream


def write_result_files(deps: Deps, batch: BatchRecord) -> dict[str, Any]:
    """Write the batch's output and error files; each id is null when its file would be empty."""
    output, errors = SpooledFile(), SpooledFile()
    for request in deps.requests.all(batch.id):
        body = deps.blobs.load_body(request.response_packed, request.response_ref)
        data = line_bytes(file_line(request, body))
        (output if request.status is RequestStatus.SUCCEEDED else errors).write(data)
    ids: dict[str, Any] = {}
    for field_name, kind, spooled in (
        ("output_file_id", "output", output),
        ("error_file_id", "error", errors),
    ):
        if spooled.size == 0:
            ids[field_name] = None
            continue
        file_id = result_file_id(batch.id, kind)
        _store(deps, batch, file_id, f"{batch.id}_{kind}.jsonl", spooled)
        ids[field_name] = file_id
    return ids


def _store(deps: Deps, batch: BatchRecord, file_id: str, filename: str, spooled: SpooledFile) -> None:
    if deps.files.get(file_id) is not None:
        return  # written by an earlier try, or deleted by its owner since
    deps.blobs.put_stream(file_key(file_id), spooled.rewind())
    now = deps.clock()
    expires_at = batch.results_expires_at
    deps.files.create(
        FileRecord(
            id=file_id,
            owner=batch.owner,
            bytes=spooled.size,
            created_at=int(now),
            created_key=created_key(int(now * 1000), file_id),
            filename=filename,
            purpose="batch_output",
            expires_at=expires_at,
            sha256=spooled.digest.hexdigest(),
            ttl=None if expires_at is None else expires_at + 86400,
        )
    )
