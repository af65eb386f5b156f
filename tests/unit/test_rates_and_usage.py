"""The pure rules behind the per-key request rate and the usage record (no AWS)."""

from __future__ import annotations

from batchgw.domain.rates import RateRule
from batchgw.domain.usage import FILE_BUCKET_SECONDS, Usage, file_bucket

NOW = 1_800_000_000.0


def take_all(rule: RateRule, at: float, tat: float | None = None) -> tuple[int, float | None]:
    """How many requests at ``at`` a bucket standing at ``tat`` takes, and where it stands after."""
    taken = 0
    while rule.taken(tat, at):
        tat = rule.next_tat(tat, at)
        taken += 1
    return taken, tat


def test_a_new_bucket_takes_a_burst_of_twice_the_rate() -> None:
    assert take_all(RateRule(20), NOW)[0] == 40
    assert take_all(RateRule(0.2), NOW)[0] == 1  # never less than one


def test_a_bucket_refills_at_the_rate_and_never_beyond_its_burst() -> None:
    rule = RateRule(4)
    _, tat = take_all(rule, NOW)
    assert take_all(rule, NOW + 1, tat)[0] == 4
    assert take_all(rule, NOW + 3600, tat)[0] == 8


def test_retry_after_is_the_whole_seconds_until_a_token_is_back() -> None:
    rule = RateRule(0.2)  # one per 5 s
    _, tat = take_all(rule, NOW)
    assert tat is not None
    assert rule.retry_after(tat, NOW) == 5
    assert rule.retry_after(tat, NOW + 4.2) == 1  # rounded up, and at least one
    assert rule.taken(tat, NOW + 5)


def test_a_file_counts_in_the_hour_at_or_after_its_expiry() -> None:
    hour = int(NOW) // FILE_BUCKET_SECONDS
    assert file_bucket(hour * FILE_BUCKET_SECONDS) == hour
    assert file_bucket(hour * FILE_BUCKET_SECONDS + 1) == hour + 1


def test_only_hours_that_have_passed_are_due() -> None:
    hour = int(NOW) // FILE_BUCKET_SECONDS
    usage = Usage(file_bytes=60, first_bucket=hour, buckets={hour: 10, hour + 1: 20, hour + 2: 30})
    assert usage.due_buckets(hour * FILE_BUCKET_SECONDS - 1) == {}
    assert usage.due_buckets(hour * FILE_BUCKET_SECONDS) == {hour: 10}
    assert usage.live_file_bytes((hour + 1) * FILE_BUCKET_SECONDS) == 30
    assert usage.drop_due(hour * FILE_BUCKET_SECONDS)
    assert not Usage(first_bucket=hour + 1).drop_due(hour * FILE_BUCKET_SECONDS)


def test_the_stored_record_is_read_once_into_its_fields() -> None:
    item = {"batches": 2, "requests": 7, "v": 3, "held:batch_a": 4, "fbytes": 9, "fnext": 5, "f5": 9}
    usage = Usage.from_item(item)
    assert (usage.batches, usage.requests, usage.releases, usage.held) == (2, 7, 3, {"batch_a": 4})
    assert (usage.file_bytes, usage.first_bucket, usage.buckets) == (9, 5, {5: 9})
    assert Usage.from_item(None) == Usage()
