"""A batch's results: pages of every request's result, and the whole as output.jsonl."""

from __future__ import annotations

from typing import Any

from batchgw.api.batches import visible_batch
from batchgw.api.params import INLINE_ANSWER_LIMIT, Download, Params, int_param, last, list_page
from batchgw.deps import Deps
from batchgw.domain import codec
from batchgw.domain.errors import BadRequest, Conflict
from batchgw.domain.principal import Principal
from batchgw.domain.request import request_index
from batchgw.domain.results import file_line, line_bytes, result_line
from batchgw.storage.blobs import export_key


def results_page(deps: Deps, principal: Principal, batch_id: str, params: Params) -> dict[str, Any]:
    """GET /v1/batches/{id}/results: up to ``limit`` results after ``after``, in order."""
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
    size = 0
    for request in requests:
        line = result_line(request, deps.blobs.load_body(request.response_packed, request.response_ref))
        line_size = len(codec.dumps(line))
        if data and size + line_size > INLINE_ANSWER_LIMIT:
            has_more = True
            break
        data.append(line)
        size += line_size
    return list_page(data, has_more=has_more)


def output_jsonl(deps: Deps, principal: Principal, batch_id: str) -> Download:
    """Every result as one JSONL document, once the batch has ended."""
    record = visible_batch(deps, principal, batch_id).record
    if not record.status.is_final:
        raise Conflict(
            f"Batch '{batch_id}' has not ended yet (status {record.status.value}).",
            code="batch_results_not_ready",
        )
    key = export_key(record.id)
    if deps.blobs.exists(key):
        return Download(location=deps.blobs.presigned_get(key))
    chunks: list[bytes] = []
    size = 0
    for request in deps.requests.all(record.id):
        data = line_bytes(
            file_line(request, deps.blobs.load_body(request.response_packed, request.response_ref))
        )
        chunks.append(data)
        size += len(data)
    body = b"".join(chunks)
    if size <= INLINE_ANSWER_LIMIT:
        return Download(body=body)
    deps.blobs.put(key, body, "application/jsonl")
    return Download(location=deps.blobs.presigned_get(key))
