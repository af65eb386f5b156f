"""A batch's results: pages of every request's result, and the whole as output.jsonl."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

from batchgw.api import prompts
from batchgw.api.batches import visible_batch
from batchgw.api.params import (
    ANSWER_LIMIT,
    PAGE_ENVELOPE,
    Download,
    Params,
    int_param,
    last,
    list_page,
    text_out_bytes,
)
from batchgw.deps import Deps
from batchgw.domain import codec
from batchgw.domain.batch import BatchRecord
from batchgw.domain.decisions import not_run_error
from batchgw.domain.errors import BadRequest, Conflict
from batchgw.domain.principal import Principal
from batchgw.domain.request import RequestRecord, request_index
from batchgw.domain.results import result_line
from batchgw.domain.states import RequestStatus
from batchgw.storage.blobs import export_key, input_file_key, input_key
from batchgw.validation.file import split_lines
from batchgw.validation.jsonbody import parse_json


def results_page(
    deps: Deps, principal: Principal, batch_id: str, params: Params
) -> dict[str, Any] | Download:
    """GET /v1/batches/{id}/results: up to ``limit`` results after ``after``, in order, as
    many as fit the response (``has_more`` says the rest follows). A first result too large
    to fit alone is answered as a redirect to the page, written to S3.

    The results are the answers to the owner's prompts: an administrator's read of another
    user's is refused where prompts are not kept and recorded against the owner before the
    page is read (``api.prompts``), one entry per page."""
    record = visible_batch(deps, principal, batch_id).record
    another_users = record.owner != principal.user_id
    if another_users:
        prompts.require_kept(deps)
    limit = int_param(params, "limit", default=100, low=1, high=1000)
    after_index = index_after(record, params)
    if another_users:
        after = last(params, "after")
        where = "from the first" if after_index < 0 else f"after {after!r}"
        prompts.record_read(
            deps, principal, record.owner, target=record.id, detail=f"results page {where} (limit {limit})"
        )
    if record.prepared or record.status.is_final:
        return _stored_page(deps, record, after_index=after_index, limit=limit)
    return _unwritten_page(deps, record, _Page(), after_index=after_index, limit=limit)


def index_after(record: BatchRecord, params: Params) -> int:
    """The index a page of the batch's requests goes on after: the request ``after`` names
    (-1 without one; 400 when it names none of the batch's)."""
    after = last(params, "after")
    if not after:
        return -1
    found = request_index(record.id, after)
    if found is None:
        raise BadRequest(f"'after' names no request of this batch: '{after}'.", param="after")
    return found


def _stored_page(
    deps: Deps, record: BatchRecord, *, after_index: int, limit: int
) -> dict[str, Any] | Download:
    """The page from the batch's stored requests, read in steps that stop at the page's cap.

    Each step asks DynamoDB for what the page still has room for: the lines left, and the
    bytes left at the largest line seen so far, plus one request (to know whether more
    follow); DynamoDB also ends a step at 1 MB. So a page reads what it answers and at most
    one step more, never ``limit`` requests first.
    """
    page = _Page()
    after = after_index
    # Past the requests prepare had written when the record was read, the page goes on from
    # the input (``_unwritten_page``): the stored ones there may not all be written yet.
    frontier = record.written_count if record.prepared and not record.all_written else None
    while True:
        want = limit - len(page.data) + 1
        if page.largest:
            want = min(want, page.room // page.largest + 1)
        requests, more = deps.requests.results_step(record.id, after_index=after, limit=max(want, 2))
        if frontier is not None and any(request.index >= frontier for request in requests):
            requests, more = [request for request in requests if request.index < frontier], False
        for position, request in enumerate(requests):
            if len(page.data) == limit:
                return page.answer(has_more=True)
            line = result_line(request, deps.blobs.load_body(request.response_packed, request.response_ref))
            if not page.add(line):
                if page.data:
                    return page.answer(has_more=True)
                more_after = more or position + 1 < len(requests) or frontier is not None
                return _alone(deps, request, line, has_more=more_after)
            after = request.index
        if more:
            continue
        if frontier is None:
            return page.answer(has_more=False)
        return _unwritten_page(deps, record, page, after_index=after, limit=limit)


class _Page:
    """A results page being filled, within what the function's response can carry."""

    def __init__(self) -> None:
        self.data: list[dict[str, Any]] = []
        self.size = PAGE_ENVELOPE
        self.largest = 0  # the largest line met so far, in response bytes

    @property
    def room(self) -> int:
        return ANSWER_LIMIT - self.size

    def add(self, line: dict[str, Any]) -> bool:
        """Add ``line`` if it fits; False (and nothing added) when it does not."""
        line_size = text_out_bytes(codec.dumps(line)) + 1  # and its comma
        self.largest = max(self.largest, line_size)
        if line_size > self.room:
            return False
        self.data.append(line)
        self.size += line_size
        return True

    def answer(self, *, has_more: bool) -> dict[str, Any]:
        return list_page(self.data, has_more=has_more)


def _alone(deps: Deps, request: RequestRecord, line: dict[str, Any], *, has_more: bool) -> Download:
    """A first result too large for the response alone: its page, written to S3, and a
    redirect to it."""
    page = codec.dumps(list_page([line], has_more=has_more)).encode()
    key = f"{export_key(request.batch_id)}.page-{request.index}.json"
    deps.blobs.put(key, page, "application/json")
    return Download(location=deps.blobs.presigned_get(key).url, content_type="application/json")


def _unwritten_page(
    deps: Deps, record: BatchRecord, page: _Page, *, after_index: int, limit: int
) -> dict[str, Any]:
    """Fill ``page`` with the requests after ``after_index`` that the workflow has not
    written yet, as the input lists them."""
    requests, has_more = _not_yet_written(deps, record, after_index=after_index, limit=limit - len(page.data))
    for request in requests:  # without a body: a line about as long as its custom_id
        if not page.add(result_line(request, None)):
            return page.answer(has_more=True)
    return page.answer(has_more=has_more)


def _not_yet_written(
    deps: Deps, record: BatchRecord, *, after_index: int, limit: int
) -> tuple[list[RequestRecord], bool]:
    """A batch whose requests the workflow has not written yet lists them all the same, as
    queued: read from the input it stored (a file batch's lines that can be read). A batch
    that failed before they were written lists them as failed with it, never run."""
    found: list[RequestRecord] = []
    ended = record.status.is_final
    for index, custom_id in enumerate(_custom_ids(deps, record)):
        if index <= after_index:
            continue
        request = RequestRecord(record.id, index, custom_id, model="")
        if ended:
            request = replace(request, status=RequestStatus.FAILED, error=not_run_error("batch_failed"))
        found.append(request)
        if len(found) > limit:
            break
    return found[:limit], len(found) > limit


def _custom_ids(deps: Deps, record: BatchRecord) -> Iterator[str]:
    if record.input_method == "inline":
        for line in deps.blobs.iter_lines_gz(input_key(record.id)):
            yield str(json.loads(line)["custom_id"])
        return
    chunks = deps.blobs.iter_chunks(input_file_key(record.id), 256 * 1024)
    lines = split_lines(chunks, max_line_bytes=deps.settings.batch_max_line_kb * 1024)
    for number, raw in enumerate(lines, 1):
        if not raw.strip():
            continue
        try:
            item = parse_json(raw, what="A line", bom=number == 1)
        except BadRequest:
            continue  # the workflow's validation will report it
        custom_id = item.get("custom_id") if isinstance(item, dict) else None
        if isinstance(custom_id, str):
            yield custom_id


def output_jsonl(deps: Deps, principal: Principal, batch_id: str) -> Download:
    """Every result as one JSONL document, once the batch has ended: the object finalize
    wrote, inline when it fits the response, else a redirect to it. An administrator's read
    of another user's is refused where prompts are not kept, and recorded against the owner
    before it is answered (``api.prompts``)."""
    record = visible_batch(deps, principal, batch_id).record
    another_users = record.owner != principal.user_id
    if another_users:
        prompts.require_kept(deps)
    if not record.status.is_final:
        raise Conflict(
            f"Batch '{batch_id}' has not ended yet (status {record.status.value}).",
            code="batch_results_not_ready",
        )
    key = export_key(record.id)
    size = deps.blobs.size(key)
    if size is None:
        if not record.prepared:
            return Download(body=b"", text=True)  # it never had requests (its input was refused)
        raise Conflict(
            f"Batch '{batch_id}' failed before its results could be written; read them page by page "
            f"from /v1/batches/{batch_id}/results.",
            code="batch_results_unavailable",
        )
    if another_users:
        prompts.record_read(
            deps, principal, record.owner, target=record.id, detail=f"output.jsonl ({size} bytes)"
        )
    return stored_download(deps, key, size)


def stored_download(deps: Deps, key: str, size: int | None = None) -> Download:
    """A stored JSONL document: inline when it fits the response, else a redirect to it."""
    size = deps.blobs.size(key) if size is None else size
    if size is not None and size <= ANSWER_LIMIT:
        body = deps.blobs.get(key)
        try:
            if text_out_bytes(body.decode()) <= ANSWER_LIMIT:
                return Download(body=body, text=True)
        except UnicodeDecodeError:
            pass  # not text the response can carry: the client downloads it
    return Download(location=deps.blobs.presigned_get(key).url)
