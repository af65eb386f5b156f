"""An unexpected exception in any route of the HTTP API's two handlers (api, admin) answers the
documented 500 ``{"error": {...}}`` shape and nothing of the failure, even with Powertools' debug
settings on (which would answer the traceback and print every event, its API key included)."""

from __future__ import annotations

import inspect
import json
import logging
from collections.abc import Callable
from typing import Any

import pytest
from batchgw.api.http import INTERNAL_ERROR

from local.env import load_handler_copy
from tests.support import LambdaContext, http_event

SECRET_DETAIL = "boom at /var/task/secret-path"
CALLER_KEY = "sk-local-alice"

ROUTES = [
    ("functions.api.handler.handler", "GET", "/v1/batches"),
    ("functions.api.handler.handler", "POST", "/v1/files/presigned"),
    ("functions.api.handler.handler", "GET", "/v1/me"),
    ("functions.admin.handler.handler", "GET", "/admin/users"),
    ("functions.admin.handler.handler", "PATCH", "/admin/config/BATCH_MIN_ROLE"),
]


def _failing() -> Any:
    raise RuntimeError(SECRET_DETAIL)


def _handler_in_debug_mode(path: str, monkeypatch: pytest.MonkeyPatch) -> Callable[..., dict[str, Any]]:
    """A fresh copy of the handler's module, made with Powertools' debug settings on (a
    resolver reads them when it is made), whose dependencies fail unexpectedly."""
    monkeypatch.setenv("POWERTOOLS_DEV", "true")
    monkeypatch.setenv("POWERTOOLS_DEBUG", "true")
    handler = load_handler_copy(path)
    monkeypatch.setitem(inspect.unwrap(handler).__globals__, "get_deps", _failing)
    return handler


@pytest.mark.parametrize(("path", "method", "route"), ROUTES, ids=[f"{m} {r}" for _, m, r in ROUTES])
def test_an_unhandled_exception_answers_the_documented_500_shape_without_a_traceback(
    path: str,
    method: str,
    route: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    logged: list[logging.LogRecord],
) -> None:
    handler = _handler_in_debug_mode(path, monkeypatch)

    response = handler(http_event(method, route, key=CALLER_KEY, body={"value": "x"}), LambdaContext())

    assert response["statusCode"] == 500
    assert response["headers"]["Content-Type"] == "application/json"
    assert json.loads(response["body"]) == {
        "error": {"message": INTERNAL_ERROR, "type": "server_error", "param": None, "code": 500}
    }
    assert SECRET_DETAIL not in response["body"] and "Traceback" not in response["body"]
    printed = capsys.readouterr()
    assert CALLER_KEY not in printed.out + printed.err  # the event is not printed
    (record,) = [r for r in logged if r.exc_info]  # the log has what went wrong
    assert record.exc_info and str(record.exc_info[1]) == SECRET_DETAIL


def test_an_unknown_route_still_answers_404_in_the_error_shape(monkeypatch: pytest.MonkeyPatch) -> None:
    for path in ("functions.api.handler.handler", "functions.admin.handler.handler"):
        handler = _handler_in_debug_mode(path, monkeypatch)
        response = handler(http_event("GET", "/admin/nothing/here"), LambdaContext())
        assert response["statusCode"] == 404
        assert json.loads(response["body"])["error"]["type"] == "not_found_error"
