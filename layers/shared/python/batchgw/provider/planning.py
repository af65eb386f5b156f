"""Planning a provider-run batch's parts (``domain.provider.Planner``) and the money they
hold: the plan's one pass over the batch's requests reserves the most they could cost at
the batch price (``storage.spend.reserve_provider``), or fails the batch before any of it is
sent; once every part ended, the parts that run its failed requests again.
"""

from __future__ import annotations

from typing import Any

from batchgw.config.catalog import price_of
from batchgw.deps import Deps
from batchgw.domain.batch import BatchRecord
from batchgw.domain.provider import Part, Planner
from batchgw.domain.request import RequestRecord
from batchgw.domain.spend import most_cost, over_budget_message
from batchgw.domain.states import RequestStatus
from batchgw.observability import logger
from batchgw.provider.parts import is_stopping
from batchgw.storage.spend import Payer, reserve_provider, room_after_holds


def plan(deps: Deps, batch: BatchRecord) -> list[Part] | dict[str, Any]:
    """The batch's parts, in one pass over its requests; or, when they could cost more at
    the batch price than its owner's quotas and budget leave, the error the batch fails with
    before any of it is sent (``budget_exceeded``: a file batch's requests are known only
    now; an inline one's create checked them already)."""
    planner = Planner(_routes(deps, batch), max_lines=deps.settings.batch_provider_max_lines)
    payer, now = Payer(batch.owner, batch.key_id), deps.clock()
    stores = (deps.accounts, deps.spend, deps.user_slots, deps.batches)
    # what is left counts the provider batches accepted besides this one (created together)
    room = room_after_holds(*stores, payer, now, besides=batch.id).room
    most = 0
    for request in deps.requests.all(batch.id):
        planner.add(request.index, request.model, len(request.request_packed or b"") or 1024)
        if room is not None and most <= room:
            most += _most_cost_of(deps, batch, request)
    if room is not None:
        # held until its lines are charged or it ends, so the next one's plan counts it
        _, short = reserve_provider(*stores, payer, batch.id, most, now) if most <= room else (False, room)
        if short is not None:
            return {"code": "budget_exceeded", "message": over_budget_message(most, short)}
    return planner.done(batch.total)


def _most_cost_of(deps: Deps, batch: BatchRecord, request: RequestRecord) -> int:
    price = price_of(batch.batch_prices, request.model)
    spec = deps.catalog.models.get(request.model)
    if price is None or spec is None:
        return 0  # run at no price of ours: nothing to reserve
    body = deps.blobs.load_body(request.request_packed, request.request_ref)
    return most_cost([(price.cost_nano, body, spec.max_output_tokens)], batch.endpoint)


def planned_reruns(deps: Deps, batch: BatchRecord, first: int) -> bool:
    """Once every part ended: parts for the requests that failed and run again
    (``omg_retries``: they wait, due at once), unless the batch stops; whether any."""
    fresh = deps.batches.get_record(batch.id)
    if fresh is None or is_stopping(fresh, deps.clock()):
        return False
    waiting = [r for r in deps.requests.unfinished(batch.id) if r.status is RequestStatus.RETRY_WAIT]
    if not waiting:
        return False
    planner = Planner(
        _routes(deps, batch), max_lines=deps.settings.batch_provider_max_lines, first=first, rerun=True
    )
    for request in sorted(waiting, key=lambda r: r.index):
        planner.add(request.index, request.model, 1024)
    deps.provider_parts.add(batch.id, planner.done(batch.total))
    logger.info(
        "provider batch runs failed requests again", extra={"batch_id": batch.id, "requests": len(waiting)}
    )
    return True


def _routes(deps: Deps, batch: BatchRecord) -> dict[str, tuple[str, str]]:
    routes: dict[str, tuple[str, str]] = {}
    for model in batch.models:
        spec = deps.catalog.models[model]
        # An allowed route, else the forbidden one: its parts take nothing (``promises.forbidden``).
        route = spec.provider_batch_route(
            batch.endpoint, deps.live.forbidden_routes(model)
        ) or spec.provider_batch_route(batch.endpoint)
        if route is None:
            raise ValueError(f"{batch.id}: model {model!r} has no provider batch route any more")
        routes[model] = (route.id, route.protocol)
    return routes
