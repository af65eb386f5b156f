"""The console's routes on the api function: what the console shows of Batch for the caller
(``GET /user/batch-capabilities``) and the check of a file before it is submitted
(``POST /v1/batches/preflight``), each a thin call into ``batchgw.console``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from aws_lambda_powertools.event_handler import APIGatewayHttpResolver, Response
from aws_lambda_powertools.shared.cookies import Cookie, SameSite

from batchgw.api import auth
from batchgw.api.http import caller, cookie, json_body, json_response, params
from batchgw.console import session
from batchgw.deps import Deps


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
        fmt, answer = preflight.preflight(deps, caller(deps, app), json_body(app), params(app))
        if fmt == "json":
            return json_response(200, answer)
        return Response(
            status_code=200,
            content_type="text/csv" if fmt == "csv" else "application/jsonl",
            body=answer,
            headers={"Content-Disposition": f'attachment; filename="preflight-problems.{fmt}"'},
        )
