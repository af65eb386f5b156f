"""Retry as a child batch: ``POST /v1/batches/{id}/retry`` opens a new batch of an ended
batch's requests that did not succeed, and ``GET /v1/batches/{id}/output.jsonl?merged=true``
reads a child's results with its ancestors' successes, one line per custom_id.

The child is opened like any batch (``api.batches.open_batch``): the caller's role,
limits, quota and budget apply, and an Idempotency-Key finds the child the first retry
made. It runs the parent's requests as the parent stored them, on the same endpoint, with
the parent's window, metadata and execution mode unless the body gives others. A file
batch's child is a file batch too: its input is a new file of the caller's holding exactly
the requests it runs (counted against the caller's storage like an upload), so it ends
with output and error files of its own. The child names its parent (``parent_batch_id``)
and the parent lists its children (``retry_batch_ids``), written in the one transaction
that stores the child; nothing that succeeded runs again.

A batch that failed inside the gateway before its requests were stored (while reading its
input, say: ``domain.batch.retries_whole_input``) retries all of them, from its own copy
of its input or, when that cannot be read, from its input file if the caller still holds
it. One whose input was refused has nothing to retry: its input is to be fixed, not run
again.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from typing import Any

from batchgw import inputs
from batchgw.api import files, idempotency, prompts
from batchgw.api.auth import require_role
from batchgw.api.batches import (
    Creating,
    FileInput,
    InlineInput,
    Opening,
    check_file_batches,
    copied_file,
    create_once,
    open_batch,
)
from batchgw.api.params import Download
from batchgw.api.results import stored_download
from batchgw.deps import Deps
from batchgw.domain import codec
from batchgw.domain.batch import BatchRecord, retries_whole_input
from batchgw.domain.errors import BadRequest, Conflict, NotFound, StorageError
from batchgw.domain.files import file_key
from batchgw.domain.modes import Mode
from batchgw.domain.principal import Principal
from batchgw.domain.states import BatchStatus, RequestStatus
from batchgw.observability import logger
from batchgw.storage.batches import MAX_CHILDREN, ParentChanged
from batchgw.storage.blobs import export_key
from batchgw.validation.create import (
    COMPLETION_WINDOWS,
    check_completion_window,
    check_metadata,
    requested_mode,
)
from batchgw.validation.file import LineInvalid
from batchgw.validation.jsonbody import parse_json

RETRY_KEYS = frozenset({"error_codes", "completion_window", "metadata", "execution_mode"})
MAX_ERROR_CODES = 50
# How many batches a merged read goes back through (a child of a child of ...).
MAX_GENERATIONS = MAX_CHILDREN


def retry_batch(
    deps: Deps, principal: Principal, batch_id: str, raw: bytes, idempotency_key: str | None
) -> dict[str, Any]:
    """POST /v1/batches/{id}/retry: the child batch (the batch object), created once per
    Idempotency-Key. The body (optional) may give ``error_codes`` (only the requests that
    ended with one of these codes), ``completion_window``, ``metadata`` and
    ``execution_mode`` (else the child asks to run where its parent asked: a batch run on
    its provider's batch service at the batch price retries there too)."""
    body = parse_json(raw) if raw.strip() else {}
    if not isinstance(body, dict):
        raise BadRequest("The body must be a JSON object.")
    unknown = sorted(body.keys() - RETRY_KEYS)
    if unknown:
        raise BadRequest(
            f"Unknown field '{unknown[0]}'; a retry takes {', '.join(sorted(RETRY_KEYS))}.", param=unknown[0]
        )
    codes = _error_codes(body.get("error_codes"))
    window = check_completion_window(body.get("completion_window"), required=False)
    metadata = check_metadata(body.get("metadata")) if "metadata" in body else None
    asked = body.get("execution_mode")
    mode = requested_mode(asked, metadata) if asked is not None or "omg_mode" in (metadata or {}) else None
    fingerprint = idempotency.fingerprint(codec.dumps({"retry": batch_id, "body": body}).encode(), None)

    def create(creating: Creating) -> dict[str, Any]:
        require_role(deps, principal, "create batches")
        parent = _own_ended(deps, principal, batch_id)
        opening = _opening(deps, principal, parent, codes, window, metadata, mode)
        try:
            return open_batch(deps, principal, creating, opening)
        except ParentChanged:
            raise Conflict(
                f"Batch '{batch_id}' was deleted, or has its {MAX_CHILDREN} retries already.",
                code="retry_refused",
            ) from None
        except Exception:
            if isinstance(opening.input, FileInput):  # its input file, made for it alone
                files.delete_file(deps, principal, opening.input.file_id)
            raise

    return create_once(deps, principal, fingerprint, idempotency_key, create, route="retry")


def _error_codes(value: Any) -> frozenset[str] | None:
    if value is None:
        return None
    if (
        not isinstance(value, list)
        or not value
        or len(value) > MAX_ERROR_CODES
        or not all(isinstance(code, str) and code for code in value)
    ):
        raise BadRequest(
            f"'error_codes' must be a list of 1 to {MAX_ERROR_CODES} error codes, as the results "
            "show them (for example batch_expired, rate_limited).",
            param="error_codes",
        )
    return frozenset(value)


def _own_ended(deps: Deps, principal: Principal, batch_id: str) -> BatchRecord:
    """The caller's own batch ``batch_id``, ended: only its owner retries it."""
    batch = deps.batches.get(batch_id)
    if batch is None or batch.record.owner != principal.user_id:
        raise NotFound(f"No batch found with id '{batch_id}'.", param="batch_id")
    record = batch.record
    if not record.status.is_final:
        raise Conflict(
            f"Batch '{batch_id}' has not ended yet (status {record.status.value}): retry it once it has.",
            code="batch_not_finished",
        )
    return record


def unfinished(
    deps: Deps, record: BatchRecord, codes: frozenset[str] | None = None, *, key: str | None = None
) -> Iterator[tuple[str, str, Any]]:
    """An ended batch's requests that did not succeed, as (custom_id, canonical model, body),
    in order: only those that ended with one of ``codes`` when given. Its ended requests
    gave up their bodies: they come from the batch's own copy of its input (or, for a file
    batch, the JSONL object at ``key``). A batch that failed before its requests were
    written has none when its input was refused, all of them when it failed inside the
    gateway (``retries_whole_input``); one that was cancelled or expired before has all of
    them, none run."""
    if not record.prepared and record.status is BatchStatus.FAILED and not _whole_input(record):
        return
    ended = {r.index: r for r in deps.requests.all(record.id)}
    requests = inputs.requests_of(deps, record, key)
    for index in itertools.count():
        try:
            request = next(requests, None)
        except LineInvalid as exc:
            raise BadRequest(
                f"Line {exc.line} of batch '{record.id}''s input no longer passes validation "
                f"({exc.message}): its requests cannot be sent again as they are.",
                code="retry_input_invalid",
            ) from None
        if request is None:
            return
        found = ended.get(index)
        if found is not None and found.status is RequestStatus.SUCCEEDED:
            continue
        code = (found.error or {}).get("code") if found is not None else _never_run(record)
        if codes is None or code in codes:
            yield request


def _whole_input(record: BatchRecord) -> bool:
    return retries_whole_input(
        record.status, prepared=record.prepared, error=record.error, refused=record.errors is not None
    )


def _requests_to_run(
    deps: Deps, principal: Principal, parent: BatchRecord, codes: frozenset[str] | None
) -> tuple[tuple[str, str, Any], ...]:
    """The parent's requests the child runs. A file batch that failed before its requests
    were stored may have failed reading its own copy of its input: when that copy cannot be
    read, they come from its input file, if the caller still holds it (409 otherwise)."""
    file_id = parent.input_file_id if parent.input_method == "file" else None
    try:
        return tuple(unfinished(deps, parent, codes))
    except StorageError:
        if file_id is None or not _whole_input(parent):
            raise
        logger.warning(
            "retry: the batch's own input copy cannot be read, reading its input file",
            extra={"batch_id": parent.id, "file_id": file_id},
            exc_info=True,
        )
    try:
        source = files.visible_file(deps, principal, file_id)
        return tuple(unfinished(deps, parent, codes, key=file_key(source.id)))
    except (NotFound, StorageError):
        raise Conflict(
            f"Batch '{parent.id}''s input can no longer be read, nor its input file "
            f"'{file_id}': submit the file again as a new batch.",
            code="retry_input_unavailable",
        ) from None


def _never_run(record: BatchRecord) -> str:
    """The code of a request an ended batch never wrote (and so never ran)."""
    return {BatchStatus.CANCELLED: "batch_cancelled", BatchStatus.EXPIRED: "batch_expired"}.get(
        record.status, "batch_failed"
    )


def jsonl_lines(record: BatchRecord, requests: Iterator[tuple[str, str, Any]]) -> Iterator[bytes]:
    """Requests as lines of a batch input file: custom_id, method, url and body (naming the
    canonical model)."""
    for custom_id, model, body in requests:
        line = {
            "custom_id": custom_id,
            "method": "POST",
            "url": record.endpoint,
            "body": {**body, "model": model},
        }
        yield codec.dumps(line).encode() + b"\n"


def _opening(
    deps: Deps,
    principal: Principal,
    parent: BatchRecord,
    codes: frozenset[str] | None,
    window: str | None,
    metadata: dict[str, str] | None,
    mode: Mode | None,
) -> Opening:
    requests = _requests_to_run(deps, principal, parent, codes)
    if (
        not requests
        and parent.status is BatchStatus.FAILED
        and not parent.prepared
        and not _whole_input(parent)
    ):
        raise BadRequest(
            f"Batch '{parent.id}' has no request to retry: its input was refused and nothing of it "
            "ran. Fix its input as its errors say, then submit it as a new batch.",
            code="nothing_to_retry",
        )
    if not requests:
        raise BadRequest(
            f"Batch '{parent.id}' has no request to retry: every one succeeded"
            + (", or none ended with the error codes given." if codes else "."),
            code="nothing_to_retry",
        )
    if window is None and parent.completion_window in COMPLETION_WINDOWS:
        window = parent.completion_window
    given: InlineInput | FileInput = InlineInput(requests)
    if parent.input_method == "file":
        check_file_batches(deps)  # before its input file is made
        data = b"".join(jsonl_lines(parent, iter(requests)))
        made = files.new_input_file(deps, principal, files.plain_filename(f"{parent.id} retry.jsonl"), data)
        given = copied_file(deps, made)
    return Opening(
        endpoint=parent.endpoint,
        window=window,
        metadata=parent.metadata if metadata is None else metadata,
        anthropic_version=parent.anthropic_version,
        input=given,
        parent_batch_id=parent.id,
        mode=Mode(parent.mode_requested) if mode is None else mode,
    )


# --- merged results -----------------------------------------------------------------------------


def merged_key(batch_id: str) -> str:
    return f"{export_key(batch_id)}.merged"


def merged_output(deps: Deps, principal: Principal, batch_id: str) -> Download:
    """GET /v1/batches/{id}/output.jsonl?merged=true: the batch's results with those of the
    batches it retries (its parent's, and theirs), one line per custom_id in its first
    batch's order: a request's line from the last batch that ran it. Written once to S3,
    the first time it is asked for (every batch in the line has ended), then answered as
    the batch's own output is. An administrator's read of another user's is refused where
    prompts are not kept, and recorded against the owner (one entry, naming the batch read;
    its ancestors are the same owner's) before it is answered (``api.prompts``)."""
    batch = deps.batches.get(batch_id)
    record = None if batch is None else batch.record
    if record is None or (record.owner != principal.user_id and not principal.is_admin):
        raise NotFound(f"No batch found with id '{batch_id}'.", param="batch_id")
    another_users = record.owner != principal.user_id
    if another_users:
        prompts.require_kept(deps)
    key = _merged(deps, record, generations=MAX_GENERATIONS)
    if another_users:
        merged = "its own results alone" if key == export_key(record.id) else "with the batches it retries"
        prompts.record_read(
            deps, principal, record.owner, target=record.id, detail=f"output.jsonl?merged=true ({merged})"
        )
    return stored_download(deps, key)


def _merged(deps: Deps, record: BatchRecord, *, generations: int) -> str:
    """The key of ``record``'s merged results, written if it was not yet."""
    if not record.status.is_final:
        raise Conflict(
            f"Batch '{record.id}' has not ended yet (status {record.status.value}).",
            code="batch_results_not_ready",
        )
    own = export_key(record.id)
    if record.parent_batch_id is None:
        return own
    key = merged_key(record.id)
    if deps.blobs.exists(key):
        return key
    parent = deps.batches.get(record.parent_batch_id)
    # A parent that failed before its requests were stored ran none of them: its child ran
    # all of them, so the child's results merge with those the parent would have merged.
    while parent is not None and generations > 1 and _whole_input(parent.record):
        if parent.record.parent_batch_id is None:
            return own
        parent, generations = deps.batches.get(parent.record.parent_batch_id), generations - 1
    if parent is None or generations <= 1:
        raise Conflict(
            f"The results of batch '{record.parent_batch_id}', which batch '{record.id}' retries, "
            "are no longer kept: only this batch's own results can be read.",
            code="parent_results_unavailable",
        )
    parent_key = _merged(deps, parent.record, generations=generations - 1)
    if not deps.blobs.exists(parent_key) or not deps.blobs.exists(own):
        raise Conflict(
            f"The results of batch '{record.id}' or of a batch it retries are not written.",
            code="parent_results_unavailable",
        )
    lines = merge_lines(_lines(deps, parent_key), _lines(deps, own))
    deps.blobs.put_chunks(key, lines)
    return key


def merge_lines(earlier: Iterator[bytes], later: Iterator[bytes]) -> Iterator[bytes]:
    """``earlier``'s result lines, each replaced by ``later``'s line of the same custom_id:
    ``later`` holds some of ``earlier``'s custom_ids, in the same order (a retry's requests
    are its parent's, in order). A line of ``later`` that ``earlier`` does not name comes
    at the end."""
    waiting = next(later, None)
    waiting_id = _custom_id(waiting)
    for line in earlier:
        if waiting is not None and _custom_id(line) == waiting_id:
            yield waiting
            waiting = next(later, None)
            waiting_id = _custom_id(waiting)
        else:
            yield line
    if waiting is not None:
        yield waiting
        yield from later


def _custom_id(line: bytes | None) -> Any:
    return None if line is None else json.loads(line).get("custom_id")


def _lines(deps: Deps, key: str) -> Iterator[bytes]:
    left = b""
    for chunk in deps.blobs.iter_chunks(key, inputs.READ_CHUNK_BYTES):
        left += chunk
        *whole, left = left.split(b"\n")
        for line in whole:
            if line:
                yield line + b"\n"
    if left:
        yield left + b"\n"
