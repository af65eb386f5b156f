"""When a batch would end (``scheduling.forecast``), as the API answers it.

- ``GET /v1/batches/capacity?model=M&requests=N``: for each model (or the one named), the
  batch slots a new batch of the caller's would hold now, the model's recent pace, the
  requests queued on it (and the caller's own among them), and ``earliest_completion_at`` for
  ``N`` more requests (null: no estimate, the model has no recent answer or is paused);
- ``promised_at``: the estimate a create stores on its batch (the batch object's
  ``estimated_completion_at`` until its own pace says better), and the 422
  ``deadline_infeasible`` of a create whose ``complete_by`` comes before it, nothing stored.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from batchgw.api.params import Params, int_param, last
from batchgw.deps import Deps
from batchgw.domain.errors import BadRequest, DeadlineInfeasible
from batchgw.domain.principal import Principal
from batchgw.validation.priority import Scheduling

if TYPE_CHECKING:
    from batchgw.domain.shares import Promise
    from batchgw.scheduling.forecast import Outlook, Stores

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
    read = _read(deps, principal)
    data = []
    for model in models:
        seen = _outlook(deps, read, model)
        claim = new_claim(
            NEW_BATCH, principal.user_id, requests, now=read.now, by_tenant=read.by_tenant, weight=read.weight
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
    from batchgw.scheduling.forecast import forecast, new_claim

    scheduling = scheduling or Scheduling()
    read = _read(deps, principal)
    ends: list[float] = []
    for model, count in sorted(requests.items()):
        claim = new_claim(
            batch_id,
            principal.user_id,
            count,
            now=read.now,
            by_tenant=read.by_tenant,
            priority=scheduling.priority,
            complete_by=None if scheduling.complete_by is None else float(scheduling.complete_by),
            weight=read.weight,
        )
        made = forecast(_outlook(deps, read, model), claim, now=read.now, tuning=deps.tuning)
        if made is None:
            return None  # one model without an estimate: the batch has none
        ends.append(made.estimated_completion_at)
    return math.ceil(max(ends))


@dataclass(frozen=True)
class _Read:
    """What one answer reads once, whatever models it asks about."""

    stores: Stores
    lengths: Mapping[str, float]  # each model's recent call length
    by_tenant: bool  # BATCH_TENANT_SHARES
    weight: float  # the caller's among tenants
    now: float


def _read(deps: Deps, principal: Principal) -> _Read:
    from batchgw.scheduling.forecast import Stores, call_lengths
    from batchgw.scheduling.share import BatchShares

    now = deps.clock()
    # One share read for the answer, apart from the process's own (a worker's, where one
    # process runs both).
    shares = BatchShares(deps.live, deps.interactive, deps.limits, deps.clock, tuning=deps.tuning)
    by_tenant = deps.settings.batch_tenant_shares
    return _Read(
        stores=Stores(deps.slots, deps.batches, deps.reqlog, shares, deps.accounts),
        lengths=call_lengths(deps.reqlog, now, deps.tuning),
        by_tenant=by_tenant,
        weight=_weight(deps, principal) if by_tenant else 1.0,
        now=now,
    )


def _outlook(deps: Deps, read: _Read, model: str) -> Outlook:
    from batchgw.scheduling.forecast import outlook

    return outlook(
        read.stores, model, lengths=read.lengths, by_tenant=read.by_tenant, now=read.now, tuning=deps.tuning
    )


def _weight(deps: Deps, principal: Principal) -> float:
    user = deps.accounts.user(principal.user_id)
    return 1.0 if user is None else float(user.weight)


def _may_use(deps: Deps, principal: Principal, model: str) -> bool:
    try:
        deps.catalog.resolve(model, principal.role)
    except BadRequest:
        return False
    return True
