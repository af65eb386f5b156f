"""What one process counts of a model's health."""

from __future__ import annotations

from batchgw.domain.health import ModelHealth


def test_failures_of_different_requests_in_a_row_pause_the_model() -> None:
    health = ModelHealth()
    assert [health.failure("m", f"b/{i}", pause_after=3) for i in range(3)] == [False, False, True]


def test_one_request_failing_again_and_again_counts_once() -> None:
    health = ModelHealth()
    assert not any(health.failure("m", "b/0", pause_after=3) for _ in range(10))
    assert health.failure("m", "b/1", pause_after=3) is False
    assert health.failure("m", "b/2", pause_after=3) is True


def test_a_success_breaks_the_run() -> None:
    health = ModelHealth()
    health.failure("m", "b/0", pause_after=2)
    health.success("m")
    assert health.failure("m", "b/1", pause_after=2) is False
    assert health.failure("other", "b/2", pause_after=2) is False  # models are counted apart


def test_pauses_only_ever_lengthen() -> None:
    health = ModelHealth()
    health.note_pause("m", 100.0)
    health.note_pause("m", 50.0)
    assert health.paused_until("m") == 100.0
