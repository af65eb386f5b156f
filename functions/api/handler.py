"""API function: the HTTP API's routes, each a thin call into ``batchgw.api``.

The ``/admin/...`` routes are the admin function's (``functions/admin``); this one only
describes them in the OpenAPI document.
"""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.utilities.typing import LambdaContext
from batchgw.api import accounts, auth, batches, files, http, uploads, webhooks
from batchgw.api.params import Download
from batchgw.deps import get_deps
from batchgw.domain.errors import BadRequest
from batchgw.domain.principal import Principal
from batchgw.observability import logger
from batchgw.validation.jsonbody import parse_json

app = http.new_resolver()
_json = http.json_response


def _principal() -> Principal:
    deps = get_deps()
    auth.ensure_enabled(deps)
    return http.caller(deps, app)


def _raw_body() -> bytes:
    return http.raw_body(app)


def _params() -> dict[str, list[str]]:
    return http.params(app)


def _json_body() -> Any:
    return http.json_body(app)


def _download(download: Download) -> Response[Any]:
    """A file answer: 302 to its presigned URL, or its bytes (as text or binary)."""
    headers = {}
    if download.sha256 is not None:
        headers = {"ETag": f'"{download.sha256}"', "x-content-sha256": download.sha256}
    if download.location is not None:
        return Response(status_code=302, headers={**headers, "Location": download.location}, body="")
    body = download.body or b""
    return Response(
        status_code=200,
        content_type=download.content_type,
        body=body.decode() if download.text else body,
        headers=headers,
    )


@app.post("/v1/batches")
def create_batch() -> Response[Any]:
    principal = _principal()
    headers = app.current_event.headers
    if headers.get("anthropic-beta"):
        raise BadRequest("anthropic-beta is not supported: batches support no beta.", param="anthropic-beta")
    if "x-on-behalf-of" in headers:
        raise BadRequest(
            "X-On-Behalf-Of is not supported: a batch always runs as the key that creates it.",
            param="X-On-Behalf-Of",
        )
    return _json(
        200,
        batches.create_batch(
            get_deps(),
            principal,
            _raw_body(),
            anthropic_version=headers.get("anthropic-version"),
            idempotency_key=headers.get("idempotency-key"),
        ),
    )


@app.get("/v1/batches")
def list_batches() -> Response[Any]:
    return _json(200, batches.list_batches(get_deps(), _principal(), _params()))


@app.get("/v1/batches/<batch_id>")
def get_batch(batch_id: str) -> Response[Any]:
    return _json(200, batches.get_batch(get_deps(), _principal(), batch_id))


@app.post("/v1/batches/<batch_id>/cancel")
def cancel_batch(batch_id: str) -> Response[Any]:
    return _json(200, batches.cancel_batch(get_deps(), _principal(), batch_id))


@app.delete("/v1/batches/<batch_id>")
def delete_batch(batch_id: str) -> Response[Any]:
    return _json(200, batches.delete_batch(get_deps(), _principal(), batch_id))


# The results routes load their module (and the file validator's line splitting it reads
# stored inputs with) on their first request: a batch's results are read long after its
# process's first request, so no cold start pays for them.


@app.get("/v1/batches/<batch_id>/results")
def batch_results(batch_id: str) -> Response[Any]:
    from batchgw.api import results

    page = results.results_page(get_deps(), _principal(), batch_id, _params())
    return _download(page) if isinstance(page, Download) else _json(200, page)


@app.get("/v1/batches/<batch_id>/output.jsonl")
def batch_output(batch_id: str) -> Response[Any]:
    from batchgw.api import results

    return _download(results.output_jsonl(get_deps(), _principal(), batch_id))


# --- files and uploads --------------------------------------------------------------------


def _content_type() -> str | None:
    return app.current_event.headers.get("content-type")


@app.post("/v1/files")
def upload_file() -> Response[Any]:
    return _json(200, files.upload_file(get_deps(), _principal(), _content_type(), _raw_body()))


@app.post("/v1/files/presigned")
def presign_upload() -> Response[Any]:
    return _json(200, files.presign_upload(get_deps(), _principal(), parse_json(_raw_body())))


@app.post("/v1/files/<file_id>/complete")
def complete_presigned(file_id: str) -> Response[Any]:
    return _json(200, files.complete_presigned(get_deps(), _principal(), file_id))


@app.get("/v1/files")
def list_files() -> Response[Any]:
    return _json(200, files.list_files(get_deps(), _principal(), _params()))


@app.get("/v1/files/<file_id>")
def get_file(file_id: str) -> Response[Any]:
    return _json(200, files.get_file(get_deps(), _principal(), file_id))


@app.delete("/v1/files/<file_id>")
def delete_file(file_id: str) -> Response[Any]:
    return _json(200, files.delete_file(get_deps(), _principal(), file_id))


@app.get("/v1/files/<file_id>/content")
def file_content(file_id: str) -> Response[Any]:
    return _download(files.file_content(get_deps(), _principal(), file_id))


@app.post("/v1/uploads")
def create_upload() -> Response[Any]:
    return _json(200, uploads.create_upload(get_deps(), _principal(), parse_json(_raw_body())))


@app.post("/v1/uploads/<upload_id>/parts")
def add_upload_part(upload_id: str) -> Response[Any]:
    return _json(200, uploads.add_part(get_deps(), _principal(), upload_id, _content_type(), _raw_body()))


@app.post("/v1/uploads/<upload_id>/complete")
def complete_upload(upload_id: str) -> Response[Any]:
    return _json(200, uploads.complete_upload(get_deps(), _principal(), upload_id, parse_json(_raw_body())))


@app.post("/v1/uploads/<upload_id>/cancel")
def cancel_upload(upload_id: str) -> Response[Any]:
    return _json(200, uploads.cancel_upload(get_deps(), _principal(), upload_id))


# --- the user's batch webhook -------------------------------------------------------------


@app.put("/v1/batch_webhook")
def put_webhook() -> Response[Any]:
    return _json(200, webhooks.put_webhook(get_deps(), _principal(), _json_body()))


@app.get("/v1/batch_webhook")
def get_webhook() -> Response[Any]:
    return _json(200, webhooks.get_webhook(get_deps(), _principal()))


@app.delete("/v1/batch_webhook")
def delete_webhook() -> Response[Any]:
    return _json(200, webhooks.delete_webhook(get_deps(), _principal()))


@app.get("/v1/batch_webhook/events")
def webhook_events() -> Response[Any]:
    return _json(200, webhooks.list_events(get_deps(), _principal()))


# --- the caller's own account ----------------------------------------------------------------


@app.get("/v1/me")
def me() -> Response[Any]:
    # outside the batch API: BATCH_ENABLED does not apply
    deps = get_deps()
    return _json(200, accounts.me(deps, http.caller(deps, app)))


# --- the API's description ---------------------------------------------------------------


@app.get("/v1/openapi.json")
def openapi_json() -> Response[Any]:
    # Loaded on this route's first request: describing the API (and the admin function's
    # routes) is no other route's cold start.
    from batchgw.api import openapi

    return Response(status_code=200, content_type="application/json", body=openapi.document(app))


# --- the retired Message Batches API ------------------------------------------------------

RETIRED = (
    "The Message Batches API has been removed: use POST /v1/batches with the Messages target "
    '(url "/v1/messages", and the anthropic-version header) instead.'
)


def _gone() -> Response[Any]:
    return _json(
        410,
        {
            "type": "error",
            "error": {"type": "not_found_error", "message": RETIRED, "code": "message_batches_removed"},
        },
    )


for _prefix in ("/v1/messages/batches", "/anthropic/v1/messages/batches"):
    for _path in (_prefix, f"{_prefix}/<batch_id>", f"{_prefix}/<batch_id>/<action>"):
        app.route(_path, method=["GET", "POST", "DELETE", "PUT", "PATCH"], include_in_schema=False)(
            lambda **_: _gone()
        )


@logger.inject_lambda_context(clear_state=True)
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    return app.resolve(event, context)
