"""The local API Gateway: HTTP requests in, HTTP API (payload v2.0) events to the api handler.

``python -m local.adapter [--port N] [--handler pkg.mod.func] [--admin-handler pkg.mod.func]``
listens on 127.0.0.1 (``BATCHGW_PORT``, default 8080) and calls the real handlers, routing as
the HTTP API does: a path under ``/admin/`` (``resources.ADMIN_PATH_PREFIX``) to the admin
handler (``BATCHGW_ADMIN_HANDLER``, default ``functions.admin.handler.handler``), whose AWS
calls are recorded as the admin function's; a POST to an interactive path
(``resources.INTERACTIVE_PATHS``) to the interactive handler
(``functions.interactive.handler.handler``); every other request to the api handler
(``BATCHGW_API_HANDLER``, default ``functions.api.handler.handler``). It enforces the limits
API Gateway and Lambda would:

- a request body over 10 MB, or an event over Lambda's 6 MB invoke limit (a body of about
  4.4 MiB on), answers 413 without calling the handler. On AWS those answers are API
  Gateway's own (``{"message": "Request Entity Too Large"}``), which no function can change;
  here the 413 is the API's error shape, saying the API's limit in bytes (BATCH_MAX_BODY_MB)
  and where a larger body goes (the Uploads API in parts that fit, ``part_size`` for the
  OpenAI SDK, or a presigned upload): the handler's own 413 says the same between
  BATCH_MAX_BODY_MB and 4.4 MiB, so a caller reads one answer at every size (``too_large``);
- a response payload over Lambda's 6 MB answers 502 ``{"message": "Internal Server Error"}``,
  as does a response that is not a valid proxy result, or one the Python 3.12 runtime could
  not serialize (a lone surrogate in a string: its UTF-8 encoding fails, a
  ``Runtime.MarshalError``). The payload is measured as each runtime would send it, the larger
  of the two: ``json.dumps`` with ``ensure_ascii=False`` in UTF-8 (3.12 and later, what the
  stack deploys) and with non-ASCII escaped (``\\uXXXX``, 12 bytes for an astral character:
  3.11 and earlier), so an answer that passes here fits on either;
- every method reaches the handler, as the HTTP API's ``ANY`` routes send it (its resolver
  answers an unknown one 404), never a 501 from this server;
- a handler exception answers 500 ``{"message": "Internal Server Error"}`` (traceback logged);
  an interactive environment that dies mid-invocation (killed, or it exited) answers 502
  ``{"message": "Internal Server Error"}``, as API Gateway answers a Lambda crash;
- a handler that runs past API Gateway's 30 s answers 503 ``{"message": "Service Unavailable"}``
  (an interactive environment is not waited for past it: it is killed and replaced, as Lambda
  resets an environment whose invocation timed out).

The interactive function runs as Lambda runs it: each execution environment is a process of its
own (``local.environments``, as the worker's), which imported the handler once and serves one
request at a time, so no object (the ``get_deps()`` caches: keys, routes, live config, the
upstream HTTP pool; the event loop) is shared by two requests running at once, only the AWS
services are; its AWS calls are recorded as the interactive function's. An idle environment
serves a request, else one starts (cold) while fewer than ``--interactive-concurrency`` exist
(``BATCHGW_INTERACTIVE_CONCURRENCY``, default 64; ``local.run`` shares it out among its
adapters), else the request waits for one. Unlike Lambda, at most ``INTERACTIVE_STARTS_AT_ONCE``
(2) start at a time, since here they share the machine's cores: past it a request waits for
an environment to come free or a start to end. One is started at launch, and one idle for
``BATCHGW_ENVIRONMENT_IDLE_SECONDS`` (120) is reaped. The api and admin functions run in this
process, each request in a Lambda-like environment of its own (``local.env.HandlerPool``: a
Powertools resolver keeps the current event in a module global, so two requests must never
share a copy of the handler's module); at most ``--concurrency`` (``BATCHGW_API_CONCURRENCY``,
default 10) at once each, the rest wait. Several adapters can share the port
(``--reuse-port``; ``local.run`` starts ``BATCHGW_API_PROCESSES``), each with its own
environments.
"""

from __future__ import annotations

import argparse
import base64
import json
import logging
import os
import re
import signal
import sys
import time
import uuid
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl

from batchgw.config import resources
from batchgw.config.settings import Settings
from batchgw.storage.aws import FUNCTION_NAME_ENV, calls_made_for

from local.env import (
    ACCOUNT_ID,
    API_HANDLER_ENV,
    API_PORT_ENV,
    DEFAULT_API_HANDLER,
    DEFAULT_API_PORT,
    DEFAULT_INTERACTIVE_CONCURRENCY,
    HOST,
    PREFIX,
    HandlerPool,
    LambdaContext,
    interactive_environments,
    setup_logging,
)
from local.environments import (
    DEFAULT_IDLE_SECONDS,
    IDLE_SECONDS_ENV,
    EnvironmentDied,
    EnvironmentPool,
    InvocationTimedOut,
    ResponseNotSerializable,
)
from local.invocations import record_invocation

log = logging.getLogger("local.adapter")

API_GATEWAY_MAX_BODY = 10 * 1024 * 1024
LAMBDA_MAX_REQUEST = 6 * 1024 * 1024  # 6,291,456 bytes: the invoke request (the whole event)
LAMBDA_MAX_RESPONSE = 6 * 1024 * 1024 + 100  # Lambda allows 100 bytes more on the way back
API_GATEWAY_TIMEOUT_SECONDS = 30.0
API_CONCURRENCY_ENV = "BATCHGW_API_CONCURRENCY"
DEFAULT_CONCURRENCY = 10
# An oversized body is read to its end (and dropped) up to this, so that the client, which
# reads no answer before it has sent its body (httpx, the OpenAI SDK), gets the 413; past it the
# connection is just closed. Above the SDK's default part (64 MiB) and BATCH_MAX_FILE_MB's 200.
DRAIN_LIMIT = 1024 * 1024 * 1024
API_FUNCTION_NAME = f"{PREFIX}-api"
ADMIN_FUNCTION_NAME = f"{PREFIX}-admin"
ADMIN_HANDLER_ENV = "BATCHGW_ADMIN_HANDLER"
DEFAULT_ADMIN_HANDLER = "functions.admin.handler.handler"
INTERACTIVE_FUNCTION_NAME = f"{PREFIX}-{resources.INTERACTIVE}"
INTERACTIVE_HANDLER = "functions.interactive.handler.handler"
INTERACTIVE_MEMORY_MB = 512  # the CDK stack's (``infra.constructs.functions``)
# Interactive cold starts running at once. On Lambda each has a machine of its own; here they
# share the stack's cores, and an import is ~0.9 s of CPU: 64 requests at once that each
# started an environment took 65 s (p50 59 s) on 2 cores; with two at a time, the rest taking
# the environments that come free, 7 s (p50 3 s) and 10 environments.
INTERACTIVE_STARTS_AT_ONCE = 2

_TEXT_TYPES = frozenset({"application/json", "application/javascript", "application/xml"})
# Hop-by-hop or recomputed here; a handler's values for these are ignored.
_RESPONSE_HEADERS_DROPPED = frozenset({"content-length", "transfer-encoding", "connection"})


class RequestTooLarge(Exception):
    """A body API Gateway or Lambda would refuse: ``size`` bytes (at least, when not read whole)."""

    def __init__(self, size: int, whole: bool = True) -> None:
        super().__init__(size)
        self.size, self.whole = size, whole


BODY_LIMIT_ENV = "BATCH_MAX_BODY_MB"
_PART_PATH = re.compile(r"^/v1/uploads/[^/]+/parts/?$")


def body_limit_bytes(environ: Mapping[str, str] = os.environ) -> tuple[float, int]:
    """The API's own limit on a body, as the api handler reads it: (MiB, bytes)."""
    default = Settings.model_fields["batch_max_body_mb"].default
    try:
        mib = float(environ.get(BODY_LIMIT_ENV) or default)
    except ValueError:
        mib = float(default)
    return mib, int(mib * 1024 * 1024)


def too_large(path: str, size: int, *, whole: bool = True, environ: Mapping[str, str] = os.environ) -> Reply:
    """The 413 for a body of ``size`` bytes that API Gateway or Lambda would refuse, in the
    API's error shape: the limit in bytes, and where the body goes instead."""
    mib, limit = body_limit_bytes(environ)
    sdk_parts = f"part_size={mib:g} * 1024 * 1024"
    has = f"this request's body has {'' if whole else 'more than '}{size} bytes"
    if _PART_PATH.match(path):
        what = "An upload's part"
        instead = (
            f"Send the file in parts of at most {mib:g} MiB ({limit} bytes): with the OpenAI SDK, "
            f"client.uploads.upload_file_chunked(..., {sdk_parts}) (its default part size, 64 MiB, "
            "is too large here)."
        )
    else:
        what = "A file sent in one request" if path.rstrip("/") == "/v1/files" else "A request body"
        instead = (
            "Send a larger file through the Uploads API (POST /v1/uploads) in parts of at most "
            f"{mib:g} MiB (with the OpenAI SDK, client.uploads.upload_file_chunked(..., {sdk_parts})), "
            "or by a presigned upload (POST /v1/files/presigned), and create the batch from the file."
        )
    message = (
        f"{what} holds at most {mib:g} MiB ({limit} bytes, BATCH_MAX_BODY_MB); {has}, more than "
        f"API Gateway and Lambda take. {instead}"
    )
    error = {"message": message, "type": "request_too_large", "param": None, "code": 413}
    return Reply(413, [("Content-Type", "application/json")], json.dumps({"error": error}).encode())


def is_text(content_type: str | None) -> bool:
    """Whether API Gateway passes a body of this type as text (else base64)."""
    if not content_type:
        return False
    media = content_type.split(";", 1)[0].strip().lower()
    return media.startswith("text/") or media in _TEXT_TYPES or media.endswith(("+json", "+xml"))


def build_event(
    *,
    method: str,
    target: str,
    headers: list[tuple[str, str]],
    body: bytes,
    source_ip: str,
    protocol: str = "HTTP/1.1",
    now: float | None = None,
) -> dict[str, Any]:
    """The API Gateway HTTP API payload v2.0 event for one request."""
    now = time.time() if now is None else now
    raw_path, _, raw_query = target.partition("?")
    merged: dict[str, str] = {}
    cookies: list[str] = []
    for name, value in headers:
        key = name.lower()
        if key == "cookie":  # v2 moves cookies to their own field
            cookies += [c.strip() for c in value.split(";") if c.strip()]
            continue
        merged[key] = f"{merged[key]},{value}" if key in merged else value
    forwarded = merged.get("x-forwarded-for")
    merged["x-forwarded-for"] = f"{forwarded}, {source_ip}" if forwarded else source_ip
    merged.setdefault("x-forwarded-proto", "http")
    host = merged.get("host", HOST)
    merged.setdefault("x-forwarded-port", host.rpartition(":")[2] if ":" in host else "80")
    request_id = base64.b32encode(uuid.uuid4().bytes).decode()[:16]

    event: dict[str, Any] = {
        "version": "2.0",
        "routeKey": "$default",
        "rawPath": raw_path,
        "rawQueryString": raw_query,
        "headers": merged,
        "requestContext": {
            "accountId": ACCOUNT_ID,
            "apiId": "local",
            "domainName": host,
            "domainPrefix": host.split(".", 1)[0],
            "http": {
                "method": method,
                "path": raw_path,
                "protocol": protocol,
                "sourceIp": source_ip,
                "userAgent": merged.get("user-agent", ""),
            },
            "requestId": request_id,
            "routeKey": "$default",
            "stage": "$default",
            "time": datetime.fromtimestamp(now, UTC).strftime("%d/%b/%Y:%H:%M:%S +0000"),
            "timeEpoch": int(now * 1000),
        },
        "isBase64Encoded": False,
    }
    if cookies:
        event["cookies"] = cookies
    if raw_query:
        params: dict[str, str] = {}
        for key, value in parse_qsl(raw_query, keep_blank_values=True):
            params[key] = f"{params[key]},{value}" if key in params else value
        event["queryStringParameters"] = params
    if body:
        text: str | None = None
        if is_text(merged.get("content-type")):
            try:
                text = body.decode("utf-8")
            except UnicodeDecodeError:
                text = None
        if text is None:
            event["body"] = base64.b64encode(body).decode("ascii")
            event["isBase64Encoded"] = True
        else:
            event["body"] = text
    return event


class Reply:
    """What goes back to the client: status, header list, body."""

    def __init__(self, status: int, headers: list[tuple[str, str]], body: bytes) -> None:
        self.status, self.headers, self.body = status, headers, body

    @classmethod
    def message(cls, status: int, message: str) -> Reply:
        body = json.dumps({"message": message}).encode()
        return cls(status, [("Content-Type", "application/json")], body)


def lambda_payload_bytes(result: Any) -> int:
    """The bytes Lambda's Python runtime sends back for ``result``, the larger of its two
    marshallers' (ValueError when it cannot serialize it, TypeError when it is not JSON).

    Python 3.12 and later encode with ``ensure_ascii=False`` (a CJK character is 3 bytes, an
    emoji 4) and then as UTF-8, which a lone surrogate fails; earlier runtimes escape every
    non-ASCII character (6 bytes, 12 for an astral one, as a surrogate pair)."""
    unescaped = json.dumps(result, ensure_ascii=False).encode("utf-8")  # UnicodeEncodeError is a ValueError
    escaped = json.dumps(result)  # ASCII: one byte a character
    return max(len(unescaped), len(escaped))


def reply_from_result(result: Any) -> Reply:
    """Turn the handler's return value into the HTTP reply, as API Gateway (v2.0) does."""
    try:
        size = lambda_payload_bytes(result)
    except (TypeError, ValueError):
        log.error("handler returned a value Lambda's runtime cannot serialize")
        return Reply.message(502, "Internal Server Error")
    payload = json.dumps(result)
    if size > LAMBDA_MAX_RESPONSE:
        log.error("response exceeds Lambda's 6 MB payload limit", extra={"bytes": size})
        return Reply.message(502, "Internal Server Error")
    if not (isinstance(result, dict) and "statusCode" in result):
        # v2.0: a JSON value without statusCode is a 200 whose body is that JSON.
        return Reply(200, [("Content-Type", "application/json")], payload.encode())
    try:
        status = int(result["statusCode"])
        body_value = result.get("body") or ""
        if result.get("isBase64Encoded"):
            body = base64.b64decode(body_value, validate=True)
        else:
            body = str(body_value).encode()
        headers: list[tuple[str, str]] = []
        for name, value in (result.get("headers") or {}).items():
            headers.append((str(name), str(value)))
        for name, values in (result.get("multiValueHeaders") or {}).items():
            headers += [(str(name), str(v)) for v in values]
        headers += [("Set-Cookie", str(cookie)) for cookie in result.get("cookies") or []]
    except (TypeError, ValueError, AttributeError):
        log.error("handler returned a malformed proxy result")
        return Reply.message(502, "Internal Server Error")
    headers = [(n, v) for n, v in headers if n.lower() not in _RESPONSE_HEADERS_DROPPED]
    return Reply(status, headers, body)


class ApiAdapter(ThreadingHTTPServer):
    """The HTTP server; ``handler_path`` names the api handler it calls, ``admin_handler_path``
    the admin function's, ``interactive_handler_path`` the interactive function's, whose
    execution environments are processes (``interactive``, an ``EnvironmentPool``).
    ``gateway_timeout_seconds`` is API Gateway's integration timeout (tests shorten it)."""

    daemon_threads = True
    block_on_close = False
    # ``listen``'s backlog: connections the kernel completes before this process accepts them
    # (socketserver's default is 5). A burst of more connections than that overflowed it: with
    # SYN cookies (Linux's default) the client saw its connection open, sent its request and got
    # a reset. 128 holds the interactive function's 64 at once and as many others.
    request_queue_size = 128

    def __init__(
        self,
        port: int,
        handler_path: str,
        host: str = HOST,
        reuse_port: bool = False,
        concurrency: int = DEFAULT_CONCURRENCY,
        admin_handler_path: str = DEFAULT_ADMIN_HANDLER,
        interactive_concurrency: int = DEFAULT_INTERACTIVE_CONCURRENCY,
        idle_seconds: float = DEFAULT_IDLE_SECONDS,
        interactive_handler_path: str = INTERACTIVE_HANDLER,
        gateway_timeout_seconds: float = API_GATEWAY_TIMEOUT_SECONDS,
        bind_and_activate: bool = True,
    ) -> None:
        self.allow_reuse_port = reuse_port
        self.gateway_timeout_seconds = gateway_timeout_seconds
        self.handlers = HandlerPool(handler_path, max_size=concurrency)
        self.admin_handlers = HandlerPool(admin_handler_path, max_size=concurrency)
        self.interactive = EnvironmentPool(  # none runs before ``warm`` or a request
            interactive_handler_path,
            max_size=interactive_concurrency,
            function_name=INTERACTIVE_FUNCTION_NAME,
            memory_mb=INTERACTIVE_MEMORY_MB,
            name="interactive",
            idle_seconds=idle_seconds,
            starts_at_once=INTERACTIVE_STARTS_AT_ONCE,
        )
        super().__init__(
            (host, port), _RequestHandler, bind_and_activate
        )  # closes the pool if it cannot listen

    def listen(self) -> None:
        """Bind the port and listen, for an adapter made with ``bind_and_activate=False``."""
        try:
            self.server_bind()
            self.server_activate()
        except BaseException:
            self.server_close()
            raise

    def function_for(self, method: str, path: str) -> str:
        """The function the HTTP API routes ``method path`` to."""
        if path.startswith(resources.ADMIN_PATH_PREFIX):
            return ADMIN_FUNCTION_NAME
        if method == "POST" and path in resources.INTERACTIVE_PATHS:
            return INTERACTIVE_FUNCTION_NAME
        return API_FUNCTION_NAME

    def invoke(self, event: Mapping[str, Any]) -> Reply:
        request_id = event["requestContext"]["requestId"]
        method = event["requestContext"]["http"]["method"]
        function_name = self.function_for(method, event["rawPath"])
        try:
            if function_name == INTERACTIVE_FUNCTION_NAME:
                result, elapsed = self._in_environment(event)
            else:
                result, elapsed = self._in_process(function_name, event)
            record_invocation(function_name, elapsed)
        except InvocationTimedOut:
            log.error(
                "handler exceeded API Gateway's timeout; its environment is replaced",
                extra={"request_id": request_id, "seconds": self.gateway_timeout_seconds},
            )
            return Reply.message(503, "Service Unavailable")
        except (EnvironmentDied, ResponseNotSerializable) as exc:
            log.error("execution environment failed", extra={"request_id": request_id, "why": str(exc)})
            return Reply.message(502, "Internal Server Error")
        except Exception:
            log.exception("handler raised", extra={"request_id": request_id, "function": function_name})
            return Reply.message(500, "Internal Server Error")
        if elapsed > self.gateway_timeout_seconds:
            log.error("api handler exceeded API Gateway's timeout", extra={"seconds": round(elapsed, 1)})
            return Reply.message(503, "Service Unavailable")
        return reply_from_result(result)

    def _in_process(self, function_name: str, event: Mapping[str, Any]) -> tuple[Any, float]:
        """The api or admin handler's result, called in this process, and how long it ran."""
        pool = self.admin_handlers if function_name == ADMIN_FUNCTION_NAME else self.handlers
        # its AWS calls are its function's (this process is named after the api function)
        with calls_made_for(function_name), pool.environment() as handler:  # an import error fails here
            context = LambdaContext(function_name=function_name, timeout_seconds=self.gateway_timeout_seconds)
            started = time.monotonic()
            result = handler(dict(event), context)
            return result, time.monotonic() - started

    def _in_environment(self, event: Mapping[str, Any]) -> tuple[Any, float]:
        """The interactive handler's result, from an execution environment of its own (a process;
        a cold one first imports the handler), and how long it ran; raises HandlerFailed when it
        raised, EnvironmentDied when the process died (InvocationTimedOut past API Gateway's
        timeout: it is not waited for longer)."""
        timeout = self.gateway_timeout_seconds
        with self.interactive.environment() as environment:
            started = time.monotonic()  # after the cold start, if any: Lambda times init apart
            result = environment.invoke(event, timeout, wait_seconds=timeout)
            return result, time.monotonic() - started

    def server_close(self) -> None:
        super().server_close()
        self.interactive.close()


class _RequestHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # A response goes out in two writes (its headers, then its body): with Nagle's algorithm on,
    # the body waited for the client's ACK of the headers, which Linux delays by up to 40 ms,
    # on every response of a kept-alive connection (API Gateway answers in one go).
    disable_nagle_algorithm = True
    server: ApiAdapter

    def version_string(self) -> str:
        return "batchgw-local"

    def log_message(self, format: str, *args: Any) -> None:
        log.debug(format, *args)

    def handle_expect_100(self) -> bool:
        declared = self._declared_length()
        if declared > API_GATEWAY_MAX_BODY:
            self._send(too_large(self.path.partition("?")[0], declared), close=True)
            return False
        return super().handle_expect_100()

    def _declared_length(self) -> int:
        try:
            return int(self.headers.get("Content-Length") or 0)
        except ValueError:
            return 0

    def _read_body(self) -> bytes:
        """The request body; raises RequestTooLarge past API Gateway's 10 MB.

        An oversized body is still read (and dropped) up to ``DRAIN_LIMIT``, so that the
        client, still sending, gets the 413 rather than a reset connection.
        """
        whole = True
        chunked = "chunked" in (self.headers.get("Transfer-Encoding") or "").lower()
        parts = self._chunks() if chunked else self._sized(self._declared_length())
        kept: list[bytes] = []
        size = 0
        for part in parts:
            size += len(part)
            if size > DRAIN_LIMIT:
                self.close_connection = True
                whole = False
                break
            if size <= API_GATEWAY_MAX_BODY:
                kept.append(part)
        if size > API_GATEWAY_MAX_BODY:
            declared = self._declared_length()
            raise RequestTooLarge(declared if declared > size else size, whole or declared > size)
        return b"".join(kept)

    def _sized(self, length: int) -> Iterator[bytes]:
        while length > 0:
            part = self.rfile.read(min(length, 1 << 20))
            if not part:
                raise ValueError("body shorter than Content-Length")
            length -= len(part)
            yield part

    def _chunks(self) -> Iterator[bytes]:
        while True:
            line = self.rfile.readline(65537)
            chunk_size = int(line.split(b";", 1)[0].strip() or b"0", 16)
            if chunk_size == 0:
                while self.rfile.readline(65537) not in (b"\r\n", b"\n", b""):
                    pass  # trailers
                return
            yield from self._sized(chunk_size)
            self.rfile.readline(3)

    def _dispatch(self) -> None:
        path = self.path.partition("?")[0]
        try:
            body = self._read_body()
        except RequestTooLarge as refused:
            self._send(too_large(path, refused.size, whole=refused.whole), close=self.close_connection)
            return
        except ValueError:
            self._send(Reply.message(400, "Bad Request"), close=True)
            return
        event = build_event(
            method=self.command,
            target=self.path,
            headers=list(self.headers.items()),
            body=body,
            source_ip=self.client_address[0],
            protocol=self.request_version,
        )
        if len(json.dumps(event).encode()) > LAMBDA_MAX_REQUEST:
            self._send(too_large(path, len(body)))
            return
        reply = self.server.invoke(event)
        reply.headers.append(("Apigw-Requestid", event["requestContext"]["requestId"]))
        self._send(reply)

    def _send(self, reply: Reply, close: bool = False) -> None:
        self.send_response(reply.status)
        for name, value in reply.headers:
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(reply.body)))
        if close:
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(reply.body)

    def __getattr__(self, name: str) -> Any:
        # BaseHTTPRequestHandler answers 501 for a method without a ``do_<METHOD>``; the HTTP
        # API's ``ANY`` routes hand every method (TRACE, CONNECT, made-up ones) to the function.
        if name.startswith("do_"):
            return self._dispatch
        raise AttributeError(name)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=int(os.environ.get(API_PORT_ENV, DEFAULT_API_PORT)))
    parser.add_argument("--handler", default=os.environ.get(API_HANDLER_ENV, DEFAULT_API_HANDLER))
    parser.add_argument("--admin-handler", default=os.environ.get(ADMIN_HANDLER_ENV, DEFAULT_ADMIN_HANDLER))
    parser.add_argument("--reuse-port", action="store_true", help="share the port with other adapters")
    parser.add_argument(
        "--concurrency", type=int, default=int(os.environ.get(API_CONCURRENCY_ENV, DEFAULT_CONCURRENCY))
    )
    parser.add_argument(
        "--interactive-concurrency",
        type=int,
        default=interactive_environments(os.environ),
        help="the interactive function's execution environments at most (BATCHGW_INTERACTIVE_CONCURRENCY)",
    )
    parser.add_argument(
        "--idle-seconds",
        type=float,
        default=float(os.environ.get(IDLE_SECONDS_ENV, DEFAULT_IDLE_SECONDS)),
        help="an interactive environment idle this long is reaped",
    )
    args = parser.parse_args(argv)
    setup_logging("api")
    os.environ[FUNCTION_NAME_ENV] = API_FUNCTION_NAME  # as in the function's environment on Lambda
    server = ApiAdapter(
        args.port,
        args.handler,
        reuse_port=args.reuse_port,
        concurrency=args.concurrency,
        admin_handler_path=args.admin_handler,
        interactive_concurrency=args.interactive_concurrency,
        idle_seconds=args.idle_seconds,
        bind_and_activate=False,
    )
    # Import the handlers (and start an interactive environment) before the port opens: fail at
    # start, and a stack that sees the port open has them ready.
    try:
        server.handlers.warm()
        server.admin_handlers.warm()
        server.interactive.warm()
    except BaseException:
        server.server_close()
        raise
    server.listen()
    log.info(
        "api adapter listening",
        extra={"port": args.port, "handler": args.handler, "admin_handler": args.admin_handler},
    )
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        server.serve_forever(poll_interval=0.2)
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


if __name__ == "__main__":
    main()
