"""API function: the HTTP API's routes, each a thin call into batchgw.service."""

from __future__ import annotations

import base64
from typing import Any

from aws_lambda_powertools.event_handler import APIGatewayHttpResolver, Response
from aws_lambda_powertools.utilities.typing import LambdaContext
from batchgw import codec, service
from batchgw.auth import Principal
from batchgw.deps import get_deps
from batchgw.errors import ApiError, NotFound
from batchgw.observability import logger

app = APIGatewayHttpResolver()


def _json(status: int, body: Any) -> Response:
    return Response(status_code=status, content_type="application/json", body=codec.dumps(body))


def _principal() -> Principal:
    deps = get_deps()
    service.ensure_enabled(deps)
    return service.authenticate(deps, app.current_event.headers.get("authorization"))


def _raw_body() -> bytes:
    event = app.current_event
    body = event.body or ""
    return base64.b64decode(body) if event.is_base64_encoded else body.encode()


def _params() -> dict[str, list[str]]:
    """Query parameters; HTTP API joins repeated ones with commas, so split them back."""
    raw = app.current_event.query_string_parameters or {}
    return {name: value.split(",") if name == "status" else [value] for name, value in raw.items()}


@app.exception_handler(ApiError)
def _api_error(exc: ApiError) -> Response:
    return _json(exc.status, exc.body())


@app.not_found
def _not_found(_: Exception) -> Response:
    return _api_error(
        NotFound(f"Unknown route {app.current_event.request_context.http.method} {app.current_event.path}.")
    )


@app.post("/v1/batches")
def create_batch() -> Response:
    return _json(200, service.create_batch(get_deps(), _principal(), _raw_body()))


@app.get("/v1/batches")
def list_batches() -> Response:
    return _json(200, service.list_batches(get_deps(), _principal(), _params()))


@app.get("/v1/batches/<batch_id>")
def get_batch(batch_id: str) -> Response:
    return _json(200, service.get_batch(get_deps(), _principal(), batch_id))


@app.post("/v1/batches/<batch_id>/cancel")
def cancel_batch(batch_id: str) -> Response:
    return _json(200, service.cancel_batch(get_deps(), _principal(), batch_id))


@app.delete("/v1/batches/<batch_id>")
def delete_batch(batch_id: str) -> Response:
    return _json(200, service.delete_batch(get_deps(), _principal(), batch_id))


@app.get("/v1/batches/<batch_id>/results")
def batch_results(batch_id: str) -> Response:
    return _json(200, service.results_page(get_deps(), _principal(), batch_id, _params()))


@app.get("/v1/batches/<batch_id>/output.jsonl")
def batch_output(batch_id: str) -> Response:
    download = service.output_jsonl(get_deps(), _principal(), batch_id)
    if download.location is not None:
        return Response(status_code=302, headers={"Location": download.location}, body="")
    return Response(status_code=200, content_type=download.content_type, body=(download.body or b"").decode())


@logger.inject_lambda_context(clear_state=True)
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    return app.resolve(event, context)
