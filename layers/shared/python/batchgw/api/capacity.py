"""When a batch would end (``scheduling.forecast``), as the API answers it.

- ``GET /v1/batches/capacity?model=M&requests=N``: for each model (or the one named), the
  batch slots a new batch of the caller's would hold now, the model's recent pace, the
  requests queued on it (and the caller's own among them), and ``earliest_completion_at`` for
  ``N`` more requests (null: no estimate, the model has no recent answer or is paused);
- ``promised_at``: the estimate a create stores on its batch (the batch object's
  ``estimated_completion_at`` until its own pace says better), and the 422
  ``deadline_infeasible`` of a create whose ``complete_by`` comes before it, nothing stored;
- ``rescheduled``: the same 422 for a ``PATCH`` whose ``complete_by`` comes before a running
  batch's estimate, nothing changed.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from batchgw.api.params import Params, int_param, last
from batchgw.deps import Deps
from batchgw.domain.batch import CountedBatch, ScheduleChange
from batchgw.domain.errors import BY_FORECAST_LEFT, BY_OWN_PACE, BadRequest, DeadlineInfeasible
from batchgw.domain.principal import Principal
from batchgw.domain.states import BatchStatus
from batchgw.validation.priority import Scheduling

if TYPE_CHECKING:
    from batchgw.domain.shares import Promise
    from batchgw.scheduling.forecast import Outlook, Reading

# ``capacity``'s batch when the call names no ``requests``.
DEFAULT_REQUESTS = 1
# The id of ``capacity``'s batch: it sorts after every batch id, as a batch created now would.
NEW_BATCH = "~new"


def capacity(deps: Deps, principal: Principal, params: Params) -> dict[str, Any]:
    """``GET /v1/batches/capacity``: the outlook of each model the caller may use, or of
    ``?model=``, for a batch of ``?requests=`` (1 by default) created now."""
    from batchgw.scheduling.forecast import forecast, new_claim, slots_now

    requests = int_param(
        params, "requests", default=DEFAULT_REQUESTS, low=1, high=deps.settings.batch_max_requests
    )
    named = last(params, "model")
    if named is not None:
        try:
            models = [deps.catalog.resolve(named, principal.role).id]
        except BadRequest as exc:
            raise BadRequest(exc.message, code=exc.code, param="model") from exc
    else:
        models = sorted(m for m in deps.catalog.models if _may_use(deps, principal, m))
    read = _read(deps)
    weight = read.weight(principal.user_id)
    data = []
    for model in models:
        seen = read.outlook(model)
        claim = new_claim(
            NEW_BATCH, principal.user_id, requests, now=read.now, by_tenant=read.by_tenant, weight=weight
        )
        made = forecast(seen, claim, now=read.now, tuning=deps.tuning)
        data.append(_capacity_object(principal, seen, requests, slots_now(seen, claim), made))
    return {"object": "list", "data": data}


def _capacity_object(
    principal: Principal, seen: Outlook, requests: int, slots: int, made: Promise | None
) -> dict[str, Any]:
    pace = seen.requests_per_second
    return {
        "object": "batch.capacity",
        "model": seen.model,
        "requests": requests,
        "batch_slots": slots,  # what the new batch would hold now, beside the batches queued
        "model_batch_slots": seen.slots,  # the model's batch share now, beside interactive traffic
        "requests_per_second": None if pace is None else round(pace, 3),
        "queued_requests": seen.queued,
        "own_queued_requests": seen.queued_of(principal.user_id),
        "earliest_completion_at": None if made is None else math.ceil(made.estimated_completion_at),
    }


def promised_at(
    deps: Deps,
    principal: Principal,
    batch_id: str,
    requests: Mapping[str, int],
    scheduling: Scheduling,
) -> int | None:
    """When a batch of ``requests`` per model, created now, would end (None: no estimate).
    A ``complete_by`` before it is a 422 ``deadline_infeasible`` naming the earliest time."""
    earliest = estimate(deps, principal, requests, scheduling=scheduling, batch_id=batch_id)
    if earliest is not None and scheduling.complete_by is not None and earliest > scheduling.complete_by:
        raise DeadlineInfeasible(complete_by=scheduling.complete_by, earliest=earliest)
    return earliest


def estimate(
    deps: Deps,
    principal: Principal,
    requests: Mapping[str, int],
    *,
    scheduling: Scheduling | None = None,
    batch_id: str = "",
) -> int | None:
    """When a batch of ``requests`` per model, created now with ``scheduling``, would end:
    its last model's end (None: no requests, or a model without an estimate)."""
    if not requests:
        return None
    # Loaded on the first estimate, not with the handler (the api's cold start).
    from batchgw.scheduling.forecast import last_end, new_claim

    scheduling = scheduling or Scheduling()
    read = _read(deps)
    weight = read.weight(principal.user_id)
    claims = (
        (
            model,
            new_claim(
                batch_id,
                principal.user_id,
                count,
                now=read.now,
                by_tenant=read.by_tenant,
                priority=scheduling.priority,
                complete_by=None if scheduling.complete_by is None else float(scheduling.complete_by),
                weight=weight,
            ),
        )
        for model, count in sorted(requests.items())
    )
    return last_end(read, claims)


def rescheduled(deps: Deps, batch: CountedBatch, change: ScheduleChange) -> ScheduleChange:
    """The change a ``PATCH`` writes: one that sets a ``complete_by`` before the batch's
    estimate is a 422 ``deadline_infeasible`` naming it (nothing written, its priority
    neither).

    The estimate is the batch object's once requests ended: its own pace (which a priority
    changed in the same call has not had time to move). Before that, its unfinished requests
    are forecast now under the new scheduling, fresher than its create's promise: the change
    stores that estimate as the new one. A priority alone, a ``complete_by`` cleared, or a
    batch without an estimate (no recent answer on its model, a batch stopping or run by a
    provider, a file not read yet) takes no check: its window stays the hard limit."""
    complete_by = change.get("complete_by")
    record = batch.record
    running = record.status in (BatchStatus.VALIDATING, BatchStatus.IN_PROGRESS) and not record.stopping
    if complete_by is None or not running or record.on_provider:
        return change
    eta = batch.eta(deps.clock())
    if eta is not None:
        if eta.finishes_at > complete_by:
            raise _unchanged(complete_by, eta.finishes_at, BY_OWN_PACE)
        return change
    from batchgw.scheduling.forecast import stored_end

    read = _read(deps)
    # Its counters do not split its requests by model: each of its models is taken to hold
    # all of them, as the forecast counts the batch for the batches after it (``claim_of``).
    earliest = stored_end(
        read,
        record,
        {model: batch.unfinished_requests for model in record.models},
        priority=change.get("priority", record.priority),
        complete_by=complete_by,
        weight=read.weight(record.owner),
    )
    if earliest is None:
        return change
    if earliest > complete_by:
        raise _unchanged(complete_by, earliest, BY_FORECAST_LEFT)
    return {**change, "promised_at": earliest}


def _unchanged(complete_by: int, earliest: int, basis: str) -> DeadlineInfeasible:
    return DeadlineInfeasible(
        complete_by=complete_by, earliest=earliest, basis=basis, outcome="Nothing was changed."
    )


def _read(deps: Deps) -> Reading:
    """What one answer reads once, whatever models it asks about."""
    from batchgw.scheduling.forecast import Stores, reading
    from batchgw.scheduling.share import BatchShares

    # One share read for the answer, apart from the process's own (a worker's, where one
    # process runs both).
    shares = BatchShares(deps.live, deps.interactive, deps.limits, deps.clock, tuning=deps.tuning)
    return reading(
        Stores(deps.slots, deps.batches, deps.reqlog, shares, deps.accounts),
        by_tenant=deps.settings.batch_tenant_shares,
        now=deps.clock(),
        tuning=deps.tuning,
    )


def _may_use(deps: Deps, principal: Principal, model: str) -> bool:
    try:
        deps.catalog.resolve(model, principal.role)
    except BadRequest:
        return False
    return True
