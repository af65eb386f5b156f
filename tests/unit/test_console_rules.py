"""What the console shows of a batch (``domain.console``): the spec's four groups, the note on
a processing batch's stage or pause, and the search."""

from __future__ import annotations

import pytest
from batchgw.domain import console
from batchgw.domain.states import BatchStatus


@pytest.mark.parametrize(
    ("status", "completed", "group"),
    [
        (BatchStatus.VALIDATING, 0, "processing"),
        (BatchStatus.IN_PROGRESS, 3, "processing"),
        (BatchStatus.FINALIZING, 10, "processing"),
        (BatchStatus.CANCELLING, 2, "processing"),
        (BatchStatus.COMPLETED, 10, "completed"),
        (BatchStatus.COMPLETED, 9, "with_issues"),  # a request did not succeed
        (BatchStatus.FAILED, 0, "with_issues"),
        (BatchStatus.EXPIRED, 7, "with_issues"),
        (BatchStatus.CANCELLED, 10, "cancelled"),  # whatever its requests did before
    ],
)
def test_each_status_shows_in_the_specs_group(status: BatchStatus, completed: int, group: str) -> None:
    assert console.group(status, total=10, completed=completed) == group


def test_each_groups_statuses_hold_every_batch_the_group_shows() -> None:
    for status in BatchStatus:
        for completed in (0, 10):
            shown = console.group(status, total=10, completed=completed)
            assert status.value in console.statuses_of(shown)


def test_a_paused_batch_stays_processing_with_a_note_saying_why() -> None:
    note = console.note(BatchStatus.IN_PROGRESS, paused={"reason": "daily_quota", "until": 1})
    assert note is not None and note.startswith("Paused:") and "daily cost quota" in note
    assert console.note(BatchStatus.IN_PROGRESS, paused={"reason": "something new"}) == (
        "Paused: held back. It resumes on its own once that changes."
    )
    cancelling = console.note(BatchStatus.CANCELLING, paused=None)
    assert cancelling is not None and "still finish" in cancelling
    assert console.note(BatchStatus.COMPLETED, paused=None) is None


def test_results_are_ready_once_the_batch_has_finished_whatever_its_group() -> None:
    finished = {s for s in BatchStatus if console.results_ready(s)}
    assert finished == {BatchStatus.COMPLETED, BatchStatus.FAILED, BatchStatus.EXPIRED, BatchStatus.CANCELLED}
    assert console.may_cancel(BatchStatus.IN_PROGRESS) and not console.may_cancel(BatchStatus.CANCELLING)


def test_a_search_finds_a_part_of_the_name_or_the_id_in_any_case() -> None:
    assert console.matches("NIGHT", "batch_1", "Nightly run")
    assert console.matches("ch_1", "batch_1", None)
    assert not console.matches("weekly", "batch_1", "Nightly run")
