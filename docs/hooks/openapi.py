"""mkdocs hook: the API reference page (``use/reference.md``), generated at build time from
the OpenAPI document the gateway serves at ``GET /v1/openapi.json``.

The document is built as the api function builds it (``functions/api/handler.py``: the
console's routes, then the public ones, described by ``batchgw.api.openapi.document``, which
adds the admin function's), so the reference cannot drift from the code. Nothing is fetched
and no JavaScript renders it: the page is plain Markdown.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import File, Files

REPO_ROOT = Path(__file__).resolve().parents[2]
SHARED_LAYER = REPO_ROOT / "layers" / "shared" / "python"
PAGE = "use/reference.md"
METHODS = ("get", "post", "put", "patch", "delete")
# The reference's sections, by the path's start (the first that matches).
SECTIONS = (
    ("Batches", ("/v1/batches",)),
    ("Files", ("/v1/files",)),
    ("Uploads", ("/v1/uploads",)),
    ("Webhooks", ("/v1/batch_webhook", "/v1/webhook_endpoints", "/v1/webhook_event_types")),
    ("Models", ("/v1/models",)),
    ("Your account", ("/v1/me",)),
    ("The console", ("/console/", "/user/")),
    ("Administration", ("/admin/",)),
    ("This document", ("/v1/openapi.json",)),
)


def openapi_document() -> dict[str, Any]:
    """The gateway's OpenAPI document, as ``GET /v1/openapi.json`` answers it."""
    if str(SHARED_LAYER) not in sys.path:
        sys.path.insert(0, str(SHARED_LAYER))
    from batchgw.api import http, openapi, routes
    from batchgw.console import routes as console_routes
    from batchgw.deps import get_deps

    app = http.new_resolver()
    console_routes.register(app, get_deps)
    routes.register(app, get_deps)
    document: dict[str, Any] = json.loads(openapi.document(app))
    return document


def _cell(text: Any) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _schema_type(schema: dict[str, Any]) -> str:
    if "$ref" in schema:
        return schema["$ref"].rsplit("/", 1)[-1]
    kind = schema.get("type", "")
    if isinstance(kind, list):
        kind = " or ".join(kind)
    if "enum" in schema:
        kind = f"{kind}: " + ", ".join(f"`{value}`" for value in schema["enum"])
    return str(kind) or "any"


def _json_block(value: Any) -> list[str]:
    return ["```json", json.dumps(value, indent=2, ensure_ascii=False), "```", ""]


def _section(path: str) -> str:
    for title, starts in SECTIONS:
        if path.startswith(starts):
            return title
    return "Other routes"


def _operation(path: str, method: str, operation: dict[str, Any]) -> list[str]:
    lines = [f"### `{method.upper()} {path}`", ""]
    if description := operation.get("description"):
        lines += [description, ""]
    if not operation.get("security"):
        lines += ["No key needed.", ""]
    if parameters := operation.get("parameters"):
        lines += ["| parameter | in | required | type | description |", "|---|---|---|---|---|"]
        for parameter in parameters:
            lines.append(
                "| `{}` | {} | {} | {} | {} |".format(
                    parameter["name"],
                    parameter["in"],
                    "yes" if parameter.get("required") else "no",
                    _cell(_schema_type(parameter.get("schema", {}))),
                    _cell(parameter.get("description", "")),
                )
            )
        lines.append("")
    if body := operation.get("requestBody"):
        for content_type, content in body.get("content", {}).items():
            required = " (required)" if body.get("required") else ""
            lines += [f"**Request body**{required}, `{content_type}`:", ""]
            if "schema" in content:
                lines += _json_block(content["schema"])
            if "example" in content:
                lines += ["Example:", "", *_json_block(content["example"])]
    lines += ["| answer | description |", "|---|---|"]
    for code, response in operation.get("responses", {}).items():
        links = ", ".join(f"`{name}`" for name in response.get("links", {}))
        more = f" (links: {links})" if links else ""
        lines.append(f"| {code} | {_cell(response.get('description', ''))}{more} |")
    lines.append("")
    return lines


def reference(document: dict[str, Any]) -> str:
    """The reference page's Markdown: every path and method, by section."""
    info = document.get("info", {})
    lines = [
        "# API reference",
        "",
        f"Generated when the site is built from the OpenAPI {document.get('openapi', '')} document "
        f"the gateway serves at `GET /v1/openapi.json` ({info.get('title', '')} {info.get('version', '')}: "
        f"{info.get('summary', '')}). What each route does, and the rules behind it, is on "
        "[The API](api.md).",
        "",
        "Every route takes `Authorization: Bearer <key>` unless it says otherwise; an error "
        "answers in one shape (`Error`):",
        "",
        *_json_block(document.get("components", {}).get("schemas", {}).get("Error", {})),
    ]
    sections: dict[str, list[tuple[str, str, dict[str, Any]]]] = {title: [] for title, _ in SECTIONS}
    for path in sorted(document.get("paths", {})):
        for method, operation in document["paths"][path].items():
            if method in METHODS:
                sections.setdefault(_section(path), []).append((path, method, operation))
    for title, operations in sections.items():
        if not operations:
            continue
        lines += [f"## {title}", ""]
        for path, method, operation in operations:
            lines += _operation(path, method, operation)
    return "\n".join(lines)


def on_files(files: Files, config: MkDocsConfig) -> Files:
    files.append(File.generated(config, PAGE, content=reference(openapi_document())))
    return files
