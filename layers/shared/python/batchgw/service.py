"""The batch API's rules: create, read, list, results. Handlers call these and nothing else.

Every read checks the caller: another user's batch reads as not found (an admin may read
any). Create stores the request and starts the workflow; it never calls a model.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from batchgw import codec
from batchgw.auth import Principal, hash_key
from batchgw.blobs import export_key, input_file_key, input_key
from batchgw.catalog import ENDPOINTS
from batchgw.deps import Deps
from batchgw.errors import (
    BadRequest,
    Conflict,
    Forbidden,
    NotFound,
    PayloadTooLarge,
    ServiceUnavailable,
    StorageError,
    TooManyRequests,
    Unauthorized,
)
from batchgw.files import file_key, visible_file
from batchgw.records import (
    ALL_STATUSES,
    CANCELLING,
    FINAL_STATUSES,
    IN_PROGRESS,
    UNFINISHED_STATUSES,
    VALIDATING,
    Job,
    created_key,
    item_index,
    result_line,
)
from batchgw.results import all_items, file_line, line_bytes, response_body
from batchgw.validation.create import check_anthropic_version, check_metadata, validate_create
from batchgw.validation.jsonbody import parse_json

# A results page or download answered inline stays under Lambda's 6 MB response limit.
PAGE_BYTE_CAP = 5 * 1024 * 1024
OWNER_INDEX = "by_owner"
_KEY_CACHE_SECONDS = 30.0


@dataclass(frozen=True)
class Download:
    """A file answer: bytes inline, or a redirect to a presigned URL when too large."""

    body: bytes | None = None
    location: str | None = None
    content_type: str = "application/jsonl"


# --- auth --------------------------------------------------------------------------------

_key_cache: dict[str, tuple[float, Principal | None]] = {}


def authenticate(deps: Deps, authorization: str | None) -> Principal:
    """The principal behind ``Authorization: Bearer <key>``; 401 when missing or unknown."""
    if not authorization or not authorization.lower().startswith("bearer "):
        raise Unauthorized("Missing API key: send 'Authorization: Bearer <key>'.", code="invalid_api_key")
    digest = hash_key(authorization[7:].strip())
    now = deps.clock()
    cached = _key_cache.get(digest)
    if cached is None or cached[0] < now:
        record = deps.keys.get(digest)
        principal = None
        if record is not None and not record.get("revoked"):
            principal = Principal(
                user_id=str(record["user_id"]),
                role=str(record["role"]),
                key_id=str(record.get("key_id", digest[:16])),
            )
        cached = (now + _KEY_CACHE_SECONDS, principal)
        _key_cache[digest] = cached
    if cached[1] is None:
        raise Unauthorized("Invalid API key.", code="invalid_api_key")
    return cached[1]


# --- create ------------------------------------------------------------------------------


def _window_label(hours: float) -> str:
    return "none" if hours == 0 else f"{hours:g}h"


COMPLETION_WINDOWS = {"24h": 24, "48h": 48, "72h": 72, "168h": 168}
FILE_CREATE_KEYS = {"input_file_id", "endpoint", "completion_window", "metadata"}


def create_batch(
    deps: Deps, principal: Principal, raw: bytes, *, anthropic_version: str | None = None
) -> dict[str, Any]:
    """POST /v1/batches: direct requests (``requests``) or a JSONL file (``input_file_id``)."""
    settings = deps.settings
    if not principal.at_least(settings.batch_min_role):
        raise Forbidden(f"Your role may not create batches (needs {settings.batch_min_role} or above).")
    if len(raw) > settings.max_body_bytes:
        raise PayloadTooLarge(
            f"The request body ({len(raw)} bytes) is larger than the limit of "
            f"{settings.batch_max_body_mb:g} MiB."
        )
    body = parse_json(raw)
    if isinstance(body, dict) and "input_file_id" in body:
        return _create_from_file(deps, principal, body, anthropic_version)
    plan = validate_create(
        body,
        settings=settings,
        catalog=deps.catalog,
        role=principal.role,
        anthropic_version=anthropic_version,
    )
    _check_user_limits(deps, principal, len(plan.requests))
    batch_id = f"batch_{uuid.uuid4().hex}"
    lines = [
        codec.dumps({"custom_id": r.custom_id, "model": r.model, "body": r.body}).encode()
        for r in plan.requests
    ]
    deps.blobs.put_lines_gz(input_key(batch_id), lines)
    window = settings.completion_window_seconds
    meta = _new_meta(
        deps,
        principal,
        batch_id,
        endpoint=plan.endpoint,
        metadata=plan.metadata,
        window_label=_window_label(settings.batch_completion_window_hours),
        window_seconds=window,
        anthropic_version=anthropic_version,
    )
    meta.update(
        input_method="inline", total=len(plan.requests), models=sorted({r.model for r in plan.requests})
    )
    return _store_and_start(deps, meta)


def _new_meta(
    deps: Deps,
    principal: Principal,
    batch_id: str,
    *,
    endpoint: str,
    metadata: Any,
    window_label: str,
    window_seconds: float | None,
    anthropic_version: str | None,
) -> dict[str, Any]:
    clock_now = deps.clock()
    now = int(clock_now)
    return {
        "pk": batch_id,
        "owner": principal.user_id,
        "owner_role": principal.role,
        "key_id": principal.key_id,
        "status": VALIDATING,
        "endpoint": endpoint,
        "completion_window": window_label,
        "created_at": now,
        "expires_at": None if window_seconds is None else int(now + window_seconds),
        "metadata": metadata,
        "anthropic_version": anthropic_version,
        "retention_seconds": int(deps.settings.retention_seconds),
        "created_key": created_key(int(clock_now * 1000), batch_id),
    }


def _store_and_start(deps: Deps, meta: dict[str, Any]) -> dict[str, Any]:
    deps.jobs.put_new(meta)
    try:
        deps.workflow.start(str(meta["pk"]))
    except StorageError as exc:
        raise ServiceUnavailable("The batch could not be started; try again.") from exc
    return Job(meta=meta).to_api()


def _create_from_file(
    deps: Deps, principal: Principal, body: dict[str, Any], anthropic_version: str | None
) -> dict[str, Any]:
    """A batch from an uploaded JSONL file: checked here only as far as the call goes; the
    file itself is validated by the workflow, in the background."""
    if "output_expires_after" in body:
        raise BadRequest(
            "'output_expires_after' is not supported.",
            code="unsupported_capability",
            param="output_expires_after",
        )
    unknown = sorted(set(body) - FILE_CREATE_KEYS)
    if unknown:
        raise BadRequest(f"Unknown field '{unknown[0]}'.", param=unknown[0])
    endpoint = body.get("endpoint")
    if endpoint not in ENDPOINTS:
        raise BadRequest(f"'endpoint' must be one of {', '.join(ENDPOINTS)}.", param="endpoint")
    window = body.get("completion_window")
    if window not in COMPLETION_WINDOWS:
        raise BadRequest(
            "'completion_window' must be one of 24h, 48h, 72h or 168h.", param="completion_window"
        )
    anthropic_version = check_anthropic_version(endpoint, anthropic_version, settings=deps.settings)
    metadata = check_metadata(body.get("metadata"))
    file_id = body.get("input_file_id")
    if not isinstance(file_id, str):
        raise BadRequest("'input_file_id' must be a file id.", param="input_file_id")
    record = visible_file(deps, principal, file_id)
    if record["purpose"] != "batch":
        raise BadRequest(f"File '{file_id}' is not a batch input file.", param="input_file_id")
    _check_user_limits(deps, principal, 0)
    batch_id = f"batch_{uuid.uuid4().hex}"
    # The batch keeps its own copy: deleting the input file later does not affect it.
    deps.blobs.copy(file_key(file_id), input_file_key(batch_id))
    hours = COMPLETION_WINDOWS[window]
    lifted = deps.settings.completion_window_seconds is None
    meta = _new_meta(
        deps,
        principal,
        batch_id,
        endpoint=endpoint,
        metadata=metadata,
        window_label=window,
        window_seconds=None if lifted else hours * 3600,
        anthropic_version=anthropic_version,
    )
    meta.update(input_method="file", input_file_id=file_id, total=0)
    return _store_and_start(deps, meta)


def _check_user_limits(deps: Deps, principal: Principal, new_requests: int) -> None:
    """Unfinished batches and unfinished requests per user (429 above either limit).

    Read from the owner index; two creates racing at the limit may both pass.
    """
    settings = deps.settings
    unfinished, _ = deps.jobs.list_for_owner(
        principal.user_id,
        limit=settings.batch_max_active_per_user + 1,
        before_key=None,
        created_after=None,
        created_before=None,
        statuses=sorted(UNFINISHED_STATUSES),
        index=OWNER_INDEX,
    )
    if len(unfinished) >= settings.batch_max_active_per_user:
        raise TooManyRequests(
            f"You have {len(unfinished)} unfinished batches, the most allowed "
            f"({settings.batch_max_active_per_user}).",
            code="too_many_active_batches",
        )
    queued = sum(int(meta["total"]) for meta in unfinished)
    if queued + new_requests > settings.batch_max_queued_requests_per_user:
        raise TooManyRequests(
            f"This batch would take your unfinished requests to {queued + new_requests}, over the limit "
            f"of {settings.batch_max_queued_requests_per_user}.",
            code="queued_request_limit",
        )


def ensure_enabled(deps: Deps) -> None:
    """With BATCH_ENABLED off, every batch route answers 404."""
    if not deps.settings.batch_enabled:
        raise NotFound("Batch inference is not available on this gateway.", code="batch_disabled")


# --- read --------------------------------------------------------------------------------


def _visible_job(deps: Deps, principal: Principal, batch_id: str) -> Job:
    job = deps.jobs.get(batch_id) if batch_id.startswith("batch_") else None
    if job is None or (job.owner != principal.user_id and not principal.is_admin):
        raise NotFound(f"No batch found with id '{batch_id}'.", code="batch_not_found")
    return job


def get_batch(deps: Deps, principal: Principal, batch_id: str) -> dict[str, Any]:
    return _visible_job(deps, principal, batch_id).to_api()


def cancel_batch(deps: Deps, principal: Principal, batch_id: str) -> dict[str, Any]:
    """Cancel: unstarted requests will not run; an ended batch comes back unchanged."""
    job = _visible_job(deps, principal, batch_id)
    if job.status in (VALIDATING, IN_PROGRESS):
        now = int(deps.clock())
        meta = deps.jobs.update(
            job.id, {"status": CANCELLING, "cancelling_at": now}, from_statuses=[VALIDATING, IN_PROGRESS]
        )
        if meta is not None and meta.get("task_token"):
            # Parked: wake the workflow to settle the unstarted requests now. (If it is not
            # parked yet, it finds the batch cancelling when it parks.)
            token = str(meta["task_token"])
            if deps.workflow.wake(token, {"next": "cancel", "wait_seconds": 0}):
                deps.jobs.clear_token(job.id, token)
    return _visible_job(deps, principal, batch_id).to_api()


def delete_batch(deps: Deps, principal: Principal, batch_id: str) -> dict[str, Any]:
    """Delete the batch with its requests and results, whatever its status, unless a
    request is running under a live lease (409); the data is purged in the background."""
    job = _visible_job(deps, principal, batch_id)
    if deps.items.live_lease(job.id, deps.clock()):
        raise Conflict(
            f"Batch '{batch_id}' has requests running; cancel it and wait for them to finish.",
            code="batch_not_deletable",
        )
    if deps.jobs.delete_meta(job.id):
        deps.workflow.stop(job.id)
        deps.workflow.start_purge(job.id)
    return {"id": job.id, "object": "batch.deleted", "deleted": True}


def _int_param(value: str | None, name: str, *, default: int, low: int, high: int) -> int:
    if value is None or value == "":
        return default
    try:
        number = int(value)
    except ValueError:
        raise BadRequest(f"'{name}' must be an integer from {low} to {high}.", param=name) from None
    if not low <= number <= high:
        raise BadRequest(f"'{name}' must be an integer from {low} to {high}.", param=name)
    return number


def parse_time(value: str, name: str) -> int:
    """Unix seconds or ISO 8601 (a naive time is UTC)."""
    text = value.strip()
    try:
        return int(float(text))
    except ValueError:
        pass
    try:
        parsed = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise BadRequest(f"'{name}' must be unix seconds or an ISO 8601 time.", param=name) from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return int(parsed.timestamp())


def _last(params: dict[str, list[str]], name: str) -> str | None:
    values = params.get(name) or []
    return values[-1] if values else None


def list_batches(deps: Deps, principal: Principal, params: dict[str, list[str]]) -> dict[str, Any]:
    def one(name: str) -> str | None:
        return _last(params, name)

    limit = _int_param(one("limit"), "limit", default=20, low=1, high=100)
    statuses = [s for value in params.get("status", []) for s in value.split(",") if s]
    unknown = [s for s in statuses if s not in ALL_STATUSES]
    if unknown:
        raise BadRequest(f"Unknown status '{unknown[0]}'.", param="status")
    before_key = None
    after = one("after")
    if after:
        anchor = deps.jobs.get_meta(after) if after.startswith("batch_") else None
        if anchor is None or anchor["owner"] != principal.user_id:
            raise BadRequest(f"'after' names no batch of yours: '{after}'.", param="after")
        before_key = str(anchor["created_key"])
    created_after = one("created_after")
    created_before = one("created_before")
    metas, has_more = deps.jobs.list_for_owner(
        principal.user_id,
        limit=limit,
        before_key=before_key,
        created_after=None if created_after is None else parse_time(created_after, "created_after"),
        created_before=None if created_before is None else parse_time(created_before, "created_before"),
        statuses=statuses,
        index=OWNER_INDEX,
    )
    data = []
    for meta in metas:
        job = deps.jobs.get(str(meta["pk"]))
        if job is not None:
            data.append(job.to_api())
    return {
        "object": "list",
        "data": data,
        "first_id": data[0]["id"] if data else None,
        "last_id": data[-1]["id"] if data else None,
        "has_more": has_more,
    }


def results_page(
    deps: Deps, principal: Principal, batch_id: str, params: dict[str, list[str]]
) -> dict[str, Any]:
    job = _visible_job(deps, principal, batch_id)
    limit = _int_param(_last(params, "limit"), "limit", default=100, low=1, high=1000)
    after = _last(params, "after")
    after_idx = -1
    if after:
        found = item_index(job.id, after)
        if found is None:
            raise BadRequest(f"'after' names no request of this batch: '{after}'.", param="after")
        after_idx = found
    items, has_more = deps.items.page(job.id, after_idx=after_idx, limit=limit)
    data: list[dict[str, Any]] = []
    size = 0
    for item in items:
        line = result_line(job.id, item, response_body(deps, item))
        line_size = len(codec.dumps(line))
        if data and size + line_size > PAGE_BYTE_CAP:
            has_more = True
            break
        data.append(line)
        size += line_size
    return {
        "object": "list",
        "data": data,
        "has_more": has_more,
        "first_id": data[0]["id"] if data else None,
        "last_id": data[-1]["id"] if data else None,
    }


def output_jsonl(deps: Deps, principal: Principal, batch_id: str) -> Download:
    """Every result as one JSONL document, once the batch has ended."""
    job = _visible_job(deps, principal, batch_id)
    if job.status not in FINAL_STATUSES:
        raise Conflict(
            f"Batch '{batch_id}' has not ended yet (status {job.status}).", code="batch_results_not_ready"
        )
    key = export_key(job.id)
    if deps.blobs.exists(key):
        return Download(location=deps.blobs.presigned_get(key))
    chunks: list[bytes] = []
    size = 0
    for item in all_items(deps, job.id):
        data = line_bytes(file_line(job.id, item, response_body(deps, item)))
        chunks.append(data)
        size += len(data)
    body = b"".join(chunks)
    if size <= PAGE_BYTE_CAP:
        return Download(body=body)
    deps.blobs.put(key, body, "application/jsonl")
    return Download(location=deps.blobs.presigned_get(key))
