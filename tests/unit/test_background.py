"""A background response's status, object and event, from its batch of one request."""

from __future__ import annotations

from dataclasses import replace

import pytest
from batchgw.domain import background
from batchgw.domain.batch import BatchRecord, created_bound, created_key, is_response, work_source
from batchgw.domain.request import RequestRecord
from batchgw.domain.states import BatchStatus, RequestStatus

RECORD = BatchRecord(
    id="resp_1",
    owner="alice",
    status=BatchStatus.IN_PROGRESS,
    endpoint="/v1/responses",
    created_at=1_800_000_000,
    created_key="k",
    models=("sim-chat",),
)
QUEUED = RequestRecord("resp_1", 0, "response", "sim-chat")
ASKED = {"model": "sim-chat-latest", "input": "hi", "instructions": "be brief", "metadata": {"a": "1"}}


def at(status: BatchStatus) -> BatchRecord:
    return replace(RECORD, status=status)


@pytest.mark.parametrize(
    ("batch", "request_", "shown"),
    [
        (BatchStatus.VALIDATING, None, "queued"),
        (BatchStatus.IN_PROGRESS, QUEUED, "queued"),
        (BatchStatus.IN_PROGRESS, replace(QUEUED, status=RequestStatus.RUNNING, attempts=1), "in_progress"),
        (
            BatchStatus.IN_PROGRESS,
            replace(QUEUED, status=RequestStatus.RETRY_WAIT, attempts=1),
            "in_progress",
        ),
        (BatchStatus.IN_PROGRESS, replace(QUEUED, status=RequestStatus.SUCCEEDED), "completed"),
        (BatchStatus.FINALIZING, replace(QUEUED, status=RequestStatus.FAILED), "failed"),
        (BatchStatus.EXPIRED, replace(QUEUED, status=RequestStatus.EXPIRED), "incomplete"),
        (BatchStatus.EXPIRED, None, "incomplete"),
        (BatchStatus.FAILED, None, "failed"),
        # a cancel wins over a call that was still running and answered
        (BatchStatus.CANCELLING, replace(QUEUED, status=RequestStatus.RUNNING, attempts=1), "cancelled"),
        (BatchStatus.CANCELLED, replace(QUEUED, status=RequestStatus.SUCCEEDED), "cancelled"),
    ],
)
def test_the_status_follows_the_cancel_then_the_request_then_the_batch(
    batch: BatchStatus, request_: RequestRecord | None, shown: str
) -> None:
    assert background.status_of(at(batch), request_) == shown
    assert background.event_type(shown) == f"response.{shown}"


def test_a_completed_response_shows_the_upstream_answer_under_its_own_id_and_creation_time() -> None:
    answer = {
        "id": "resp_upstream",
        "object": "response",
        "created_at": 1,
        "status": "completed",
        "output": [{"type": "message", "content": [{"type": "output_text", "text": "hello"}]}],
        "usage": {"input_tokens": 1, "output_tokens": 1, "total_tokens": 2},
    }
    done = replace(QUEUED, status=RequestStatus.SUCCEEDED)
    shown = background.response_object(replace(RECORD, ended_at=1_800_000_009.5), done, ASKED, answer)
    assert (shown["id"], shown["created_at"], shown["background"]) == ("resp_1", 1_800_000_000, True)
    assert shown["output"] == answer["output"] and shown["usage"] == answer["usage"]
    assert shown["status"] == "completed" and shown["completed_at"] == 1_800_000_009
    assert (shown["instructions"], shown["metadata"], shown["model"]) == (
        "be brief",
        {"a": "1"},
        "sim-chat-latest",
    )


def test_a_failed_response_carries_its_requests_error_and_an_incomplete_one_why() -> None:
    failed = replace(
        QUEUED, status=RequestStatus.FAILED, error={"code": "rate_limited", "message": "slow down"}
    )
    shown = background.response_object(RECORD, failed, ASKED)
    assert shown["error"] == {"code": "rate_limited", "message": "slow down"} and shown["output"] == []
    late = background.response_object(at(BatchStatus.EXPIRED), None, ASKED)
    assert late["status"] == "incomplete"
    assert late["incomplete_details"] == {"reason": background.WINDOW_CLOSED}
    assert late["error"]["code"] == background.WINDOW_CLOSED


def test_a_responses_owner_index_keys_sort_after_every_batchs() -> None:
    assert is_response("resp_1") and not is_response("batch_1")
    batch_key, response_key = created_key(1_800_000_000_000, "batch_1"), created_key(1, "resp_1")
    assert batch_key < ":" < response_key  # a batch list ends at ":", a response list starts at "r"
    assert created_bound(5, responses=True) == "r000000000005000#"


def test_the_source_a_batch_of_requests_is_measured_under_follows_its_id() -> None:
    assert work_source("batch_1") == "batch"
    assert work_source("resp_1") == "background"
    assert work_source("flex_1") == "flex"
