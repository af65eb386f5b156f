"""Why a batch did not succeed, and what to do next, in lines for a terminal (``batchgw get``,
``watch`` and ``download``): the batch's ``error`` (message and code), the first of its
``errors`` by line, and the command that helps. Where the failure was the gateway's own, its
stored message is not shown (an older gateway wrote an exception's text there): the words
here say what happened instead."""

from __future__ import annotations

from typing import Any

# How many of a refused file's problems are printed (the rest are counted).
PROBLEMS_SHOWN = 5
# Codes of a batch that failed inside the gateway (batch_failed: as older gateways wrote it).
INTERNAL = frozenset({"internal_error", "batch_failed"})
# Codes that refuse the whole batch, whatever its lines (``errors`` holds that one entry).
_WHOLE_BATCH = frozenset({"queued_request_limit", "batch_route_unavailable", "batch_not_supported"})
INTERNAL_MESSAGE = "the gateway failed while running it (an internal failure, recorded in its logs)"
FINAL = ("completed", "failed", "expired", "cancelled")


def reasons(batch: dict[str, Any]) -> list[str]:
    """The lines that explain an ended batch's failure, expiry or failed requests, ending
    with what to do next; none for a batch that succeeded, was cancelled or still runs."""
    status, batch_id = batch.get("status"), batch.get("id", "")
    if status == "failed":
        return _failure(batch)
    counts = batch.get("request_counts") or {}
    failed, expired, total = (
        int(counts.get("failed", 0)),
        int(counts.get("expired", 0)),
        int(counts.get("total", 0)),
    )
    if status == "expired":
        return [
            f"reason: its window closed before every request started ({expired:,} of {total:,} expired)",
            f"next: batchgw retry {batch_id} runs the requests that did not succeed, in a new window",
        ]
    if status == "completed" and failed:
        return [
            f"reason: {failed:,} of {total:,} requests failed; each one's error is in the results",
            f"next: batchgw download {batch_id} writes them (the error file); "
            f"batchgw retry {batch_id} runs them again",
        ]
    return []


def _failure(batch: dict[str, Any]) -> list[str]:
    batch_id = batch.get("id", "")
    error = batch.get("error") or {}
    code = str(error.get("code") or "")
    message = error.get("message") if code not in INTERNAL else None
    lines = [f"reason: {message or INTERNAL_MESSAGE}" + (f" ({code})" if code else "")]
    problems = (batch.get("errors") or {}).get("data") or []
    for problem in problems[:PROBLEMS_SHOWN]:
        where = f"line {problem['line']}: " if problem.get("line") else ""
        kind = f" ({problem['code']})" if problem.get("code") else ""
        lines.append(f"  {where}{problem.get('message', '')}{kind}")
    if len(problems) > PROBLEMS_SHOWN:
        lines.append(
            f"  … and {len(problems) - PROBLEMS_SHOWN:,} more listed (batchgw --json get {batch_id})"
        )
    counts = batch.get("request_counts") or {}
    total, succeeded = int(counts.get("total", 0)), int(counts.get("completed", 0))
    done = total > 0 and succeeded >= total  # the retry route finds nothing to run again
    lines.append(f"next: {_next(code, batch_id, refused=bool(problems), all_succeeded=done)}")
    return lines


def _next(code: str, batch_id: str, *, refused: bool, all_succeeded: bool = False) -> str:
    if code == "invalid_batch_input" or (refused and code not in _WHOLE_BATCH):
        return (
            "fix these lines in your file and submit it again (batchgw preflight FILE checks every "
            "line first); nothing of this batch ran or was billed"
        )
    if code in INTERNAL and all_succeeded:
        return (
            f"every request succeeded, but the batch could not be ended with its results file: "
            f"contact the operator with the batch id {batch_id}"
        )
    if code in INTERNAL:
        # The retry route takes it whether or not its requests were stored before it failed:
        # it runs those that did not succeed, or, if none was stored, its whole input.
        return (
            f"retry it: batchgw retry {batch_id} runs again what did not succeed (all of it if "
            f"nothing ran); if it fails again, contact the operator with the batch id {batch_id}"
        )
    if code == "owner_unauthorized":
        return (
            "the API key or account that created it may no longer run batches; finished requests keep "
            f"their results: batchgw retry {batch_id} runs the others under your current key"
        )
    if code == "queued_request_limit":
        return (
            "wait for some of your unfinished batches to end (batchgw list --status in_progress), "
            "or cancel some, then submit the file again"
        )
    if code in ("batch_route_unavailable", "batch_not_supported"):
        return "choose another model and submit again, or ask the operator to allow this model's batch route"
    return f"batchgw retry {batch_id} runs its unfinished requests again"


def no_results(batch: dict[str, Any]) -> str | None:
    """Why ``batchgw download`` has nothing to write for this batch (None: it has results).
    Results exist once the batch ended through finalizing, which writes them; a batch whose
    input was refused, or that a failure stopped, never got there."""
    batch_id, status = batch.get("id", ""), batch.get("status")
    if status not in FINAL:
        return f"{batch_id} has not ended yet ({status}): batchgw watch {batch_id} follows it to its end"
    written = batch.get("finalizing_at") is not None
    from_file = batch.get("input_file_id") is not None
    if written and (not from_file or batch.get("output_file_id") or batch.get("error_file_id")):
        return None
    why = f"{batch_id} {status} without results to download"
    found = [line for line in reasons(batch) if not line.startswith("  ")]  # its lines: batchgw get
    return "; ".join([why, *found]) if found else why + "; none of its requests ran"
