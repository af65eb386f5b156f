"""Requests that would break a worker become outcomes: never a redelivery loop that calls
(and bills) the upstream again."""

from __future__ import annotations

import asyncio
import base64
import os

import pytest
from batchgw.api import batches
from batchgw.api import results as results_api
from batchgw.config.catalog import Catalog
from batchgw.deps import Deps
from batchgw.domain.chains import decode
from batchgw.domain.principal import Principal
from batchgw.run import lifecycle
from batchgw.run.chain import run_message
from batchgw.upstream import client as upstream

from local.simulator import Simulator
from tests.integration.conftest import body_of, chat_request, make_deps, receive_all
from tests.support import FakeClock

pytestmark = pytest.mark.usefixtures("aws_env")

ALICE = Principal(user_id="user-alice", role="internal", key_id="key_local_alice")


def run_batch(deps: Deps, texts: list[str]) -> str:
    batch = batches.create_batch(
        deps, ALICE, body_of([chat_request(f"p-{i}", t) for i, t in enumerate(texts)])
    )
    lifecycle.prepare(deps, batch["id"])
    for message in receive_all(deps):
        asyncio.run(run_message(deps, decode(message["Body"]), owner="w", deadline=deps.clock() + 900))
    return str(batch["id"])


def results(deps: Deps, batch_id: str) -> list[dict]:  # type: ignore[type-arg]
    return list(results_api.results_page(deps, ALICE, batch_id, {})["data"])


def test_an_exception_while_calling_becomes_the_requests_outcome(
    sim: Simulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    deps = make_deps(sim, FakeClock())

    async def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("a bug in the call path")

    monkeypatch.setattr(upstream, "run_request", broken)
    batch_id = run_batch(deps, ["one", "two"])
    assert [(r["status"], r["error"]["code"]) for r in results(deps, batch_id)] == [
        ("failed", "upstream_error")
    ] * 2
    message = results(deps, batch_id)[0]["error"]["message"]
    assert "internal failure" in message and "Retry the batch" in message  # words a user can act on
    assert "RuntimeError" not in message and "a bug in the call path" not in message  # the logs keep them
    assert receive_all(deps) == []  # nothing comes back to be tried again


def test_a_request_whose_model_left_the_catalog_fails_model_not_found(sim: Simulator) -> None:
    deps = make_deps(sim, FakeClock())
    batch = batches.create_batch(deps, ALICE, body_of([chat_request("gone", "hello")]))
    lifecycle.prepare(deps, batch["id"])
    deps.catalog = Catalog.model_validate(
        {
            "models": {
                name: spec.model_dump(exclude={"id"})
                for name, spec in deps.catalog.models.items()
                if name != "sim-chat"
            },
            "aliases": {},
        }
    )
    for message in receive_all(deps):
        asyncio.run(run_message(deps, decode(message["Body"]), owner="w", deadline=deps.clock() + 900))
    [result] = results(deps, batch["id"])
    assert (result["status"], result["error"]["code"]) == ("failed", "model_not_found")
    assert sim.stats()["models"]["sim-chat"]["requests"] == 0


def test_a_request_whose_workers_keep_dying_fails_worker_lost(sim: Simulator) -> None:
    clock = FakeClock()
    deps = make_deps(sim, clock)
    batch = batches.create_batch(deps, ALICE, body_of([chat_request("doomed", "hello")]))
    lifecycle.prepare(deps, batch["id"])
    [message] = receive_all(deps)
    for attempt in range(4):  # four workers claim it and die
        deps.requests.claim(batch["id"], 0, f"dead-{attempt}", clock(), 60)
        clock.advance(61)
    asyncio.run(run_message(deps, decode(message["Body"]), owner="w", deadline=clock() + 900))
    [result] = results(deps, batch["id"])
    assert (result["status"], result["error"]["code"]) == ("failed", "worker_lost")
    assert batches.get_batch(deps, ALICE, batch["id"])["cost_unknown_attempts"] == 4
    assert sim.stats()["models"]["sim-chat"]["requests"] == 0


def test_a_large_request_and_its_response_never_share_one_oversized_record(sim: Simulator) -> None:
    deps = make_deps(sim, FakeClock())
    text = base64.b64encode(os.urandom(250_000)).decode()  # ~250 KB packed: kept in its record
    batch_id = run_batch(deps, [text])
    request = deps.requests.get(batch_id, 0)
    assert request is not None and request.request_packed is None  # let go once it ended
    assert request.response_packed is None and request.response_ref is not None  # the echo went to S3
    [result] = results(deps, batch_id)
    assert (
        result["status"] == "completed"
        and text in result["response"]["body"]["choices"][0]["message"]["content"]
    )
