"""The API's OpenAPI document (``GET /v1/openapi.json``).

The resolver generates the paths, methods and path parameters from its routes; this
module completes each operation with what the routes read themselves: the query
parameters, the request bodies, the bearer key, the errors every route may answer in the
spec's shape, and the links from an answer's id to what can be done with it next;
``document`` adds the admin function's routes to the api's.

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
from batchgw.domain.interactive import MAX_IN_FLIGHT, MAX_REPORT_MODELS, MAX_TTL_SECONDS, MIN_TTL_SECONDS
from batchgw.domain.modes import MODES
from batchgw.domain.states import BatchStatus
from batchgw.domain.webhooks import SENT_EVENT_TYPES
from batchgw.validation.priority import ADMIN_PRIORITIES, USER_PRIORITIES

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
# Errors of one operation alone.
_OWN_ERRORS = {
    ("post", "/v1/batches"): {
        "422": "complete_by cannot be met (code deadline_infeasible; the error's earliest_completion_at "
        "says when the batch could end); nothing was stored."
    },
    ("patch", "/v1/batches/{batch_id}"): {
        "422": "complete_by cannot be met (code deadline_infeasible; the error's earliest_completion_at "
        "says when the batch could end); nothing was changed."
    },
}


def _query(name: str, schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"name": name, "in": "query", "required": False, "schema": schema, "description": description}


_TIME = {"type": "string", "description": "unix seconds or ISO 8601"}
QUERY: dict[tuple[str, str], list[dict[str, Any]]] = {
    ("post", "/v1/batches/preflight"): [
        _query(
            "format",
            {"type": "string", "enum": ["json", "csv", "jsonl"]},
            "json (the default), or the problems alone as csv or jsonl",
        )
    ],
    ("get", "/console/api/batches"): [
        _query(
            "group",
            {"type": "string", "enum": ["processing", "completed", "with_issues", "cancelled"]},
            "only batches the console shows in this group",
        ),
        _query("q", {"type": "string", "maxLength": 200}, "a part of a batch's name or id"),
        _query("limit", {"type": "integer", "minimum": 1, "maximum": 100}, "batches per page (20)"),
        _query("after", {"type": "string"}, "the next_after of the previous page"),
    ],
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
    ("get", "/v1/batches/{batch_id}/output.jsonl"): [
        _query(
            "merged",
            {"type": "string", "enum": ["true", "false"]},
            "true: with the results of the batches it retries, one line per custom_id",
        )
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

QUERY[("get", "/v1/batches/capacity")] = [
    _query("model", {"type": "string"}, "only this model (every model the key may use)"),
    _query("requests", {"type": "integer", "minimum": 1}, "the new batch's requests (1)"),
]
_LIST_FILTERS = QUERY[("get", "/v1/batches")]
QUERY[("get", "/admin/batch/jobs")] = [*_LIST_FILTERS, _query("user", {"type": "string"}, "only this user's")]
QUERY[("get", "/admin/batch/summary")] = [_query("user", {"type": "string"}, "only this user")]
QUERY[("get", "/admin/batch/jobs/{batch_id}/requests")] = [
    _query("limit", {"type": "integer", "minimum": 1, "maximum": 100}, "requests per page (20)"),
    _query("after", {"type": "string"}, "the last request id of the previous page"),
]
_SOURCE = _query("source", {"type": "string", "enum": ["interactive", "batch"]}, "whose calls (interactive)")
_WINDOW_QUERY = [
    _query("start_time", _TIME, "from this time, inclusive (a day back; at most 90 days)"),
    _query("end_time", _TIME, "to this time, exclusive (now)"),
]
QUERY[("get", "/admin/requests")] = [
    _SOURCE,
    _query("batch_id", {"type": "string"}, "one batch's calls (with source=batch)"),
    *_WINDOW_QUERY,
    _query("limit", {"type": "integer", "minimum": 1, "maximum": 1000}, "requests per page (100)"),
    _query("after", {"type": "string"}, "the last request id of the previous page"),
]
QUERY[("get", "/admin/request-metrics")] = [
    _SOURCE,
    *_WINDOW_QUERY,
    _query("interval", {"type": "string", "enum": ["hour", "day"]}, "each bar's length (hour)"),
]
QUERY[("get", "/admin/audit")] = [
    _query("user", {"type": "string"}, "whose content was read (required)"),
    _query("limit", {"type": "integer", "minimum": 1, "maximum": 100}, "entries per page (20)"),
    _query("after", {"type": "string"}, "the last entry id of the previous page"),
]
QUERY[("get", "/admin/batch/jobs/{batch_id}/attempts")] = [
    _query("limit", {"type": "integer", "minimum": 1, "maximum": 1000}, "attempts per page (100)"),
    _query("after", {"type": "string"}, "the last attempt id of the previous page"),
    _query("model", {"type": "string"}, "only this model's"),
    _query("status", {"type": "string"}, "an HTTP status code, or success, failed, retry or queued"),
    _query("start_time", _TIME, "only attempts ended at or after this time (with a timezone)"),
    _query("end_time", _TIME, "only attempts ended before this time (with a timezone)"),
]

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
# A batch's scheduling (``validation.priority``): on a create, and changed by PATCH.
_SCHEDULING = {
    "priority": {
        "type": "integer",
        "minimum": ADMIN_PRIORITIES[0],
        "maximum": ADMIN_PRIORITIES[1],
        "description": f"Higher first (0). A user may give {USER_PRIORITIES[0]} to {USER_PRIORITIES[1]}; "
        f"an administrator {ADMIN_PRIORITIES[0]} to {ADMIN_PRIORITIES[1]}.",
    },
    "complete_by": {
        "type": ["integer", "null"],
        "minimum": 0,
        "description": "Unix seconds by which the batch is wanted done: after now, not after "
        "expires_at (null: none).",
    },
}
_WINDOW = {"type": "string", "enum": ["24h", "48h", "72h", "168h"]}


def _json_body(schema: dict[str, Any]) -> dict[str, Any]:
    return {"required": True, "content": {"application/json": {"schema": schema}}}


def _multipart_body(properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    schema = {"type": "object", "properties": properties, "required": required}
    return {"required": True, "content": {"multipart/form-data": {"schema": schema}}}


_DECLARED_FILE = {
    "filename": {"type": "string", "minLength": 1, "maxLength": 512},
    "purpose": {"type": "string", "enum": ["batch"]},
    "bytes": {"type": "integer", "minimum": 1},
}
# The create page's file and choices: a preflight's body, and a console submission's.
_PREFLIGHT = {
    "input_file_id": {"type": "string"},
    "endpoint": {"type": "string", "enum": ["/v1/chat/completions", "/v1/embeddings"]},
    "model": {"type": "string", "minLength": 1},
    "temperature": {"type": "number", "minimum": 0, "maximum": 2},
    "max_tokens": {"type": "integer", "minimum": 1},
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
                        "endpoint": {
                            "type": "string",
                            "enum": list(ENDPOINTS),
                            "description": "Each request's url when it gives none (it may not give another).",
                        },
                        "model": {
                            "type": "string",
                            "minLength": 1,
                            "description": "Each body's model when it gives none (it may not give another).",
                        },
                        **_SCHEDULING,
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
                        **_SCHEDULING,
                    },
                },
            ]
        }
    ),
    ("post", "/v1/batches/preflight"): _json_body(
        {
            "oneOf": [
                {
                    "type": "object",
                    "required": ["input_file_id"],
                    "description": "Check an uploaded JSONL file as the console submits it, running and "
                    "billing nothing: lines may leave out url and method, and the stricter rules apply "
                    "(fields the gateway would not forward, a byte-order mark, repeated keys, NaN and "
                    "Infinity are errors). ?format=csv or jsonl answers the problems alone, as a file.",
                    "properties": _PREFLIGHT,
                },
                {
                    "type": "object",
                    "required": ["requests"],
                    "description": "Check direct requests as a create would take them, running and "
                    "billing nothing.",
                    "properties": {
                        "requests": {"type": "array", "items": _REQUEST_LINE, "minItems": 1},
                        "metadata": _METADATA,
                        "completion_window": _WINDOW,
                    },
                },
            ],
            "description": "The answer's cost bounds each model's requests from no output to the most "
            "each may ask for, and says whether that fits what the caller's quotas and budgets leave.",
        }
    ),
    ("post", "/v1/batches/{batch_id}/retry"): {
        "required": False,
        "content": {
            "application/json": {
                "schema": {
                    "type": "object",
                    "description": "Open a child batch of this ended batch's failed, expired and "
                    "cancelled requests (only those with one of error_codes, when given), in the "
                    "execution mode its parent asked for unless execution_mode says another. Honours "
                    "an Idempotency-Key header.",
                    "properties": {
                        "error_codes": {
                            "type": "array",
                            "items": {"type": "string", "minLength": 1},
                            "minItems": 1,
                        },
                        "completion_window": _WINDOW,
                        "metadata": _METADATA,
                        "execution_mode": {"type": "string", "enum": list(MODES)},
                    },
                    "additionalProperties": False,
                }
            }
        },
    },
    ("post", "/console/api/batches"): _json_body(
        {
            "type": "object",
            "required": ["input_file_id", "name", "check"],
            "description": "Submit the console's create page: the preflight's body, the batch's name and "
            "description, and the check the preflight answered (409 check_outdated when the file, the "
            "key or the model changed since). Needs an Idempotency-Key header.",
            "properties": {
                **_PREFLIGHT,
                "name": {"type": "string", "minLength": 1, "maxLength": 256},
                "description": {"type": "string", "maxLength": 512},
                "check": {"type": "string"},
                **_SCHEDULING,
            },
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


_USD = {"type": ["number", "null"], "minimum": 0}
_ROLE = {"type": "string", "enum": ["free", "pro", "internal", "admin"]}
_USER = {
    "name": {"type": "string", "minLength": 1},
    "email": {"type": "string", "format": "email"},
    "role": _ROLE,
    "daily_quota_usd": _USD,
    "monthly_quota_usd": _USD,
    "weight": {
        "type": "number",
        "exclusiveMinimum": 0,
        "maximum": 100,
        "description": "the share of batch capacity against other users (1)",
    },
}
_KEY = {
    "name": {"type": "string"},
    "expires_at": {"type": ["integer", "string", "null"], "description": "unix seconds or ISO 8601"},
    "daily_budget_usd": _USD,
    "monthly_budget_usd": _USD,
}


_ENDPOINT = {
    "url": {"type": "string", "format": "uri"},
    "name": {"type": "string", "minLength": 1, "maxLength": 256},
    "event_types": {
        "type": "array",
        "items": {"type": "string", "enum": list(SENT_EVENT_TYPES)},
        "minItems": 1,
    },
}


def _object(properties: dict[str, Any], required: tuple[str, ...] = ()) -> dict[str, Any]:
    return _json_body(
        {
            "type": "object",
            "properties": properties,
            "required": list(required),
            "additionalProperties": False,
        }
    )


BODIES.update(
    {
        ("put", "/v1/batch_webhook"): _object(
            {"url": {"type": "string", "format": "uri"}, "rotate_secret": {"type": "boolean"}}, ("url",)
        ),
        ("post", "/v1/webhook_endpoints"): _object(_ENDPOINT, ("url", "name", "event_types")),
        ("post", "/v1/webhook_endpoints/{endpoint_id}"): _object(_ENDPOINT),
        ("post", "/v1/webhook_endpoints/{endpoint_id}/rotate_secret"): {
            **_object({"keep_old_secret_active_for_24_hours": {"type": "boolean"}}),
            "required": False,
        },
        ("post", "/v1/webhook_endpoints/{endpoint_id}/test"): _object(
            {"event_type": {"type": "string", "enum": list(SENT_EVENT_TYPES)}}, ("event_type",)
        ),
        ("patch", "/v1/batches/{batch_id}"): _json_body(
            {
                "type": "object",
                "description": "Change an unfinished batch's priority and/or complete_by (null "
                "clears it); 422 deadline_infeasible for a complete_by before the batch's estimate; "
                "409 batch_finalized once it has ended.",
                "properties": _SCHEDULING,
                "minProperties": 1,
                "additionalProperties": False,
            }
        ),
        ("post", "/admin/users"): _object(_USER, ("name", "email", "role")),
        ("patch", "/admin/users/{user_id}"): _object(
            {**_USER, "status": {"type": "string", "enum": ["active", "suspended"]}}
        ),
        ("post", "/admin/users/{user_id}/keys"): _object(_KEY),
        ("patch", "/admin/keys/{key_id}"): _object(_KEY),
        ("patch", "/admin/config/{name}"): _object({"value": {}}, ("value",)),
        ("patch", "/admin/batch/models/{model_id}"): _object(
            {"max_concurrency": {"type": ["integer", "null"], "minimum": 0}}, ("max_concurrency",)
        ),
        ("put", "/admin/interactive-load/{reporter_id}"): _object(
            {
                "models": {
                    "type": "object",
                    "maxProperties": MAX_REPORT_MODELS,
                    "additionalProperties": {"type": "integer", "minimum": 0, "maximum": MAX_IN_FLIGHT},
                },
                "ttl_seconds": {"type": "number", "minimum": MIN_TTL_SECONDS, "maximum": MAX_TTL_SECONDS},
            },
            ("models",),
        ),
        ("patch", "/admin/routing/provider-route-batch/{model_id}/{route_id}"): _object(
            {"batch_allowed": {"type": ["boolean", "null"]}}, ("batch_allowed",)
        ),
    }
)

# OpenAPI links: what an answer's id lets a client do next (and a stateful fuzzer chain).
# (method, path) of the answering operation -> link name -> (method, path, {parameter: expression}).
_BATCH = {"batch_id": "$response.body#/id"}
_FILE = {"file_id": "$response.body#/id"}
_UPLOAD = {"upload_id": "$response.body#/id"}
_BATCH_OPERATIONS = {
    "GetBatch": ("get", "/v1/batches/{batch_id}"),
    "UpdateBatch": ("patch", "/v1/batches/{batch_id}"),
    "CancelBatch": ("post", "/v1/batches/{batch_id}/cancel"),
    "BatchResults": ("get", "/v1/batches/{batch_id}/results"),
    "BatchOutput": ("get", "/v1/batches/{batch_id}/output.jsonl"),
    "DeleteBatch": ("delete", "/v1/batches/{batch_id}"),
    "RetryBatch": ("post", "/v1/batches/{batch_id}/retry"),
}
_FILE_OPERATIONS = {
    "GetFile": ("get", "/v1/files/{file_id}"),
    "FileContent": ("get", "/v1/files/{file_id}/content"),
    "DeleteFile": ("delete", "/v1/files/{file_id}"),
}
LINKS: dict[tuple[str, str], dict[str, tuple[str, str, dict[str, str]]]] = {
    ("post", "/v1/batches"): {name: (*op, _BATCH) for name, op in _BATCH_OPERATIONS.items()},
    ("post", "/v1/files"): {name: (*op, _FILE) for name, op in _FILE_OPERATIONS.items()},
    ("post", "/v1/files/presigned"): {
        "CompleteFile": ("post", "/v1/files/{file_id}/complete", {"file_id": "$response.body#/file/id"}),
    },
    ("post", "/v1/files/{file_id}/complete"): {name: (*op, _FILE) for name, op in _FILE_OPERATIONS.items()},
    ("post", "/v1/uploads"): {
        "AddPart": ("post", "/v1/uploads/{upload_id}/parts", _UPLOAD),
        "CompleteUpload": ("post", "/v1/uploads/{upload_id}/complete", _UPLOAD),
        "CancelUpload": ("post", "/v1/uploads/{upload_id}/cancel", _UPLOAD),
    },
    ("post", "/v1/uploads/{upload_id}/complete"): {
        name: (method, path, {"file_id": "$response.body#/file/id"})
        for name, (method, path) in _FILE_OPERATIONS.items()
    },
    ("post", "/v1/webhook_endpoints"): {
        name: (method, path, {"endpoint_id": "$response.body#/id"})
        for name, (method, path) in {
            "GetWebhookEndpoint": ("get", "/v1/webhook_endpoints/{endpoint_id}"),
            "UpdateWebhookEndpoint": ("post", "/v1/webhook_endpoints/{endpoint_id}"),
            "RotateWebhookSecret": ("post", "/v1/webhook_endpoints/{endpoint_id}/rotate_secret"),
            "TestWebhookEndpoint": ("post", "/v1/webhook_endpoints/{endpoint_id}/test"),
            "DeleteWebhookEndpoint": ("delete", "/v1/webhook_endpoints/{endpoint_id}"),
        }.items()
    },
    ("post", "/admin/users"): {
        "GetUser": ("get", "/admin/users/{user_id}", {"user_id": "$response.body#/id"}),
        "UpdateUser": ("patch", "/admin/users/{user_id}", {"user_id": "$response.body#/id"}),
        "CreateKey": ("post", "/admin/users/{user_id}/keys", {"user_id": "$response.body#/id"}),
        "ListKeys": ("get", "/admin/users/{user_id}/keys", {"user_id": "$response.body#/id"}),
        "DeleteUser": ("delete", "/admin/users/{user_id}", {"user_id": "$response.body#/id"}),
    },
    ("post", "/admin/users/{user_id}/keys"): {
        "UpdateKey": ("patch", "/admin/keys/{key_id}", {"key_id": "$response.body#/id"}),
        "RevokeKey": ("post", "/admin/keys/{key_id}/revoke", {"key_id": "$response.body#/id"}),
        "RegenerateKey": ("post", "/admin/keys/{key_id}/regenerate", {"key_id": "$response.body#/id"}),
    },
}


def _links(document: dict[str, Any], key: tuple[str, str]) -> dict[str, Any]:
    """The ``links`` of ``key``'s 200 answer, each naming its target by operationId."""
    paths = document.get("paths", {})
    links = {}
    for name, (method, path, parameters) in LINKS.get(key, {}).items():
        target = paths.get(path, {}).get(method)
        if target is not None:
            links[name] = {"operationId": target["operationId"], "parameters": dict(parameters)}
    return links


# A valid body for each operation that makes something, so a client (or a stateful fuzzer)
# has one that works, and the links from its answer lead somewhere.
EXAMPLES: dict[tuple[str, str], Any] = {
    ("post", "/v1/batches"): {
        "requests": [
            {
                "custom_id": "q-1",
                "method": "POST",
                "url": "/v1/chat/completions",
                "body": {"model": "sim-chat", "messages": [{"role": "user", "content": "Hello"}]},
            }
        ],
        "metadata": {"run": "example"},
    },
    ("post", "/v1/files/presigned"): {"filename": "requests.jsonl", "purpose": "batch", "bytes": 1024},
    ("post", "/v1/uploads"): {
        "filename": "requests.jsonl",
        "purpose": "batch",
        "bytes": 1024,
        "mime_type": "application/jsonl",
    },
    ("post", "/admin/users"): {"name": "Example", "email": "example@example.com", "role": "internal"},
    ("post", "/admin/users/{user_id}/keys"): {"name": "example", "daily_budget_usd": 10},
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
                if key in EXAMPLES:
                    operation["requestBody"]["content"]["application/json"]["example"] = EXAMPLES[key]
            if path != "/v1/openapi.json":
                operation["security"] = [{"bearer": []}]
            responses = {
                code: response for code, response in operation.get("responses", {}).items() if code != "422"
            }
            for code, description in {**_ERRORS, **_OWN_ERRORS.get(key, {})}.items():
                responses.setdefault(
                    code,
                    {
                        "description": description,
                        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}},
                    },
                )
            links = _links(document, key)
            if links and "200" in responses:
                responses["200"] = {**responses["200"], "links": links}
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
