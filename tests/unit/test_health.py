"""What one process counts of a model's health."""

from __future__ import annotations

from batchgw.domain.health import ModelHealth


def test_failures_of_different_requests_in_a_row_pause_the_model() -> None:
    health = ModelHealth(failures_to_pause=3, pause_seconds=60)
    assert [health.failure("m", f"b/{i}") for i in range(3)] == [False, False, True]


def test_one_request_failing_again_and_again_counts_once() -> None:
    health = ModelHealth(failures_to_pause=3, pause_seconds=60)
    assert not any(health.failure("m", "b/0") for _ in range(10))
    assert health.failure("m", "b/1") is False
    assert health.failure("m", "b/2") is True


def test_a_success_breaks_the_run() -> None:
    health = ModelHealth(failures_to_pause=2, pause_seconds=60)
    health.failure("m", "b/0")
    health.success("m")
    assert health.failure("m", "b/1") is False
    assert health.failure("other", "b/2") is False  # models are counted apart


def test_pauses_only_ever_lengthen() -> None:
    health = ModelHealth(failures_to_pause=2, pause_seconds=60)
    health.note_pause("m", 100.0)
    health.note_pause("m", 50.0)
    assert health.paused_until("m") == 100.0
