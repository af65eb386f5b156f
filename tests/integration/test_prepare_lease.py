"""Only one prepare invocation writes a batch's requests: the holder of its prepare lease.

The workflow calls prepare again when it lost track of an invocation that may still run.
The retry waits while that one holds the lease (``PrepareBusy``), goes on from the
``written`` frontier once the lease is given up or has run out, and the one left behind
sends nothing more: a request a chain claimed past its frontier is never stored again as
queued. The failing step waits the same way before it counts anything.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import pytest
from batchgw.deps import Deps
from batchgw.domain.errors import StorageError
from batchgw.domain.request import RequestRecord
from batchgw.domain.states import RequestStatus
from batchgw.run import ending, lifecycle
from batchgw.run.prepare_lease import PrepareBusy, PrepareLost
from batchgw.storage.requests import ClaimKind

from local.simulator import Simulator
from tests.integration.conftest import make_deps
from tests.integration.test_first_requests_start_early import N, _crash_after_first_chunk, _create
from tests.support import FakeClock

pytestmark = pytest.mark.usefixtures("aws_env")

LEASE = 60.0


class Died(BaseException):
    """The prepare's process died: no ``except Exception`` of it runs, as in a killed one."""


def _deps(sim: Simulator) -> tuple[Deps, FakeClock]:
    clock = FakeClock()
    deps = make_deps(sim, clock, BATCH_MODEL_CONCURRENCY=4, BATCH_PREPARE_LEASE_SECONDS=str(LEASE))
    return deps, clock


def _died_at_second_chunk(sim: Simulator, monkeypatch: pytest.MonkeyPatch) -> tuple[Deps, FakeClock, str]:
    """A batch whose prepare died (no ``except Exception`` of it ran) at its second chunk."""
    deps, clock = _deps(sim)
    batch_id = _create(deps)
    with monkeypatch.context() as patched:
        _crash_after_first_chunk(deps, patched, Died())
        with pytest.raises(Died):
            lifecycle.prepare(deps, batch_id)
    return deps, clock, batch_id


def _record(deps: Deps, batch_id: str) -> Any:
    record = deps.batches.get_record(batch_id)
    assert record is not None
    return record


def test_a_prepare_left_behind_cannot_store_again_a_request_its_retry_wrote_and_a_chain_claimed(
    sim: Simulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    deps, clock = _deps(sim)
    batch_id = _create(deps)
    put_new = deps.requests.put_new
    at_second_chunk, resume = threading.Event(), threading.Event()
    calls = 0

    def slow_second_chunk(requests: Sequence[RequestRecord]) -> None:
        nonlocal calls
        calls += 1
        if calls == 2:  # the first invocation: stalls with its second chunk in hand
            at_second_chunk.set()
            assert resume.wait(30)
        put_new(requests)

    monkeypatch.setattr(deps.requests, "put_new", slow_second_chunk)
    outcome: list[BaseException | dict[str, Any]] = []

    def first() -> None:
        try:
            outcome.append(lifecycle.prepare(deps, batch_id))
        except BaseException as exc:  # the outcome is what the test checks
            outcome.append(exc)

    behind = threading.Thread(target=first)
    behind.start()
    assert at_second_chunk.wait(30)
    assert _record(deps, batch_id).written_count == lifecycle.FIRST_WRITE

    with pytest.raises(PrepareBusy):  # the workflow's retry, while the first holds the lease
        lifecycle.prepare(deps, batch_id)
    clock.advance(LEASE + 1)  # the first's lease has run out: the retry takes over
    assert lifecycle.prepare(deps, batch_id)["next"] == "park"
    assert _record(deps, batch_id).written_count == N
    claimed = deps.requests.claim(batch_id, 150, "worker-x", clock(), 300)
    assert claimed.kind is ClaimKind.CLAIMED

    resume.set()  # the first invocation sends its second chunk now, if anything lets it
    behind.join(30)
    request = deps.requests.get(batch_id, 150)
    assert request is not None
    assert (request.status, request.lease_owner) == (RequestStatus.RUNNING, "worker-x")
    assert len(outcome) == 1 and isinstance(outcome[0], PrepareLost)
    assert _record(deps, batch_id).prep_owner is None  # the retry gave it up when it was done


def test_a_prepare_that_fails_gives_its_lease_up_and_its_retry_goes_on_at_once(
    sim: Simulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    deps, _ = _deps(sim)
    batch_id = _create(deps)
    with monkeypatch.context() as patched:
        _crash_after_first_chunk(deps, patched, RuntimeError("DynamoDB said no"))
        with pytest.raises(RuntimeError):
            lifecycle.prepare(deps, batch_id)
    assert _record(deps, batch_id).prep_owner is None

    assert lifecycle.prepare(deps, batch_id)["next"] == "park"  # the clock has not moved
    assert _record(deps, batch_id).written_count == N


def test_a_prepare_that_died_keeps_its_lease_until_it_runs_out(
    sim: Simulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    deps, clock, batch_id = _died_at_second_chunk(sim, monkeypatch)

    clock.advance(LEASE - 1)
    with pytest.raises(PrepareBusy):
        lifecycle.prepare(deps, batch_id)
    clock.advance(2)
    assert lifecycle.prepare(deps, batch_id)["next"] == "park"
    assert [r.index for r in deps.requests.all(batch_id)] == list(range(N))


def test_a_batch_fails_only_once_no_prepare_can_write_its_requests(
    sim: Simulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    deps, clock, batch_id = _died_at_second_chunk(sim, monkeypatch)

    with pytest.raises(ending.StillRunning):  # its lease has not run out: it may still write
        ending.fail(deps, batch_id, "Prepare")
    record = _record(deps, batch_id)
    assert record.owner_failed and not record.status.is_final

    clock.advance(LEASE + 1)
    assert ending.fail(deps, batch_id, "Prepare")["status"] == "failed"
    counted = deps.batches.get(batch_id)
    assert counted is not None
    assert counted.counts.failed == N and counted.counts.completed == 0


def test_a_lease_that_cannot_be_given_up_runs_out_without_failing_the_prepare(
    sim: Simulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    deps, clock = _deps(sim)
    batch_id = _create(deps)

    def refused(*_: Any) -> bool:
        raise StorageError("DynamoDB is away")

    monkeypatch.setattr(deps.batches, "release_prepare", refused)
    assert lifecycle.prepare(deps, batch_id)["next"] == "park"  # every request is written
    record = _record(deps, batch_id)
    assert record.all_written and record.prepare_held(clock())
    assert not record.prepare_held(clock() + LEASE + 1)
