"""The console's routes on the api function: what the console shows of Batch for the caller
(``GET /user/batch-capabilities``) and the check of a file before it is submitted
(``POST /v1/batches/preflight``), each a thin call into ``batchgw.console``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from aws_lambda_powertools.event_handler import APIGatewayHttpResolver, Response

from batchgw.api import auth
from batchgw.api.http import caller, json_body, json_response, params
from batchgw.deps import Deps


def register(app: APIGatewayHttpResolver, get_deps: Callable[[], Deps]) -> None:
    """Add the console's routes to ``app``; each reads its dependencies from ``get_deps()``."""

    @app.get("/user/batch-capabilities")
    def batch_capabilities() -> Response[Any]:
        from batchgw.console.capabilities import capabilities

        deps = get_deps()  # asked with BATCH_ENABLED off too: the console learns it here
        return json_response(200, capabilities(deps, caller(deps, app)))

    @app.post("/v1/batches/preflight")
    def preflight_batch() -> Response[Any]:
        from batchgw.console import preflight  # loaded on this route's first request

        deps = get_deps()
        auth.ensure_enabled(deps)
        fmt, answer = preflight.preflight(deps, caller(deps, app), json_body(app), params(app))
        if fmt == "json":
            return json_response(200, answer)
        return Response(
            status_code=200,
            content_type="text/csv" if fmt == "csv" else "application/jsonl",
            body=answer,
            headers={"Content-Disposition": f'attachment; filename="preflight-problems.{fmt}"'},
        )
