"""A flex request's work does not wait for a worker environment behind batch chains.

On a stack whose worker has one execution environment, a batch's chains hold that
environment for as long as their slow requests run; a flex request's message goes on the flex
queue (``resources.FLEX_QUEUE``), which the worker takes through a mapping of its own, so the
flex request is answered while the batch's requests still run at the model. On the work queue
it would have waited for the environment (and, past BATCH_FLEX_WAIT_SECONDS, answered 429)."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import openai
import pytest

from local.run import LocalStack
from tests.e2e.conftest import Api, chat, stack_for
from tests.support import wait_for

pytestmark = pytest.mark.e2e

BATCH_TAG, FLEX_TAG = "held", "lane"
BATCH_LATENCY_MS = 30_000  # the batch's requests hold the environment this long


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    env = {
        "BATCHGW_WORKER_ENVIRONMENTS": "1",
        "BATCHGW_FLEX_ENVIRONMENTS": "1",
        "BATCH_MODEL_CONCURRENCY": "8",
        "BATCH_UPSTREAM_TIMEOUT_SECONDS": "60",
    }
    with stack_for(tmp_path_factory, "flex-lane", env, workers=1) as running:
        yield running


def tagged(sim: httpx.Client, tag: str, what: str) -> int:
    return int(sim.get("/_sim/stats").json().get("tags", {}).get(tag, {}).get(what, 0))


def test_a_flex_request_is_answered_while_batch_chains_hold_every_worker_environment(
    stack: LocalStack,
) -> None:
    alice = Api(stack, "sk-local-alice")
    sim = httpx.Client(base_url=stack.sim_url, timeout=10)
    text = f"[[sim latency_ms={BATCH_LATENCY_MS} tag={BATCH_TAG}]]"
    created = alice.create([chat(f"r{i}", f"{text} {i}") for i in range(3)])
    assert created.status_code == 200, created.text
    # The worker's one environment runs the batch's chains, each in a 30-s call.
    wait_for(lambda: tagged(sim, BATCH_TAG, "in_flight") == 3, timeout=60, what="the batch's calls to start")

    client = openai.OpenAI(base_url=stack.api_url, api_key="sk-local-bob", max_retries=0)
    answer = client.chat.completions.create(
        model="sim-chat",
        messages=[{"role": "user", "content": f"[[sim tag={FLEX_TAG}]] past the batch"}],
        service_tier="flex",
    )
    assert answer.service_tier == "flex" and answer.choices[0].message.content.endswith("past the batch")
    # ...while the batch's calls still run: its chains never let the environment go.
    assert tagged(sim, BATCH_TAG, "in_flight") == 3
    assert tagged(sim, FLEX_TAG, "requests") == 1
    alice.http.post(f"/batches/{created.json()['id']}/cancel").raise_for_status()
