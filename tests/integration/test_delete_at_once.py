"""Deleting a batch deletes its result files at once (moto, the injected clock): from the
write that removes the batch's record, its output and error files read as not found on
every route and are out of the list; one its finalize had yet to record is never written;
the purge then removes their bytes."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from batchgw.api import batches, files
from batchgw.deps import Deps
from batchgw.domain.batch import BatchRecord
from batchgw.domain.errors import NotFound
from batchgw.domain.files import FileRecord, file_key, result_file_id
from batchgw.domain.principal import Principal
from batchgw.domain.states import BatchStatus
from batchgw.run import lifecycle
from batchgw.storage import aws
from batchgw.storage.dynamo import Table

from local.simulator import Simulator
from tests.integration.conftest import make_deps
from tests.support import FakeClock

pytestmark = pytest.mark.usefixtures("aws_env")

ALICE = Principal(user_id="user-alice", role="internal", key_id="key_local_alice")


def _file_batch(deps: Deps, status: BatchStatus, *, results: bool) -> BatchRecord:
    """A file batch of ``status`` (its result files written and named, when ``results``)."""
    now = deps.clock()
    batch_id = f"batch_del{int(now * 1000)}{status.value}"
    output, error = result_file_id(batch_id, "output"), result_file_id(batch_id, "error")
    record = BatchRecord(
        id=batch_id,
        owner=ALICE.user_id,
        status=status,
        endpoint="/v1/chat/completions",
        created_at=int(now),
        created_key=f"{int(now * 1000):015d}#{batch_id}",
        total=2,
        models=("sim-chat",),
        input_method="file",
        output_file_id=output if results else None,
        error_file_id=error if results else None,
    )
    Table(aws.get_clients().dynamodb, deps.settings.batches_table).put_many([record.to_item()])
    if results:
        for file_id in (output, error):
            _record_result_file(deps, batch_id, file_id)
    return record


def _record_result_file(deps: Deps, batch_id: str, file_id: str) -> bool:
    """What a finalize does for each non-empty result file: its bytes, then its record."""
    now = int(deps.clock())
    deps.blobs.put(file_key(file_id), b'{"id": "line"}\n', "application/jsonl")
    return deps.files.create(
        FileRecord(
            id=file_id,
            owner=ALICE.user_id,
            bytes=15,
            created_at=now,
            created_key=f"{now * 1000:015d}#{file_id}",
            filename=f"{batch_id}.jsonl",
            purpose="batch_output",
            expires_at=now + 86400,
            sha256="0" * 64,
        )
    )


def _reads_as_not_found(deps: Deps, file_id: str) -> bool:
    for read in (files.get_file, files.file_content):
        try:
            read(deps, ALICE, file_id)
        except NotFound:
            continue
        return False
    listed = files.list_files(deps, ALICE, {})["data"]
    return file_id not in {f["id"] for f in listed}


def _blob_exists(deps: Deps, file_id: str) -> bool:
    s3 = aws.get_clients().s3
    found = s3.list_objects_v2(Bucket=deps.settings.data_bucket, Prefix=file_key(file_id))
    return bool(found.get("KeyCount"))


def test_deleting_an_ended_batch_makes_its_result_files_unreadable_before_the_purge(sim: Simulator) -> None:
    deps = make_deps(sim, FakeClock())
    batch = _file_batch(deps, BatchStatus.COMPLETED, results=True)
    assert batch.output_file_id is not None and batch.error_file_id is not None
    assert files.get_file(deps, ALICE, batch.output_file_id)["id"] == batch.output_file_id

    batches.delete_batch(deps, ALICE, batch.id)

    for file_id in (batch.output_file_id, batch.error_file_id):
        assert _reads_as_not_found(deps, file_id)
        assert _blob_exists(deps, file_id)  # the bytes wait for the purge
    lifecycle.purge(deps, batch.id)
    for file_id in (batch.output_file_id, batch.error_file_id):
        assert not _blob_exists(deps, file_id)
        record = deps.files.get(file_id)
        assert record is not None and record.deleted  # the tombstone stays: never written again


def test_a_batch_deleted_while_it_finalizes_never_gets_its_result_files(sim: Simulator) -> None:
    deps = make_deps(sim, FakeClock())
    batch = _file_batch(deps, BatchStatus.FINALIZING, results=False)
    output = result_file_id(batch.id, "output")

    batches.delete_batch(deps, ALICE, batch.id)

    assert _record_result_file(deps, batch.id, output) is False  # the tombstone refuses it
    assert _reads_as_not_found(deps, output)
    lifecycle.purge(deps, batch.id)
    assert not _blob_exists(deps, output)  # the bytes its finalize wrote went with the purge


def test_a_result_file_recorded_while_its_batch_is_deleted_becomes_a_tombstone(
    sim: Simulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    deps = make_deps(sim, FakeClock())
    batch = _file_batch(deps, BatchStatus.FINALIZING, results=False)
    output = result_file_id(batch.id, "output")
    get = deps.files.get
    raced: list[str] = []

    def finalize_between_read_and_write(file_id: str) -> Any:
        found = get(file_id)
        if file_id == output and not raced:
            raced.append(file_id)
            _record_result_file(deps, batch.id, output)  # lands after the delete read it
        return found

    monkeypatch.setattr(deps.files, "get", finalize_between_read_and_write)
    batches.delete_batch(deps, ALICE, batch.id)

    assert raced == [output]
    assert deps.batches.get_record(batch.id) is None
    record = get(output)
    assert record is not None and record.deleted
    assert _reads_as_not_found(deps, output)


def test_deleting_an_inline_batch_writes_no_file_tombstones(sim: Simulator) -> None:
    deps = make_deps(sim, FakeClock())
    batch = replace(_file_batch(deps, BatchStatus.COMPLETED, results=False), input_method="inline")
    Table(aws.get_clients().dynamodb, deps.settings.batches_table).put_many([batch.to_item()])

    batches.delete_batch(deps, ALICE, batch.id)

    assert deps.batches.get_record(batch.id) is None
    for kind in ("output", "error"):
        assert deps.files.get(result_file_id(batch.id, kind)) is None
