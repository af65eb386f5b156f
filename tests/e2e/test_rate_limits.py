"""No tenant can starve another: each API key's request rate on the local stack, over HTTP.

The stack takes 2 requests a second per key, in bursts of 4 (``BATCH_API_RATE_PER_KEY``).
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from local.run import LocalStack
from tests.e2e.conftest import STACK_ENV, stack_for

pytestmark = pytest.mark.e2e

RATE = 2
BURST = 2 * RATE


@pytest.fixture(scope="module")
def limited(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    with stack_for(tmp_path_factory, "rates", {**STACK_ENV, "BATCH_API_RATE_PER_KEY": str(RATE)}) as running:
        yield running


def client(stack: LocalStack, key: str) -> httpx.Client:
    return httpx.Client(base_url=stack.api_url, headers={"Authorization": f"Bearer {key}"}, timeout=30)


def test_one_key_flooding_gets_429_with_retry_after_while_another_keys_requests_all_succeed(
    limited: LocalStack,
) -> None:
    flooder, other = client(limited, "sk-local-alice"), client(limited, "sk-local-bob")
    strangers = [client(limited, f"sk-made-up-{secrets.token_hex(6)}") for _ in range(20)]
    started = time.monotonic()
    with ThreadPoolExecutor(8) as pool:
        flood = [pool.submit(flooder.get, "/batches") for _ in range(60)]
        made_up = [pool.submit(stranger.get, "/batches") for stranger in strangers]
        # The other tenant sends no more than its own burst while the flood goes on: every
        # one is taken, however slow the machine (its bucket is its own).
        others = [pool.submit(other.get, "/batches") for _ in range(BURST)]
        flooded = [f.result() for f in flood]
    elapsed = time.monotonic() - started

    assert [r.status_code for r in (f.result() for f in others)] == [200] * BURST
    assert {f.result().status_code for f in made_up} == {401}  # they took no tenant's turn
    refused = [r for r in flooded if r.status_code == 429]
    taken = [r for r in flooded if r.status_code == 200]
    assert len(refused) + len(taken) == len(flooded)
    assert refused, f"60 requests in {elapsed:.1f} s were all taken"
    assert len(taken) <= BURST + RATE * elapsed + 1  # no more than the bucket gave in that time
    for response in refused:
        assert response.json()["error"]["code"] == "rate_limited"
        assert int(response.headers["Retry-After"]) >= 1


def test_a_key_that_waits_as_retry_after_says_is_served_again(limited: LocalStack) -> None:
    api = client(limited, "sk-local-admin")
    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(lambda _: api.get("/batches"), range(30)))
    waits = [int(r.headers["Retry-After"]) for r in answers if r.status_code == 429]
    assert waits, [r.status_code for r in answers]
    # The last request taken left the bucket at most one interval short of a token; any
    # Retry-After (a whole second at least) covers that.
    time.sleep(max(waits))
    assert api.get("/batches").status_code == 200
