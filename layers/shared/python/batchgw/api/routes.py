"""The public routes (``/v1/...``): batches, files and uploads, the caller's webhook and
account, the models the caller may use, the API's description, and the retired Message
Batches API, each a thin call into ``batchgw.api``. The api function (``functions/api``)
registers them on its resolver, as the admin function does ``admin_routes``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from aws_lambda_powertools.event_handler import APIGatewayHttpResolver, Response

from batchgw.api import accounts, auth, batches, capacity, files, models, reschedule, uploads, webhooks
from batchgw.api.http import caller, json_body, json_response, params, raw_body
from batchgw.api.params import Download, last
from batchgw.deps import Deps
from batchgw.domain.errors import AccountSuspended, AccountUnavailable, BadRequest
from batchgw.domain.principal import Principal
from batchgw.validation.jsonbody import parse_json

RETIRED = (
    "The Message Batches API has been removed: use POST /v1/batches with the Messages target "
    '(url "/v1/messages", and the anthropic-version header) instead.'
)


def download(answer: Download) -> Response[Any]:
    """A file answer: 302 to its presigned URL, or its bytes (as text or binary)."""
    headers = {}
    if answer.sha256 is not None:
        headers = {"ETag": f'"{answer.sha256}"', "x-content-sha256": answer.sha256}
    if answer.location is not None:
        return Response(status_code=302, headers={**headers, "Location": answer.location}, body="")
    body = answer.body or b""
    return Response(
        status_code=200,
        content_type=answer.content_type,
        body=body.decode() if answer.text else body,
        headers=headers,
    )


def refuse_create_headers(headers: Mapping[str, str]) -> None:
    """What a create may not ask for in its headers: a beta, or to run as someone else."""
    if headers.get("anthropic-beta"):
        raise BadRequest("anthropic-beta is not supported: batches support no beta.", param="anthropic-beta")
    if "x-on-behalf-of" in headers:
        raise BadRequest(
            "X-On-Behalf-Of is not supported: a batch always runs as the key that creates it.",
            param="X-On-Behalf-Of",
        )


def register(app: APIGatewayHttpResolver, get_deps: Callable[[], Deps]) -> None:
    """Add the public routes to ``app``; each reads its dependencies from ``get_deps()``."""

    def call() -> tuple[Deps, Principal]:
        """The dependencies and the caller of a batch route (404 with BATCH_ENABLED off)."""
        deps = get_deps()
        auth.ensure_enabled(deps)
        return deps, caller(deps, app)

    def content_type() -> str | None:
        return app.current_event.headers.get("content-type")

    # --- batches ------------------------------------------------------------------------------

    @app.post("/v1/batches")
    def create_batch() -> Response[Any]:
        try:
            deps, principal = call()
        except AccountSuspended:
            # The create call's errors: 401 when the account is unavailable, as it is when it
            # is suspended after this point, before the batch is stored (``batches.create``).
            raise AccountUnavailable() from None
        headers = app.current_event.headers
        refuse_create_headers(headers)
        created = batches.create_batch(
            deps,
            principal,
            raw_body(app),
            anthropic_version=headers.get("anthropic-version"),
            idempotency_key=headers.get("idempotency-key"),
        )
        return json_response(200, created)

    @app.get("/v1/batches")
    def list_batches() -> Response[Any]:
        return json_response(200, batches.list_batches(*call(), params(app)))

    @app.get("/v1/batches/capacity")
    def batch_capacity() -> Response[Any]:
        return json_response(200, capacity.capacity(*call(), params(app)))

    @app.get("/v1/batches/<batch_id>")
    def get_batch(batch_id: str) -> Response[Any]:
        return json_response(200, batches.get_batch(*call(), batch_id))

    @app.patch("/v1/batches/<batch_id>")
    def update_batch(batch_id: str) -> Response[Any]:
        deps, principal = call()
        return json_response(200, reschedule.update_batch(deps, principal, batch_id, json_body(app)))

    @app.post("/v1/batches/<batch_id>/cancel")
    def cancel_batch(batch_id: str) -> Response[Any]:
        return json_response(200, batches.cancel_batch(*call(), batch_id))

    @app.delete("/v1/batches/<batch_id>")
    def delete_batch(batch_id: str) -> Response[Any]:
        return json_response(200, batches.delete_batch(*call(), batch_id))

    # The results routes load their module (and the file validator's line splitting it reads
    # stored inputs with) on their first request: a batch's results are read long after its
    # process's first request, so no cold start pays for them.

    @app.get("/v1/batches/<batch_id>/results")
    def batch_results(batch_id: str) -> Response[Any]:
        from batchgw.api import results

        page = results.results_page(*call(), batch_id, params(app))
        return download(page) if isinstance(page, Download) else json_response(200, page)

    @app.get("/v1/batches/<batch_id>/output.jsonl")
    def batch_output(batch_id: str) -> Response[Any]:
        from batchgw.api import results

        merged = last(params(app), "merged")
        if merged not in (None, "true", "false"):
            raise BadRequest("'merged' must be true or false.", param="merged")
        if merged == "true":
            from batchgw.api import retry

            return download(retry.merged_output(*call(), batch_id))
        return download(results.output_jsonl(*call(), batch_id))

    @app.post("/v1/batches/<batch_id>/retry")
    def retry_batch(batch_id: str) -> Response[Any]:
        from batchgw.api import retry  # loaded on this route's first request

        deps, principal = call()
        key = app.current_event.headers.get("idempotency-key")
        return json_response(200, retry.retry_batch(deps, principal, batch_id, raw_body(app), key))

    # --- files and uploads --------------------------------------------------------------------

    @app.post("/v1/files")
    def upload_file() -> Response[Any]:
        return json_response(200, files.upload_file(*call(), content_type(), raw_body(app)))

    @app.post("/v1/files/presigned")
    def presign_upload() -> Response[Any]:
        return json_response(200, files.presign_upload(*call(), parse_json(raw_body(app))))

    @app.post("/v1/files/<file_id>/complete")
    def complete_presigned(file_id: str) -> Response[Any]:
        return json_response(200, files.complete_presigned(*call(), file_id))

    @app.get("/v1/files")
    def list_files() -> Response[Any]:
        return json_response(200, files.list_files(*call(), params(app)))

    @app.get("/v1/files/<file_id>")
    def get_file(file_id: str) -> Response[Any]:
        return json_response(200, files.get_file(*call(), file_id))

    @app.delete("/v1/files/<file_id>")
    def delete_file(file_id: str) -> Response[Any]:
        return json_response(200, files.delete_file(*call(), file_id))

    @app.get("/v1/files/<file_id>/content")
    def file_content(file_id: str) -> Response[Any]:
        return download(files.file_content(*call(), file_id))

    @app.post("/v1/uploads")
    def create_upload() -> Response[Any]:
        return json_response(200, uploads.create_upload(*call(), parse_json(raw_body(app))))

    @app.post("/v1/uploads/<upload_id>/parts")
    def add_upload_part(upload_id: str) -> Response[Any]:
        return json_response(200, uploads.add_part(*call(), upload_id, content_type(), raw_body(app)))

    @app.post("/v1/uploads/<upload_id>/complete")
    def complete_upload(upload_id: str) -> Response[Any]:
        return json_response(200, uploads.complete_upload(*call(), upload_id, parse_json(raw_body(app))))

    @app.post("/v1/uploads/<upload_id>/cancel")
    def cancel_upload(upload_id: str) -> Response[Any]:
        return json_response(200, uploads.cancel_upload(*call(), upload_id))

    # --- the user's batch webhook -------------------------------------------------------------

    @app.put("/v1/batch_webhook")
    def put_webhook() -> Response[Any]:
        return json_response(200, webhooks.put_webhook(*call(), json_body(app)))

    @app.get("/v1/batch_webhook")
    def get_webhook() -> Response[Any]:
        return json_response(200, webhooks.get_webhook(*call()))

    @app.delete("/v1/batch_webhook")
    def delete_webhook() -> Response[Any]:
        return json_response(200, webhooks.delete_webhook(*call()))

    @app.get("/v1/batch_webhook/events")
    def webhook_events() -> Response[Any]:
        return json_response(200, webhooks.list_events(*call()))

    # The OpenAI SDK's webhook endpoints (``client.webhooks``), onto the same webhook; their
    # module loads on their first request.

    @app.get("/v1/webhook_event_types")
    def webhook_event_types() -> Response[Any]:
        from batchgw.api import webhook_endpoints

        call()
        return json_response(200, webhook_endpoints.event_types())

    @app.post("/v1/webhook_endpoints")
    def create_webhook_endpoint() -> Response[Any]:
        from batchgw.api import webhook_endpoints

        return json_response(200, webhook_endpoints.create(*call(), json_body(app)))

    @app.get("/v1/webhook_endpoints")
    def list_webhook_endpoints() -> Response[Any]:
        from batchgw.api import webhook_endpoints

        return json_response(200, webhook_endpoints.list_endpoints(*call()))

    @app.get("/v1/webhook_endpoints/<endpoint_id>")
    def get_webhook_endpoint(endpoint_id: str) -> Response[Any]:
        from batchgw.api import webhook_endpoints

        return json_response(200, webhook_endpoints.retrieve(*call(), endpoint_id))

    @app.post("/v1/webhook_endpoints/<endpoint_id>")
    def update_webhook_endpoint(endpoint_id: str) -> Response[Any]:
        from batchgw.api import webhook_endpoints

        return json_response(200, webhook_endpoints.update(*call(), endpoint_id, json_body(app)))

    @app.delete("/v1/webhook_endpoints/<endpoint_id>")
    def delete_webhook_endpoint(endpoint_id: str) -> Response[Any]:
        from batchgw.api import webhook_endpoints

        return json_response(200, webhook_endpoints.delete(*call(), endpoint_id))

    @app.post("/v1/webhook_endpoints/<endpoint_id>/rotate_secret")
    def rotate_webhook_secret(endpoint_id: str) -> Response[Any]:
        from batchgw.api import webhook_endpoints

        return json_response(200, webhook_endpoints.rotate_secret(*call(), endpoint_id, json_body(app)))

    @app.post("/v1/webhook_endpoints/<endpoint_id>/test")
    def test_webhook_endpoint(endpoint_id: str) -> Response[Any]:
        from batchgw.api import webhook_endpoints

        return json_response(200, webhook_endpoints.send_test(*call(), endpoint_id, json_body(app)))

    # --- the caller's own account -------------------------------------------------------------

    @app.get("/v1/me")
    def me() -> Response[Any]:
        # outside the batch API: BATCH_ENABLED does not apply
        deps = get_deps()
        return json_response(200, accounts.me(deps, caller(deps, app)))

    # --- the models the caller may use --------------------------------------------------------

    @app.get("/v1/models")
    def list_models() -> Response[Any]:
        # outside the batch API as /v1/me is: with BATCH_ENABLED off no model lists the batch tier
        deps = get_deps()
        return json_response(200, models.list_models(deps, caller(deps, app)))

    @app.get("/v1/models/<model_id>")
    def get_model(model_id: str) -> Response[Any]:
        deps = get_deps()
        return json_response(200, models.get_model(deps, caller(deps, app), model_id))

    # --- the API's description ----------------------------------------------------------------

    @app.get("/v1/openapi.json")
    def openapi_json() -> Response[Any]:
        # Loaded on this route's first request: describing the API (and the admin function's
        # routes) is no other route's cold start.
        from batchgw.api import openapi

        return Response(status_code=200, content_type="application/json", body=openapi.document(app))

    # --- the retired Message Batches API ------------------------------------------------------

    def gone(**_: Any) -> Response[Any]:
        error = {"type": "not_found_error", "message": RETIRED, "code": "message_batches_removed"}
        return json_response(410, {"type": "error", "error": error})

    for prefix in ("/v1/messages/batches", "/anthropic/v1/messages/batches"):
        for path in (prefix, f"{prefix}/<batch_id>", f"{prefix}/<batch_id>/<action>"):
            app.route(path, method=["GET", "POST", "DELETE", "PUT", "PATCH"], include_in_schema=False)(gone)
