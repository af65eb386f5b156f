"""The API's OpenAPI document (``GET /v1/openapi.json``).

The resolver generates the paths, methods and path parameters from its routes; this
module completes each operation with what the routes read themselves: the query
parameters, the request bodies, the bearer key, and the errors every route may answer
in the spec's shape; ``document`` adds the admin function's routes to the api's.

Only ``GET /v1/openapi.json`` needs this module (and the admin routes it describes): the
api handler loads it on that route's first request, so no other route's cold start pays
for it.
"""

from __future__ import annotations

import functools
from copy import deepcopy
from typing import Any

from aws_lambda_powertools.event_handler import APIGatewayHttpResolver

from batchgw.api import admin_routes, http
from batchgw.config.catalog import ENDPOINTS
from batchgw.deps import get_deps
from batchgw.domain import codec
from batchgw.domain.states import BatchStatus

ERROR = {
    "type": "object",
    "required": ["error"],
    "properties": {
        "error": {
            "type": "object",
            "required": ["message", "type", "param", "code"],
            "properties": {
                "message": {"type": "string"},
                "type": {"type": "string"},
                "param": {"type": ["string", "null"]},
                "code": {"type": ["string", "integer", "null"]},
            },
        }
    },
}
_ERRORS = {
    "400": "The request is not valid; nothing was stored.",
    "401": "No API key, or an unknown one.",
    "403": "The key's role may not do this.",
    "404": "No such batch, file or upload (or batch inference is not available).",
    "409": "The batch is not in a state that allows this.",
    "413": "The body is larger than the gateway takes.",
    "429": (
        "A per-user limit was reached, or the key's request rate (code rate_limited, with a "
        "Retry-After header in seconds)."
    ),
}


def _query(name: str, schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"name": name, "in": "query", "required": False, "schema": schema, "description": description}


_TIME = {"type": "string", "description": "unix seconds or ISO 8601"}
QUERY: dict[tuple[str, str], list[dict[str, Any]]] = {
    ("get", "/v1/batches"): [
        _query("limit", {"type": "integer", "minimum": 1, "maximum": 100}, "batches per page (20)"),
        _query("after", {"type": "string"}, "the last batch id of the previous page"),
        _query(
            "status",
            {"type": "string", "enum": [s.value for s in BatchStatus]},
            "only batches in this status (repeatable)",
        ),
        _query("created_after", _TIME, "only batches created after this time"),
        _query("created_before", _TIME, "only batches created before this time"),
    ],
    ("get", "/v1/batches/{batch_id}/results"): [
        _query("limit", {"type": "integer", "minimum": 1, "maximum": 1000}, "results per page (100)"),
        _query("after", {"type": "string"}, "the last result id of the previous page"),
    ],
    ("get", "/v1/files"): [
        _query("limit", {"type": "integer", "minimum": 1, "maximum": 10000}, "files per page"),
        _query("after", {"type": "string"}, "the last file id of the previous page"),
        _query("purpose", {"type": "string"}, "only files with this purpose"),
        _query("order", {"type": "string", "enum": ["asc", "desc"]}, "by creation time (desc)"),
    ],
}

_REQUEST_LINE = {
    "type": "object",
    "required": ["custom_id", "body"],
    "properties": {
        "custom_id": {"type": "string", "maxLength": 512},
        "method": {"type": "string", "enum": ["POST"]},
        "url": {"type": "string", "enum": list(ENDPOINTS)},
        "body": {"type": "object", "description": "the request as its endpoint takes it"},
    },
}
_METADATA = {"type": ["object", "null"], "additionalProperties": {"type": "string", "maxLength": 512}}
_WINDOW = {"type": "string", "enum": ["24h", "48h", "72h", "168h"]}


def _json_body(schema: dict[str, Any]) -> dict[str, Any]:
    return {"required": True, "content": {"application/json": {"schema": schema}}}


def _multipart_body(properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    schema = {"type": "object", "properties": properties, "required": required}
    return {"required": True, "content": {"multipart/form-data": {"schema": schema}}}


_DECLARED_FILE = {
    "filename": {"type": "string", "minLength": 1},
    "purpose": {"type": "string", "enum": ["batch"]},
    "bytes": {"type": "integer", "minimum": 1},
}
BODIES: dict[tuple[str, str], dict[str, Any]] = {
    ("post", "/v1/batches"): _json_body(
        {
            "oneOf": [
                {
                    "type": "object",
                    "required": ["requests"],
                    "properties": {
                        "requests": {"type": "array", "items": _REQUEST_LINE, "minItems": 1},
                        "metadata": _METADATA,
                        "completion_window": _WINDOW,
                    },
                },
                {
                    "type": "object",
                    "required": ["input_file_id", "endpoint", "completion_window"],
                    "properties": {
                        "input_file_id": {"type": "string"},
                        "endpoint": {"type": "string", "enum": list(ENDPOINTS)},
                        "completion_window": _WINDOW,
                        "metadata": _METADATA,
                    },
                },
            ]
        }
    ),
    ("post", "/v1/files"): _multipart_body(
        {"file": {"type": "string", "format": "binary"}, "purpose": {"type": "string", "enum": ["batch"]}},
        ["file", "purpose"],
    ),
    ("post", "/v1/files/presigned"): _json_body(
        {"type": "object", "required": list(_DECLARED_FILE), "properties": _DECLARED_FILE}
    ),
    ("post", "/v1/uploads"): _json_body(
        {
            "type": "object",
            "required": [*_DECLARED_FILE, "mime_type"],
            "properties": {**_DECLARED_FILE, "mime_type": {"type": "string", "minLength": 1}},
        }
    ),
    ("post", "/v1/uploads/{upload_id}/parts"): _multipart_body(
        {"data": {"type": "string", "format": "binary"}}, ["data"]
    ),
    ("post", "/v1/uploads/{upload_id}/complete"): _json_body(
        {
            "type": "object",
            "required": ["part_ids"],
            "properties": {
                "part_ids": {"type": "array", "items": {"type": "string"}, "minItems": 1},
                "md5": {"type": "string"},
            },
        }
    ),
}


def complete(generated: dict[str, Any]) -> dict[str, Any]:
    """The resolver's generated document with the parameters, bodies, key and errors added."""
    document = deepcopy(generated)
    document.setdefault("components", {})
    document["components"]["schemas"] = {"Error": ERROR}
    document["components"]["securitySchemes"] = {"bearer": {"type": "http", "scheme": "bearer"}}
    for path, operations in document.get("paths", {}).items():
        for method, operation in operations.items():
            key = (method, path)
            operation.setdefault("parameters", []).extend(deepcopy(QUERY.get(key, [])))
            if key in BODIES:
                operation["requestBody"] = deepcopy(BODIES[key])
            if path != "/v1/openapi.json":
                operation["security"] = [{"bearer": []}]
            responses = {
                code: response for code, response in operation.get("responses", {}).items() if code != "422"
            }
            for code, description in _ERRORS.items():
                responses.setdefault(
                    code,
                    {
                        "description": description,
                        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}},
                    },
                )
            operation["responses"] = responses
    return document


def _schema(resolver: APIGatewayHttpResolver) -> dict[str, Any]:
    generated = resolver.get_openapi_schema(
        title="batchgw", version="1", summary="The batch API of an LLM gateway"
    )
    schema: dict[str, Any] = generated.model_dump(mode="json", by_alias=True, exclude_none=True)
    return schema


@functools.cache
def document(api: APIGatewayHttpResolver) -> str:
    """The whole HTTP API's description, as JSON: ``api``'s routes and the admin function's."""
    described = http.new_resolver()
    admin_routes.register(described, get_deps)
    generated = _schema(api)
    generated.setdefault("paths", {}).update(_schema(described).get("paths", {}))
    return codec.dumps(complete(generated))
