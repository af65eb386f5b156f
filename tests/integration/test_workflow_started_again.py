"""A batch's workflow started again from the top (``local.resume`` after a restored start):
its Prepare sends chains that run, whatever the reconciler had done before."""

from __future__ import annotations

import asyncio

import pytest
from batchgw.api import batches
from batchgw.domain.chains import ChainMessage, decode
from batchgw.domain.principal import Principal
from batchgw.run import lifecycle, reconcile
from batchgw.run.chain import run_message

from local.simulator import Simulator
from tests.integration.conftest import body_of, chat_request, make_deps, receive_all
from tests.support import FakeClock

pytestmark = pytest.mark.usefixtures("aws_env")

ALICE = Principal(user_id="user-alice", role="internal", key_id="key_local_alice")
# A stall (no request ending) of lease + upstream timeout + two slot waits: 94 s.
SHORT_STALL = {"BATCH_LEASE_SECONDS": "60", "BATCH_UPSTREAM_TIMEOUT_SECONDS": "30"}


def test_a_prepare_started_again_sends_chains_of_the_generation_the_reconciler_reached(
    sim: Simulator,
) -> None:
    clock = FakeClock()
    deps = make_deps(sim, clock, BATCH_MODEL_CONCURRENCY="2", **SHORT_STALL)
    batch_id = batches.create_batch(
        deps, ALICE, body_of([chat_request(f"r-{i}", f"hi {i}") for i in range(6)])
    )["id"]
    lifecycle.prepare(deps, batch_id)
    receive_all(deps)  # its chains lost
    reconcile.reconcile(deps, batch_id)
    clock.advance(100)
    reconcile.reconcile(deps, batch_id)  # stalled: a new generation of chains is sent...
    assert {decode(m["Body"]).generation for m in receive_all(deps)} == {1}  # ...and lost with the stack
    assert lifecycle.prepare(deps, batch_id)["next"] == "park"  # the workflow started again
    resent = [decode(m["Body"]) for m in receive_all(deps)]
    assert sorted((m.chain, m.generation) for m in resent if isinstance(m, ChainMessage)) == [(0, 1), (1, 1)]
    for message in resent:
        asyncio.run(run_message(deps, message, owner="w", deadline=deps.clock() + 900))
    assert sim.stats()["models"]["sim-chat"]["requests"] == 6
    assert reconcile.reconcile(deps, batch_id)["next"] == "finalize"
