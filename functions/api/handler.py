"""API function: the HTTP API's routes, each a thin call into ``batchgw.api``."""

from __future__ import annotations

import base64
import functools
from typing import Any

from aws_lambda_powertools.event_handler import APIGatewayHttpResolver, Response
from aws_lambda_powertools.utilities.typing import LambdaContext
from batchgw.api import accounts, admin, auth, batches, files, openapi, results, uploads, webhooks
from batchgw.api.params import Download
from batchgw.deps import get_deps
from batchgw.domain import codec
from batchgw.domain.errors import ApiError, BadRequest, NotFound
from batchgw.domain.principal import Principal
from batchgw.observability import logger
from batchgw.validation.jsonbody import parse_json

app = APIGatewayHttpResolver()


def _json(status: int, body: Any) -> Response[Any]:
    return Response(status_code=status, content_type="application/json", body=codec.dumps(body))


def _principal() -> Principal:
    deps = get_deps()
    auth.ensure_enabled(deps)
    return auth.authenticate(deps, app.current_event.headers.get("authorization"))


def _raw_body() -> bytes:
    event = app.current_event
    body = event.body or ""
    return base64.b64decode(body) if event.is_base64_encoded else body.encode()


def _params() -> dict[str, list[str]]:
    """Query parameters; HTTP API joins repeated ones with commas, so split them back."""
    raw = app.current_event.query_string_parameters or {}
    return {name: value.split(",") if name == "status" else [value] for name, value in raw.items()}


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


@app.exception_handler(ApiError)
def _api_error(exc: ApiError) -> Response[Any]:
    return _json(exc.status, exc.body())


@app.not_found
def _not_found(_: Exception) -> Response[Any]:
    return _api_error(
        NotFound(f"Unknown route {app.current_event.request_context.http.method} {app.current_event.path}.")
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


@app.get("/v1/batches/<batch_id>/results")
def batch_results(batch_id: str) -> Response[Any]:
    page = results.results_page(get_deps(), _principal(), batch_id, _params())
    return _download(page) if isinstance(page, Download) else _json(200, page)


@app.get("/v1/batches/<batch_id>/output.jsonl")
def batch_output(batch_id: str) -> Response[Any]:
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


# --- users and keys (administrators) -------------------------------------------------------


def _caller() -> Principal:
    """The caller of a route outside the batch API (BATCH_ENABLED does not apply)."""
    return auth.authenticate(get_deps(), app.current_event.headers.get("authorization"))


def _json_body() -> Any:
    return parse_json(_raw_body()) if _raw_body() else None


@app.get("/v1/me")
def me() -> Response[Any]:
    return _json(200, accounts.me(get_deps(), _caller()))


@app.post("/admin/users")
def create_user() -> Response[Any]:
    return _json(200, accounts.create_user(get_deps(), _caller(), _json_body()))


@app.get("/admin/users")
def list_users() -> Response[Any]:
    return _json(200, accounts.list_users(get_deps(), _caller()))


@app.get("/admin/users/<user_id>")
def get_user(user_id: str) -> Response[Any]:
    return _json(200, accounts.get_user(get_deps(), _caller(), user_id))


@app.patch("/admin/users/<user_id>")
def update_user(user_id: str) -> Response[Any]:
    return _json(200, accounts.update_user(get_deps(), _caller(), user_id, _json_body()))


@app.delete("/admin/users/<user_id>")
def delete_user(user_id: str) -> Response[Any]:
    return _json(200, accounts.delete_user(get_deps(), _caller(), user_id))


@app.post("/admin/users/<user_id>/keys")
def create_key(user_id: str) -> Response[Any]:
    return _json(200, accounts.create_key(get_deps(), _caller(), user_id, _json_body()))


@app.get("/admin/users/<user_id>/keys")
def list_keys(user_id: str) -> Response[Any]:
    return _json(200, accounts.list_keys(get_deps(), _caller(), user_id))


@app.patch("/admin/keys/<key_id>")
def update_key(key_id: str) -> Response[Any]:
    return _json(200, accounts.update_key(get_deps(), _caller(), key_id, _json_body()))


@app.post("/admin/keys/<key_id>/revoke")
def revoke_key(key_id: str) -> Response[Any]:
    return _json(200, accounts.revoke_key(get_deps(), _caller(), key_id))


@app.post("/admin/keys/<key_id>/regenerate")
def regenerate_key(key_id: str) -> Response[Any]:
    return _json(200, accounts.regenerate_key(get_deps(), _caller(), key_id))


# --- the operator's plane (administrators) ------------------------------------------------


@app.get("/admin/config")
def list_config() -> Response[Any]:
    return _json(200, admin.list_config(get_deps(), _caller()))


@app.patch("/admin/config/<name>")
def set_config(name: str) -> Response[Any]:
    return _json(200, admin.set_config(get_deps(), _caller(), name, _json_body()))


@app.delete("/admin/config/<name>")
def reset_config(name: str) -> Response[Any]:
    return _json(200, admin.reset_config(get_deps(), _caller(), name))


@app.get("/admin/batch/models")
def list_models() -> Response[Any]:
    return _json(200, admin.list_models(get_deps(), _caller()))


@app.patch("/admin/batch/models/<model_id>")
def set_model(model_id: str) -> Response[Any]:
    return _json(200, admin.set_model(get_deps(), _caller(), model_id, _json_body()))


@app.get("/admin/routing/provider-routes")
def list_routes() -> Response[Any]:
    return _json(200, admin.list_routes(get_deps(), _caller()))


@app.patch("/admin/routing/provider-route-batch/<model_id>/<route_id>")
def set_route(model_id: str, route_id: str) -> Response[Any]:
    return _json(200, admin.set_route(get_deps(), _caller(), model_id, route_id, _json_body()))


@app.get("/admin/batch/jobs")
def list_jobs() -> Response[Any]:
    return _json(200, admin.list_jobs(get_deps(), _caller(), _params()))


@app.get("/admin/batch/summary")
def batch_summary() -> Response[Any]:
    return _json(200, admin.summary(get_deps(), _caller(), _params()))


@app.get("/admin/batch/jobs/<batch_id>/attempts")
def batch_attempts(batch_id: str) -> Response[Any]:
    return _json(200, admin.attempts(get_deps(), _caller(), batch_id, _params()))


# --- the API's description ---------------------------------------------------------------


@functools.cache
def _openapi_document() -> str:
    generated = app.get_openapi_schema(
        title="batchgw", version="1", summary="The batch API of an LLM gateway"
    )
    return codec.dumps(openapi.complete(generated.model_dump(mode="json", by_alias=True, exclude_none=True)))


@app.get("/v1/openapi.json")
def openapi_json() -> Response[Any]:
    return Response(status_code=200, content_type="application/json", body=_openapi_document())


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
