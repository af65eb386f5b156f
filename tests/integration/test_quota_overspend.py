"""A quota with less than one request of headroom left, and chains in several execution
environments charging against it at once (moto, the injected clock; each environment its
own ``Deps`` and caches, sharing only the tables): one request runs past it at most, so
the quota is overspent by less than one request's cost, the bound the README states."""

from __future__ import annotations

import asyncio

import pytest
from batchgw.api import batches
from batchgw.deps import build_deps
from batchgw.domain.chains import decode
from batchgw.run import lifecycle
from batchgw.run.chain import run_message

from local.simulator import Simulator
from tests.integration.conftest import body_of, chat_request, receive_all
from tests.integration.test_owner_gate import ALICE, ONE_REQUEST_NANO, gate_deps, set_user, spent
from tests.support import FakeClock

pytestmark = pytest.mark.usefixtures("aws_env")

ENVIRONMENTS = 4
CHAINS = 8  # two in each environment


def overspent_by(sim: Simulator) -> tuple[int, int]:
    """(requests run, nano-dollars spent past the quota) when 8 chains of one batch, two in
    each of 4 environments, start at once against a daily quota one nano-dollar short of
    one request's cost."""
    clock = FakeClock()
    deps = gate_deps(sim, clock, BATCH_MODEL_CONCURRENCY=str(CHAINS))
    others = [build_deps(deps.settings, deps.catalog, clock=clock) for _ in range(ENVIRONMENTS - 1)]
    for other in others:
        other.workflow = deps.workflow
    environments = [deps, *others]
    quota = ONE_REQUEST_NANO - 1
    set_user(deps, "user-alice", daily_quota_usd=quota / 1e9)
    requests = [chat_request(f"r-{i}", f"hello {i}") for i in range(4 * CHAINS)]
    batch_id = batches.create_batch(deps, ALICE, body_of(requests))["id"]
    lifecycle.prepare(deps, batch_id)
    chains = [decode(m["Body"]) for m in receive_all(deps)]
    assert len(chains) == CHAINS

    async def at_once() -> None:
        await asyncio.gather(
            *(
                run_message(environments[i % ENVIRONMENTS], chain, owner=f"env-{i}", deadline=clock() + 900)
                for i, chain in enumerate(chains)
            )
        )

    asyncio.run(at_once())
    return sim.stats()["models"]["sim-chat"]["requests"], spent(deps, ALICE)[0] - quota


def test_a_quota_with_less_than_one_request_left_lets_one_run_past_it_with_chains_in_four_environments(
    sim: Simulator,
) -> None:
    ran, overspent = overspent_by(sim)
    assert ran == 1
    assert 0 < overspent < ONE_REQUEST_NANO  # the one request past it: less than its cost
