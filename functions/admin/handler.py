"""Admin function: the HTTP API's ``/admin/...`` routes (``batchgw.api.admin_routes``, and the
console's Admin Batches tab's, ``batchgw.console.routes.register_admin``).

Its own function with its own role, so that only it may write users, keys and runtime
settings: the internet-facing api function's role cannot.
"""

from __future__ import annotations

from batchgw import coldstart

coldstart.loading()

from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext
from batchgw.api import admin_routes, http
from batchgw.console import routes as console_routes
from batchgw.deps import get_deps
from batchgw.observability import logger

coldstart.loaded()

app = http.new_resolver()
# get_deps is looked up at each call, so a test may replace it on this module
admin_routes.register(app, lambda: get_deps())
console_routes.register_admin(app, lambda: get_deps())


@logger.inject_lambda_context(clear_state=True)
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    return app.resolve(event, context)
