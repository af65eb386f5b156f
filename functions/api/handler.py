"""API function: the HTTP API's public routes (``batchgw.api.routes``) and the console's
(``batchgw.console.routes``).

The ``/admin/...`` routes are the admin function's (``functions/admin``); this one only
describes them in the OpenAPI document.
"""

from __future__ import annotations

from batchgw import coldstart

coldstart.loading()

from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext
from batchgw.api import http, routes
from batchgw.console import routes as console_routes
from batchgw.deferred import routes as deferred_routes
from batchgw.deps import get_deps
from batchgw.observability import logger

app = http.new_resolver()
# get_deps is looked up at each call, so a test may replace it on this module. The console's
# routes come first: POST /v1/batches/preflight before the batch routes' <batch_id>.
console_routes.register(app, lambda: get_deps())
deferred_routes.register(app, lambda: get_deps())
routes.register(app, lambda: get_deps())
deferred_routes.register(app, lambda: get_deps())
coldstart.loaded()


@logger.inject_lambda_context(clear_state=True)
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    return app.resolve(event, context)
