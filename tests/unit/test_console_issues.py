"""What the console says of a finished batch that did not succeed (``domain.console.issue``),
and whether it offers results and Retry: words a user acts on, never an exception's name or
a checksum, with what to do next."""

from __future__ import annotations

import re

import pytest
from batchgw.domain import console
from batchgw.domain.states import BatchStatus

# What infrastructure text looks like: a CamelCase exception name, a base64 checksum.
INFRASTRUCTURE = re.compile(r"\b[A-Z][a-z]+(?:[A-Z][a-z]+)*(?:Error|Exception)\b|[A-Za-z0-9+/]{6,}==")


def failed(error: dict[str, str] | None, *, retryable: bool = True) -> console.Issue:
    shown = console.issue(BatchStatus.FAILED, error=error, failed=3, expired=0, total=3, retryable=retryable)
    assert shown is not None
    return shown


def test_a_refused_input_says_nothing_ran_and_to_fix_the_listed_lines() -> None:
    shown = failed(
        {"code": "invalid_batch_input", "message": "The input file has 2 problems."}, retryable=False
    )
    assert "nothing ran" in shown.title and shown.message is None  # the page lists them by line
    assert shown.next.startswith("Fix these lines in your file")


@pytest.mark.parametrize("code", ["internal_error", "batch_failed"])
def test_an_internal_failure_never_shows_its_stored_text_and_says_to_retry(code: str) -> None:
    stored = "The batch could not be run to its end: FlexibleChecksumError: Expected checksum nA9nMw== ."
    shown = failed({"code": code, "message": stored})
    words = " ".join([shown.title, shown.message or "", shown.next])
    assert not INFRASTRUCTURE.search(words) and "checksum" not in words
    assert shown.next.startswith("Retry the batch") and "operator" in shown.next
    unretryable = failed({"code": code, "message": stored}, retryable=False)
    assert unretryable.next.startswith("Submit its input again")


def test_an_owner_failure_keeps_its_message_and_offers_retry_under_the_current_key() -> None:
    shown = failed(
        {"code": "owner_unauthorized", "message": "The API key that created this batch was revoked."}
    )
    assert shown.message == "The API key that created this batch was revoked."
    assert "Retry the batch" in shown.next and "current API key" in shown.next


def test_expired_and_partly_failed_batches_say_how_many_and_what_to_do() -> None:
    expired = console.issue(BatchStatus.EXPIRED, error=None, failed=0, expired=4, total=10, retryable=True)
    assert expired is not None and "4 of 10" in (expired.message or "") and "Retry" in expired.next
    some = console.issue(BatchStatus.COMPLETED, error=None, failed=1, expired=0, total=10, retryable=True)
    assert some is not None and some.title == "1 of 10 requests did not succeed."
    assert (
        console.issue(BatchStatus.COMPLETED, error=None, failed=0, expired=0, total=10, retryable=False)
        is None
    )
    assert (
        console.issue(BatchStatus.CANCELLED, error=None, failed=0, expired=0, total=10, retryable=True)
        is None
    )
    assert (
        console.issue(BatchStatus.IN_PROGRESS, error=None, failed=2, expired=0, total=10, retryable=False)
        is None
    )


def test_results_are_offered_only_once_written_and_retry_only_where_the_api_takes_it() -> None:
    assert console.has_results(BatchStatus.COMPLETED, finalized=True)
    assert not console.has_results(BatchStatus.FAILED, finalized=False)  # refused, or stopped by a failure
    assert not console.has_results(BatchStatus.IN_PROGRESS, finalized=False)
    assert console.may_retry(BatchStatus.FAILED, prepared=True, succeeded=2, total=5)
    assert not console.may_retry(BatchStatus.FAILED, prepared=False, succeeded=0, total=5)  # never written
    assert console.may_retry(BatchStatus.EXPIRED, prepared=False, succeeded=0, total=5)
    assert not console.may_retry(BatchStatus.COMPLETED, prepared=True, succeeded=5, total=5)
    assert not console.may_retry(BatchStatus.IN_PROGRESS, prepared=True, succeeded=0, total=5)


@pytest.mark.parametrize("code", ["internal_error", "batch_failed"])
def test_a_batch_failed_inside_the_gateway_before_its_requests_were_stored_offers_retry(code: str) -> None:
    """It failed reading its input, say: nothing ran, its input is still good, and the retry
    route runs all of it again, whatever the batch had counted (a file batch: none yet)."""
    error = {"code": code, "message": "The gateway could not run this batch to its end."}
    for total in (0, 5):
        assert console.may_retry(BatchStatus.FAILED, prepared=False, succeeded=0, total=total, error=error)
    shown = console.issue(BatchStatus.FAILED, error=error, failed=0, expired=0, total=0, retryable=True)
    assert shown is not None and shown.next.startswith("Retry the batch")


@pytest.mark.parametrize(
    "code", ["invalid_batch_input", "queued_request_limit", "batch_route_unavailable", "batch_not_supported"]
)
def test_a_batch_whose_input_was_refused_offers_no_retry(code: str) -> None:
    """Refused by the file check, or as a whole (its ``errors`` holds why): the input is
    fixed or submitted again, not run again as it is."""
    error = {"code": code, "message": "refused"}
    assert not console.may_retry(
        BatchStatus.FAILED, prepared=False, succeeded=0, total=0, error=error, refused=True
    )
    # An internal code with a validation report is still a refusal.
    assert not console.may_retry(
        BatchStatus.FAILED,
        prepared=False,
        succeeded=0,
        total=3,
        error={"code": "internal_error"},
        refused=True,
    )
    # Its requests stored, one that ended in success is never run again.
    assert not console.may_retry(
        BatchStatus.FAILED, prepared=True, succeeded=3, total=3, error={"code": "internal_error"}
    )
