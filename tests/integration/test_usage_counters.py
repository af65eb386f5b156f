"""Each user's limits as conditional counters (moto, the injected clock): exact when creates
and uploads race, released once whatever ends or deletes a batch, file bytes leaving the
count with their expiry hour."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from batchgw.api import batches, files
from batchgw.deps import Deps
from batchgw.domain.batch import RECORD_SK
from batchgw.domain.errors import ApiError, StorageError
from batchgw.domain.files import incoming_key
from batchgw.domain.principal import Principal
from batchgw.domain.states import BatchStatus
from batchgw.domain.usage import FILE_BUCKET_SECONDS, OverLimit, UsageLimits, file_bucket
from batchgw.run import ending, lifecycle
from batchgw.storage import aws

from local.simulator import Simulator
from tests.integration.conftest import body_of, chat_request, make_deps
from tests.support import FakeClock

pytestmark = pytest.mark.usefixtures("aws_env")

ALICE = Principal(user_id="user-alice", role="internal", key_id="key_local_alice")
BOB = Principal(user_id="user-bob", role="internal", key_id="key_local_bob")


def inline(n: int, tag: str = "q") -> bytes:
    return body_of([chat_request(f"{tag}-{i}", f"hello {i}") for i in range(n)])


def create(deps: Deps, principal: Principal, n: int) -> dict[str, Any]:
    return batches.create_batch(deps, principal, inline(n))


def code_of(call: Callable[[], Any]) -> str:
    """ "ok", or the error code the call was refused with."""
    try:
        call()
    except ApiError as exc:
        return str(exc.code)
    return "ok"


def at_once(times: int, call: Callable[[], Any]) -> list[str]:
    """``call`` from ``times`` threads released together; each one's outcome."""
    start = threading.Barrier(times)

    def one(_: int) -> str:
        start.wait()
        return code_of(call)

    with ThreadPoolExecutor(times) as pool:
        return list(pool.map(one, range(times)))


def cancel_unstarted(deps: Deps, batch_id: str) -> None:
    """Cancel a prepared batch and end its unstarted requests (it is still ``cancelling``)."""
    batches.cancel_batch(deps, ALICE, batch_id)
    lifecycle.cancel(deps, batch_id)


# --- unfinished batches and requests ----------------------------------------------------------


def test_twelve_creates_racing_against_a_limit_of_four_batches_make_exactly_four(sim: Simulator) -> None:
    deps = make_deps(sim, FakeClock(), BATCH_MAX_ACTIVE_PER_USER="4")
    outcomes = at_once(12, lambda: create(deps, ALICE, 1))
    assert outcomes.count("ok") == 4
    assert set(outcomes) == {"ok", "too_many_open_batches"}
    assert len(batches.list_batches(deps, ALICE, {})["data"]) == 4
    assert deps.usage.read(ALICE.user_id).batches == 4
    assert code_of(lambda: create(deps, BOB, 1)) == "ok"  # another user is not affected


def test_ten_creates_racing_for_the_unfinished_request_limit_never_exceed_it(sim: Simulator) -> None:
    deps = make_deps(sim, FakeClock(), BATCH_MAX_QUEUED_REQUESTS_PER_USER="10")
    outcomes = at_once(10, lambda: create(deps, ALICE, 3))
    assert outcomes.count("ok") == 3  # 9 of 10; a fourth would make 12
    assert set(outcomes) == {"ok", "queued_request_limit"}
    usage = deps.usage.read(ALICE.user_id)
    assert (usage.batches, usage.requests) == (3, 9)


def test_a_refused_create_keeps_todays_message_and_stores_nothing(sim: Simulator) -> None:
    deps = make_deps(sim, FakeClock(), BATCH_MAX_QUEUED_REQUESTS_PER_USER="5")
    create(deps, ALICE, 3)
    with pytest.raises(ApiError) as refused:
        create(deps, ALICE, 3)
    assert refused.value.status == 429 and refused.value.code == "queued_request_limit"
    assert (
        refused.value.message == "This batch would take your unfinished requests to 6, over the limit of 5."
    )
    assert len(batches.list_batches(deps, ALICE, {})["data"]) == 1
    assert deps.usage.read(ALICE.user_id).requests == 3


def test_requests_that_ended_in_an_unfinished_batch_make_room(sim: Simulator) -> None:
    deps = make_deps(sim, FakeClock(), BATCH_MAX_QUEUED_REQUESTS_PER_USER="5")
    first = create(deps, ALICE, 4)["id"]
    lifecycle.prepare(deps, first)
    assert code_of(lambda: create(deps, ALICE, 4)) == "queued_request_limit"
    cancel_unstarted(deps, first)  # its 4 requests ended; the batch itself has not
    assert deps.batches.get_record(first).status is BatchStatus.CANCELLING  # type: ignore[union-attr]
    assert code_of(lambda: create(deps, ALICE, 4)) == "ok"
    assert code_of(lambda: create(deps, ALICE, 2)) == "queued_request_limit"  # 4 unfinished + 2
    ending.finalize(deps, first)
    usage = deps.usage.read(ALICE.user_id)
    assert (usage.batches, usage.requests) == (1, 4)


# --- released once ------------------------------------------------------------------------------


def test_a_batch_that_ends_is_released_once_however_often_its_end_is_retried(sim: Simulator) -> None:
    deps = make_deps(sim, FakeClock())
    failed = create(deps, ALICE, 3)["id"]
    cancelled = create(deps, ALICE, 2)["id"]
    lifecycle.prepare(deps, cancelled)
    cancel_unstarted(deps, cancelled)
    for _ in range(2):  # a retried step, and a fail after the end
        ending.fail(deps, failed, "a step failed")
        ending.finalize(deps, cancelled)
        ending.fail(deps, cancelled, "late")
    assert deps.batches.get_record(failed).status is BatchStatus.FAILED  # type: ignore[union-attr]
    assert deps.batches.get_record(cancelled).status is BatchStatus.CANCELLED  # type: ignore[union-attr]
    usage = deps.usage.read(ALICE.user_id)
    assert (usage.batches, usage.requests, usage.releases) == (0, 0, 2)


def test_deleting_an_unfinished_batch_releases_it_once_and_its_purge_does_not_again(sim: Simulator) -> None:
    deps = make_deps(sim, FakeClock())
    unfinished = create(deps, ALICE, 3)["id"]
    ended = create(deps, ALICE, 2)["id"]
    ending.fail(deps, ended)
    at_once(2, lambda: batches.delete_batch(deps, ALICE, unfinished))
    batches.delete_batch(deps, ALICE, ended)
    for batch_id in (unfinished, ended):
        lifecycle.purge(deps, batch_id)
    usage = deps.usage.read(ALICE.user_id)
    assert (usage.batches, usage.requests, usage.releases) == (0, 0, 2)


def test_a_batch_whose_record_vanished_unreleased_is_released_by_the_next_charge_it_blocks(
    sim: Simulator,
) -> None:
    deps = make_deps(sim, FakeClock(), BATCH_MAX_ACTIVE_PER_USER="1")
    lost = create(deps, ALICE, 2)["id"]
    # DynamoDB's TTL removes the record of a batch whose workflow died long ago.
    aws.get_clients().dynamodb.delete_item(
        TableName=deps.settings.batches_table, Key={"pk": {"S": lost}, "sk": {"S": "meta"}}
    )
    assert code_of(lambda: create(deps, ALICE, 1)) == "ok"
    usage = deps.usage.read(ALICE.user_id)
    assert (usage.batches, usage.requests, list(usage.held.values())) == (1, 1, [1])
    assert lost not in usage.held


def test_a_batch_whose_workflow_cannot_start_is_not_counted(sim: Simulator) -> None:
    deps = make_deps(sim, FakeClock())

    def refuse(batch_id: str) -> None:
        raise StorageError("no workflow")

    deps.workflow.start = refuse  # type: ignore[method-assign]
    assert code_of(lambda: create(deps, ALICE, 2)) == "503"
    usage = deps.usage.read(ALICE.user_id)
    assert (usage.batches, usage.requests) == (0, 0)


def file_batch(deps: Deps, lines: int) -> str:
    """A batch made from an uploaded file of ``lines`` chat requests."""
    data = b"".join(
        json.dumps(
            {"custom_id": f"f-{i}", "method": "POST", "url": "/v1/chat/completions", **chat_request("", "x")}
            | {"custom_id": f"f-{i}"}
        ).encode()
        + b"\n"
        for i in range(lines)
    )
    upload = files.new_input_file(deps, ALICE, "in.jsonl", data)
    body = {"input_file_id": upload.id, "endpoint": "/v1/chat/completions", "completion_window": "24h"}
    return str(batches.create_batch(deps, ALICE, json.dumps(body).encode())["id"])


def test_a_file_batch_counts_its_requests_once_its_file_is_read_and_once_only(sim: Simulator) -> None:
    deps = make_deps(sim, FakeClock(), BATCH_MAX_QUEUED_REQUESTS_PER_USER="5")
    batch_id = file_batch(deps, 3)
    usage = deps.usage.read(ALICE.user_id)
    assert (usage.batches, usage.requests) == (1, 0)
    record = deps.batches.get_record(batch_id)
    assert record is not None
    limits = UsageLimits(max_batches=10, max_requests=5)
    unprepared = [BatchStatus.VALIDATING, BatchStatus.CANCELLING]
    for _ in range(2):  # a retried prepare finds them counted
        counted = deps.batches.charge_requests(
            record, total=3, models=["sim-chat"], limits=limits, from_statuses=unprepared
        )
        assert counted is not None and not isinstance(counted, OverLimit) and counted.total == 3
    assert deps.usage.read(ALICE.user_id).requests == 3
    lifecycle.prepare(deps, batch_id)  # validates the same file: nothing more is counted
    assert deps.usage.read(ALICE.user_id).requests == 3


def test_a_file_batch_over_the_request_limit_fails_and_is_released(sim: Simulator) -> None:
    deps = make_deps(sim, FakeClock(), BATCH_MAX_QUEUED_REQUESTS_PER_USER="5")
    create(deps, ALICE, 3)
    batch_id = file_batch(deps, 3)
    lifecycle.prepare(deps, batch_id)
    record = deps.batches.get_record(batch_id)
    assert record is not None and record.status is BatchStatus.FAILED
    assert record.error is not None and record.error["code"] == "queued_request_limit"
    assert "to 6, over the limit of 5" in record.error["message"]
    usage = deps.usage.read(ALICE.user_id)
    assert (usage.batches, usage.requests) == (1, 3)  # the inline batch alone


# --- stored input-file bytes ------------------------------------------------------------------


def upload(deps: Deps, size: int, principal: Principal = ALICE) -> str:
    return files.new_input_file(deps, principal, "in.jsonl", b"x" * size).id


def test_ten_uploads_racing_for_the_storage_limit_store_exactly_what_fits(sim: Simulator) -> None:
    deps = make_deps(sim, FakeClock(), BATCH_FILES_MAX_TOTAL_MB_PER_USER=str(3500 / 1024 / 1024))
    outcomes = at_once(10, lambda: upload(deps, 1000))
    assert outcomes.count("ok") == 3
    assert set(outcomes) == {"ok", "file_storage_limit"}
    assert deps.usage.read(ALICE.user_id).file_bytes == 3000
    assert code_of(lambda: upload(deps, 1000, BOB)) == "ok"


def test_a_file_deleted_twice_at_once_is_released_once(sim: Simulator) -> None:
    deps = make_deps(sim, FakeClock(), BATCH_FILES_MAX_TOTAL_MB_PER_USER=str(2048 / 1024 / 1024))
    kept, doomed = upload(deps, 500), upload(deps, 1000)
    at_once(3, lambda: files.delete_file(deps, ALICE, doomed))
    assert deps.usage.read(ALICE.user_id).file_bytes == 500
    assert code_of(lambda: upload(deps, 1500)) == "ok"
    files.delete_file(deps, ALICE, kept)
    assert deps.usage.read(ALICE.user_id).file_bytes == 1500


def test_an_expired_files_bytes_leave_the_count_with_its_hour_and_are_not_released_again(
    sim: Simulator,
) -> None:
    clock = FakeClock(1_800_000_000.0 + 600)  # not on an hour boundary
    deps = make_deps(
        sim, clock, BATCH_FILES_MAX_TOTAL_MB_PER_USER=str(2048 / 1024 / 1024), BATCH_FILE_RETENTION_DAYS="1"
    )
    upload(deps, 1500)
    clock.advance(86400 + 1)  # expired, but its hour has not passed: it still counts
    assert code_of(lambda: upload(deps, 1000)) == "file_storage_limit"
    clock.advance(FILE_BUCKET_SECONDS)
    assert code_of(lambda: upload(deps, 1000)) == "ok"
    assert deps.usage.read(ALICE.user_id).file_bytes == 1000
    files.delete_all_of(deps, ALICE.user_id)  # the expired file too: its bytes already left
    usage = deps.usage.read(ALICE.user_id)
    assert usage.file_bytes == 0 and sum(usage.buckets.values()) == 0


def test_a_batchs_input_copy_counts_until_its_record_is_deleted_once_whatever_its_backstop_does(
    sim: Simulator,
) -> None:
    clock = FakeClock(1_800_000_000.0 + 600)
    deps = make_deps(sim, clock, BATCH_RETENTION_DAYS="1")
    deleted = create(deps, ALICE, 3)["id"]
    kept = create(deps, ALICE, 2)["id"]
    copies = {b: deps.batches.get_record(b) for b in (deleted, kept)}
    sizes = {b: r.input_bytes for b, r in copies.items() if r is not None}
    assert min(sizes.values()) > 0
    assert deps.usage.read(ALICE.user_id).file_bytes == sum(sizes.values())
    assert deps.usage.read(ALICE.user_id).held_bytes == sizes  # each under its own entry

    at_once(2, lambda: batches.delete_batch(deps, ALICE, deleted))
    lifecycle.purge(deps, deleted)
    assert deps.usage.read(ALICE.user_id).file_bytes == sizes[kept]

    # The kept batch runs past the hour of the backstop it was created with (a batch without a
    # window moves its backstop on at each reconcile): its copy still counts, as its own.
    record = copies[kept]
    assert record is not None and record.ttl is not None
    clock.now = record.ttl + FILE_BUCKET_SECONDS
    upload(deps, 100)
    assert deps.usage.read(ALICE.user_id).file_bytes == 100 + sizes[kept]
    # Its end moves the bytes to the hour of its final backstop, where they count until its purge.
    ending.fail(deps, kept)
    ended = deps.batches.get_record(kept)
    assert ended is not None and ended.input_until == ended.ttl and ended.ttl is not None
    usage = deps.usage.read(ALICE.user_id)
    assert usage.held_bytes == {} and usage.buckets[file_bucket(ended.ttl)] == sizes[kept]
    assert usage.file_bytes == 100 + sizes[kept]
    at_once(2, lambda: batches.delete_batch(deps, ALICE, kept))
    assert deps.usage.read(ALICE.user_id).file_bytes == 100


def test_an_ended_batchs_record_that_outlives_its_backstop_hour_counts_no_more(sim: Simulator) -> None:
    clock = FakeClock(1_800_000_000.0 + 600)
    deps = make_deps(sim, clock, BATCH_RETENTION_DAYS="1")
    kept = create(deps, ALICE, 2)["id"]
    ending.fail(deps, kept)
    ended = deps.batches.get_record(kept)
    assert ended is not None and ended.input_until is not None
    # Its purge never ran: the copy's bytes leave the count with its hour, and deleting the
    # record later takes nothing off again.
    clock.now = ended.input_until + FILE_BUCKET_SECONDS
    upload(deps, 100)
    assert deps.usage.read(ALICE.user_id).file_bytes == 100
    batches.delete_batch(deps, ALICE, kept)
    assert deps.usage.read(ALICE.user_id).file_bytes == 100


def test_an_unfinished_batch_whose_record_vanished_is_released_with_its_copy_by_the_next_refused_create(
    sim: Simulator,
) -> None:
    deps = make_deps(sim, FakeClock(), BATCH_MAX_ACTIVE_PER_USER="1")
    gone = create(deps, ALICE, 2)["id"]
    assert deps.usage.read(ALICE.user_id).file_bytes > 0
    # DynamoDB's TTL removes the record of a batch whose workflow died: no release is written.
    raw = aws.get_clients().dynamodb
    raw.delete_item(TableName=deps.settings.batches_table, Key={"pk": {"S": gone}, "sk": {"S": RECORD_SK}})
    create(deps, ALICE, 1)  # over one active batch as counted: the vanished one is found and released
    usage = deps.usage.read(ALICE.user_id)
    assert gone not in usage.held and gone not in usage.held_bytes
    assert usage.batches == 1 and usage.file_bytes == sum(usage.held_bytes.values()) > 0


def test_the_usage_record_keeps_one_bucket_per_hour_of_retention_at_most(sim: Simulator) -> None:
    clock = FakeClock()
    retention_hours = 6
    deps = make_deps(sim, clock, BATCH_FILE_RETENTION_DAYS=str(retention_hours / 24))
    for _ in range(48):
        clock.advance(FILE_BUCKET_SECONDS)
        upload(deps, 10)
    usage = deps.usage.read(ALICE.user_id)
    assert len(usage.buckets) <= retention_hours + 1
    assert usage.live_file_bytes(clock()) == usage.file_bytes == 10 * retention_hours


def test_a_presigned_upload_counts_when_completed_and_waits_for_room_over_the_limit(sim: Simulator) -> None:
    deps = make_deps(sim, FakeClock(), BATCH_FILES_MAX_TOTAL_MB_PER_USER=str(2048 / 1024 / 1024))
    declared = files.presign_upload(deps, ALICE, {"filename": "big.jsonl", "purpose": "batch", "bytes": 1000})
    file_id = declared["file"]["id"]
    deps.blobs.put(incoming_key(file_id), b"y" * 1000, "application/jsonl")
    assert deps.usage.read(ALICE.user_id).file_bytes == 0  # declared, not counted
    first = upload(deps, 1500)
    assert code_of(lambda: files.complete_presigned(deps, ALICE, file_id)) == "file_storage_limit"
    files.delete_file(deps, ALICE, first)
    assert code_of(lambda: files.complete_presigned(deps, ALICE, file_id)) == "ok"  # the upload was kept
    assert deps.usage.read(ALICE.user_id).file_bytes == 1000


def test_five_batches_from_one_file_are_refused_once_their_copies_reach_the_limit_and_a_purge_frees_one(
    sim: Simulator,
) -> None:
    lines = b"".join(json.dumps(chat_request(f"f-{i}", f"hello {i}")).encode() + b"\n" for i in range(20))
    # The file and two copies of it fit; a third copy would not.
    deps = make_deps(
        sim, FakeClock(), BATCH_FILES_MAX_TOTAL_MB_PER_USER=str((3.5 * len(lines)) / 1024 / 1024)
    )
    file_id = files.new_input_file(deps, ALICE, "in.jsonl", lines).id
    body = json.dumps(
        {"input_file_id": file_id, "endpoint": "/v1/chat/completions", "completion_window": "24h"}
    ).encode()
    made: list[str] = []
    refusals: list[ApiError] = []
    for _ in range(5):
        try:
            made.append(batches.create_batch(deps, ALICE, body)["id"])
        except ApiError as exc:
            refusals.append(exc)
    assert len(made) == 2 and len(refusals) == 3
    for refused in refusals:
        assert (refused.status, refused.code) == (429, "file_storage_limit")
        assert refused.body()["error"]["type"] == "rate_limit_error"
        assert "copies of their inputs your batches keep" in refused.message
    assert deps.usage.read(ALICE.user_id).file_bytes == 3 * len(lines)  # nothing stored for those
    # A batch's end alone keeps its copy (until its purge); its purge frees it.
    ending.fail(deps, made[0])
    assert code_of(lambda: batches.create_batch(deps, ALICE, body)) == "file_storage_limit"
    lifecycle.purge(deps, made[0])
    assert deps.usage.read(ALICE.user_id).file_bytes == 2 * len(lines)
    assert code_of(lambda: batches.create_batch(deps, ALICE, body)) == "ok"
