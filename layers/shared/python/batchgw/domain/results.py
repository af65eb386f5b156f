"""A request's result as the client reads it: a results-page entry or a JSONL line."""

from __future__ import annotations

import json
from typing import Any

from batchgw.domain.request import RequestRecord, request_id
from batchgw.domain.states import RequestStatus


def result_line(request: RequestRecord, response_body: Any) -> dict[str, Any]:
    """One result in the spec's line shape, with its status (the results page shows it)."""
    response = None
    if request.status is RequestStatus.SUCCEEDED:
        response = {
            "status_code": request.status_code if request.status_code is not None else 200,
            "request_id": request.upstream_request_id,
            "body": response_body,
        }
    error = None
    if request.status is not RequestStatus.SUCCEEDED and request.error is not None:
        raw = request.error  # a fixed key order, whatever order the store returns
        error = {"code": raw.get("code"), "message": raw.get("message"), "status": raw.get("status")}
    return {
        "id": request_id(request.batch_id, request.index),
        "custom_id": request.custom_id,
        "status": request.status.result_status,
        "response": response,
        "error": error,
    }


def file_line(request: RequestRecord, response_body: Any) -> dict[str, Any]:
    """The spec's JSONL line shape (``id``, ``custom_id``, ``response``, ``error``)."""
    line = result_line(request, response_body)
    del line["status"]
    return line


def line_bytes(line: dict[str, Any]) -> bytes:
    """One JSONL line, byte for byte the same whenever the same result is written."""
    return json.dumps(line, separators=(",", ":"), ensure_ascii=False).encode() + b"\n"
