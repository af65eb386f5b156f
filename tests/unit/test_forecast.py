"""``scheduling.forecast``: a model's outlook turned into a promise, as the workers would
share its slots (per batch, or per tenant), and a model's pace read from its answers."""

from __future__ import annotations

import math
from types import SimpleNamespace
from typing import Any

import pytest
from batchgw.domain.attempts import AttemptEntry
from batchgw.domain.batch import BatchRecord
from batchgw.domain.shares import Claim
from batchgw.domain.states import BatchStatus
from batchgw.scheduling.forecast import (
    Outlook,
    Reading,
    Stores,
    call_lengths,
    forecast,
    last_end,
    new_claim,
    reading,
    slots_now,
    stored_end,
)
from batchgw.scheduling.tuning import Tuning
from batchgw.storage.slots import SlotState

NOW = 1_000.0
TUNING = Tuning(first_call_seconds=1.0)


def ahead(batch_id: str, owner: str, demand: int, *, by_tenant: bool, created_at: float = 0.0) -> Claim:
    return Claim(batch_id, owner if by_tenant else batch_id, demand, created_at)


def test_a_lone_batch_ends_when_its_slots_have_run_its_requests_after_its_first_call() -> None:
    seen = Outlook("m", slots=4, request_seconds=2.0, ahead=())
    made = forecast(seen, new_claim("b", "alice", 10, now=NOW, by_tenant=False), now=NOW, tuning=TUNING)
    assert made is not None and made.estimated_completion_at == pytest.approx(NOW + 1 + 10 * 2.0 / 4)


@pytest.mark.parametrize(("slots", "request_seconds"), [(4, None), (0, 1.0)])
def test_without_a_pace_or_with_no_batch_slot_there_is_no_promise(
    slots: int, request_seconds: float | None
) -> None:
    seen = Outlook("m", slots=slots, request_seconds=request_seconds, ahead=())
    assert (
        forecast(seen, new_claim("b", "alice", 10, now=NOW, by_tenant=False), now=NOW, tuning=TUNING) is None
    )


@pytest.mark.parametrize("by_tenant", [False, True])
def test_another_owners_batch_shares_the_slots_evenly_either_way(by_tenant: bool) -> None:
    seen = Outlook("m", 4, 1.0, (ahead("other", "bob", 100, by_tenant=by_tenant),), {"other": "bob"})
    claim = new_claim("b", "alice", 8, now=NOW, by_tenant=by_tenant)
    made = forecast(seen, claim, now=NOW, tuning=TUNING)
    assert made is not None and made.estimated_completion_at == pytest.approx(NOW + 1 + 8 / 2)
    assert slots_now(seen, claim) == 2
    assert (seen.queued, seen.queued_of("bob"), seen.queued_of("alice")) == (100, 100, 0)


def test_with_tenant_shares_the_owners_earlier_batch_goes_first_and_without_them_it_does_not() -> None:
    mine = {"earlier": "alice"}
    shared = Outlook("m", 4, 1.0, (ahead("earlier", "alice", 40, by_tenant=True),), mine)
    made = forecast(shared, new_claim("b", "alice", 8, now=NOW, by_tenant=True), now=NOW, tuning=TUNING)
    assert made is not None and made.estimated_completion_at == pytest.approx(NOW + 1 + 48 / 4)
    even = Outlook("m", 4, 1.0, (ahead("earlier", "alice", 40, by_tenant=False),), mine)
    made = forecast(even, new_claim("b", "alice", 8, now=NOW, by_tenant=False), now=NOW, tuning=TUNING)
    assert made is not None and made.estimated_completion_at == pytest.approx(NOW + 1 + 8 / 2)


def test_a_higher_priority_goes_before_the_owners_earlier_batch_with_tenant_shares() -> None:
    seen = Outlook("m", 4, 1.0, (ahead("earlier", "alice", 40, by_tenant=True),))
    claim = new_claim("b", "alice", 8, now=NOW, by_tenant=True, priority=5)
    made = forecast(seen, claim, now=NOW, tuning=TUNING)
    assert made is not None and made.estimated_completion_at == pytest.approx(NOW + 1 + 8 / 4)


def test_the_claim_being_estimated_is_not_counted_twice_when_it_is_already_queued() -> None:
    seen = Outlook("m", 4, 1.0, (Claim("b", "b", 8, NOW),))
    made = forecast(seen, new_claim("b", "alice", 8, now=NOW, by_tenant=False), now=NOW, tuning=TUNING)
    assert made is not None and made.estimated_completion_at == pytest.approx(NOW + 1 + 8 / 4)


class Seen(Reading):
    """A reading whose models' outlooks are given (no store behind it)."""

    def __init__(self, outlooks: dict[str, Outlook], *, by_tenant: bool) -> None:
        super().__init__(stores=None, lengths={}, by_tenant=by_tenant, now=NOW, tuning=TUNING)  # type: ignore[arg-type]
        object.__setattr__(self, "outlooks", outlooks)

    def outlook(self, model: str) -> Outlook:
        return self.outlooks[model]  # type: ignore[attr-defined, no-any-return]


def test_a_batch_ends_with_its_last_model_and_without_an_estimate_on_one_has_none() -> None:
    fast, slow = Outlook("fast", 4, 1.0, ()), Outlook("slow", 2, 1.0, ())
    claim = new_claim("b", "alice", 8, now=NOW, by_tenant=False)
    claims = [("fast", claim), ("slow", claim)]
    assert last_end(Seen({"fast": fast, "slow": slow}, by_tenant=False), claims) == math.ceil(NOW + 1 + 8 / 2)
    unknown = Outlook("slow", 2, None, ())
    assert last_end(Seen({"fast": fast, "slow": unknown}, by_tenant=False), claims) is None
    assert last_end(Seen({}, by_tenant=False), []) is None


def test_a_stored_batch_keeps_its_place_in_creation_order_before_the_owners_later_batch() -> None:
    """Alice's batch stored 100 s ago, its 8 requests left, beside her batch of 40 made 50 s
    ago: with tenant shares it goes first (2 s), where a batch made now would wait (12 s)."""
    later = Outlook("m", 4, 1.0, (Claim("later", "alice", 40, NOW - 50),), {"later": "alice"})
    seen = Seen({"m": later}, by_tenant=True)
    record = BatchRecord(
        id="b",
        owner="alice",
        status=BatchStatus.IN_PROGRESS,
        endpoint="/v1/chat/completions",
        created_at=int(NOW) - 100,
        created_key="k",
    )
    end = stored_end(seen, record, {"m": 8}, priority=0, complete_by=None, weight=1.0)
    assert end == math.ceil(NOW + 1 + 8 / 4)
    made_now = last_end(seen, [("m", new_claim("b", "alice", 8, now=NOW, by_tenant=True))])
    assert made_now == math.ceil(NOW + 1 + 48 / 4)
    # None of its requests left: nothing to estimate.
    assert stored_end(seen, record, {"m": 0}, priority=0, complete_by=None, weight=1.0) is None


class Log:
    """The request log's page across batches, as ``call_lengths`` reads it."""

    def __init__(self, entries: list[AttemptEntry]) -> None:
        self.entries = entries
        self.asked: dict[str, Any] = {}

    def page(self, source: str, **asked: Any) -> tuple[list[tuple[str, AttemptEntry]], bool]:
        self.asked = {"source": source, **asked}
        return [(str(i), entry) for i, entry in enumerate(self.entries)], False


def entry(model: str, latency_ms: int, outcome: str = "success") -> AttemptEntry:
    return AttemptEntry("b", 0, "c", model, 1, outcome, NOW - 1, latency_ms)


def test_a_models_call_length_is_the_mean_of_its_recent_successful_batch_answers() -> None:
    log = Log([entry("a", 1000), entry("a", 3000), entry("a", 60_000, "retry"), entry("b", 500)])
    lengths = call_lengths(log, NOW, TUNING)  # type: ignore[arg-type]
    assert lengths == {"a": 2.0, "b": 0.5}
    assert log.asked["source"] == "batch" and log.asked["limit"] == TUNING.pace_sample
    assert log.asked["start_ms"] == math.floor((NOW - TUNING.pace_window_seconds) * 1000)


def test_a_process_reads_the_paces_once_per_pace_read_seconds() -> None:
    log = Log([entry("m", 2_000)])
    stores = Stores(slots=None, batches=None, reqlog=log, shares=None, accounts=None)  # type: ignore[arg-type]
    tuning = Tuning(pace_read_seconds=10.0)
    first = reading(stores, by_tenant=False, now=NOW, tuning=tuning)
    log.entries = [entry("m", 4_000)]  # answers grew slower meanwhile
    again = reading(stores, by_tenant=False, now=NOW + 9.9, tuning=tuning)
    later = reading(stores, by_tenant=False, now=NOW + 10.0, tuning=tuning)
    assert (first.lengths, again.lengths, later.lengths) == ({"m": 2.0}, {"m": 2.0}, {"m": 4.0})


class Slots:
    def read(self, model: str) -> SlotState:
        return SlotState(holders={}, paused_until=0.0)


class Shares:
    def share(self, model: str) -> Any:
        return SimpleNamespace(slots=4)


def test_a_model_without_a_pace_as_last_read_is_read_again_at_once() -> None:
    log = Log([])
    stores = Stores(slots=Slots(), batches=None, reqlog=log, shares=Shares(), accounts=None)  # type: ignore[arg-type]
    tuning = Tuning(pace_read_seconds=10.0)
    assert reading(stores, by_tenant=False, now=NOW, tuning=tuning).outlook("m").request_seconds is None
    log.entries = [entry("m", 2_000)]  # a first batch's answers, a second later
    again = reading(stores, by_tenant=False, now=NOW + 1, tuning=tuning)
    assert again.outlook("m").request_seconds == pytest.approx(2.0 + tuning.call_gap_seconds)
