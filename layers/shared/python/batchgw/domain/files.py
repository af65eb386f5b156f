"""Files: uploaded batch inputs and result files, as stored."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any, Literal

FilePurpose = Literal["batch", "batch_output"]
ResultKind = Literal["output", "error"]
RESULT_KINDS: tuple[ResultKind, ...] = ("output", "error")

# Where a deleted file's record keeps its ``created_key``: without it, the record is out of
# the owner index (see ``storage.files.FileStore.mark_deleted``).
UNLISTED_KEY = "unlisted_key"


def file_key(file_id: str) -> str:
    """Where a file's bytes live in the data bucket."""
    return f"files/{file_id}"


def result_file_id(batch_id: str, kind: str) -> str:
    """The id of a batch's output or error file: known before it is written, so a batch
    deleted while it finalizes can tombstone it first (it is then never written)."""
    return "file-" + hashlib.sha256(f"{batch_id}/{kind}".encode()).hexdigest()[:32]


def incoming_key(file_id: str) -> str:
    """Where a presigned upload puts a file's bytes, until the file is completed (then they
    are copied to ``file_key``: the URL can no longer change what the gateway reads)."""
    return f"incoming/{file_id}"


@dataclass(frozen=True, slots=True)
class FileRecord:
    id: str
    owner: str
    bytes: int
    created_at: int
    created_key: str
    filename: str
    purpose: str
    expires_at: int | None = None
    sha256: str | None = None  # None while a presigned upload has not been completed
    pending: bool = False  # declared for a presigned upload, not completed yet
    deleted: bool = False  # a tombstone: a result file once deleted is never written again
    ttl: int | None = None
    counted: bool = False  # its bytes count in its owner's usage (``storage.usage``)

    def visible(self, now: float) -> bool:
        """Whether it can be read: completed, not deleted, not expired."""
        return not self.pending and not self.deleted and not self.expired(now)

    def expired(self, now: float) -> bool:
        return self.expires_at is not None and self.expires_at <= now

    @classmethod
    def from_item(cls, item: dict[str, Any]) -> FileRecord:
        expires = item.get("expires_at")
        ttl = item.get("ttl")
        return cls(
            id=str(item["pk"]),
            owner=str(item["owner"]),
            bytes=int(item["bytes"]),
            created_at=int(item["created_at"]),
            created_key=str(item["created_key"] if "created_key" in item else item[UNLISTED_KEY]),
            filename=str(item["filename"]),
            purpose=str(item["purpose"]),
            expires_at=None if expires is None else int(expires),
            sha256=item.get("sha256"),
            pending=bool(item.get("pending")),
            deleted=bool(item.get("deleted")),
            ttl=None if ttl is None else int(ttl),
            counted=bool(item.get("counted")),
        )

    def to_item(self) -> dict[str, Any]:
        item = {
            "pk": self.id,
            "owner": self.owner,
            "bytes": self.bytes,
            "created_at": self.created_at,
            "created_key": self.created_key,
            "filename": self.filename,
            "purpose": self.purpose,
            "expires_at": self.expires_at,
            "sha256": self.sha256,
            "pending": self.pending or None,
            "deleted": self.deleted or None,
            "ttl": self.ttl,
            "counted": self.counted or None,
        }
        return {k: v for k, v in item.items() if v is not None}
