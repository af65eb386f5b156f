"""A chain claims its next request ahead while its call runs, once a share of the recent call
length has passed (``Tuning.claim_ahead_share``), not beside the writes of the ends that
answered with its call; and at once when it needs the claim sooner (moto, the simulator)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from batchgw.api import batches
from batchgw.deps import Deps
from batchgw.domain.chains import ChainMessage, decode
from batchgw.domain.principal import Principal
from batchgw.run import attempt, lifecycle
from batchgw.run.chain import run_message

from local.simulator import Simulator
from tests.integration.conftest import body_of, chat_request, make_deps, receive_all, tune

pytestmark = pytest.mark.usefixtures("aws_env")

ALICE = Principal(user_id="user-alice", role="internal", key_id="key_local_alice")


def one_chain(sim: Simulator, texts: list[str]) -> tuple[Deps, ChainMessage]:
    deps = make_deps(sim, time.time, BATCH_MODEL_CONCURRENCY="1")
    batch = batches.create_batch(
        deps, ALICE, body_of([chat_request(f"r-{i}", t) for i, t in enumerate(texts)])
    )
    lifecycle.prepare(deps, batch["id"])
    (message,) = [
        m for m in (decode(raw["Body"]) for raw in receive_all(deps)) if isinstance(m, ChainMessage)
    ]
    return deps, message


def watched(
    deps: Deps, monkeypatch: pytest.MonkeyPatch
) -> tuple[dict[int, float], dict[int, float], dict[int, float]]:
    """When each index was claimed, and when its call started and answered (monotonic)."""
    claimed: dict[int, float] = {}
    called: dict[int, float] = {}
    answered: dict[int, float] = {}
    claim = deps.requests.claim

    def claiming(batch_id: str, index: int, *args: Any) -> Any:
        claimed.setdefault(index, time.monotonic())
        return claim(batch_id, index, *args)

    real_call = attempt.call

    async def calling(deps: Deps, batch: Any, held: Any, *args: Any, **kwargs: Any) -> Any:
        called[held.index] = time.monotonic()
        try:
            return await real_call(deps, batch, held, *args, **kwargs)
        finally:
            answered[held.index] = time.monotonic()

    monkeypatch.setattr(deps.requests, "claim", claiming)
    monkeypatch.setattr(attempt, "call", calling)
    return claimed, called, answered


def claims_wait(deps: Deps, monkeypatch: pytest.MonkeyPatch, seconds: float) -> None:
    """Make each claim ahead wait ``seconds`` (a recent call length that long, and no cap below it)."""
    tune(deps, monkeypatch, claim_ahead_wait_max_seconds=seconds)
    monkeypatch.setattr(deps.pacer, "recent_length", lambda: seconds / deps.tuning.claim_ahead_share)


def test_a_chain_claims_its_next_request_once_a_share_of_the_recent_call_length_has_passed(
    sim: Simulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    deps, message = one_chain(sim, ["[[sim latency_ms=400]] a", "[[sim latency_ms=400]] b", "c"])
    claimed, called, answered = watched(deps, monkeypatch)
    asyncio.run(run_message(deps, message, owner="w", deadline=deps.clock() + 900))
    # The first call's length was not known yet: its next request was claimed at once.
    assert claimed[1] < answered[0]
    # Then it was: the next claim waited a quarter of it (0.4 s) from the call's start,
    # and was still ahead of its own call.
    assert claimed[2] - called[1] >= 0.4 * deps.tuning.claim_ahead_share * 0.9
    assert claimed[2] < answered[1]


def test_a_chain_that_needs_its_claim_ahead_before_its_time_sends_it_at_once(
    sim: Simulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    deps, message = one_chain(sim, ["a", "b", "c"])
    claims_wait(deps, monkeypatch, 600.0)
    claimed, _, answered = watched(deps, monkeypatch)
    run = run_message(deps, message, owner="w", deadline=time.time() + 900)
    asyncio.run(asyncio.wait_for(run, timeout=60))  # not 600 s per request: each claim went once wanted
    assert all(claimed[i] >= answered[i - 1] for i in (1, 2))  # sent when the call before answered


def test_a_chain_that_stops_while_its_claim_ahead_waits_claims_nothing(
    sim: Simulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    deps, message = one_chain(sim, ["[[sim latency_ms=1000]] a", "b", "c"])
    claims_wait(deps, monkeypatch, 10.0)
    claimed, called, _ = watched(deps, monkeypatch)
    # Its invocation's time runs out during the first call: the chain stops there, handing on.
    needed = deps.settings.batch_upstream_timeout_seconds + deps.tuning.segment_margin_seconds
    asyncio.run(run_message(deps, message, owner="w", deadline=time.time() + needed + 0.5))
    assert list(called) == [0] and list(claimed) == [0]  # the claim of request 1 was dropped unsent
    ahead = deps.requests.get(message.batch_id, 1)
    assert ahead is not None and ahead.attempts == 0 and ahead.lease_owner is None
