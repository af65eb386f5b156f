"""What one user holds against their limits: unfinished batches and requests, and the bytes
of their input files, as counted in their usage record.

The record changes only in the transaction that makes the change it counts, under a
condition that keeps it within the limit, so two calls racing at a limit cannot both pass.
An unfinished batch's input copy is held under its own entry (``hb:<batch id>``); input files
are counted per expiry hour (``f<hour>``), and an hour that has passed is dropped by the next
write that finds it.

How batches' copies and expiring files are counted, and why: docs/design/ledger.md,
"From the code: domain/usage.py".
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Literal

from batchgw.domain import codec

FILE_BUCKET_SECONDS = 3600
BUCKET_PREFIX = "f"  # a bucket's attribute: f<hour>, hours since the epoch
HELD_PREFIX = "held:"  # a batch's attribute: held:<batch id>, the requests it charged
HELD_BYTES_PREFIX = "hb:"  # an unfinished batch's attribute: hb:<batch id>, its input copy's bytes


def held_attribute(batch_id: str) -> str:
    return f"{HELD_PREFIX}{batch_id}"


def held_bytes_attribute(batch_id: str) -> str:
    return f"{HELD_BYTES_PREFIX}{batch_id}"


def file_bucket(expires_at: int) -> int:
    """The expiry hour a file's bytes are kept in: the first hour boundary at or after it
    expires (once that has passed, the file has expired)."""
    return math.ceil(expires_at / FILE_BUCKET_SECONDS)


def bucket_attribute(bucket: int) -> str:
    return f"{BUCKET_PREFIX}{bucket}"


def current_hour(now: float) -> int:
    """The last hour boundary at or before ``now``: every bucket up to it has expired."""
    return math.floor(now / FILE_BUCKET_SECONDS)


@dataclass(frozen=True, slots=True)
class UsageLimits:
    """The limits a batch's charge is checked against."""

    max_batches: int  # BATCH_MAX_ACTIVE_PER_USER
    max_requests: int  # BATCH_MAX_QUEUED_REQUESTS_PER_USER
    max_file_bytes: int | None = None  # BATCH_FILES_MAX_TOTAL_MB_PER_USER, for a batch's input copy


@dataclass(frozen=True, slots=True)
class OverLimit:
    """A charge refused: which limit, and ``count``: the unfinished batches the user holds,
    or the unfinished requests or input-file bytes they would hold with the charge."""

    limit: Literal["batches", "requests", "file_bytes"]
    count: int


@dataclass(frozen=True, slots=True)
class Usage:
    """A user's usage record, as stored."""

    batches: int = 0  # unfinished batches
    requests: int = 0  # requests charged by unfinished batches (some may have ended)
    releases: int = 0  # batches released so far: a charge that read the record names it
    held: dict[str, int] = field(default_factory=dict)  # batch id -> the requests it charged
    # bytes of input files and copies, the expired hours not dropped yet included
    file_bytes: int = 0
    held_bytes: dict[str, int] = field(default_factory=dict)  # unfinished batch id -> its copy's bytes
    # An hour held, the earliest unless the retention was shortened since: when a drop is due.
    first_bucket: int | None = None
    buckets: dict[int, int] = field(default_factory=dict)  # expiry hour -> bytes

    def due_buckets(self, now: float) -> dict[int, int]:
        """The buckets whose hour has passed: every file in them has expired."""
        hour = current_hour(now)
        return {bucket: size for bucket, size in self.buckets.items() if bucket <= hour}

    def drop_due(self, now: float) -> bool:
        """Whether an hour is due to be dropped (or the record's next one to be named again)."""
        return bool(self.due_buckets(now)) or (
            self.first_bucket is not None and self.first_bucket <= current_hour(now)
        )

    def live_file_bytes(self, now: float) -> int:
        """Bytes of the input files that have not expired (up to the hour)."""
        return self.file_bytes - sum(self.due_buckets(now).values())

    @classmethod
    def from_item(cls, item: dict[str, Any] | None) -> Usage:
        if item is None:
            return cls()
        first = item.get("fnext")
        return cls(
            batches=int(item.get("batches", 0)),
            requests=int(item.get("requests", 0)),
            releases=int(item.get("v", 0)),
            held={
                name[len(HELD_PREFIX) :]: int(value)
                for name, value in item.items()
                if name.startswith(HELD_PREFIX)
            },
            file_bytes=int(item.get("fbytes", 0)),
            held_bytes={
                name[len(HELD_BYTES_PREFIX) :]: int(value)
                for name, value in item.items()
                if name.startswith(HELD_BYTES_PREFIX)
            },
            first_bucket=None if first is None else int(first),
            buckets={
                int(name[len(BUCKET_PREFIX) :]): int(value)
                for name, value in item.items()
                if name.startswith(BUCKET_PREFIX) and codec.decimal(name[len(BUCKET_PREFIX) :]) is not None
            },
        )
