"""A batch's results: pages of every request's result, and the whole as output.jsonl."""

from __future__ import annotations

from typing import Any

from batchgw.api.batches import visible_batch
from batchgw.api.params import ANSWER_LIMIT, Download, Params, int_param, last, list_page, text_out_bytes
from batchgw.deps import Deps
from batchgw.domain import codec
from batchgw.domain.errors import BadRequest, Conflict
from batchgw.domain.principal import Principal
from batchgw.domain.request import request_index
from batchgw.domain.results import result_line
from batchgw.storage.blobs import export_key

PAGE_ENVELOPE = 512  # the page's own keys and ids around its lines


def results_page(
    deps: Deps, principal: Principal, batch_id: str, params: Params
) -> dict[str, Any] | Download:
    """GET /v1/batches/{id}/results: up to ``limit`` results after ``after``, in order, as
    many as fit the response (``has_more`` says the rest follows). A first result too large
    to fit alone is answered as a redirect to the page, written to S3."""
    record = visible_batch(deps, principal, batch_id).record
    limit = int_param(params, "limit", default=100, low=1, high=1000)
    after = last(params, "after")
    after_index = -1
    if after:
        found = request_index(record.id, after)
        if found is None:
            raise BadRequest(f"'after' names no request of this batch: '{after}'.", param="after")
        after_index = found
    requests, has_more = deps.requests.page(record.id, after_index=after_index, limit=limit)
    data: list[dict[str, Any]] = []
    size = PAGE_ENVELOPE
    for request in requests:
        line = result_line(request, deps.blobs.load_body(request.response_packed, request.response_ref))
        line_size = text_out_bytes(codec.dumps(line)) + 1  # and its comma
        if size + line_size > ANSWER_LIMIT:
            if data:
                has_more = True
                break
            page = codec.dumps(list_page([line], has_more=has_more or len(requests) > 1)).encode()
            key = f"{export_key(record.id)}.page-{request.index}.json"
            deps.blobs.put(key, page, "application/json")
            return Download(location=deps.blobs.presigned_get(key), content_type="application/json")
        data.append(line)
        size += line_size
    return list_page(data, has_more=has_more)


def output_jsonl(deps: Deps, principal: Principal, batch_id: str) -> Download:
    """Every result as one JSONL document, once the batch has ended: the object finalize
    wrote, inline when it fits the response, else a redirect to it."""
    record = visible_batch(deps, principal, batch_id).record
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
    if size <= ANSWER_LIMIT:
        body = deps.blobs.get(key)
        try:
            if text_out_bytes(body.decode()) <= ANSWER_LIMIT:
                return Download(body=body, text=True)
        except UnicodeDecodeError:
            pass  # not text the response can carry: the client downloads it
    return Download(location=deps.blobs.presigned_get(key))
