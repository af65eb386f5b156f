"""What the HTTP API's two handlers share (``functions/api``, ``functions/admin``): one
resolver setup, whose errors are mapped once to the spec's ``{"error": {...}}`` shape, and
the helpers their routes read requests and write answers with.

Every answer is JSON in that shape, an unexpected exception's too: a 500 that says nothing of
the code, whatever the Powertools debug settings (``POWERTOOLS_DEV`` would answer a traceback
and print every event, its API key included); the traceback goes to the log.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from contextvars import ContextVar
from typing import Any, cast

from aws_lambda_powertools.event_handler import APIGatewayHttpResolver, Response
from aws_lambda_powertools.utilities.data_classes import APIGatewayProxyEventV2
from aws_lambda_powertools.utilities.typing import LambdaContext

from batchgw.api import auth
from batchgw.deps import Deps
from batchgw.domain import codec
from batchgw.domain.errors import ApiError, InternalError, NotFound
from batchgw.domain.principal import Principal
from batchgw.observability import logger
from batchgw.validation.jsonbody import parse_json

INTERNAL_ERROR = "The server had an error while processing your request."


def json_response(status: int, body: Any) -> Response[Any]:
    return Response(status_code=status, content_type="application/json", body=codec.dumps(body))


def error_response(exc: ApiError) -> Response[Any]:
    return Response(
        status_code=exc.status,
        content_type="application/json",
        body=codec.dumps(exc.body()),
        headers=exc.headers(),
    )


# The request being resolved, per thread (each invocation's own: see ``Resolver``).
_current_event: ContextVar[APIGatewayProxyEventV2] = ContextVar("batchgw_current_event")
_current_context: ContextVar[LambdaContext] = ContextVar("batchgw_lambda_context")


class Resolver(APIGatewayHttpResolver):
    """Powertools' resolver, with the request it resolves kept per thread.

    Powertools keeps the current event and context on its ``BaseRouter`` class, shared by every
    resolver in the process. A Lambda environment serves one invocation at a time, so that is
    harmless there; the local stack's adapter serves concurrent requests in threads of one
    process, where one request's route would read another's event — another caller's API key.
    Here each thread (and each context) sees only the event it resolves.
    """

    @property  # type: ignore[override]
    def current_event(self) -> APIGatewayProxyEventV2:
        return _current_event.get()

    @current_event.setter
    def current_event(self, value: APIGatewayProxyEventV2) -> None:
        _current_event.set(value)

    @property  # type: ignore[override]
    def lambda_context(self) -> LambdaContext:
        return _current_context.get()

    @lambda_context.setter
    def lambda_context(self, value: LambdaContext) -> None:
        _current_context.set(value)

    def resolve(self, event: Mapping[str, Any], context: LambdaContext) -> dict[str, Any]:
        self.lambda_context = context
        return super().resolve(event, context)

    def _to_proxy_event(self, event: dict[str, Any]) -> APIGatewayProxyEventV2:
        proxy = cast(APIGatewayProxyEventV2, super()._to_proxy_event(event))
        self.current_event = proxy
        return proxy


def new_resolver() -> Resolver:
    """A resolver whose every error answers the ``{"error": {...}}`` shape."""
    app = Resolver(debug=False)  # never a traceback in an answer, whatever the env

    @app.exception_handler(ApiError)
    def _api_error(exc: ApiError) -> Response[Any]:
        return error_response(exc)

    @app.exception_handler(Exception)
    def _unexpected(exc: Exception) -> Response[Any]:
        logger.exception("unhandled exception", extra={"path": app.current_event.path})
        return error_response(InternalError(INTERNAL_ERROR))

    @app.not_found
    def _not_found(_: Exception) -> Response[Any]:
        event = app.current_event
        return error_response(NotFound(f"Unknown route {event.request_context.http.method} {event.path}."))

    return app


def raw_body(app: APIGatewayHttpResolver) -> bytes:
    """The body as sent (``decoded_body`` would decode binary uploads as UTF-8)."""
    event = app.current_event
    body = event.body or ""
    return base64.b64decode(body) if event.is_base64_encoded else body.encode()


def json_body(app: APIGatewayHttpResolver) -> Any:
    """The body parsed as JSON, or None when there is none."""
    raw = raw_body(app)
    return parse_json(raw) if raw else None


def params(app: APIGatewayHttpResolver) -> dict[str, list[str]]:
    """Query parameters; HTTP API joins repeated ones with commas, so split them back."""
    raw = app.current_event.query_string_parameters or {}
    return {name: value.split(",") if name == "status" else [value] for name, value in raw.items()}


def caller(deps: Deps, app: APIGatewayHttpResolver, *, admin_plane: bool = False) -> Principal:
    """The caller, by its API key (401 without a usable one); without one, by its console
    session's cookie (``auth.session_caller``). On the admin routes (``admin_plane``) an
    administrator's key is not held to the per-key request rate."""
    event = app.current_event
    authorization = event.headers.get("authorization")
    token = None if authorization else cookie(app, auth.SESSION_COOKIE)
    if token is None:
        return auth.authenticate(deps, authorization, admin_plane=admin_plane)
    method = event.request_context.http.method
    return auth.session_caller(deps, token, method=method, csrf=event.headers.get(auth.CSRF_HEADER))


def cookie(app: APIGatewayHttpResolver, name: str) -> str | None:
    """The value of the request's cookie ``name`` (None when it sent none)."""
    for pair in app.current_event.cookies or []:
        key, _, value = pair.strip().partition("=")
        if key == name and value:
            return value
    return None
