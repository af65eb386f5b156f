"""A model's batch share beside interactive traffic (``domain.interactive``): the cap less
the interactive requests in flight less the reserve, never below 0; fail closed while the
shared reports are unreadable; the whole cap with yield off."""

from __future__ import annotations

import pytest
from batchgw.domain.interactive import (
    OWN,
    SHARED,
    BatchShare,
    InteractiveLoad,
    LoadReport,
    ShareWhy,
    batch_share,
    peak,
)

NOW = 1_800_000_000.0


def load(**in_flight: int) -> InteractiveLoad:
    return InteractiveLoad.of([LoadReport("gw", in_flight, NOW + 10, NOW)], NOW)


def share(
    cap: int,
    loaded: InteractiveLoad | None,
    *,
    yield_on: bool = True,
    shared_on: bool = True,
    reserve: int = 0,
) -> BatchShare:
    return batch_share("m", cap, loaded, yield_on=yield_on, shared_on=shared_on, reserve=reserve)


def test_nothing_interactive_leaves_the_whole_cap() -> None:
    assert share(8, InteractiveLoad()) == BatchShare(8, 8, 0, 0, ShareWhy.CAP)
    assert share(8, load(other=5)) == BatchShare(8, 8, 0, 0, ShareWhy.CAP)


@pytest.mark.parametrize(
    ("cap", "in_flight", "reserve", "slots"),
    [
        (16, 1, 0, 15),  # one or two requests in flight leave no headroom
        (16, 2, 0, 14),
        (16, 3, 0, 12),  # three: one slot of headroom
        (16, 9, 0, 3),  # busy traffic: half as many again, past the first
        (8, 3, 4, 1),  # the reserve, when larger, instead
        (8, 8, 0, 0),
        (8, 20, 0, 0),
        (8, 0, 4, 4),
        (8, 0, 9, 0),
        (0, 2, 1, 0),
    ],
)
def test_interactive_requests_their_headroom_and_the_reserve_take_slots_never_below_zero(
    cap: int, in_flight: int, reserve: int, slots: int
) -> None:
    got = share(cap, load(m=in_flight), reserve=reserve)
    assert got.slots == slots and got.interactive == in_flight and got.reserve == reserve
    assert got.headroom == max(0, in_flight - 1) // 2
    assert got.why is (ShareWhy.CAP if slots == cap else ShareWhy.YIELDING)
    assert got.yielding == (slots < cap)


def test_yield_off_fills_the_cap_whatever_the_load_the_reserve_or_an_unreadable_table() -> None:
    for loaded in (load(m=6), None):
        assert share(8, loaded, yield_on=False, reserve=4) == BatchShare(8, 8, None, 0, ShareWhy.YIELD_OFF)


def test_unreadable_shared_load_starts_nothing_new() -> None:
    got = share(8, None, reserve=2)
    assert got == BatchShare(0, 8, None, 2, ShareWhy.LOAD_UNKNOWN) and got.yielding


def test_without_the_shared_load_only_the_deployments_own_counts_and_unreadable_counts_as_none() -> None:
    reports = [
        LoadReport("other-gateway", {"m": 5}, NOW + 10, NOW, SHARED),
        LoadReport("own-route", {"m": 2}, NOW + 10, NOW, OWN),
    ]
    both = InteractiveLoad.of(reports, NOW)
    assert share(8, both).slots == 0  # 7 in flight, 3 of headroom
    assert share(8, both, shared_on=False).slots == 6  # 2 in flight, no headroom
    assert share(8, None, shared_on=False, reserve=1) == BatchShare(7, 8, 0, 1, ShareWhy.YIELDING)


def test_reports_add_up_and_an_expired_one_counts_for_nothing() -> None:
    reports = [
        LoadReport("a", {"m": 2, "n": 1}, NOW + 5, NOW),
        LoadReport("b", {"m": 3}, NOW + 1, NOW),
        LoadReport("dead", {"m": 50}, NOW, NOW - 10),  # expired now: its reporter died
    ]
    summed = InteractiveLoad.of(reports, NOW)
    assert dict(summed.shared) == {"m": 5, "n": 1} and summed.reporters == 2
    assert dict(InteractiveLoad.of(reports, NOW + 2).shared) == {"m": 2, "n": 1}


def test_the_load_counts_at_its_most_over_the_last_seconds_then_lets_go() -> None:
    # Interactive load that keeps a model busy dips by a request now and then: batch work
    # goes by the most seen lately, so the slot the dip freed is still free when it comes back.
    reads = [(NOW, load(m=8, n=1)), (NOW + 1, load(m=7)), (NOW + 2, load(m=8)), (NOW + 2.5, load(m=6))]
    held = peak(reads, NOW + 2.5, hold=3.0)
    assert dict(held.shared) == {"m": 8, "n": 1}
    assert share(16, held).slots == 5  # 8 in flight and 3 of headroom
    # Three seconds on, the 8 read at NOW and NOW + 2 no longer count... then nothing does.
    assert dict(peak(reads, NOW + 3.5, hold=3.0).shared) == {"m": 8}
    assert dict(peak(reads, NOW + 5.1, hold=3.0).shared) == {"m": 6}
    assert dict(peak(reads, NOW + 6, hold=3.0).shared) == {}
    # Own and shared are held alike, each on its own.
    own = InteractiveLoad.of([LoadReport("own:1", {"m": 2}, NOW + 10, NOW, OWN)], NOW)
    both = peak([(NOW, own), (NOW + 1, load(m=5))], NOW + 1)
    assert (dict(both.own), dict(both.shared)) == ({"m": 2}, {"m": 5})


def test_a_burst_that_ends_gives_its_slots_back_once_the_load_stays_quiet_not_after_the_whole_hold() -> None:
    # Reads four times a second: a burst of 8 in flight, then its last requests end.
    burst = [(NOW + i / 4, load(m=8)) for i in range(4)]
    ended = [*burst, (NOW + 1.0, load(m=1)), (NOW + 1.25, load(m=0))]
    assert dict(peak(ended, NOW + 1.25).shared) == {"m": 8}  # quiet for a quarter second: a dip, maybe
    ended.append((NOW + 1.5, load(m=1)))
    assert dict(peak(ended, NOW + 1.5).shared) == {"m": 1}  # quiet for half a second: it ended
    assert share(16, peak(ended, NOW + 1.5)).slots == 15  # not 16 - 8 - 3 until NOW + 2.25
    # After the quiet, the burst's peak is gone for good: two in flight a moment later hold
    # two, and a new burst holds its own peak.
    assert dict(peak([*ended, (NOW + 1.75, load(m=2))], NOW + 1.75).shared) == {"m": 2}
    assert dict(peak([*ended, (NOW + 1.75, load(m=9))], NOW + 1.75).shared) == {"m": 9}
    # A dip of busy traffic to one request, read twice, is not its end: the peak holds.
    dip = [*burst, (NOW + 1.0, load(m=1)), (NOW + 1.25, load(m=1)), (NOW + 1.5, load(m=6))]
    assert dict(peak(dip, NOW + 1.5).shared) == {"m": 8}
    # Two in flight is not quiet, however long it lasts (within the hold).
    calm = burst + [(NOW + 1.0 + i / 4, load(m=2)) for i in range(3)]
    assert dict(peak(calm, NOW + 1.5).shared) == {"m": 8}
    # One read alone is not a quiet half second, however old the busy one before it.
    sparse = [(NOW, load(m=8)), (NOW + 1.0, load(m=0))]
    assert dict(peak(sparse, NOW + 1.2).shared) == {"m": 8}
    # Own and shared alike: quiet on both sides lets both go.
    own = InteractiveLoad.of([LoadReport("own:1", {"m": 1}, NOW + 10, NOW, OWN)], NOW)
    both = [(NOW, InteractiveLoad({"m": 9}, {"m": 4})), *((NOW + 0.5 + i / 4, own) for i in range(3))]
    assert (dict(peak(both, NOW + 1.0).shared), dict(peak(both, NOW + 1.0).own)) == ({"m": 1}, {"m": 1})
