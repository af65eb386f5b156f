"""The promise at create (issue 56) on the local stack, through HTTP and the OpenAI SDK
unmodified: the capacity answer, a batch's ``estimated_completion_at``, and a ``complete_by``
the gateway cannot meet refused with 422 ``deadline_infeasible`` and the earliest time,
storing nothing. How close the estimate comes to the real end is a benchmark's business
(``make bench-promise``), never a test's."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import openai
import pytest
from openai import OpenAI
from openai.types import Batch

from local.run import LocalStack
from tests.e2e.conftest import STACK_ENV, Api, chat, stack_for

pytestmark = pytest.mark.e2e
SLOW = "[[sim latency_ms=400]]"  # every request of this module: a pace the stack keeps
N = 120  # the batch: 120 requests of 0.4 s on 4 slots end 13 s after they start at the soonest


@pytest.fixture(scope="module")
def quiet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    """A stack of its own: no other test's batch answers on the model or waits for its slots."""
    with stack_for(tmp_path_factory, "promise", dict(STACK_ENV)) as running:
        yield running


def test_an_infeasible_complete_by_is_refused_with_the_earliest_time_and_a_feasible_create_gets_the_estimate(
    quiet: LocalStack,
) -> None:
    alice = Api(quiet, "sk-local-alice")
    sdk = OpenAI(base_url=quiet.api_url, api_key="sk-local-alice", max_retries=0)
    # A pace on the model first: a small batch's answers, in the request log.
    warm = alice.create([chat(f"w-{i}", f"warm {SLOW} {i}") for i in range(8)]).json()
    assert alice.wait_final(warm["id"])["status"] == "completed"

    seen = alice.http.get("/batches/capacity", params={"model": "sim-chat", "requests": N})
    assert seen.status_code == 200, seen.text
    [model] = seen.json()["data"]
    assert model["requests_per_second"] > 0 and model["model_batch_slots"] > 0
    earliest = model["earliest_completion_at"]
    assert earliest is not None and earliest > time.time()

    tag = uuid.uuid4().hex
    lines = [
        {
            "custom_id": f"r-{i}",
            "body": {"model": "sim-chat", "messages": [{"role": "user", "content": f"{SLOW} {i}"}]},
        }
        for i in range(N)
    ]
    too_soon = int(time.time()) + 5  # in the future, and before N requests of 0.4 s can end
    with pytest.raises(openai.UnprocessableEntityError) as refused:
        sdk.post(
            "/batches",
            body={"requests": lines, "complete_by": too_soon, "metadata": {"tag": tag}},
            cast_to=Batch,
        )
    error = refused.value.body
    assert isinstance(error, dict)
    assert (error["code"], error["param"]) == ("deadline_infeasible", "complete_by")
    assert error["earliest_completion_at"] > too_soon
    assert str(error["earliest_completion_at"]) in error["message"]
    assert not [
        b
        for b in alice.http.get("/batches", params={"limit": 100}).json()["data"]
        if (b.get("metadata") or {}).get("tag") == tag
    ]  # nothing stored

    asked = time.time()
    created = alice.create(lines, metadata={"tag": tag})
    assert created.status_code == 200, created.text
    batch = created.json()
    # The same reading of the same quiet model: the estimate the capacity answer gave, made
    # as much later as the create came.
    assert earliest - 1 <= batch["estimated_completion_at"] <= earliest + int(time.time() - asked) + 2
    assert sdk.batches.retrieve(batch["id"]).model_extra["estimated_completion_at"] is not None
    done = alice.wait_final(batch["id"], timeout=180)
    assert done["status"] == "completed" and done["estimated_completion_at"] is None
