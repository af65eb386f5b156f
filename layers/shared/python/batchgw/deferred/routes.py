"""The background-response routes the api function serves: ``GET /v1/responses`` (a list of
the caller's), and ``GET``, ``DELETE`` and ``POST .../cancel`` of ``/v1/responses/{id}``. A
create is a ``POST /v1/responses``, which the HTTP API routes to the interactive function
(``functions/interactive``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from aws_lambda_powertools.event_handler import APIGatewayHttpResolver, Response

from batchgw.api import auth
from batchgw.api.http import caller, json_response, params
from batchgw.deferred import background
from batchgw.deps import Deps
from batchgw.domain.principal import Principal


def register(app: APIGatewayHttpResolver, get_deps: Callable[[], Deps]) -> None:
    """Add the background-response routes to ``app``."""

    def call() -> tuple[Deps, Principal]:
        deps = get_deps()
        auth.ensure_enabled(deps)  # batch work: 404 with BATCH_ENABLED off, as batches are
        return deps, caller(deps, app)

    @app.get("/v1/responses")
    def list_responses() -> Response[Any]:
        return json_response(200, background.list_responses(*call(), params(app)))

    @app.get("/v1/responses/<response_id>")
    def get_response(response_id: str) -> Response[Any]:
        return json_response(200, background.retrieve(*call(), response_id))

    @app.post("/v1/responses/<response_id>/cancel")
    def cancel_response(response_id: str) -> Response[Any]:
        return json_response(200, background.cancel(*call(), response_id))

    @app.delete("/v1/responses/<response_id>")
    def delete_response(response_id: str) -> Response[Any]:
        return json_response(200, background.delete(*call(), response_id))
