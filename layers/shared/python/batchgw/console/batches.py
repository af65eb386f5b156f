"""The console's Batches page: the caller's batches as the page shows them, found by group
and by name or id, a page at a time (``GET /console/api/batches``; every user's for the
Admin Batches tab, ``GET /admin/console/batches``), one batch's details
(``GET /console/api/batches/{id}``), the models the create page offers
(``GET /console/api/models``), and its submission (``POST /console/api/batches``).

The page only shows what the server decided: each row carries its group (the spec's four,
``domain.console``), the note on its stage, whether its results may be downloaded, and what
it may do next. Filtering by a group or a search pages on the server: it reads the owner's
index a page at a time, newest first, until it has a page of matches or has read
``SCAN_RECORDS`` batches, and answers the cursor to go on from (never every batch).
"""

from __future__ import annotations

import dataclasses
import heapq
import json
from collections.abc import Generator, Iterator, Sequence
from typing import Any

from batchgw.api import batches as api_batches
from batchgw.api import files, idempotency, retry
from batchgw.api import webhooks as api_webhooks
from batchgw.api.accounts import require_admin
from batchgw.api.auth import require_role
from batchgw.api.batches import BATCH_PREFIX, Creating
from batchgw.api.capacity import promised_at
from batchgw.api.params import Params, int_param, last
from batchgw.api.shapes import batch_object
from batchgw.console import preflight
from batchgw.deps import Deps
from batchgw.domain import codec
from batchgw.domain import console as rules
from batchgw.domain.batch import BatchRecord, CountedBatch
from batchgw.domain.errors import BadRequest, Conflict, NotFound
from batchgw.domain.principal import Principal
from batchgw.validation import priority
from batchgw.validation.strict import stored_lines

# Batches one list call reads at most while it looks for a page of matches, and how many it
# asks each owner's index for at a time.
SCAN_RECORDS = 500
_READ_PAGE = 50
MAX_SEARCH_CHARS = 200
MAX_NAME_CHARS = 256  # metadata values' own limit (``validation.create.check_metadata``)
MAX_DESCRIPTION_CHARS = 512
_SUBMIT_KEYS = frozenset({*preflight.BODY_KEYS, "check", "name", "description", *priority.FIELDS})
# Targets a batch of which may be copied, or its unfinished requests exported (the spec's).
EXPORTABLE = frozenset({"/v1/chat/completions", "/v1/embeddings"})
CHOICES_KEY = "console_choices"  # the batch's metadata key for the create page's choices


def row(batch: CountedBatch, now: float) -> dict[str, Any]:
    """One batch as the Batches page shows it: the batch object and what the page needs
    beside it, each decided here."""
    record, counts = batch.record, batch.counts
    shown = batch_object(batch, now)
    metadata = record.metadata or {}
    retryable = rules.may_retry(
        record.status,
        prepared=record.prepared,
        succeeded=counts.completed,
        total=record.total,
        error=record.error,
        refused=record.errors is not None,
    )
    issue = rules.issue(
        record.status,
        error=record.error,
        failed=counts.failed - counts.expired,
        expired=counts.expired,
        total=record.total,
        retryable=retryable,
    )
    return {
        **shown,
        "user_id": record.owner,
        "name": metadata.get("name"),
        "description": metadata.get("description"),
        "target": rules.target(record.endpoint),
        "models": list(record.models),
        "input_method": record.input_method,
        "group": rules.group(record.status, total=record.total, completed=counts.completed),
        "note": rules.note(record.status, paused=shown["paused"]) or (issue.title if issue else None),
        # What went wrong, in the user's words, and what to do (null: nothing did).
        "issue": None if issue is None else dataclasses.asdict(issue),
        "outcomes": {
            "succeeded": counts.completed,
            "failed": counts.failed - counts.expired,
            "expired": counts.expired,
            "cancelled": counts.cancelled,
            "not_ended": max(0, record.total - counts.completed - counts.failed - counts.cancelled),
        },
        "may": {
            "cancel": rules.may_cancel(record.status),
            # Whatever its status, unless a request runs under a live lease (409: cancel
            # it and wait): the page offers it and shows the refusal.
            "delete": True,
            "download": rules.has_results(record.status, finalized=record.finalizing_at is not None),
            # As the retry route takes it; the page offers it only to a role that may submit.
            "retry": retryable,
        },
    }


def list_rows(
    deps: Deps, principal: Principal, params: Params, owners: Sequence[str] | None = None
) -> dict[str, Any]:
    """GET /console/api/batches: ``group`` (one of the four), ``q`` (a part of a name or of
    an id), ``limit`` and ``after`` (the ``next_after`` of the page before). ``owners``: whose
    batches (the caller's own unless an administrator's list names others); each row of
    another's batch says whose it is."""
    limit = int_param(params, "limit", default=20, low=1, high=100)
    group = last(params, "group") or None
    if group is not None and group not in rules.GROUPS:
        raise BadRequest(f"'group' must be one of {', '.join(rules.GROUPS)}.", param="group")
    query = (last(params, "q") or "").strip()
    if len(query) > MAX_SEARCH_CHARS:
        raise BadRequest(f"'q' is at most {MAX_SEARCH_CHARS} characters.", param="q")
    owners = [principal.user_id] if owners is None else owners
    if query.startswith(BATCH_PREFIX):  # a whole id finds its batch however old
        exact = deps.batches.get(query)
        if exact is not None and exact.record.owner in owners:
            shown = row(exact, deps.clock())
            rows = [shown] if group is None or shown["group"] == group else []
            return _page(rows, more=False, last_read=None, scanned=1)
    statuses = rules.statuses_of(group) if group else ()
    found = _newest_first(
        deps, owners, api_batches.after_cursor(deps, principal, last(params, "after")), statuses
    )
    now = deps.clock()
    matches: list[dict[str, Any]] = []
    scanned = 0
    last_read: BatchRecord | None = None
    for record in found:
        if len(matches) == limit or scanned == SCAN_RECORDS:
            found.close()
            return _page(matches, more=True, last_read=last_read, scanned=scanned)
        scanned += 1
        last_read = record
        if query and not rules.matches(query, record.id, (record.metadata or {}).get("name")):
            continue
        counted = deps.batches.get(record.id)
        if counted is None:
            continue  # deleted meanwhile
        shown = row(counted, now)
        if group is None or shown["group"] == group:
            matches.append(shown)
    return _page(matches, more=False, last_read=last_read, scanned=scanned)


def list_every_rows(deps: Deps, principal: Principal, params: Params) -> dict[str, Any]:
    """GET /admin/console/batches (administrators): every user's batches, or ``user``'s,
    with the Batches page's filters."""
    require_admin(principal)
    user = last(params, "user")
    owners = [user] if user else [u.id for u in deps.accounts.users()]
    return list_rows(deps, principal, params, owners)


def _page(
    rows: list[dict[str, Any]], *, more: bool, last_read: BatchRecord | None, scanned: int
) -> dict[str, Any]:
    """A page of rows; ``next_after`` (with ``has_more``) is the last batch read, matched or
    not: the next page reads on from it."""
    return {
        "object": "list",
        "data": rows,
        "has_more": more,
        "next_after": last_read.id if more and last_read is not None else None,
        "scanned": scanned,
    }


def _newest_first(
    deps: Deps, owners: Sequence[str], before: str | None, statuses: Sequence[str]
) -> Generator[BatchRecord, None, None]:
    """The owners' batches older than the cursor ``before``, newest first across them all:
    each owner's index read a page at a time, only as far as the reader goes."""

    def owner_pages(owner: str) -> Iterator[BatchRecord]:
        cursor, more = before, True
        while more:
            records, more = deps.batches.list_for_owner(
                owner, limit=_READ_PAGE, before_key=cursor, statuses=list(statuses)
            )
            yield from records
            if not records:
                return
            cursor = records[-1].created_key

    yield from heapq.merge(*(owner_pages(o) for o in owners), key=lambda r: r.created_key, reverse=True)


def details(deps: Deps, principal: Principal, batch_id: str) -> dict[str, Any]:
    """GET /console/api/batches/{id}: the row, the webhook deliveries about this batch, what
    Copy as new batch opens (``copy_of``), and whether its unfinished requests may be exported."""
    batch = deps.batches.get(batch_id)
    if batch is None or batch.record.owner != principal.user_id:
        raise NotFound(f"No batch found with id '{batch_id}'.", param="batch_id")
    record = batch.record
    shown = row(batch, deps.clock())
    shown["webhook_deliveries"] = _deliveries(deps, principal, record)
    shown["copy"] = copy_of(deps, record)
    shown["may"]["export_unfinished"] = (
        record.endpoint in EXPORTABLE
        and rules.results_ready(record.status)
        and shown["outcomes"]["succeeded"] < record.total
    )
    return shown


def _deliveries(deps: Deps, principal: Principal, record: BatchRecord) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = api_webhooks.list_events(deps, principal)["data"]
    return [e for e in events if e["batch_id"] == record.id]


def submit(
    deps: Deps, principal: Principal, raw: bytes, body: Any, idempotency_key: str | None
) -> dict[str, Any]:
    """POST /console/batches: the create page's last step. The body is the preflight's (the
    file and the choices) with the batch's ``name``, ``description``, its ``priority`` and
    ``complete_by`` if given, and the ``check`` the preflight answered; the file is checked
    again, and a check that no longer matches (the file, the key, or the model the choice
    resolves to changed) is refused with 409 ``check_outdated``. The batch keeps its own copy
    of the stored requests. An ``Idempotency-Key`` is required: a reload finds the batch
    instead of making another."""
    if not idempotency_key:
        raise BadRequest(
            "A console submission needs an Idempotency-Key header.", code="idempotency_key_required"
        )
    if not isinstance(body, dict):
        raise BadRequest("The body must be a JSON object.")
    unknown = sorted(body.keys() - _SUBMIT_KEYS)
    if unknown:
        raise BadRequest(f"Unknown field '{unknown[0]}'.", param=unknown[0])
    name = _text(body.get("name"), "name", MAX_NAME_CHARS, required=True)
    description = _text(body.get("description"), "description", MAX_DESCRIPTION_CHARS, required=False)
    if not isinstance(body.get("check"), str):
        raise BadRequest("'check' must be the check the preflight answered.", param="check")
    assert name is not None
    metadata = {"name": name, "console": "1", CHOICES_KEY: _choices_of(body)}
    if description:
        metadata["description"] = description
    scheduling = priority.scheduling_of(body, admin=principal.is_admin)

    def create(creating: Creating) -> dict[str, Any]:
        require_role(deps, principal, "create batches")
        checked = preflight.checked(deps, principal, body)
        if not checked.report.valid:
            raise Conflict(
                "The file no longer passes the check: check it again.", code="check_outdated", param="check"
            )
        if checked.digest != body["check"]:
            raise Conflict(
                "The file, your API key or the model the choice resolves to changed since the "
                "check: check it again before you submit.",
                code="check_outdated",
                param="check",
            )

        def write(key: str) -> int:
            lines = stored_lines(checked.lines, checked.report, checked.choices, limits=checked.limits)
            return deps.blobs.put_chunks(key, lines)

        assert checked.report.endpoint is not None
        model, requests = checked.report.model, checked.report.requests
        opening = api_batches.Opening(
            endpoint=checked.report.endpoint,
            window=None,
            metadata=metadata,
            input=api_batches.FileInput(checked.file_id, write=write),
            scheduling=scheduling,
            # 422 when its complete_by cannot be met (``api.capacity``).
            promised_at=promised_at(
                deps, principal, creating.batch_id, {model: requests} if model else {}, scheduling
            ),
        )
        return api_batches.open_batch(deps, principal, creating, opening)

    fingerprint = idempotency.fingerprint(raw, None)
    return api_batches.create_once(
        deps, principal, fingerprint, idempotency_key, create, route="console-batches"
    )


def _choices_of(body: dict[str, Any]) -> str:
    """The create page's choices, kept in the batch's metadata for Copy as new batch."""
    kept = {k: body[k] for k in ("endpoint", "model", "temperature", "max_tokens") if body.get(k) is not None}
    return codec.dumps(kept)


def copy_of(deps: Deps, record: BatchRecord) -> dict[str, Any] | None:
    """What Copy as new batch opens the create page on (None: this batch cannot be copied
    yet: direct requests, or a Messages or Responses batch). Its source file, while it is
    still stored (else None: the user uploads it again), and its settings."""
    if record.input_method != "file" or record.endpoint not in EXPORTABLE or record.input_file_id is None:
        return None
    source = deps.files.get(record.input_file_id)
    live = (
        source is not None and not source.deleted and not source.pending and not source.expired(deps.clock())
    )
    metadata = record.metadata or {}
    try:
        choices = json.loads(metadata.get(CHOICES_KEY) or "{}")
    except ValueError:
        choices = {}
    return {
        "input_file_id": record.input_file_id if live else None,
        "filename": source.filename if live and source is not None else None,
        "endpoint": record.endpoint,
        "name": metadata.get("name"),
        "description": metadata.get("description"),
        "choices": choices if isinstance(choices, dict) else {},
    }


def _text(value: Any, name: str, most: int, *, required: bool) -> str | None:
    """A name or description: text of at most ``most`` characters, trimmed (None: empty)."""
    if value is not None and (not isinstance(value, str) or len(value) > most):
        raise BadRequest(f"'{name}' must be text of at most {most} characters.", param=name)
    text = (value or "").strip() or None
    if text is None and required:
        raise BadRequest(f"Give the batch a {name}.", param=name)
    return text


def models(deps: Deps, principal: Principal) -> dict[str, Any]:
    """GET /console/api/models: the models the caller may choose on the create page, with the
    targets each serves and its price (aliases and auto models are not offered: the stored
    requests name the canonical model)."""
    data = []
    for model_id, spec in sorted(deps.catalog.models.items()):
        if spec.roles is not None and principal.role not in spec.roles and not principal.is_admin:
            continue
        data.append(
            {
                "id": model_id,
                "object": "model",
                "endpoints": list(spec.endpoints),
                "price": None
                if spec.price is None
                else {
                    "input_per_mtok_usd": str(spec.price.input_per_mtok),
                    "output_per_mtok_usd": str(spec.price.output_per_mtok),
                },
            }
        )
    return {"object": "list", "data": data, "has_more": False}


def export_unfinished(deps: Deps, principal: Principal, batch_id: str) -> dict[str, Any]:
    """POST /console/api/batches/{id}/export-unfinished: a finished Chat or Embeddings batch's
    failed, expired and cancelled requests as a new input file of the caller (each line as
    the batch stored it: its custom_id, url, method and body, on the canonical model), to fix
    and submit as a new batch. It makes a file as ``POST /v1/files`` does, under the same rule
    (``files.may_create_file``: 403 below BATCH_MIN_ROLE, one upload of the hour's counted) and
    against the same storage limit (429 ``file_storage_limit``)."""
    files.may_create_file(deps, principal)
    batch = deps.batches.get(batch_id)
    if batch is None or batch.record.owner != principal.user_id:
        raise NotFound(f"No batch found with id '{batch_id}'.", param="batch_id")
    record = batch.record
    if record.endpoint not in EXPORTABLE:
        raise BadRequest(
            "Only a Chat Completions or Embeddings batch's unfinished requests can be exported.",
            code="export_unsupported",
        )
    if not rules.results_ready(record.status):
        raise Conflict(
            f"Batch '{batch_id}' has not finished yet (status {record.status.value}).",
            code="batch_not_finished",
        )
    lines = list(retry.jsonl_lines(record, retry.unfinished(deps, record)))
    if not lines:
        raise BadRequest(
            "Every request of this batch succeeded: nothing to export.", code="nothing_to_export"
        )
    name = f"{(record.metadata or {}).get('name') or record.id} unfinished.jsonl"
    created = files.new_input_file(deps, principal, files.plain_filename(name), b"".join(lines))
    return {**files.file_object(created), "requests": len(lines)}
