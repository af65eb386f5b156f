"""Concurrent requests in one process (the local adapter's threads) each see their own event."""

from __future__ import annotations

import json
import threading
from typing import Any

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.utilities.typing import LambdaContext
from batchgw.api.http import json_response, new_resolver

from tests.support import load_event


def _event(who: str) -> dict[str, Any]:
    event = load_event("http_api_request")
    event["rawPath"] = event["requestContext"]["http"]["path"] = "/probe"
    event["requestContext"]["http"]["method"] = "GET"
    event["headers"] = {"x-who": who}
    event["body"] = None
    event["isBase64Encoded"] = False
    return event


def test_a_route_reads_its_own_request_while_another_thread_resolves_one() -> None:
    app = new_resolver()
    inside = threading.Event()
    other_done = threading.Event()

    @app.get("/probe")
    def probe() -> Response[Any]:
        who = app.current_event.headers["x-who"]
        if who == "alice":
            inside.set()  # bob's request is resolved in full while alice's route runs
            assert other_done.wait(10)
        return json_response(200, {"who_then": who, "who_now": app.current_event.headers["x-who"]})

    answers: dict[str, Any] = {}

    def call(who: str) -> None:
        answers[who] = json.loads(app.resolve(_event(who), LambdaContext())["body"])

    alice = threading.Thread(target=call, args=("alice",))
    alice.start()
    assert inside.wait(10)
    call("bob")
    other_done.set()
    alice.join(10)

    assert answers["bob"] == {"who_then": "bob", "who_now": "bob"}
    assert answers["alice"] == {"who_then": "alice", "who_now": "alice"}
