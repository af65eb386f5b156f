"""A batch's results as lines: read by the results pages, the export and result files."""

from __future__ import annotations

import hashlib
import json
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import IO, Any

from batchgw import codec
from batchgw.deps import Deps
from batchgw.records import ITEM_SUCCEEDED, result_line


def response_body(deps: Deps, item: dict[str, Any]) -> Any:
    if "res" in item:
        return codec.unpack(item["res"])
    if "res_ref" in item:
        return codec.unpack(deps.blobs.get(str(item["res_ref"])))
    return None


def all_items(deps: Deps, batch_id: str) -> Iterator[dict[str, Any]]:
    """Every item of the batch in submission order, a page at a time."""
    after = -1
    while True:
        items, more = deps.items.page(batch_id, after_idx=after, limit=500)
        yield from items
        if not more or not items:
            return
        after = int(items[-1]["idx"])


def line_bytes(line: dict[str, Any]) -> bytes:
    """One JSONL line, byte for byte the same whenever the same result is written."""
    return json.dumps(line, separators=(",", ":"), ensure_ascii=False).encode() + b"\n"


def file_line(batch_id: str, item: dict[str, Any], body: Any) -> dict[str, Any]:
    """The spec's line shape (``id``, ``custom_id``, ``response``, ``error``)."""
    line = result_line(batch_id, item, body)
    del line["status"]
    return line


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


def split_results(deps: Deps, batch_id: str) -> tuple[SpooledFile, SpooledFile]:
    """(successes, everything else) as two spooled JSONL files, in submission order."""
    output, errors = SpooledFile(), SpooledFile()
    for item in all_items(deps, batch_id):
        data = line_bytes(file_line(batch_id, item, response_body(deps, item)))
        (output if item["status"] == ITEM_SUCCEEDED else errors).write(data)
    return output, errors
