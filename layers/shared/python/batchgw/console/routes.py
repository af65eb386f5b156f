"""The console's routes on the api function, each a thin call into ``batchgw.console``: its
session (``/console/session``), what it shows of Batch for the caller
(``GET /user/batch-capabilities``), the check of a file before it is submitted
(``POST /v1/batches/preflight``), the Batches page's own calls (``/console/api/...``), and its
files (every other path under ``/console/``: the page routes in the browser)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from aws_lambda_powertools.event_handler import APIGatewayHttpResolver, Response
from aws_lambda_powertools.shared.cookies import Cookie, SameSite

from batchgw.api import auth
from batchgw.api.http import caller, cookie, json_body, json_response, params, raw_body
from batchgw.console import session
from batchgw.deps import Deps


def register_admin(app: APIGatewayHttpResolver, get_deps: Callable[[], Deps]) -> None:
    """Add the console's admin routes (on the admin function): every user's batches as the
    Admin Batches tab lists them, with the Batches page's filters and ``user``."""

    @app.get("/admin/console/batches")
    def admin_console_batches() -> Response[Any]:
        from batchgw.console import batches

        deps = get_deps()
        return json_response(200, batches.list_every_rows(deps, caller(deps, app), params(app)))


def register(app: APIGatewayHttpResolver, get_deps: Callable[[], Deps]) -> None:
    """Add the console's routes to ``app``; each reads its dependencies from ``get_deps()``."""

    def session_cookie(value: str, max_age: int) -> Cookie:
        return Cookie(
            auth.SESSION_COOKIE,
            value,
            path="/",
            secure=session.secure_cookie(app.current_event.headers.get("host")),
            http_only=True,
            max_age=max_age,
            same_site=SameSite.STRICT_MODE,
        )

    def signed_in() -> tuple[Deps, str, Any]:
        deps = get_deps()
        token = cookie(app, auth.SESSION_COOKIE)
        event = app.current_event
        principal, current = session.current(
            deps, token, method=event.request_context.http.method, csrf=event.headers.get(auth.CSRF_HEADER)
        )
        assert token is not None
        return deps, token, session.shown(deps, principal, current)

    @app.post("/console/session")
    def sign_in() -> Response[Any]:
        shown, token = session.sign_in(get_deps(), json_body(app))
        answer = json_response(200, shown)
        answer.cookies.append(session_cookie(token, session.SESSION_SECONDS))
        return answer

    @app.get("/console/session")
    def current_session() -> Response[Any]:
        return json_response(200, signed_in()[2])

    @app.delete("/console/session")
    def sign_out() -> Response[Any]:
        deps, token, _ = signed_in()
        session.sign_out(deps, token)
        answer = json_response(200, {"object": "console.session", "deleted": True})
        answer.cookies.append(session_cookie("", 0))
        return answer

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
        fmt, answer = preflight.preflight(
            deps,
            caller(deps, app),
            json_body(app),
            params(app),
            anthropic_version=app.current_event.headers.get("anthropic-version"),
        )
        if fmt == "json":
            return json_response(200, answer)
        return Response(
            status_code=200,
            content_type="text/csv" if fmt == "csv" else "application/jsonl",
            body=answer,
            headers={"Content-Disposition": f'attachment; filename="preflight-problems.{fmt}"'},
        )

    # --- the Batches page's calls (a session's, or a key's) ---------------------------------

    def call() -> tuple[Deps, Any]:
        deps = get_deps()
        auth.ensure_enabled(deps)
        return deps, caller(deps, app)

    @app.get("/console/api/batches")
    def console_batches() -> Response[Any]:
        from batchgw.console import batches

        deps, principal = call()
        return json_response(200, batches.list_rows(deps, principal, params(app)))

    @app.get("/console/api/batches/<batch_id>")
    def console_batch(batch_id: str) -> Response[Any]:
        from batchgw.console import batches

        deps, principal = call()
        return json_response(200, batches.details(deps, principal, batch_id))

    @app.post("/console/api/batches/<batch_id>/export-unfinished")
    def console_export(batch_id: str) -> Response[Any]:
        from batchgw.console import batches

        deps, principal = call()
        return json_response(200, batches.export_unfinished(deps, principal, batch_id))

    @app.get("/console/api/models")
    def console_models() -> Response[Any]:
        from batchgw.console import batches

        deps, principal = call()
        return json_response(200, batches.models(deps, principal))

    @app.post("/console/api/batches")
    def console_submit() -> Response[Any]:
        from batchgw.console import batches

        deps, principal = call()
        headers = app.current_event.headers
        body = json_body(app)
        created = batches.submit(deps, principal, raw_body(app), body, headers.get("idempotency-key"))
        return json_response(200, created)

    # --- the console's files ----------------------------------------------------------------

    @app.get("/console", include_in_schema=False)
    def console_root() -> Response[Any]:
        return Response(status_code=308, headers={"Location": "/console/"}, body="")

    @app.get("/console/", include_in_schema=False)
    def console_page() -> Response[Any]:
        return _file("")

    # A group makes it a dynamic route, tried after the static ones and after the dynamic
    # ones registered before it (``/console/api/batches/<batch_id>``).
    @app.get("/console/(.+)", include_in_schema=False)
    def console_file() -> Response[Any]:
        return _file(app.current_event.path.removeprefix("/console/"))

    def _file(path: str) -> Response[Any]:
        from batchgw.console import assets

        found = None if path.startswith("api/") else assets.asset(path)
        if found is None:
            return Response(
                status_code=404,
                content_type="text/plain; charset=utf-8",
                body="Not found",
                headers=assets.headers(),
            )
        return Response(
            status_code=200,
            content_type=found.content_type,
            body=found.body,
            headers={**assets.headers(), "Cache-Control": found.cache_control},
        )
