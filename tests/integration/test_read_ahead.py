"""At an answer, a chain reads ahead what its next steps need (``run.slot.read_ahead``): the
batch shares and its model's room are read beside the writes that record the answer, and the
steps that come after find them read, with no read made twice."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest
from batchgw.deps import Deps
from batchgw.run.slot import read_ahead, share_of
from batchgw.storage.slots import SlotState

from local.simulator import Simulator
from tests.integration.conftest import make_deps
from tests.support import FakeClock

pytestmark = pytest.mark.usefixtures("aws_env")

MODEL = "sim-chat"


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def deps(sim: Simulator, clock: FakeClock) -> Deps:
    return make_deps(sim, clock, BATCH_MODEL_CONCURRENCY="4")


def test_the_shares_and_the_room_are_read_beside_the_answers_writes_and_not_again_after(
    deps: Deps, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    deps.shares.share(MODEL)
    deps.ledger.read_room(MODEL)
    clock.advance(10)  # every read is due again, too old to go by
    share_reads: list[float] = []
    map_reads: list[str] = []
    answer = threading.Event()  # the reads answer only when the test says so
    real_reports, real_read = deps.interactive.reports, deps.slots.read

    def reports() -> Any:
        share_reads.append(clock())
        answer.wait(10)
        return real_reports()

    def read(model: str) -> SlotState:
        map_reads.append(model)
        answer.wait(10)
        return real_read(model)

    monkeypatch.setattr(deps.interactive, "reports", reports)
    monkeypatch.setattr(deps.slots, "read", read)

    async def answered() -> tuple[int, int]:
        read_ahead(deps, MODEL, room=True)
        read_ahead(deps, MODEL, room=True)  # a second answer meanwhile: the same reads
        deadline = time.monotonic() + 10
        while (len(share_reads), len(map_reads)) != (1, 1):  # under way, nobody waiting for them
            assert time.monotonic() < deadline, (share_reads, map_reads)
            await asyncio.sleep(0.01)
        answer.set()
        share = await share_of(deps, MODEL)  # the next start: waits for the read under way
        deadline = time.monotonic() + 10
        while deps.ledger.room_due(MODEL):
            assert time.monotonic() < deadline
            await asyncio.sleep(0.01)
        return share.slots, deps.ledger.take(MODEL)

    slots, _ = asyncio.run(answered())
    assert slots == 4
    assert len(share_reads) == 1 and map_reads == [MODEL]  # each read once, the room's serving the map
    assert not deps.ledger.map_due(MODEL)


def test_a_chain_that_cannot_split_reads_no_room_ahead(deps: Deps, clock: FakeClock) -> None:
    deps.ledger.read_room(MODEL)
    clock.advance(10)

    async def answered() -> None:
        read_ahead(deps, MODEL, room=False)
        await asyncio.sleep(0)

    asyncio.run(answered())
    assert deps.ledger.room_due(MODEL)
