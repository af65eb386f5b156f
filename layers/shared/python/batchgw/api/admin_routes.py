"""The administrators' routes (``/admin/...``): users and keys, runtime settings, models,
routes and every user's batches, each a thin call into ``batchgw.api``.

The HTTP API sends every path under ``resources.ADMIN_PATH_PREFIX`` to the admin function
(``functions/admin``), whose role alone may write accounts, keys and runtime settings. The
routes are registered here, on the resolver a handler passes, so that the api function can
describe them in the API's one OpenAPI document (``GET /v1/openapi.json``) without serving
them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from aws_lambda_powertools.event_handler import APIGatewayHttpResolver, Response

from batchgw.api import accounts, admin, interactive
from batchgw.api.http import caller, json_body, json_response, params
from batchgw.deps import Deps


def register(app: APIGatewayHttpResolver, get_deps: Callable[[], Deps]) -> None:
    """Add the admin routes to ``app``; each reads its dependencies from ``get_deps()``."""

    def call() -> tuple[Deps, Any]:
        deps = get_deps()
        return deps, caller(deps, app, admin_plane=True)

    # --- users and keys ---------------------------------------------------------------------

    @app.post("/admin/users")
    def create_user() -> Response[Any]:
        return json_response(200, accounts.create_user(*call(), json_body(app)))

    @app.get("/admin/users")
    def list_users() -> Response[Any]:
        return json_response(200, accounts.list_users(*call()))

    @app.get("/admin/users/<user_id>")
    def get_user(user_id: str) -> Response[Any]:
        return json_response(200, accounts.get_user(*call(), user_id))

    @app.patch("/admin/users/<user_id>")
    def update_user(user_id: str) -> Response[Any]:
        return json_response(200, accounts.update_user(*call(), user_id, json_body(app)))

    @app.delete("/admin/users/<user_id>")
    def delete_user(user_id: str) -> Response[Any]:
        return json_response(200, accounts.delete_user(*call(), user_id))

    @app.post("/admin/users/<user_id>/keys")
    def create_key(user_id: str) -> Response[Any]:
        return json_response(200, accounts.create_key(*call(), user_id, json_body(app)))

    @app.get("/admin/users/<user_id>/keys")
    def list_keys(user_id: str) -> Response[Any]:
        return json_response(200, accounts.list_keys(*call(), user_id))

    @app.patch("/admin/keys/<key_id>")
    def update_key(key_id: str) -> Response[Any]:
        return json_response(200, accounts.update_key(*call(), key_id, json_body(app)))

    @app.post("/admin/keys/<key_id>/revoke")
    def revoke_key(key_id: str) -> Response[Any]:
        return json_response(200, accounts.revoke_key(*call(), key_id))

    @app.post("/admin/keys/<key_id>/regenerate")
    def regenerate_key(key_id: str) -> Response[Any]:
        return json_response(200, accounts.regenerate_key(*call(), key_id))

    # --- the operator's plane ---------------------------------------------------------------

    @app.get("/admin/config")
    def list_config() -> Response[Any]:
        return json_response(200, admin.list_config(*call()))

    @app.patch("/admin/config/<name>")
    def set_config(name: str) -> Response[Any]:
        return json_response(200, admin.set_config(*call(), name, json_body(app)))

    @app.delete("/admin/config/<name>")
    def reset_config(name: str) -> Response[Any]:
        return json_response(200, admin.reset_config(*call(), name))

    @app.get("/admin/batch/models")
    def list_models() -> Response[Any]:
        return json_response(200, admin.list_models(*call()))

    @app.patch("/admin/batch/models/<model_id>")
    def set_model(model_id: str) -> Response[Any]:
        return json_response(200, admin.set_model(*call(), model_id, json_body(app)))

    @app.put("/admin/interactive-load/<reporter_id>")
    def report_interactive_load(reporter_id: str) -> Response[Any]:
        return json_response(200, interactive.report(*call(), reporter_id, json_body(app)))

    @app.delete("/admin/interactive-load/<reporter_id>")
    def remove_interactive_load(reporter_id: str) -> Response[Any]:
        return json_response(200, interactive.remove(*call(), reporter_id))

    @app.get("/admin/interactive-load")
    def list_interactive_load() -> Response[Any]:
        return json_response(200, interactive.list_reports(*call()))

    @app.get("/admin/routing/provider-routes")
    def list_routes() -> Response[Any]:
        return json_response(200, admin.list_routes(*call()))

    @app.patch("/admin/routing/provider-route-batch/<model_id>/<route_id>")
    def set_route(model_id: str, route_id: str) -> Response[Any]:
        return json_response(200, admin.set_route(*call(), model_id, route_id, json_body(app)))

    @app.get("/admin/batch/jobs")
    def list_jobs() -> Response[Any]:
        return json_response(200, admin.list_jobs(*call(), params(app)))

    @app.get("/admin/batch/summary")
    def batch_summary() -> Response[Any]:
        return json_response(200, admin.summary(*call(), params(app)))

    @app.get("/admin/batch/jobs/<batch_id>/requests")
    def batch_requests(batch_id: str) -> Response[Any]:
        return json_response(200, admin.batch_requests(*call(), batch_id, params(app)))

    @app.get("/admin/requests")
    def request_log() -> Response[Any]:
        return json_response(200, admin.request_log(*call(), params(app)))

    @app.get("/admin/request-metrics")
    def request_metrics() -> Response[Any]:
        return json_response(200, admin.request_metrics(*call(), params(app)))

    @app.get("/admin/audit")
    def audit_log() -> Response[Any]:
        return json_response(200, admin.audit_log(*call(), params(app)))

    @app.get("/admin/batch/jobs/<batch_id>/attempts")
    def batch_attempts(batch_id: str) -> Response[Any]:
        return json_response(200, admin.attempts(*call(), batch_id, params(app)))
