"""Stored records (what DynamoDB holds) and their conversion to the API's objects.

A batch is one ``meta`` item plus counter shards; each request is one item. The API
shapes live in ``batchgw.api_objects``; this module is the explicit bridge.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from batchgw import codec

# Batch statuses (the spec's).
VALIDATING = "validating"
IN_PROGRESS = "in_progress"
FINALIZING = "finalizing"
COMPLETED = "completed"
FAILED = "failed"
EXPIRED = "expired"
CANCELLING = "cancelling"
CANCELLED = "cancelled"
FINAL_STATUSES = frozenset({COMPLETED, FAILED, EXPIRED, CANCELLED})
UNFINISHED_STATUSES = frozenset({VALIDATING, IN_PROGRESS, FINALIZING, CANCELLING})
ALL_STATUSES = FINAL_STATUSES | UNFINISHED_STATUSES

# Item (request) states. Terminal ones are counted exactly once, in the batch's shards.
ITEM_QUEUED = "queued"
ITEM_RUNNING = "running"
ITEM_RETRY = "retry_wait"
ITEM_SUCCEEDED = "succeeded"
ITEM_FAILED = "failed"
ITEM_CANCELLED = "cancelled"
ITEM_EXPIRED = "expired"
ITEM_TERMINAL = frozenset({ITEM_SUCCEEDED, ITEM_FAILED, ITEM_CANCELLED, ITEM_EXPIRED})

META_SK = "meta"
SHARD_PREFIX = "ctr#"


def shard_sk(k: int) -> str:
    return f"{SHARD_PREFIX}{k:02d}"


def created_key(created_ms: int, batch_id: str) -> str:
    """Sort key of the owner index (milliseconds, so read backwards it is newest first)."""
    return f"{created_ms:015d}#{batch_id}"


def created_bound(seconds: int) -> str:
    """The owner index's key at the start of second ``seconds``."""
    return f"{seconds * 1000:015d}#"


def item_id(batch_id: str, idx: int) -> str:
    return f"batch_req_{batch_id.removeprefix('batch_')}_{idx}"


def item_index(batch_id: str, request_id: str) -> int | None:
    """The position an item id names within ``batch_id``, or None if it is not one of its."""
    prefix = f"batch_req_{batch_id.removeprefix('batch_')}_"
    if not request_id.startswith(prefix):
        return None
    tail = request_id[len(prefix) :]
    return int(tail) if tail.isdigit() else None


def shard_totals(total: int, shards: int) -> list[int]:
    """How many items each shard counts: item ``i`` belongs to shard ``i % shards``."""
    return [len(range(k, total, shards)) for k in range(shards)]


@dataclass
class Counts:
    """A batch's counters, summed over its shards."""

    completed: int = 0
    failed: int = 0
    cancelled: int = 0
    left: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: Decimal = Decimal(0)
    cost_unknown_attempts: int = 0

    def add_shard(self, shard: dict[str, Any]) -> None:
        self.completed += int(shard.get("completed", 0))
        self.failed += int(shard.get("failed", 0))
        self.cancelled += int(shard.get("cancelled", 0))
        self.left += int(shard.get("left", 0))
        self.input_tokens += int(shard.get("in_tok", 0))
        self.output_tokens += int(shard.get("out_tok", 0))
        self.cost_usd += Decimal(int(shard.get("cost_nano", 0))) / 1_000_000_000
        self.cost_unknown_attempts += int(shard.get("cost_unknown", 0))


@dataclass
class Job:
    """A batch as stored: its meta item and the sum of its counter shards."""

    meta: dict[str, Any]
    counts: Counts = field(default_factory=Counts)

    @property
    def id(self) -> str:
        return str(self.meta["pk"])

    @property
    def owner(self) -> str:
        return str(self.meta["owner"])

    @property
    def status(self) -> str:
        return str(self.meta["status"])

    @property
    def total(self) -> int:
        return int(self.meta["total"])

    @property
    def expires_at(self) -> int | None:
        value = self.meta.get("expires_at")
        return None if value is None else int(value)

    @property
    def shards(self) -> int:
        return int(self.meta.get("shards", 1))

    @property
    def chains(self) -> int:
        return int(self.meta.get("chains", 1))

    def to_api(self) -> dict[str, Any]:
        """The batch object, with every field the spec lists."""
        m = self.meta
        c = self.counts

        def ts(name: str) -> int | None:
            value = m.get(name)
            return None if value is None else int(value)

        cost = float(c.cost_usd)
        usage = {
            "input_tokens": c.input_tokens,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": c.output_tokens,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": c.input_tokens + c.output_tokens,
        }
        return {
            "id": self.id,
            "object": "batch",
            "endpoint": m["endpoint"],
            "errors": codec.plain(m.get("errors")),
            "input_file_id": m.get("input_file_id"),
            "completion_window": m.get("completion_window", "24h"),
            "status": self.status,
            "output_file_id": m.get("output_file_id"),
            "error_file_id": m.get("error_file_id"),
            "created_at": ts("created_at"),
            "in_progress_at": ts("in_progress_at"),
            "expires_at": ts("expires_at"),
            "finalizing_at": ts("finalizing_at"),
            "completed_at": ts("completed_at"),
            "failed_at": ts("failed_at"),
            "expired_at": ts("expired_at"),
            "cancelling_at": ts("cancelling_at"),
            "cancelled_at": ts("cancelled_at"),
            "request_counts": {"total": self.total, "completed": c.completed, "failed": c.failed},
            "metadata": codec.plain(m.get("metadata")),
            "usage": usage,
            "anthropic_version": m.get("anthropic_version"),
            "cost_usd": round(cost, 10) if math.isfinite(cost) else 0.0,
            "cost_unknown_attempts": c.cost_unknown_attempts,
            "results_expires_at": ts("results_expires_at"),
            "error": codec.plain(m.get("error")),
        }


# What a request's result reads as, by item state.
_RESULT_STATUS = {
    ITEM_QUEUED: "queued",
    ITEM_RETRY: "queued",
    ITEM_RUNNING: "in_progress",
    ITEM_SUCCEEDED: "completed",
    ITEM_FAILED: "failed",
    ITEM_CANCELLED: "cancelled",
    ITEM_EXPIRED: "expired",
}


def result_line(batch_id: str, item: dict[str, Any], response_body: Any) -> dict[str, Any]:
    """One result in the spec's line shape, with its status (the results page adds it)."""
    state = str(item["status"])
    response = None
    if state == ITEM_SUCCEEDED:
        response = {
            "status_code": int(item.get("status_code", 200)),
            "request_id": item.get("request_id"),
            "body": response_body,
        }
    error = None
    if state != ITEM_SUCCEEDED and item.get("error") is not None:
        raw = codec.plain(item["error"])  # a fixed key order, whatever order the store returns
        error = {"code": raw.get("code"), "message": raw.get("message"), "status": raw.get("status")}
    return {
        "id": item_id(batch_id, int(item["idx"])),
        "custom_id": item["custom_id"],
        "status": _RESULT_STATUS.get(state, state),
        "response": response,
        "error": error,
    }
