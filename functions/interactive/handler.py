"""Interactive function: the reference interactive path (``batchgw.passthrough``), one
request at a time, each passed straight to its model while it counts as interactive load.

Errors answer in the shape of the caller's SDK: OpenAI's on every path but
``/v1/messages``, whose callers (the Anthropic SDK) read Anthropic's. The Anthropic SDK
sends its key as ``x-api-key``; ``Authorization: Bearer`` works on every path.
"""

from __future__ import annotations

from batchgw import coldstart

coldstart.loading()

import asyncio
from typing import Any

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.utilities.typing import LambdaContext
from batchgw.api import auth, http
from batchgw.config.resources import INTERACTIVE_PATHS
from batchgw.deps import get_deps
from batchgw.domain import codec
from batchgw.domain.errors import ApiError, InternalError
from batchgw.observability import logger, metrics
from batchgw.passthrough import answers, serve

coldstart.loaded()

app = http.Resolver(debug=False)
# One loop per execution environment, kept across invocations: its pooled HTTP connections
# to the upstreams are reused (``upstream.client.http_client``).
_loop = asyncio.new_event_loop()


def _reply(reply: answers.Reply) -> Response[Any]:
    return Response(
        status_code=reply.status,
        content_type="application/json",
        body=codec.dumps(reply.body),
        headers=reply.headers,
    )


@app.exception_handler(ApiError)
def _refused(exc: ApiError) -> Response[Any]:
    return _reply(answers.refused(app.current_event.path, exc))


@app.exception_handler(Exception)
def _unexpected(exc: Exception) -> Response[Any]:
    logger.exception("unhandled exception", extra={"path": app.current_event.path})
    return _reply(answers.refused(app.current_event.path, InternalError(http.INTERNAL_ERROR)))


def _authorization() -> str | None:
    headers = app.current_event.headers
    authorization = headers.get("authorization")
    if authorization is None and headers.get("x-api-key"):
        return f"Bearer {headers['x-api-key']}"
    return authorization


def _serve(endpoint: str) -> Response[Any]:
    deps = get_deps()
    principal = auth.authenticate(deps, _authorization())
    raw = http.raw_body(app)
    headers = app.current_event.headers
    if endpoint in DEFERRED_PATHS and (b'"background"' in raw or b'"flex"' in raw):
        from batchgw.deferred import background, flex  # loaded by the first request that may be one

        body = background.json_object(raw)
        if body is not None and endpoint == "/v1/responses" and background.wants_background(body):
            auth.ensure_enabled(deps)  # batch work, as batches: 404 with BATCH_ENABLED off
            key = headers.get("idempotency-key")
            return _reply(
                answers.Reply(200, background.create(deps, principal, raw, body, idempotency_key=key))
            )
        if body is not None and flex.wants_flex(endpoint, body):
            auth.ensure_enabled(deps)
            return _reply(flex.serve(deps, principal, endpoint, body))
    reply = _loop.run_until_complete(
        serve.serve(deps, principal, endpoint, raw, anthropic_version=headers.get("anthropic-version"))
    )
    return _reply(reply)


# The paths a deferred request (background, or the flex tier: ``batchgw.deferred``) comes on.
DEFERRED_PATHS = ("/v1/chat/completions", "/v1/responses", "/v1/embeddings")

for _path in INTERACTIVE_PATHS:
    app.post(_path)(lambda _endpoint=_path: _serve(_endpoint))


@logger.inject_lambda_context(clear_state=True)
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    try:
        return app.resolve(event, context)
    finally:
        metrics.flush()
