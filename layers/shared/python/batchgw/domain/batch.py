"""A batch as stored: its record, its counters, and the keys that order and count it.

A batch is one record (``BatchRecord``) plus up to ``BATCH_COUNTER_SHARDS`` counter
shards: request ``i`` is counted in shard ``i % shards``, so the per-result counter
writes spread over several DynamoDB items. ``Counts`` is their sum.

Stored attribute names are short and fixed; they are mapped here, once, in
``from_item`` / ``to_item``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields, replace
from decimal import Decimal
from typing import Any, Literal, TypedDict

from batchgw.domain import codec
from batchgw.domain.money import usd
from batchgw.domain.states import BatchStatus

InputMethod = Literal["inline", "file"]

RECORD_SK = "meta"  # the sort key of a batch's record
SHARD_PREFIX = "ctr#"  # the sort keys of its counter shards


def shard_sk(shard: int) -> str:
    return f"{SHARD_PREFIX}{shard:02d}"


def shard_of_sk(sk: str) -> int:
    return int(sk.removeprefix(SHARD_PREFIX))


# The ``error`` codes of a batch that failed inside the gateway, its input not refused
# (``batch_failed``: as gateways before ``internal_error`` wrote it).
INTERNAL_FAILURES = frozenset({"internal_error", "batch_failed"})


def retries_whole_input(
    status: BatchStatus, *, prepared: bool, error: Mapping[str, Any] | None, refused: bool
) -> bool:
    """Whether a retry of this ended batch runs its whole input again: it failed inside the
    gateway (``INTERNAL_FAILURES``) before its requests were stored, while reading its input
    file say, so none of them ran, and its input is still good (no validation report and no
    whole-batch refusal, ``refused``: those are answered by fixing the input, not by running
    it again). A batch whose requests were stored retries those that did not succeed."""
    code = (error or {}).get("code")
    return status is BatchStatus.FAILED and not prepared and not refused and code in INTERNAL_FAILURES


def shard_totals(total: int, shards: int) -> list[int]:
    """How many requests each shard counts: request ``i`` belongs to shard ``i % shards``."""
    return [len(range(k, total, shards)) for k in range(shards)]


# A deferred single request (``batchgw.deferred``) is stored as a batch of one request: a
# background response's id starts ``resp_``, a flex request's ``flex_``. Its owner-index key
# starts ``r``, after every batch's (which start with digits), so a list of batches and a
# list of deferred requests are two ranges of one index.
RESPONSE_PREFIX = "resp_"
FLEX_PREFIX = "flex_"
RESPONSE_KEYS = "r"
KEYS_END = ":"  # just after the digits: the end of a range of owner-index keys


def is_response(record_id: str) -> bool:
    """Whether ``record_id`` names a background response, not a batch."""
    return record_id.startswith(RESPONSE_PREFIX)


def is_flex(record_id: str) -> bool:
    """Whether ``record_id`` names a flex request (served before every batch's requests)."""
    return record_id.startswith(FLEX_PREFIX)


# Where a batch of requests came from, as metrics and the request log tell them apart.
WorkSource = Literal["batch", "background", "flex"]


def work_source(record_id: str) -> WorkSource:
    """What ``record_id`` names: a batch, a background response or a flex request."""
    return "background" if is_response(record_id) else "flex" if is_flex(record_id) else "batch"


def created_key(created_ms: int, record_id: str) -> str:
    """Sort key of the owner indexes (milliseconds, so read backwards it is newest first)."""
    deferred = is_response(record_id) or is_flex(record_id)
    return f"{RESPONSE_KEYS if deferred else ''}{created_ms:015d}#{record_id}"


def created_bound(seconds: int, *, responses: bool = False) -> str:
    """The owner index's key at the start of second ``seconds`` (among responses' keys)."""
    return f"{RESPONSE_KEYS if responses else ''}{seconds * 1000:015d}#"


def backstop_ttl(*, now: float, expires_at: int | None, retention: float, reconcile: float) -> int:
    """When DynamoDB's TTL may remove a batch's record even if its workflow died: a day
    after its window and retention (without a window, two reconciles from now: each
    reconcile moves it on)."""
    end = expires_at if expires_at is not None else now + 2 * reconcile
    return int(end + retention + 86400)


# A batch's timestamps, as the batch object lists them (unix seconds, or None).
TIMESTAMPS = (
    "created_at",
    "in_progress_at",
    "expires_at",
    "finalizing_at",
    "completed_at",
    "failed_at",
    "expired_at",
    "cancelling_at",
    "cancelled_at",
    "results_expires_at",
)


@dataclass(frozen=True, slots=True)
class BatchRecord:
    """A batch's stored record (its counters live apart, in shards: see ``Counts``)."""

    id: str
    owner: str
    status: BatchStatus
    endpoint: str
    created_at: int
    created_key: str
    owner_role: str = "internal"
    key_id: str | None = None
    completion_window: str = "24h"
    expires_at: int | None = None  # None: no window (BATCH_COMPLETION_WINDOW_HOURS=0)
    metadata: dict[str, str] | None = None
    anthropic_version: str | None = None
    retention_seconds: int | None = None
    input_method: InputMethod = "inline"
    input_file_id: str | None = None
    # Its own copy of its input, in bytes as stored, counted in its owner's input-file bytes
    # until its record is deleted: while unfinished under its own entry (``input_until``
    # None), from its end at the latest until the hour of ``input_until``, set then
    # (``domain.usage``; a batch stored before this had it set at create). 0: not counted.
    input_bytes: int = 0
    input_until: int | None = None
    total: int = 0
    models: tuple[str, ...] = ()
    # Set by prepare: how many counter shards and chains the batch has.
    shards: int | None = None
    chains: int | None = None
    # How many of its requests (from index 0) prepare has written: its chains start once the
    # first are, and wait at this frontier for the rest. None: all of them (or not prepared).
    written: int | None = None
    # The lease of the prepare invocation writing its requests (``run.prepare_lease``): the
    # invocation's token, and until when it holds the lease.
    prep_owner: str | None = None
    prep_until: float | None = None
    shards_done: int = 0
    generation: int = 0  # of its chains: messages of an older generation are dropped
    reconciled_left: int | None = None  # requests left at the last reconcile (None: none yet)
    progress_at: float | None = None  # when a reconcile last saw requests end
    # The parked workflow's task token, while it waits for the batch's requests to end.
    task_token: str | None = None
    expiring: bool = False  # the window closed; requests still running finish
    cancel_swept: bool = False  # a cancel's unstarted requests were ended
    results_full: bool = False  # the batch's stored responses reached their limit
    # Its key or owner may no longer run it: no request starts, running ones finish, and it
    # ends failed (``error`` says why).
    owner_failed: bool = False
    # Why its owner's account holds it back, until when, and when it is checked again:
    # {"reason", "until", "check_at"} (see ``domain.spend``), or None while it runs.
    paused: dict[str, Any] | None = None
    final_status: BatchStatus | None = None  # where a finalizing batch ends
    errors: dict[str, Any] | None = None  # a failed file batch's validation report
    error: dict[str, Any] | None = None
    output_file_id: str | None = None
    error_file_id: str | None = None
    in_progress_at: int | None = None
    finalizing_at: int | None = None
    completed_at: int | None = None
    failed_at: int | None = None
    expired_at: int | None = None
    cancelling_at: int | None = None
    cancelled_at: int | None = None
    results_expires_at: int | None = None
    ttl: int | None = None  # when DynamoDB may remove the record (a backstop: see backstop_ttl)
    finalize_cursor: dict[str, Any] | None = None  # how far finalize wrote its result objects
    idempotency_key: str | None = None  # the Idempotency-Key it was created with, as stored
    # Its end is still to be announced to its owner's webhook (set with the final status,
    # cleared once the event is queued: a retried step queues it again, deduplicated).
    event_pending: bool = False
    ended_at: float | None = None  # when it reached its final status (to the millisecond)
    # Counted in its owner's usage (``storage.usage``): released when it ends, or is deleted
    # unfinished, in that same write.
    charged: bool = False
    # A retry's child batch names the batch whose unfinished requests it runs again; the
    # parent lists its children, oldest first (``api.retry``).
    parent_batch_id: str | None = None
    retry_batch_ids: tuple[str, ...] = ()
    reruns: int = 0  # times a request that failed for good runs again (``omg_retries``)
    # Its counters count cached input tokens (False: stored before they were recorded).
    cache_recorded: bool = False
    # Where it runs (``domain.modes``): as its creator asked (gateway, provider or auto),
    # where it was decided to run (None: not decided yet, a file batch before its input was
    # read; gateway), and why; a provider-run batch's batch price per model, fixed then
    # ({model: [input, output] dollars per million tokens}).
    mode_requested: str = "gateway"
    execution_mode: str | None = None
    mode_reason: str | None = None
    batch_prices: dict[str, list[str]] | None = None
    # What its owner (or an administrator) asked of its scheduling, changeable while it runs
    # (``validation.priority``): higher first, and the unix time it is wanted done by (None:
    # no wish beyond ``expires_at``). A batch stored before these read 0 and None.
    priority: int = 0
    complete_by: int | None = None
    # When the scheduler's estimate at create said it would end (``scheduling.forecast``; None:
    # no estimate): the batch object's ``estimated_completion_at`` until its own pace says.
    promised_at: int | None = None

    @property
    def on_provider(self) -> bool:
        """Whether its requests run on its provider's batch service, not on the gateway's chains."""
        return self.execution_mode == "provider"

    @property
    def prepared(self) -> bool:
        """Whether its counter shards and its first requests are written (the rest follow:
        ``written_count``)."""
        return self.shards is not None

    @property
    def written_count(self) -> int:
        """How many of its requests, from index 0, are stored (a chain claims none past them)."""
        if not self.prepared:
            return 0
        return self.total if self.written is None else min(self.written, self.total)

    @property
    def all_written(self) -> bool:
        return self.prepared and self.written_count >= self.total

    def prepare_held(self, now: float) -> bool:
        """Whether a prepare invocation holds the lease on its writes (it may still write)."""
        return self.prep_owner is not None and self.prep_until is not None and self.prep_until > now

    @property
    def shard_count(self) -> int:
        return self.shards or 1

    @property
    def all_shards_done(self) -> bool:
        return self.shards_done >= self.shard_count

    def window_closed(self, now: float) -> bool:
        return self.expires_at is not None and now >= self.expires_at

    @property
    def stopping(self) -> bool:
        """Cancelled, past its window or failed for its owner: no new request starts;
        running ones finish."""
        return self.status is BatchStatus.CANCELLING or self.expiring or self.owner_failed

    def paused_at(self, now: float) -> bool:
        """Paused, and not yet due to be checked again."""
        return self.paused is not None and float(self.paused.get("check_at") or 0) > now

    def shard_of(self, index: int) -> int:
        return index % self.shard_count

    def replace(self, **changes: Any) -> BatchRecord:
        return replace(self, **changes)

    @classmethod
    def from_item(cls, item: dict[str, Any]) -> BatchRecord:
        def num(name: str) -> int | None:
            value = item.get(name)
            return None if value is None else int(value)

        final = item.get("final_status")
        return cls(
            id=str(item["pk"]),
            owner=str(item["owner"]),
            status=BatchStatus(item["status"]),
            endpoint=str(item["endpoint"]),
            created_at=int(item["created_at"]),
            created_key=str(item["created_key"]),
            owner_role=str(item.get("owner_role", "internal")),
            key_id=item.get("key_id"),
            completion_window=str(item.get("completion_window", "24h")),
            expires_at=num("expires_at"),
            metadata=codec.plain(item.get("metadata")),
            anthropic_version=item.get("anthropic_version"),
            retention_seconds=num("retention_seconds"),
            input_method="file" if item.get("input_method") == "file" else "inline",
            input_file_id=item.get("input_file_id"),
            input_bytes=int(item.get("input_bytes", 0)),
            input_until=num("input_until"),
            total=int(item.get("total", 0)),
            models=tuple(item.get("models") or ()),
            shards=num("shards"),
            chains=num("chains"),
            written=num("written"),
            prep_owner=item.get("prep_owner"),
            prep_until=None if item.get("prep_until") is None else float(item["prep_until"]),
            shards_done=int(item.get("shards_done", 0)),
            generation=int(item.get("generation", 0)),
            reconciled_left=num("reconciled_left"),
            progress_at=None if item.get("progress_at") is None else float(item["progress_at"]),
            task_token=item.get("task_token"),
            expiring=bool(item.get("expiring")),
            cancel_swept=bool(item.get("cancel_swept")),
            results_full=bool(item.get("results_full")),
            owner_failed=bool(item.get("owner_failed")),
            paused=codec.plain(item.get("paused")),
            final_status=None if final is None else BatchStatus(final),
            errors=codec.plain(item.get("errors")),
            error=codec.plain(item.get("error")),
            output_file_id=item.get("output_file_id"),
            error_file_id=item.get("error_file_id"),
            **{name: num(name) for name in _LATER_TIMESTAMPS},
            ttl=num("ttl"),
            finalize_cursor=codec.plain(item.get("finalize_cursor")),
            idempotency_key=item.get("idempotency_key"),
            event_pending=bool(item.get("event_pending")),
            ended_at=None if item.get("ended_at") is None else float(item["ended_at"]),
            charged=bool(item.get("charged")),
            parent_batch_id=item.get("parent_batch_id"),
            retry_batch_ids=tuple(str(i) for i in item.get("retry_batch_ids") or ()),
            reruns=int(item.get("reruns", 0)),
            cache_recorded=bool(item.get("cache_recorded")),
            mode_requested=str(item.get("mode_requested", "gateway")),
            execution_mode=item.get("execution_mode"),
            mode_reason=item.get("mode_reason"),
            batch_prices=codec.plain(item.get("batch_prices")),
            priority=int(item.get("priority", 0)),
            complete_by=num("complete_by"),
            promised_at=num("promised_at"),
        )

    def to_item(self) -> dict[str, Any]:
        """The stored item (None, False and empty values are left out)."""
        item: dict[str, Any] = {"pk": self.id, "sk": RECORD_SK}
        for f in fields(self):
            if f.name == "id":
                continue
            value = getattr(self, f.name)
            if value is None or value is False or value == ():
                continue
            item[f.name] = list(value) if isinstance(value, tuple) else value
        return item


class ScheduleChange(TypedDict, total=False):
    """A change of a batch's scheduling fields: those given change (``complete_by`` None
    clears it), the others stay; with a new ``complete_by``, the estimate remade for it
    (``promised_at``), when there is one."""

    priority: int
    complete_by: int | None
    promised_at: int


_LATER_TIMESTAMPS = tuple(name for name in TIMESTAMPS if name not in ("created_at", "expires_at"))


# Counter names as stored in a shard (``Tally`` field -> attribute).
SHARD_COUNTERS = {
    "completed": "completed",
    "failed": "failed",
    "cancelled": "cancelled",
    "expired": "expired",
    "input_tokens": "in_tok",
    "output_tokens": "out_tok",
    "cached_tokens": "cache_tok",
    "cost_nano": "cost_nano",
    "cost_unknown": "cost_unknown",
    "stored_bytes": "stored_bytes",
}


@dataclass(frozen=True, slots=True)
class Tally:
    """What ended requests add to their shard's counters (one request's, or a sum)."""

    completed: int = 0
    failed: int = 0
    cancelled: int = 0
    expired: int = 0  # of ``failed``: requests that never started before the window closed
    input_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = 0  # of the input tokens: those the upstream read from a prompt cache
    cost_nano: int = 0
    cost_unknown: int = 0  # attempts whose cost is unknown (timed out, or lost with a worker)
    stored_bytes: int = 0  # packed bytes of the responses stored

    def counters(self, times: int = 1) -> dict[str, int]:
        """The non-zero counters, by stored name, for ``times`` such requests."""
        return {
            stored: getattr(self, name) * times
            for name, stored in SHARD_COUNTERS.items()
            if getattr(self, name)
        }

    @classmethod
    def from_item(cls, item: dict[str, Any]) -> Tally:
        return cls(**{name: int(item.get(stored, 0)) for name, stored in SHARD_COUNTERS.items()})

    @classmethod
    def total(cls, tallies: Iterable[Tally]) -> Tally:
        sums = dict.fromkeys(SHARD_COUNTERS, 0)
        for tally in tallies:
            for name in SHARD_COUNTERS:
                sums[name] += getattr(tally, name)
        return cls(**sums)


@dataclass(frozen=True, slots=True)
class ShardRecord:
    """One counter shard: what its requests added up to, and how many are left to end."""

    shard: int
    left: int = 0
    done: bool = False  # counted in the record's ``shards_done``
    tally: Tally = field(default_factory=Tally)

    @classmethod
    def from_item(cls, item: dict[str, Any]) -> ShardRecord:
        return cls(
            shard=shard_of_sk(str(item["sk"])),
            left=int(item.get("left", 0)),
            done=bool(item.get("done")),
            tally=Tally.from_item(item),
        )


@dataclass(frozen=True, slots=True)
class Counts(Tally):
    """A batch's counters, summed over its shards, with the requests left to end."""

    left: int = 0

    @property
    def cost_usd(self) -> Decimal:
        return usd(self.cost_nano)

    @property
    def cost_unknown_attempts(self) -> int:
        return self.cost_unknown

    @classmethod
    def of_shards(cls, shards: Iterable[ShardRecord]) -> Counts:
        shards = list(shards)
        total = Tally.total(shard.tally for shard in shards)
        return cls(
            **{name: getattr(total, name) for name in SHARD_COUNTERS}, left=sum(s.left for s in shards)
        )


@dataclass(frozen=True, slots=True)
class Eta:
    finishes_at: int
    per_minute: float  # requests ended per minute so far
    window_closes_first: bool  # the window closes before: its unstarted requests would expire


@dataclass(frozen=True, slots=True)
class CountedBatch:
    """A batch's record with its counters summed: everything the batch object shows."""

    record: BatchRecord
    counts: Counts = field(default_factory=Counts)

    def eta(self, now: float) -> Eta | None:
        """When a running batch should finish at its pace so far: the requests ended since it
        started running, over the time since. None before it runs, before any ended, or once
        it stopped running."""
        record, counts = self.record, self.counts
        done = counts.completed + counts.failed + counts.cancelled
        if record.status is not BatchStatus.IN_PROGRESS or record.in_progress_at is None or done == 0:
            return None
        elapsed = max(1.0, now - record.in_progress_at)
        per_second = done / elapsed
        finish = now + max(0, record.total - done) / per_second
        closes_first = record.expires_at is not None and not record.stopping and finish > record.expires_at
        return Eta(finishes_at=int(finish), per_minute=per_second * 60, window_closes_first=closes_first)

    @property
    def unfinished_requests(self) -> int:
        """Its requests that have not ended (all of them before its counters exist)."""
        counts = self.counts
        return max(0, self.record.total - counts.completed - counts.failed - counts.cancelled)
