"""Interactive load reports in the control table and the worker's view of them (moto): a
report counts until it expires, reports written straight to the table by another service
count alike (and a badly written one counts for nothing rather than stopping the worker),
the worker reads them at most once a second, starts nothing new while they cannot be read,
and lets a running request go on."""

from __future__ import annotations

import asyncio
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from batchgw.deps import Deps
from batchgw.domain.errors import StorageError
from batchgw.domain.interactive import PEAK_HOLD_SECONDS, ShareWhy
from batchgw.run.slot import SlotHolder, share_of
from batchgw.scheduling.tuning import TUNING
from batchgw.storage.aws import get_clients

from local.simulator import Simulator
from tests.integration.conftest import make_deps
from tests.support import FakeClock

pytestmark = pytest.mark.usefixtures("aws_env")

SETTINGS = {"BATCH_MODEL_CONCURRENCY": "4"}


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def deps(sim: Simulator, clock: FakeClock) -> Deps:
    return make_deps(sim, clock, **SETTINGS)


def put_raw(deps: Deps, item: dict[str, Any]) -> None:
    """What another AWS service writes, as the README shows."""
    get_clients().dynamodb.put_item(TableName=deps.settings.control_table, Item=item)


def unreadable(monkeypatch: pytest.MonkeyPatch, deps: Deps) -> None:
    def refuse() -> Any:
        raise StorageError("could not query the control table")

    monkeypatch.setattr(deps.interactive, "reports", refuse)


def test_a_report_counts_until_it_expires_and_replaces_its_reporters_last(
    deps: Deps, clock: FakeClock
) -> None:
    deps.interactive.report("gw-1", {"sim-chat": 3}, now=clock(), ttl_seconds=10)
    deps.interactive.report("gw-1", {"sim-chat": 1, "sim-embed": 2}, now=clock(), ttl_seconds=10)
    deps.interactive.report("gw-2", {"sim-chat": 2}, now=clock(), ttl_seconds=30)
    assert deps.shares.share("sim-chat").slots == 4 - 3 - 1  # 3 in flight, 1 of headroom
    clock.advance(11)  # gw-1 stopped reporting
    assert deps.shares.share("sim-chat").slots == 4 - 2
    assert deps.shares.share("sim-embed").why is ShareWhy.CAP
    assert deps.interactive.remove("gw-2") and not deps.interactive.remove("gw-2")
    clock.advance(1)
    assert deps.shares.share("sim-chat").slots == 4 - 2  # held, a moment, at its most lately
    clock.advance(PEAK_HOLD_SECONDS)
    assert deps.shares.share("sim-chat").slots == 4


def test_a_report_another_service_puts_straight_into_the_table_counts(deps: Deps, clock: FakeClock) -> None:
    put_raw(
        deps,
        {
            "pk": {"S": "interactive"},
            "sk": {"S": "ecs-task-7"},
            "models": {"M": {"sim-chat": {"N": "3"}}},
            "expires_at": {"N": str(clock() + 10)},
        },
    )
    share = deps.shares.share("sim-chat")
    assert (share.slots, share.interactive, share.headroom, share.why) == (0, 3, 1, ShareWhy.YIELDING)


def test_a_badly_written_report_counts_for_nothing_and_stops_nobody(deps: Deps, clock: FakeClock) -> None:
    later = {"N": str(clock() + 10)}
    put_raw(
        deps,
        {"pk": {"S": "interactive"}, "sk": {"S": "a"}, "models": {"S": "sim-chat=3"}, "expires_at": later},
    )
    put_raw(
        deps,
        {
            "pk": {"S": "interactive"},
            "sk": {"S": "b"},
            "models": {"M": {"sim-chat": {"S": "3"}, "sim-embed": {"N": "-2"}}},
            "expires_at": later,
        },
    )
    put_raw(deps, {"pk": {"S": "interactive"}, "sk": {"S": "c"}, "models": {"M": {"sim-chat": {"N": "2"}}}})
    put_raw(
        deps,
        {
            "pk": {"S": "interactive"},
            "sk": {"S": "d"},
            "models": {"M": {"sim-chat": {"N": "1"}}},
            "expires_at": {"S": "soon"},
        },
    )
    assert deps.shares.share("sim-chat").slots == 4
    assert deps.shares.share("sim-embed").slots == 4


def test_the_worker_reads_the_reports_at_most_four_times_a_second(
    deps: Deps, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    reads = 0
    real = deps.interactive.reports

    def counted() -> Any:
        nonlocal reads
        reads += 1
        return real()

    monkeypatch.setattr(deps.interactive, "reports", counted)
    assert deps.shares.share("sim-chat").slots == 4
    deps.interactive.report("gw", {"sim-chat": 2}, now=clock(), ttl_seconds=10)
    for _ in range(50):
        assert deps.shares.share("sim-chat").slots == 4  # what it read less than a moment ago
    assert deps.settings.batch_share_read_seconds == 0.25  # BATCH_SHARE_READ_SECONDS's default
    clock.advance(deps.settings.batch_share_read_seconds * 0.9)
    assert deps.shares.share("sim-chat").slots == 4
    clock.advance(deps.settings.batch_share_read_seconds * 0.2)
    assert deps.shares.share("sim-chat").slots == 2
    assert reads == 2


def test_an_operator_may_have_the_reports_read_less_often(sim: Simulator, clock: FakeClock) -> None:
    # On AWS each execution environment reads them: BATCH_SHARE_READ_SECONDS sets how often.
    deps = make_deps(sim, clock, **SETTINGS, BATCH_SHARE_READ_SECONDS="2")
    assert deps.shares.share("sim-chat").slots == 4
    deps.interactive.report("gw", {"sim-chat": 2}, now=clock(), ttl_seconds=10)
    clock.advance(1.9)
    assert deps.shares.share("sim-chat").slots == 4  # read 1.9 s ago: young enough
    clock.advance(0.2)
    assert deps.shares.share("sim-chat").slots == 2


def test_while_the_reports_cannot_be_read_nothing_new_starts_and_a_running_request_goes_on(
    deps: Deps, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    holder = SlotHolder(deps, "batch_test")
    assert asyncio.run(holder.hold("sim-chat")).granted  # a request runs
    unreadable(monkeypatch, deps)
    clock.advance(1.0)
    assert deps.shares.share("sim-chat").why is ShareWhy.CAP  # one failed read: the last load, for a moment
    clock.advance(TUNING.unreadable_grace_seconds)
    share = deps.shares.share("sim-chat")
    assert (share.slots, share.why, share.yielding) == (0, ShareWhy.LOAD_UNKNOWN, True)
    assert not asyncio.run(SlotHolder(deps, "batch_test").hold("sim-chat")).granted  # nothing new starts
    # The running request's slot lapses and is purged while the table is unreadable: it is
    # taken again against the whole cap, so the call goes on.
    deps.slots.release("sim-chat", holder.token)
    assert asyncio.run(holder.keep())
    # Its chain's next request is a new one: it gives the slot back and waits.
    assert not asyncio.run(holder.hold("sim-chat")).granted
    assert deps.slots.read("sim-chat").running(clock()) == 0


def test_a_process_that_never_read_the_reports_starts_nothing_until_it_can(
    deps: Deps, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    readable = deps.interactive.reports
    unreadable(monkeypatch, deps)
    assert deps.shares.share("sim-chat").why is ShareWhy.LOAD_UNKNOWN
    monkeypatch.setattr(deps.interactive, "reports", readable)
    clock.advance(1.0)
    assert deps.shares.share("sim-chat").why is ShareWhy.CAP


def test_without_the_shared_load_an_unreadable_table_stops_nothing(
    deps: Deps, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(
        deps.live, "settings", deps.settings.model_copy(update={"batch_shared_interactive_load": False})
    )
    unreadable(monkeypatch, deps)
    assert deps.shares.share("sim-chat").slots == 4
    assert asyncio.run(SlotHolder(deps, "batch_test").hold("sim-chat")).granted


def test_a_chain_holding_a_slot_gives_it_back_when_the_share_shrinks(deps: Deps, clock: FakeClock) -> None:
    holders = [SlotHolder(deps, "batch_test") for _ in range(4)]
    assert all(asyncio.run(h.hold("sim-chat")).granted for h in holders)
    deps.interactive.report("gw", {"sim-chat": 2}, now=clock(), ttl_seconds=60)
    clock.advance(1.0)
    kept = [asyncio.run(h.hold("sim-chat")).granted for h in holders]  # each chain's next request
    assert kept.count(True) == 2
    assert deps.slots.read("sim-chat").running(clock()) == 2


def test_a_chain_within_a_smaller_share_keeps_its_slot_in_one_write(
    deps: Deps, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    holders = [SlotHolder(deps, "batch_test") for _ in range(2)]
    assert all(asyncio.run(h.hold("sim-chat")).granted for h in holders)
    deps.interactive.report("gw", {"sim-chat": 2}, now=clock(), ttl_seconds=60)  # 4 -> 2: both fit
    clock.advance(1.0)
    writes: list[tuple[str, int | None]] = []
    for name in ("acquire", "release", "renew"):
        real = getattr(deps.slots, name)
        monkeypatch.setattr(
            deps.slots,
            name,
            lambda *a, _real=real, _name=name, **k: writes.append((_name, k.get("within"))) or _real(*a, **k),
        )
    assert all(asyncio.run(h.hold("sim-chat")).granted for h in holders)
    # One renewal each, within the new share: never let go, so never taken by another.
    assert writes == [("renew", 2), ("renew", 2)]
    assert deps.slots.read("sim-chat").running(clock()) == 2


def test_chains_that_look_while_the_first_read_is_under_way_wait_for_it_rather_than_stop(
    deps: Deps, monkeypatch: pytest.MonkeyPatch
) -> None:
    reports = deps.interactive.reports

    def slow() -> Any:
        time.sleep(0.3)
        return reports()

    monkeypatch.setattr(deps.interactive, "reports", slow)
    with ThreadPoolExecutor(3) as chains:  # a process's first chains, all at once
        shares = list(chains.map(lambda _: deps.shares.share("sim-chat"), range(3)))
    assert [share.why for share in shares] == [ShareWhy.CAP] * 3


def test_a_chain_goes_by_a_recent_share_while_one_read_beside_the_chains_brings_it_up_to_date(
    deps: Deps, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert deps.shares.share("sim-chat").slots == 4
    deps.interactive.report("gw", {"sim-chat": 2}, now=clock(), ttl_seconds=60)
    reads, answer = [], threading.Event()
    real = deps.interactive.reports

    def slow() -> Any:
        reads.append(clock())
        answer.wait(10)
        return real()

    monkeypatch.setattr(deps.interactive, "reports", slow)

    async def looks() -> tuple[list[int], int, int]:
        clock.advance(deps.settings.batch_share_read_seconds * 1.5)  # due again, but recent
        seen = [(await share_of(deps, "sim-chat")).slots for _ in range(5)]  # no chain waits
        answer.set()
        deadline = time.monotonic() + 10
        while not deps.shares.fresh() and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        after = (await share_of(deps, "sim-chat")).slots
        deps.interactive.report("gw", {"sim-chat": 3}, now=clock(), ttl_seconds=60)
        clock.advance(
            deps.settings.batch_share_read_seconds * 2.5
        )  # too old to go by: the chain waits for the read
        return seen, after, (await share_of(deps, "sim-chat")).slots

    seen, after, waited = asyncio.run(looks())
    assert seen == [4] * 5 and after == 2 and waited == 0  # 4 less 3 in flight, one more left free
    assert len(reads) == 2  # one read beside the five looks, one the last look waited for
