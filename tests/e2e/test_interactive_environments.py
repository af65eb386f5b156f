"""The interactive function on the local stack runs as on Lambda: each execution environment is
a process of the api adapter's (``local.environments``) with caches of its own, serving one
request at a time; a burst of 64 requests at once through httpx is answered, none reset.

The stack records the AWS calls each process makes, per function and pid
(``BATCHGW_AWS_CALLS_DIR``): what an environment looked up is its own.
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from batchgw.storage.aws import CALLS_DIR_ENV

from local.adapter import INTERACTIVE_FUNCTION_NAME
from local.run import LocalStack
from tests.e2e.conftest import stack_for

ENV = {
    "BATCH_API_RATE_PER_KEY": "0",  # 64 requests at once from one key
    "BATCH_OWNER_CACHE_SECONDS": "600",  # a key read stays remembered for the whole module
}
BURST = 64  # BATCHGW_INTERACTIVE_CONCURRENCY's default


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    with stack_for(tmp_path_factory, "interactive", ENV, workers=1) as running:
        yield running


def ask(stack: LocalStack, text: str, client: httpx.Client | None = None) -> httpx.Response:
    body = {"model": "sim-chat", "messages": [{"role": "user", "content": text}]}
    if client is not None:
        return client.post("/chat/completions", json=body)
    with alice(stack) as own:
        return own.post("/chat/completions", json=body)


def alice(stack: LocalStack) -> httpx.Client:
    return httpx.Client(
        base_url=stack.api_url, headers={"Authorization": "Bearer sk-local-alice"}, timeout=120
    )


def interactive_calls(stack: LocalStack) -> dict[int, Counter[str]]:
    """The AWS calls each process made as the interactive function, by pid, once their counts
    (written twice a second) stop changing."""

    def read() -> dict[int, Counter[str]]:
        found = {}
        for path in Path(stack.env[CALLS_DIR_ENV]).glob(f"{INTERACTIVE_FUNCTION_NAME}.*.json"):
            found[int(path.stem.rpartition(".")[2])] = Counter(json.loads(path.read_text()))
        return found

    previous: dict[int, Counter[str]] | None = None
    deadline = time.monotonic() + 15
    while (current := read()) != previous and time.monotonic() < deadline:
        previous = current
        time.sleep(0.7)
    return current


def test_two_concurrent_interactive_requests_run_in_different_processes_with_caches_of_their_own(
    stack: LocalStack, sim: httpx.Client
) -> None:
    (warm,) = stack.environment_pids("api-")  # started at launch
    assert ask(stack, "hello first").status_code == 200  # served warm; it reads alice's key once

    with ThreadPoolExecutor(2) as callers:
        pair = list(callers.map(lambda i: ask(stack, f"[[sim latency_ms=5000 tag=pair]] {i}"), range(2)))
    assert [answer.status_code for answer in pair] == [200, 200]
    assert sim.get("/_sim/stats").json()["tags"]["pair"]["max_in_flight"] == 2  # at once

    (started,) = set(stack.environment_pids("api-")) - {warm}  # a second environment, for the second
    calls = interactive_calls(stack)
    assert set(calls) == {warm, started}  # only they called AWS as the function: not the adapter
    # Each looked alice's key up once: the warm one for its first request (its second found the
    # key in its cache), the new one for its own, since the other's cache is not its.
    assert calls[warm]["dynamodb.GetItem"] == 1 and calls[started]["dynamodb.GetItem"] == 1


def test_sixty_four_interactive_requests_at_once_through_httpx_are_all_answered_none_reset(
    stack: LocalStack,
) -> None:
    at_once = threading.Barrier(BURST)

    def send(i: int) -> Any:
        with alice(stack) as client:  # a connection of its own each, all opened at once
            at_once.wait()
            return ask(stack, f"[[sim latency_ms=200]] burst {i}", client)

    with ThreadPoolExecutor(BURST) as callers:
        answers = list(callers.map(send, range(BURST)))  # a reset connection raises here
    assert [answer.status_code for answer in answers] == [200] * BURST
    contents = [answer.json()["choices"][0]["message"]["content"] for answer in answers]
    assert all(content.endswith(f"burst {i}") for i, content in enumerate(contents))
    assert 2 <= len(stack.environment_pids("api-")) <= BURST
