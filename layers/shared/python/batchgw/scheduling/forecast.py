"""When a batch would end: a model's capacity as a new batch finds it, and the promise made
from it (``domain.shares.promise``).

A model's ``Outlook`` is read from the store, as any environment sees it: its batch slots now
(``share``: the cap beside the interactive load and the adaptive limit), its recent pace (the
mean length of its batch answers in the request log across batches, plus a chain's gap
between an answer and its next call), and the batches with work on it (those holding or
waiting for its slots in the slot map, each with its requests not ended). Its batches share
the slots as the workers share them: per tenant when ``BATCH_TENANT_SHARES`` is on, else an
even share per batch (each batch its own tenant).

The estimate assumes what it reads lasts: interactive traffic that grows, a batch that
arrives later ahead of this one, or retries lengthen it. Without a recent answer on the model,
or with its batch work paused, there is no estimate (None).

A ``Reading`` is what one answer reads once (the request log's pace above all), whatever
models it asks about; ``last_end`` is a batch's end over its models, ``stored_end`` that of
a batch already stored (a ``PATCH`` of a running one; a file batch once its file is read,
its requests known only then).
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from batchgw.domain.fairness import held_by_batch
from batchgw.domain.shares import Claim, Promise, allocate, promise
from batchgw.scheduling.tuning import TUNING, Tuning

if TYPE_CHECKING:  # the stores are the caller's (``Deps``): nothing here builds or imports one
    from batchgw.domain.batch import BatchRecord, CountedBatch
    from batchgw.scheduling.share import BatchShares
    from batchgw.storage.accounts import AccountStore
    from batchgw.storage.batches import BatchStore
    from batchgw.storage.reqlog import RequestLog
    from batchgw.storage.slots import SlotStore


@dataclass(frozen=True)
class Outlook:
    """A model's batch capacity now: ``slots`` batch slots, each ending a request every
    ``request_seconds`` (None: no recent answer to tell), shared with the batches ``ahead``
    (whose owners ``owners`` names, by batch)."""

    model: str
    slots: int
    request_seconds: float | None
    ahead: tuple[Claim, ...]
    owners: Mapping[str, str] = field(default_factory=dict)

    @property
    def requests_per_second(self) -> float | None:
        """The model's batch pace with every slot busy (None: unknown)."""
        if self.request_seconds is None:
            return None
        return self.slots / self.request_seconds

    @property
    def queued(self) -> int:
        """The requests not ended of the batches ahead."""
        return sum(claim.demand for claim in self.ahead)

    def queued_of(self, owner: str) -> int:
        """The requests not ended of ``owner``'s batches ahead."""
        return sum(claim.demand for claim in self.ahead if self.owners.get(claim.batch_id) == owner)


@dataclass(frozen=True)
class Stores:
    """What an outlook reads (``Deps`` holds each)."""

    slots: SlotStore
    batches: BatchStore
    reqlog: RequestLog
    shares: BatchShares
    accounts: AccountStore


def call_lengths(reqlog: RequestLog, now: float, tuning: Tuning = TUNING) -> dict[str, float]:
    """Each model's mean batch answer length of the recent stretch, in seconds (one read of
    the request log across batches; a model without a recent answer is left out)."""
    start_ms = int((now - tuning.pace_window_seconds) * 1000)
    end_ms = int(now * 1000) + 1
    entries, _ = reqlog.page("batch", start_ms=start_ms, end_ms=end_ms, before=None, limit=tuning.pace_sample)
    sums: dict[str, list[float]] = {}
    for _, entry in entries:
        if entry.outcome == "success":
            total = sums.setdefault(entry.model, [0.0, 0.0])
            total[0] += entry.latency_ms / 1000
            total[1] += 1
    return {model: seconds / count for model, (seconds, count) in sums.items()}


def outlook(
    stores: Stores,
    model: str,
    *,
    lengths: Mapping[str, float],
    by_tenant: bool,
    now: float,
    tuning: Tuning = TUNING,
) -> Outlook:
    """``model``'s outlook, its pace taken from ``lengths`` (``call_lengths``)."""
    state = stores.slots.read(model)
    active = set(held_by_batch(state.holders, now)) | set(state.waiting_now(now))
    active.discard("")
    batches = [found for found in (stores.batches.get(batch_id) for batch_id in sorted(active)) if found]
    weights = _weights(stores.accounts, {batch.record.owner for batch in batches}) if by_tenant else {}
    ahead = tuple(
        claim_of(batch, weight=weights.get(batch.record.owner, 1.0), by_tenant=by_tenant)
        for batch in batches
        if batch.unfinished_requests > 0
    )
    length = lengths.get(model)
    slots = stores.shares.share(model).slots
    owners = {batch.record.id: batch.record.owner for batch in batches}
    return Outlook(model, slots, None if length is None else length + tuning.call_gap_seconds, ahead, owners)


def claim_of(batch: CountedBatch, *, weight: float, by_tenant: bool) -> Claim:
    """A stored batch's claim on its model: its requests not ended, its owner's share (or,
    with tenant shares off, a share of its own)."""
    record = batch.record
    return Claim(
        batch_id=record.id,
        tenant=record.owner if by_tenant else record.id,
        demand=batch.unfinished_requests,
        created_at=float(record.created_at),
        priority=record.priority,
        complete_by=None if record.complete_by is None else float(record.complete_by),
        weight=weight,
    )


def new_claim(
    batch_id: str,
    owner: str,
    requests: int,
    *,
    now: float,
    by_tenant: bool,
    priority: int = 0,
    complete_by: float | None = None,
    weight: float = 1.0,
) -> Claim:
    """The claim a batch created now would make."""
    return Claim(
        batch_id=batch_id,
        tenant=owner if by_tenant else batch_id,
        demand=requests,
        created_at=now,
        priority=priority,
        complete_by=complete_by,
        weight=weight,
    )


def forecast(seen: Outlook, claim: Claim, *, now: float, tuning: Tuning = TUNING) -> Promise | None:
    """When ``claim``'s batch would end on ``seen``'s model (None: no estimate)."""
    if seen.request_seconds is None or seen.slots <= 0:
        return None
    others = [other for other in seen.ahead if other.batch_id != claim.batch_id]
    made = promise(
        now + tuning.first_call_seconds, claim, others, slots=seen.slots, request_seconds=seen.request_seconds
    )
    return None if math.isinf(made.estimated_completion_at) else made


def slots_now(seen: Outlook, claim: Claim) -> int:
    """The batch slots ``claim``'s batch would hold now, beside the batches ahead."""
    others = [other for other in seen.ahead if other.batch_id != claim.batch_id]
    return allocate(seen.slots, [*others, claim]).get(claim.batch_id, 0) if seen.slots > 0 else 0


@dataclass(frozen=True)
class Reading:
    """What one answer reads once, whatever models it asks about: each model's recent call
    length (``call_lengths``), whether tenants share the slots (``BATCH_TENANT_SHARES``) and
    the time; the slot maps are read per model (``outlook``)."""

    stores: Stores
    lengths: Mapping[str, float]
    by_tenant: bool
    now: float
    tuning: Tuning = TUNING

    def outlook(self, model: str) -> Outlook:
        lengths = self.lengths
        if model not in lengths:  # no pace as last read: a first batch's answers may have come since
            lengths = _lengths(self.stores.reqlog, self.now, self.tuning, fresh=True)
        return outlook(
            self.stores,
            model,
            lengths=lengths,
            by_tenant=self.by_tenant,
            now=self.now,
            tuning=self.tuning,
        )

    def weight(self, owner: str) -> float:
        """``owner``'s weight among tenants (1 while tenants do not share: it weighs nothing)."""
        return _weights(self.stores.accounts, [owner])[owner] if self.by_tenant else 1.0


def reading(stores: Stores, *, by_tenant: bool, now: float, tuning: Tuning = TUNING) -> Reading:
    """What one answer reads once; the call lengths as this process last read them from
    ``stores.reqlog`` when that was within ``Tuning.pace_read_seconds``."""
    return Reading(stores, _lengths(stores.reqlog, now, tuning, fresh=False), by_tenant, now, tuning)


def _lengths(reqlog: RequestLog, now: float, tuning: Tuning, *, fresh: bool) -> dict[str, float]:
    """The call lengths as this process last read them, if within ``Tuning.pace_read_seconds``
    (``fresh``: only if read at ``now``, by the same answer); else read again."""
    last = _lengths_read.get(reqlog)
    age = None if last is None else now - last[0]
    if last is None or age is None or not 0 <= age < (1e-9 if fresh else tuning.pace_read_seconds):
        last = (now, call_lengths(reqlog, now, tuning))
        _lengths_read[reqlog] = last
    return last[1]


# Each request log's call lengths, and when they were read (``reading``).
_lengths_read: weakref.WeakKeyDictionary[RequestLog, tuple[float, dict[str, float]]] = (
    weakref.WeakKeyDictionary()
)


def last_end(read: Reading, claims: Iterable[tuple[str, Claim]]) -> int | None:
    """When the last of a batch's ``claims`` (each on its model) would end, in whole seconds
    (None: no claim, or a model without an estimate, so the batch has none)."""
    ends: list[float] = []
    for model, claim in claims:
        made = forecast(read.outlook(model), claim, now=read.now, tuning=read.tuning)
        if made is None:
            return None
        ends.append(made.estimated_completion_at)
    return math.ceil(max(ends)) if ends else None


def stored_end(
    read: Reading,
    record: BatchRecord,
    requests: Mapping[str, int],
    *,
    priority: int,
    complete_by: int | None,
    weight: float,
) -> int | None:
    """When a stored batch's ``requests`` (per model: those not ended) would end with
    ``priority`` and ``complete_by``, the batch keeping its place in creation order."""
    claims = (
        (
            model,
            Claim(
                batch_id=record.id,
                tenant=record.owner if read.by_tenant else record.id,
                demand=count,
                created_at=float(record.created_at),
                priority=priority,
                complete_by=None if complete_by is None else float(complete_by),
                weight=weight,
            ),
        )
        for model, count in sorted(requests.items())
        if count > 0
    )
    return last_end(read, claims)


def _weights(accounts: AccountStore, owners: Iterable[str]) -> dict[str, float]:
    weights: dict[str, float] = {}
    for owner in owners:
        user = accounts.user(owner)
        weights[owner] = 1.0 if user is None else float(user.weight)
    return weights
