"""Helpers every test layer shares: the repo root, a clock tests move by hand, waiting."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

REPO_ROOT = Path(__file__).resolve().parent.parent
T = TypeVar("T")


def load_event(name: str, **overrides: Any) -> dict[str, Any]:
    """A sample Lambda event from ``events/<name>.json``, with top-level fields replaced."""
    event: dict[str, Any] = json.loads((REPO_ROOT / "events" / f"{name}.json").read_text())
    event.update(overrides)
    return event


def http_event(
    method: str,
    path: str,
    *,
    key: str | None = "sk-local-alice",
    body: Any = None,
    query: str = "",
    headers: dict[str, str] | None = None,
) -> dict[str, Any]:
    """An API Gateway HTTP API (v2) event for ``method path``, built on the sample event."""
    event = load_event("http_api_request")
    event["rawPath"] = path
    event["rawQueryString"] = query
    event["requestContext"]["http"].update(method=method, path=path)
    sent = dict(event["headers"])
    if key is None:
        sent.pop("authorization")
    else:
        sent["authorization"] = f"Bearer {key}"
    sent.update({name.lower(): value for name, value in (headers or {}).items()})
    event["headers"] = sent
    if query:
        params: dict[str, str] = {}
        for pair in query.split("&"):
            name, _, value = pair.partition("=")
            params[name] = f"{params[name]},{value}" if name in params else value
        event["queryStringParameters"] = params
    event["body"] = None if body is None else (body if isinstance(body, str) else json.dumps(body))
    return event


def bare_table(dynamodb: Any, name: str) -> Any:
    """Create a table keyed by a string ``pk`` alone (for tests of the AWS plumbing itself,
    not of the gateway's tables); returns ``dynamodb``."""
    dynamodb.create_table(
        TableName=name,
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )
    return dynamodb


class FakeClock:
    """A clock that only moves when told to."""

    def __init__(self, now: float = 1_800_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def wait_for(
    predicate: Callable[[], T | None], *, timeout: float, interval: float = 0.05, what: str = "condition"
) -> T:
    """Poll ``predicate`` until it returns something truthy, or fail after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


class LambdaContext:
    """The Lambda context a handler gets, for calling handlers in a test."""

    memory_limit_in_mb = 1024

    def __init__(
        self, function_name: str = "batchgw-api", *, request_id: str = "req-1", remaining_ms: int = 30_000
    ):
        self.function_name = function_name
        self.aws_request_id = request_id
        self.invoked_function_arn = f"arn:aws:lambda:us-east-1:123456789012:function:{function_name}"
        self._remaining_ms = remaining_ms

    def get_remaining_time_in_millis(self) -> int:
        return self._remaining_ms


class Receiver:
    """A webhook receiver on loopback: each POST to a path gets the next step planned for it
    (a status; "slow": 200 after 0.8 s; "hang": 200 after 5 s, well past the tests' timeouts of
    at most 2 s), else 200; every delivery is kept as (headers with lower-case names, body,
    when)."""

    def __init__(self) -> None:
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        self.plans: dict[str, list[int | str]] = {}
        self.seen: list[tuple[str, dict[str, str], bytes, float]] = []
        self.lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length", 0)))
                headers = {k.lower(): v for k, v in self.headers.items()}
                with receiver.lock:
                    receiver.seen.append((self.path, headers, body, time.monotonic()))
                    plan = receiver.plans.get(self.path, [])
                    step = plan.pop(0) if plan else 200
                if step in ("slow", "hang"):
                    time.sleep(0.8 if step == "slow" else 5)
                    step = 200
                self.send_response(int(step))
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, *_: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.server.server_port}{path}"

    def at(self, path: str) -> list[tuple[dict[str, str], bytes, float]]:
        with self.lock:
            return [(h, b, t) for p, h, b, t in self.seen if p == path]

    def stop(self) -> None:
        self.server.shutdown()


def spec_counts(batch: dict[str, Any]) -> dict[str, int]:
    """A batch object's request counts as the spec names them (total, completed, failed)."""
    counts = batch["request_counts"]
    return {name: counts[name] for name in ("total", "completed", "failed")}


# Headers a proxy sets itself (the body is relayed whole, decoded).
HOP_HEADERS = ("host", "content-length", "transfer-encoding", "connection", "content-encoding")


class GateProxy:
    """A loopback HTTP proxy to ``target`` that lets the first ``open_for`` requests whose
    path ends with ``suffix`` through and holds the later ones until ``release`` (or 60 s):
    a test interrupts a client at a known point, however fast the machine runs it."""

    def __init__(self, target: str, suffix: str, open_for: int) -> None:
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        import httpx

        self.passed = 0
        self.held = threading.Event()  # a request is being held
        self._gate = threading.Event()
        lock = threading.Lock()
        proxy = self
        client = httpx.Client(base_url=target.rstrip("/"), timeout=60)

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _relay(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length", 0)))
                if self.path.split("?")[0].endswith(suffix):
                    with lock:
                        hold = proxy.passed >= open_for
                        proxy.passed += 0 if hold else 1
                    if hold:
                        proxy.held.set()
                        proxy._gate.wait(60)
                headers = {
                    k: v for k, v in self.headers.items() if k.lower() not in ("host", "content-length")
                }
                answer = client.request(self.command, self.path, headers=headers, content=body)
                self.send_response(answer.status_code)
                for name, value in answer.headers.items():
                    if name.lower() not in (
                        "content-length",
                        "transfer-encoding",
                        "connection",
                        "content-encoding",
                    ):
                        self.send_header(name, value)
                self.send_header("content-length", str(len(answer.content)))
                self.end_headers()
                self.wfile.write(answer.content)

            do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = _relay

            def log_message(self, *_: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_port}"

    def release(self) -> None:
        self._gate.set()

    def stop(self) -> None:
        self.release()
        self.server.shutdown()
