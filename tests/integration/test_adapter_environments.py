"""The api adapter runs the interactive function as Lambda does: each execution environment a
process of its own (``local.environments``), with its own module state, serving one request at a
time, reused while warm, replaced when it dies or runs past API Gateway's timeout; and what goes
wrong in one answers as API Gateway answers it.

One adapter runs in this process on a free port, with the stand-in handlers of
``tests.integration.fake_handlers`` (no AWS call is made).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from threading import Thread
from typing import Any

import httpx
import pytest

from local.adapter import INTERACTIVE_FUNCTION_NAME, ApiAdapter
from local.children import child_pids
from local.environments import BUSY_NAME
from tests.integration import fake_handlers
from tests.support import wait_for

FAKES = fake_handlers.__name__
GATEWAY_TIMEOUT = 3.0  # API Gateway's 30 s, shortened
CRASHED = {"message": "Internal Server Error"}


@pytest.fixture(scope="module")
def adapter() -> Iterator[ApiAdapter]:
    server = ApiAdapter(
        0,
        f"{FAKES}.echo_api",
        admin_handler_path=f"{FAKES}.echo_api",
        interactive_handler_path=f"{FAKES}.interactive",
        interactive_concurrency=3,
        gateway_timeout_seconds=GATEWAY_TIMEOUT,
    )
    server.interactive.warm()
    serving = Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    serving.start()
    yield server
    server.shutdown()
    server.server_close()


@pytest.fixture
def client(adapter: ApiAdapter) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=f"http://127.0.0.1:{adapter.server_address[1]}/v1", timeout=60) as http:
        yield http


def ask(client: httpx.Client, **body: Any) -> httpx.Response:
    return client.post("/chat/completions", json=body)


def busy_environments() -> int:
    """This process's execution environments serving an invocation now (their process name)."""
    return sum(name == BUSY_NAME for name in child_pids(os.getpid()).values())


def test_concurrent_interactive_requests_run_in_processes_of_their_own_with_their_own_module_state(
    adapter: ApiAdapter, client: httpx.Client, tmp_path: Path
) -> None:
    first = ask(client).json()  # the environment started at launch: warm
    assert first["pid"] != os.getpid() and first["pid"] in adapter.interactive.pids()
    assert first["function"] == first["variable"] == INTERACTIVE_FUNCTION_NAME

    release = tmp_path / "release"
    with ThreadPoolExecutor(1) as caller:
        held = caller.submit(ask, client, do="hold", until=str(release))
        wait_for(lambda: busy_environments() == 1, timeout=10, what="the held request to run")
        beside = ask(client).json()  # while the other runs: another environment, started for it
        release.touch()
        again = held.result(timeout=30).json()
    assert again["pid"] == first["pid"] and again["served"] == first["served"] + 1  # warm: its state kept
    assert beside["pid"] != first["pid"] and beside["served"] == 1  # nothing of the other's module
    assert {first["pid"], beside["pid"]} <= set(adapter.interactive.pids())


def test_a_handler_exception_answers_500_and_its_environment_serves_on(
    adapter: ApiAdapter, client: httpx.Client
) -> None:
    before = set(adapter.interactive.pids())
    failed = ask(client, do="raise")
    assert failed.status_code == 500 and failed.json() == CRASHED
    assert set(adapter.interactive.pids()) == before
    assert ask(client).json()["pid"] in before


def test_an_environment_that_dies_mid_request_answers_502_as_a_lambda_crash_and_is_replaced(
    adapter: ApiAdapter, client: httpx.Client
) -> None:
    replaced = adapter.interactive.replaced
    before = set(adapter.interactive.pids())
    died = ask(client, do="die")
    assert died.status_code == 502 and died.json() == CRASHED
    assert adapter.interactive.replaced == replaced + 1
    after = set(adapter.interactive.pids())
    assert len(after) == len(before) and len(after - before) == 1  # one new process, started at once
    assert ask(client).status_code == 200


def test_answers_lambda_would_refuse_answer_502_from_an_environment_too(client: httpx.Client) -> None:
    for do in ("big", "unserializable"):  # over the 6 MB payload limit; not JSON (a MarshalError)
        refused = ask(client, do=do)
        assert refused.status_code == 502 and refused.json() == CRASHED, do


def test_a_request_past_the_gateway_timeout_answers_503_at_the_timeout_and_its_environment_is_replaced(
    adapter: ApiAdapter, client: httpx.Client
) -> None:
    replaced = adapter.interactive.replaced
    late = client.post("/chat/completions", json={"do": "sleep", "seconds": 60})
    assert late.status_code == 503 and late.json() == {"message": "Service Unavailable"}
    assert late.elapsed.total_seconds() < GATEWAY_TIMEOUT + 10  # not waited for past the timeout
    assert adapter.interactive.replaced == replaced + 1  # as Lambda resets a timed-out environment
    assert ask(client).status_code == 200
