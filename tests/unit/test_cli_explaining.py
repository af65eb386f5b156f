"""What ``batchgw get``, ``watch`` and ``download`` say of a batch that did not succeed
(``batchgw_cli.explaining``): the reason with its code, the first problems by line, what to
do next; and why a download has nothing to write."""

from __future__ import annotations

from typing import Any

from batchgw_cli import explaining


def batch(status: str, **fields: Any) -> dict[str, Any]:
    counts = fields.pop("counts", {"total": 3, "completed": 0, "failed": 3})
    return {
        "id": "batch_x",
        "status": status,
        "request_counts": counts,
        "error": None,
        "errors": None,
        **fields,
    }


def refused(n: int) -> dict[str, Any]:
    problems = [
        {
            "code": "invalid_body",
            "message": f"'messages' is required (problem {i})",
            "param": None,
            "line": i + 1,
        }
        for i in range(n)
    ]
    error = {"code": "invalid_batch_input", "message": f"The input file has {n} problems; nothing was run."}
    return batch("failed", error=error, errors={"object": "list", "data": problems})


def test_a_refused_file_prints_its_reason_the_first_lines_and_to_fix_them() -> None:
    lines = explaining.reasons(refused(7))
    assert lines[0] == "reason: The input file has 7 problems; nothing was run. (invalid_batch_input)"
    assert lines[1] == "  line 1: 'messages' is required (problem 0) (invalid_body)"
    assert len([x for x in lines if x.startswith("  line ")]) == explaining.PROBLEMS_SHOWN
    assert "and 2 more" in lines[-2]
    assert lines[-1].startswith("next: fix these lines in your file and submit it again")


def test_an_internal_failure_never_prints_the_stored_exception_and_says_to_retry() -> None:
    stored = "The batch could not be run to its end: FlexibleChecksumError: Expected checksum nA9nMw== ."
    for code in ("internal_error", "batch_failed"):
        lines = explaining.reasons(batch("failed", error={"code": code, "message": stored}))
        text = "\n".join(lines)
        assert "FlexibleChecksumError" not in text and "nA9nMw" not in text
        assert lines[0].endswith(f"({code})") and "batchgw retry batch_x" in lines[-1]
        assert "operator" in lines[-1]


def test_an_owner_failure_prints_its_message_and_retry_under_the_current_key() -> None:
    error = {"code": "owner_unauthorized", "message": "The batch's API key was revoked."}
    lines = explaining.reasons(batch("failed", error=error))
    assert lines[0] == "reason: The batch's API key was revoked. (owner_unauthorized)"
    assert "batchgw retry batch_x" in lines[-1] and "current key" in lines[-1]


def test_expired_and_partly_failed_batches_say_how_many_and_succeeded_ones_say_nothing() -> None:
    expired = explaining.reasons(
        batch("expired", counts={"total": 10, "completed": 6, "failed": 4, "expired": 4})
    )
    assert "4 of 10 expired" in expired[0] and expired[-1].startswith("next: batchgw retry")
    partly = explaining.reasons(batch("completed", counts={"total": 10, "completed": 9, "failed": 1}))
    assert partly[0].startswith("reason: 1 of 10 requests failed")
    assert explaining.reasons(batch("completed", counts={"total": 3, "completed": 3, "failed": 0})) == []
    assert explaining.reasons(batch("cancelled")) == []


def test_a_download_has_nothing_to_write_for_a_batch_that_never_wrote_results() -> None:
    why = explaining.no_results(refused(1))
    assert why is not None and why.startswith("batch_x failed without results to download")
    assert "fix these lines" in why
    running = explaining.no_results(batch("in_progress"))
    assert running is not None and "has not ended yet" in running and "batchgw watch batch_x" in running
    stopped = batch("failed", error={"code": "internal_error", "message": "x"}, input_file_id=None)
    assert explaining.no_results(stopped) is not None  # never finalized: no output.jsonl
    assert explaining.no_results(batch("completed", finalizing_at=5, input_file_id=None)) is None
    assert explaining.no_results(batch("completed", finalizing_at=5, input_file_id="file-1")) is not None
    written = batch("completed", finalizing_at=5, input_file_id="file-1", output_file_id="file-2")
    assert explaining.no_results(written) is None


def test_a_batch_failed_before_its_requests_were_stored_says_retry_and_not_submit_again() -> None:
    """A file batch that failed reading its input counted no request yet: the retry route
    runs its whole input again, so the next step is the retry command."""
    error = {"code": "internal_error", "message": "The gateway could not run this batch to its end."}
    nothing_counted = {"total": 0, "completed": 0, "failed": 0}
    lines = explaining.reasons(batch("failed", error=error, counts=nothing_counted, input_file_id="file-1"))
    assert lines[-1].startswith("next: retry it: batchgw retry batch_x") and "submit" not in lines[-1]
    assert "operator" in lines[-1]


def test_an_internal_failure_after_every_request_succeeded_asks_the_operator_not_a_retry() -> None:
    error = {"code": "internal_error", "message": "x"}
    lines = explaining.reasons(batch("failed", error=error, counts={"total": 3, "completed": 3, "failed": 0}))
    assert "batchgw retry" not in lines[-1] and "operator" in lines[-1] and "batch_x" in lines[-1]
