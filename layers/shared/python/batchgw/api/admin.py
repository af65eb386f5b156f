"""The operator's plane (administrators only): runtime settings, per-model caps and the
routes batch work may use.

Routes: ``GET /admin/config``, ``PATCH|DELETE /admin/config/{NAME}``,
``GET /admin/batch/models``, ``PATCH /admin/batch/models/{model_id}``,
``GET /admin/routing/provider-routes``,
``PATCH /admin/routing/provider-route-batch/{model_id}/{route_id}``,
``GET /admin/batch/jobs`` (every user's batches), ``GET /admin/batch/summary``,
``GET /admin/batch/jobs/{batch_id}/attempts`` (the request log); the interactive load
reports are ``api.interactive``'s. A change is stored
in the control table and applies in this process at once, in every other within
``BATCHGW_RUNTIME_REFRESH_SECONDS`` (see ``batchgw.live_config``).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import asdict, replace
from typing import Any

from batchgw import inputs
from batchgw.api import prompts
from batchgw.api.accounts import require_admin
from batchgw.api.batches import batches_of, list_every_batch, visible_batch
from batchgw.api.params import (
    ANSWER_LIMIT,
    Params,
    aware_time_ms,
    fitted_page,
    int_param,
    last,
    list_page,
    text_out_bytes,
)
from batchgw.api.results import index_after
from batchgw.config.catalog import ModelSpec, Route
from batchgw.deps import Deps
from batchgw.domain import codec, money
from batchgw.domain.attempts import AttemptEntry, log_key
from batchgw.domain.batch import BatchRecord, CountedBatch, Tally, is_flex, is_response
from batchgw.domain.decisions import not_run_error
from batchgw.domain.errors import BadRequest, NotFound
from batchgw.domain.fairness import held_by_batch
from batchgw.domain.principal import Principal
from batchgw.domain.request import RequestRecord
from batchgw.domain.results import result_line
from batchgw.domain.states import UNFINISHED_STATUSES, RequestStatus
from batchgw.storage.audit import ENTRY_ID
from batchgw.storage.reqlog import ENTRY_ID as LOG_ENTRY_ID
from batchgw.storage.reqlog import HOUR_SECONDS, SOURCES, HourCounts, Source
from batchgw.storage.reqlog import entry_id as log_entry_id

# --- runtime settings ---------------------------------------------------------------------------


# The largest cap a model may be given (DynamoDB numbers, and any real server, are far below
# what a client may write).
MAX_MODEL_CAP = 100_000


def list_config(deps: Deps, principal: Principal) -> dict[str, Any]:
    require_admin(principal)
    deps.live.refresh(force=True)
    return {"object": "list", "data": deps.live.describe()}


def set_config(deps: Deps, principal: Principal, name: str, body: Any) -> dict[str, Any]:
    require_admin(principal)
    if not isinstance(body, dict) or "value" not in body:
        raise BadRequest('Send {"value": ...}; DELETE resets a setting to its default.', param="value")
    if body["value"] is None:
        raise BadRequest("A setting's value cannot be null: DELETE resets it to its default.", param="value")
    return deps.live.set_setting(name, body["value"], by=principal.user_id, now=deps.clock())


def reset_config(deps: Deps, principal: Principal, name: str) -> dict[str, Any]:
    require_admin(principal)
    return deps.live.reset_setting(name, by=principal.user_id)


# --- per-model caps -----------------------------------------------------------------------------


def list_models(deps: Deps, principal: Principal) -> dict[str, Any]:
    """Each model: its cap and where it comes from, batch requests running now and queued,
    and whether its batch work is paused, and why."""
    require_admin(principal)
    deps.live.refresh(force=True)
    queued = _queued_per_model(deps)
    return {"object": "list", "data": [_model_object(deps, model, queued) for model in deps.catalog.models]}


def set_model(deps: Deps, principal: Principal, model_id: str, body: Any) -> dict[str, Any]:
    """``{"max_concurrency": n}`` caps a model (0 pauses its batch work); null takes the
    default (the models config's cap, else BATCH_MODEL_CONCURRENCY) again."""
    require_admin(principal)
    if model_id not in deps.catalog.models:
        raise NotFound(f"No model named '{model_id}'.", code="model_not_found")
    if not isinstance(body, dict) or set(body) != {"max_concurrency"}:
        raise BadRequest('Send {"max_concurrency": <n or null>}.', param="max_concurrency")
    cap = body["max_concurrency"]
    if cap is not None and (
        isinstance(cap, bool) or not isinstance(cap, int) or not 0 <= cap <= MAX_MODEL_CAP
    ):
        raise BadRequest(
            f"max_concurrency must be a whole number from 0 to {MAX_MODEL_CAP:,}, or null.",
            param="max_concurrency",
        )
    deps.live.set_model_cap(model_id, cap, by=principal.user_id, now=deps.clock())
    return _model_object(deps, model_id, _queued_per_model(deps))


def _model_object(deps: Deps, model: str, queued: dict[str, int]) -> dict[str, Any]:
    cap, source = deps.live.model_cap(model)
    now = deps.clock()
    slots = deps.slots.read(model)
    running = slots.running(now)
    paused: dict[str, Any] | None = None
    if not deps.settings.batch_enabled:
        paused = {"reason": "batch_disabled", "until": None}
    elif cap == 0:
        paused = {"reason": "max_concurrency_zero", "until": None}
    elif slots.paused_until > now:
        paused = {"reason": "upstream_unavailable", "until": int(slots.paused_until)}
    share = deps.shares.share(model)
    return {
        "id": model,
        "object": "batch.model",
        "max_concurrency": deps.live.overrides.caps.get(model),
        "effective_concurrency": cap,
        "concurrency_source": source,
        "running": running,
        "queued": max(0, queued.get(model, 0) - running),
        # Batches holding its slots, and batches waiting for one (``domain.fairness``).
        "batches_running": len(held_by_batch(slots.holders, now)),
        "batches_waiting": len(slots.waiting_now(now)),
        "paused": paused,
        # What batch work may use of the cap now, beside interactive traffic.
        "batch_share": {
            "slots": share.slots,
            "interactive_in_flight": share.interactive,
            "interactive_reserve": share.reserve,
            "interactive_headroom": share.headroom,
            "adaptive_limit": None if share.adaptive_limit is None else round(share.adaptive_limit, 2),
            "adaptive_reason": None
            if share.adaptive_limit is None
            else deps.shares.adaptive(model, read=False).why,
            "reason": share.why.value,
        },
        "provider_batch": _provider_batch(deps, model),
    }


def _provider_batch(deps: Deps, model: str) -> dict[str, Any] | None:
    """Where the model's batches may run on a provider's batch service: the route, the
    endpoints, and the batch price (None: nowhere, or only on routes an administrator forbade)."""
    spec = deps.catalog.models[model]
    forbidden = deps.live.forbidden_routes(model)
    endpoints = [e for e in spec.endpoints if spec.provider_batch_route(e, forbidden) is not None]
    route = spec.provider_batch_route(endpoints[0], forbidden) if endpoints else None
    price = None if route is None else spec.batch_price_on(route)
    if route is None or price is None:
        return None
    return {
        "route": route.id,
        "protocol": route.protocol,
        "batch_endpoints": endpoints,
        "batch_price": {
            "input_per_mtok": float(price.input_per_mtok),
            "output_per_mtok": float(price.output_per_mtok),
        },
    }


def every_batch(deps: Deps, statuses: Sequence[str] = ()) -> Iterator[BatchRecord]:
    """Every user's batches (of those statuses, if any are given), user by user."""
    for user in deps.accounts.users():
        yield from batches_of(deps, user.id, statuses)


def _queued_per_model(deps: Deps) -> dict[str, int]:
    """Requests not ended of every unfinished batch, by model (a batch of several models
    counts toward each), running ones included."""
    queued: dict[str, int] = {}
    for record in every_batch(deps, statuses=sorted(UNFINISHED_STATUSES)):
        counted = deps.batches.get(record.id)
        if counted is None:
            continue
        for model in record.models:
            queued[model] = queued.get(model, 0) + counted.unfinished_requests
    return queued


# --- batch-allowed routes -----------------------------------------------------------------------


def list_routes(deps: Deps, principal: Principal) -> dict[str, Any]:
    """Every route of every model, with whether batch work may use it, what it would be by
    its locality alone, and the administrator's choice (null: none)."""
    require_admin(principal)
    deps.live.refresh(force=True)
    return {
        "object": "list",
        "data": [
            _route_object(deps, spec, route) for spec in deps.catalog.models.values() for route in spec.routes
        ],
    }


def set_route(deps: Deps, principal: Principal, model_id: str, route_id: str, body: Any) -> dict[str, Any]:
    """``{"batch_allowed": true | false}`` allows or forbids batch work on a route; null lets
    it follow its locality again. A queued request whose model is left with no batch-allowed
    route fails ``batch_route_unavailable`` when its turn comes."""
    require_admin(principal)
    spec = deps.catalog.models.get(model_id)
    route = next((r for r in spec.routes if r.id == route_id), None) if spec is not None else None
    if spec is None or route is None:
        raise NotFound(f"No route '{route_id}' of model '{model_id}'.", code="route_not_found")
    if not isinstance(body, dict) or set(body) != {"batch_allowed"}:
        raise BadRequest('Send {"batch_allowed": true, false or null}.', param="batch_allowed")
    allowed = body["batch_allowed"]
    if allowed is not None and not isinstance(allowed, bool):
        raise BadRequest("batch_allowed must be true, false or null.", param="batch_allowed")
    if spec.embeddings_only:
        raise BadRequest(
            f"'{model_id}' is an embedding model: its routes follow their locality and have no "
            "per-route choice.",
            param="model_id",
            code="route_choice_not_supported",
        )
    deps.live.set_route_choice(model_id, route_id, allowed, by=principal.user_id, now=deps.clock())
    return _route_object(deps, spec, route)


def _route_object(deps: Deps, spec: ModelSpec, route: Route) -> dict[str, Any]:
    return {
        "object": "provider_route",
        "model_id": spec.id,
        "route_id": route.id,
        "protocol": route.protocol,
        "base_url": route.base_url,
        "deployment_type": route.deployment_type,
        "weight": route.weight,
        "enabled": route.enabled,
        "batch_allowed": deps.live.batch_allowed(spec, route),
        "batch_allowed_default": route.local,
        "batch_allowed_choice": deps.live.route_choice(spec, route),
    }


# --- the request log ----------------------------------------------------------------------------

_OUTCOMES = ("success", "failed", "retry", "queued")
_ATTEMPT_PREFIX = "att_"
ATTEMPT_KEY_DIGITS = 38  # an attempt's key is a number DynamoDB stores: 38 digits at most


def attempts(deps: Deps, principal: Principal, batch_id: str, params: Params) -> dict[str, Any]:
    """The batch's attempts, newest first: one per upstream call, filtered by ``model``,
    ``status`` (an HTTP status code, or success, failed, retry or queued) and ``start_time``
    (inclusive) / ``end_time`` (exclusive), unix seconds or ISO 8601 with a timezone."""
    require_admin(principal)
    visible_batch(deps, principal, batch_id)
    limit = int_param(params, "limit", default=100, low=1, high=1000)
    start_ms, end_ms = aware_time_ms(params, "start_time"), aware_time_ms(params, "end_time")
    if start_ms is not None and end_ms is not None and start_ms >= end_ms:
        raise BadRequest("'start_time' must be earlier than 'end_time'.", param="start_time")
    status = last(params, "status")
    outcome = status_code = None
    if status is not None and codec.decimal(status, most_digits=3) is not None:
        status_code = int(status)
    elif status is not None and status in _OUTCOMES:
        outcome = status
    elif status is not None:
        raise BadRequest(
            f"'status' must be an HTTP status code or one of {', '.join(_OUTCOMES)}.", param="status"
        )
    after = last(params, "after")
    before_key = None
    if after:
        before_key = (
            codec.decimal(after.removeprefix(_ATTEMPT_PREFIX), most_digits=ATTEMPT_KEY_DIGITS)
            if after.startswith(_ATTEMPT_PREFIX)
            else None
        )
        if before_key is None:
            raise BadRequest("'after' must be an attempt id from this list.", param="after")
    found, more = deps.reqlog.batch_attempts(
        batch_id,
        limit=limit,
        start_ms=start_ms,
        end_ms=end_ms,
        before_key=before_key,
        model=last(params, "model"),
        outcome=outcome,
        status_code=status_code,
    )
    return fitted_page([_attempt_object(key, entry) for key, entry in found], has_more=more)


def _attempt_object(key: int, entry: AttemptEntry) -> dict[str, Any]:
    return {
        "id": f"{_ATTEMPT_PREFIX}{key}",
        "object": "batch.attempt",
        "batch_id": entry.batch_id,
        "request_index": entry.index,
        "custom_id": entry.custom_id,
        "model": entry.model,
        "route": entry.route,
        "refused_routes": list(entry.refused_routes),
        "attempt": entry.attempt,
        "outcome": entry.outcome,
        "status_code": entry.status_code,
        "error_code": entry.error_code,
        "latency_ms": entry.latency_ms,
        "input_tokens": entry.input_tokens,
        "output_tokens": entry.output_tokens,
        "cost_usd": None if entry.cost_nano is None else money.usd_float(entry.cost_nano),
        "worker": entry.worker,
        "ended_at": entry.ended_at,
    }


# --- every user's batches ---------------------------------------------------------------------


def list_jobs(deps: Deps, principal: Principal, params: Params) -> dict[str, Any]:
    """Every user's batches (or ``user``'s), newest first, with the filters of
    ``GET /v1/batches``; each says whose it is."""
    require_admin(principal)
    user = last(params, "user")
    owners = [user] if user else [u.id for u in deps.accounts.users()]
    return list_every_batch(deps, principal, params, owners)


def summary(deps: Deps, principal: Principal, params: Params) -> dict[str, Any]:
    """Requests by outcome, known cost, unknown-cost attempts and tokens, per user (or only
    ``user``) and overall. ``failed`` includes the expired requests (as a batch's
    request_counts does); ``expired_unrun`` says how many of them never started."""
    require_admin(principal)
    wanted = last(params, "user")
    users = [u for u in deps.accounts.users() if wanted is None or u.id == wanted]
    rows = []
    everyone: list[CountedBatch] = []
    for user in users:
        counted = [c for r in batches_of(deps, user.id) if (c := deps.batches.get(r.id)) is not None]
        everyone += counted
        rows.append({"user_id": user.id, "user_name": user.name, "email": user.email, **_totals(counted)})
    return {"object": "batch.summary", "users": rows, "total": _totals(everyone)}


def _totals(batches: list[CountedBatch]) -> dict[str, Any]:
    """What ``batches`` add up to: their counters summed (``Tally.total``)."""
    total = Tally.total(batch.counts for batch in batches)
    return {
        "batches": len(batches),
        "requests": {
            "succeeded": total.completed,
            "failed": total.failed,
            "expired_unrun": total.expired,
            "cancelled": total.cancelled,
            "not_finished": sum(batch.unfinished_requests for batch in batches),
        },
        "cost_usd": money.usd_float(total.cost_nano),
        "cost_unknown_attempts": total.cost_unknown,
        "input_tokens": total.input_tokens,
        "output_tokens": total.output_tokens,
        # Of the input tokens, those read from a prompt cache, in the batches that record them;
        # a batch stored before they were recorded counts apart, never as zero.
        "cached_tokens": Tally.total(b.counts for b in batches if b.record.cache_recorded).cached_tokens,
        "cache_unrecorded_batches": sum(not b.record.cache_recorded for b in batches),
    }


# --- a batch's prompts, and the audit of who read them ------------------------------------------

# An entry larger than this shows its request and answer as a note (the page must fit Lambda's
# answer; the output file has them whole).
_PROMPT_ENTRY_MOST_BYTES = ANSWER_LIMIT // 4


def batch_requests(deps: Deps, principal: Principal, batch_id: str, params: Params) -> dict[str, Any]:
    """GET /admin/batch/jobs/{id}/requests: the batch's stored requests with their answers, a
    page at a time (``limit`` 1-100, 20; ``after``), in submission order. 403 where prompts are
    not kept (DB_STORE_FULL_CONTENT off). Each page read is audited against the batch's owner
    (``batch.requests.read``) before it is answered."""
    require_admin(principal)
    prompts.require_kept(deps)
    record = visible_batch(deps, principal, batch_id).record
    limit = int_param(params, "limit", default=20, low=1, high=100)
    after_index = index_after(record, params)
    wanted: list[tuple[int, str, str, Any]] = []
    for index, (custom_id, model, body) in enumerate(inputs.requests_of(deps, record)):
        if index <= after_index:
            continue
        wanted.append((index, custom_id, model, body))
        if len(wanted) > limit:
            break
    more = len(wanted) > limit
    wanted = wanted[:limit]
    stored: dict[int, RequestRecord] = {}
    if wanted and record.prepared:
        step, _ = deps.requests.results_step(record.id, after_index=after_index, limit=len(wanted))
        stored = {request.index: request for request in step}
    page = fitted_page(
        [_prompt_entry(deps, record, *entry, stored.get(entry[0])) for entry in wanted], has_more=more
    )
    if page["data"]:
        shown = page["data"]
        prompts.record_read(
            deps,
            principal,
            record.owner,
            target=record.id,
            detail=f"requests {shown[0]['custom_id']!r} to {shown[-1]['custom_id']!r} ({len(shown)})",
        )
    return page


def _prompt_entry(
    deps: Deps,
    record: BatchRecord,
    index: int,
    custom_id: str,
    model: str,
    body: Any,
    stored: RequestRecord | None,
) -> dict[str, Any]:
    """One request of a batch as Prompts shows it: what was sent, and what came back."""
    if stored is None:  # not written yet (or never: its batch failed first)
        request = RequestRecord(record.id, index, custom_id, model=model)
        if record.status.is_final:
            request = replace(request, status=RequestStatus.FAILED, error=not_run_error("batch_failed"))
        stored = request
    line = result_line(stored, deps.blobs.load_body(stored.response_packed, stored.response_ref))
    entry = {**line, "model": model, "status": stored.status.value, "request": {"body": body}}
    if text_out_bytes(codec.dumps(entry)) > _PROMPT_ENTRY_MOST_BYTES:
        note = {"too_large_to_show": True, "see": "the batch's output and error files"}
        entry = {**entry, "request": note, "response": None if line["response"] is None else note}
    return entry


def audit_log(deps: Deps, principal: Principal, params: Params) -> dict[str, Any]:
    """GET /admin/audit?user=: what administrators read of ``user``'s content, newest first
    (``limit`` 1-100, 20; ``after``: the last entry's id of the page before)."""
    require_admin(principal)
    user = last(params, "user")
    if not user:
        raise BadRequest("'user' is required: whose content was read.", param="user")
    limit = int_param(params, "limit", default=20, low=1, high=100)
    after = last(params, "after")
    if after is not None and not ENTRY_ID.fullmatch(after):
        raise BadRequest("'after' must be an entry id from this list.", param="after")
    entries, next_id = deps.audit.entries(user, limit=limit, before=after)
    data = [
        {"id": entry_id, "object": "audit.entry", **asdict(entry), "at": int(entry.at)}
        for entry_id, entry in entries
    ]
    return list_page(data, has_more=next_id is not None)


# --- the request log across batches, and request volume ---------------------------------------

LOOKBACK_SECONDS = 86400  # a list or count without a start_time looks back a day
MOST_LOOKBACK_SECONDS = 90 * 86400  # a start_time may reach back this far, no further


def request_log(deps: Deps, principal: Principal, params: Params) -> dict[str, Any]:
    """GET /admin/requests: every upstream call of ``source`` (``interactive``, the default, or
    ``batch``; ``batch_id``: one batch's), newest first, ended in [``start_time``, ``end_time``)
    (timezone-aware; a day back by default, at most 90 days), ``limit`` 1-1000 (100), ``after``."""
    require_admin(principal)
    source = _source(params)
    batch_id = last(params, "batch_id")
    if batch_id is not None and source != "batch":
        raise BadRequest("'batch_id' lists a batch's requests: use it with source=batch.", param="batch_id")
    limit = int_param(params, "limit", default=100, low=1, high=1000)
    start_ms, end_ms = _time_range(deps, params)
    after = last(params, "after")
    if after is not None and not LOG_ENTRY_ID.fullmatch(after):
        raise BadRequest("'after' must be a request id from this list.", param="after")
    if batch_id is not None:
        if deps.batches.get_record(batch_id) is None:  # a deferred request's id too (resp_, flex_)
            raise NotFound(f"No batch found with id '{batch_id}'.", code="batch_not_found")
        before_key = None if after is None else _batch_log_key(after)
        found, more = deps.reqlog.batch_attempts(
            batch_id, limit=limit, start_ms=start_ms, end_ms=end_ms, before_key=before_key
        )
        entries = [(log_entry_id(entry), entry) for _, entry in found]
    else:
        entries, more = deps.reqlog.page(source, start_ms=start_ms, end_ms=end_ms, before=after, limit=limit)
    data = [_request_object(entry_id, source, entry) for entry_id, entry in entries]
    return fitted_page(data, has_more=more)


def request_metrics(deps: Deps, principal: Principal, params: Params) -> dict[str, Any]:
    """GET /admin/request-metrics: request counts of ``source`` per ``interval`` (``hour``, the
    default, or ``day``, UTC) in [``start_time``, ``end_time``), every bar with the batch
    worker's requests in it (``batch_request_count``, ``batch_error_count``) whatever the
    source, and the window's totals. An error is a call that did not succeed."""
    require_admin(principal)
    source = _source(params)
    interval = last(params, "interval") or "hour"
    if interval not in _INTERVALS:
        raise BadRequest(f"'interval' must be one of {', '.join(_INTERVALS)}.", param="interval")
    step = _INTERVALS[interval]
    start_ms, end_ms = _time_range(deps, params)
    first = start_ms // 1000 // step * step
    hours = deps.reqlog.hours(first // HOUR_SECONDS, (end_ms - 1) // 1000 // HOUR_SECONDS)
    in_bar: dict[int, list[HourCounts]] = {}
    for hour, counted in hours.items():
        in_bar.setdefault((hour * HOUR_SECONDS - first) // step, []).append(counted)
    bars = []
    for number, bar_start in enumerate(range(first, (end_ms - 1) // 1000 + 1, step)):
        counts = in_bar.get(number, [])
        own = sum(c.batch if source == "batch" else c.interactive for c in counts)
        own_errors = sum(c.batch_errors if source == "batch" else c.interactive_errors for c in counts)
        bars.append(
            {
                "start_time": bar_start,
                "end_time": bar_start + step,
                "request_count": own,
                "error_count": own_errors,
                "batch_request_count": sum(c.batch for c in counts),
                "batch_error_count": sum(c.batch_errors for c in counts),
            }
        )
    return {
        "object": "request_metrics",
        "source": source,
        "interval": interval,
        "start_time": start_ms / 1000,
        "end_time": end_ms / 1000,
        "data": bars,
        "requests": sum(bar["request_count"] for bar in bars),
        "error_requests": sum(bar["error_count"] for bar in bars),
        "batch_requests": sum(bar["batch_request_count"] for bar in bars),
        "batch_error_requests": sum(bar["batch_error_count"] for bar in bars),
    }


_INTERVALS = {"hour": HOUR_SECONDS, "day": 24 * HOUR_SECONDS}


def _source(params: Params) -> Source:
    source = last(params, "source") or "interactive"
    if source not in SOURCES:
        raise BadRequest(f"'source' must be one of {', '.join(SOURCES)}.", param="source")
    return "batch" if source == "batch" else "interactive"


def _time_range(deps: Deps, params: Params) -> tuple[int, int]:
    """[start, end) in ms: ``end_time`` (just after now by default), ``start_time`` (a day
    before it by default, at most 90 days before now)."""
    now_ms = round(deps.clock() * 1000)
    end_ms = aware_time_ms(params, "end_time") or now_ms + 1  # what ended by now
    start_ms = aware_time_ms(params, "start_time")
    if start_ms is None:
        start_ms = end_ms - LOOKBACK_SECONDS * 1000
    if start_ms < now_ms - MOST_LOOKBACK_SECONDS * 1000:
        raise BadRequest("'start_time' reaches back at most 90 days.", param="start_time")
    if start_ms >= end_ms:
        raise BadRequest("'start_time' must be earlier than 'end_time'.", param="start_time")
    return start_ms, end_ms


def _batch_log_key(entry_id: str) -> int:
    """A batch's log key of the entry ``entry_id`` names (``storage.reqlog.entry_id``)."""
    parts = entry_id.split("#")
    index = codec.decimal(parts[2], most_digits=9) if len(parts) == 4 else None
    if index is None:
        raise BadRequest("'after' must be a request id from this list.", param="after")
    return log_key(int(parts[0]), int(index))


def _deferred_source(batch_id: str) -> str | None:
    return "background" if is_response(batch_id) else "flex" if is_flex(batch_id) else None


def _request_object(entry_id: str, source: Source, entry: AttemptEntry) -> dict[str, Any]:
    """A call of the request log. A background response's or a flex request's (each a batch
    of one request: ``batchgw.deferred``) is listed among the batch calls, its source
    ``background`` or ``flex``."""
    shown = _attempt_object(0, entry)
    return {
        **shown,
        "id": entry_id,
        "object": "request",
        "source": _deferred_source(entry.batch_id or "") or source,
        "user_id": entry.user_id,
        "batch_id": entry.batch_id or None,
        "request_index": entry.index if entry.batch_id else None,
    }
