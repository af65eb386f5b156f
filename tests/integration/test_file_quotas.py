"""File quotas and retention on moto, through the files service."""

from __future__ import annotations

import pytest
from batchgw.api import files
from batchgw.domain.errors import BadRequest, NotFound, TooManyRequests
from batchgw.domain.principal import Principal

from local.simulator import Simulator
from tests.integration.conftest import make_deps
from tests.support import FakeClock

pytestmark = pytest.mark.usefixtures("aws_env")

ALICE = Principal(user_id="user-alice", role="internal", key_id="key_local_alice")
BOUNDARY = "xYzBoUnDaRy"


def multipart(data: bytes, purpose: str = "batch") -> tuple[str, bytes]:
    body = (
        (
            f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="purpose"\r\n\r\n{purpose}\r\n'
            f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="file"; filename="in.jsonl"\r\n'
            "Content-Type: application/jsonl\r\n\r\n"
        ).encode()
        + data
        + f"\r\n--{BOUNDARY}--\r\n".encode()
    )
    return f"multipart/form-data; boundary={BOUNDARY}", body


def upload(deps, data: bytes = b'{"x": 1}\n'):  # type: ignore[no-untyped-def]
    content_type, body = multipart(data)
    return files.upload_file(deps, ALICE, content_type, body)


def test_uploads_per_hour_are_limited_and_failed_ones_count(sim: Simulator) -> None:
    clock = FakeClock()
    deps = make_deps(sim, clock, BATCH_FILE_UPLOADS_PER_HOUR="2")
    upload(deps)
    content_type, body = multipart(b'{"x": 1}\n', purpose="fine-tune")
    with pytest.raises(BadRequest):  # a refused upload fails, and still counts
        files.upload_file(deps, ALICE, content_type, body)
    with pytest.raises(TooManyRequests):
        upload(deps)
    clock.advance(3600)  # the next hour
    assert upload(deps)["object"] == "file"


def test_stored_bytes_per_user_are_limited(sim: Simulator) -> None:
    deps = make_deps(sim, FakeClock(), BATCH_FILES_MAX_TOTAL_MB_PER_USER=str(2048 / 1024 / 1024))
    first = upload(deps, b"a" * 1500)
    with pytest.raises(TooManyRequests):
        upload(deps, b"b" * 1000)
    files.delete_file(deps, ALICE, first["id"])  # deleting frees the room
    assert upload(deps, b"b" * 1000)["bytes"] == 1000


def test_a_file_reads_as_not_found_after_its_retention(sim: Simulator) -> None:
    clock = FakeClock()
    deps = make_deps(sim, clock, BATCH_FILE_RETENTION_DAYS="1")
    record = upload(deps)
    assert record["expires_at"] == record["created_at"] + 86400
    assert files.get_file(deps, ALICE, record["id"])["id"] == record["id"]
    clock.advance(86401)
    with pytest.raises(NotFound):
        files.get_file(deps, ALICE, record["id"])
    assert files.list_files(deps, ALICE, {})["data"] == []


def test_the_storage_quota_counts_only_files_the_user_can_still_see(sim: Simulator) -> None:
    clock = FakeClock()
    deps = make_deps(
        sim, clock, BATCH_FILES_MAX_TOTAL_MB_PER_USER="0.001", BATCH_FILE_RETENTION_DAYS="1"
    )  # 1,048 B
    files.presign_upload(deps, ALICE, {"filename": "never.jsonl", "purpose": "batch", "bytes": 1000})
    upload(deps, b'{"x": 1}\n' * 100)  # 900 bytes: the declared upload above does not count
    with pytest.raises(TooManyRequests):
        upload(deps, b'{"x": 1}\n' * 20)
    clock.advance(86400 + 1)  # the first file expired: it no longer counts
    assert upload(deps, b'{"x": 1}\n' * 100)["object"] == "file"


def _part(data: bytes) -> tuple[str, bytes]:
    body = (
        f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="data"; filename="part"\r\n\r\n'.encode()
        + data
        + f"\r\n--{BOUNDARY}--\r\n".encode()
    )
    return f"multipart/form-data; boundary={BOUNDARY}", body


def test_an_upload_in_parts_is_assembled_streaming_checked_and_counted_once(sim: Simulator) -> None:
    import hashlib

    from batchgw.api import uploads
    from batchgw.domain.files import file_key

    deps = make_deps(sim, FakeClock())
    parts = [bytes([65 + i]) * (1024 * 1024 + i) for i in range(3)]  # three parts, ~1 MiB each
    whole = b"".join(parts)

    def upload_in_parts(md5: str | None) -> dict:  # type: ignore[type-arg]
        made = uploads.create_upload(
            deps,
            ALICE,
            {"filename": "p.jsonl", "purpose": "batch", "bytes": len(whole), "mime_type": "text/plain"},
        )
        ids = [uploads.add_part(deps, ALICE, made["id"], *_part(p))["id"] for p in parts]
        return uploads.complete_upload(
            deps, ALICE, made["id"], {"part_ids": ids, **({"md5": md5} if md5 else {})}
        )

    with pytest.raises(BadRequest, match="md5"):
        upload_in_parts("0" * 32)
    assert deps.usage.read(ALICE.user_id).file_bytes == 0  # refused: nothing stored or counted
    done = upload_in_parts(hashlib.md5(whole).hexdigest())
    file = deps.files.get(done["file"]["id"])
    assert file is not None and file.bytes == len(whole) and file.sha256 == hashlib.sha256(whole).hexdigest()
    assert deps.blobs.get(file_key(file.id)) == whole
    assert deps.usage.read(ALICE.user_id).file_bytes == len(whole)


def test_a_presigned_upload_takes_an_upload_of_the_hour_by_the_same_rule_a_refused_one_too(
    sim: Simulator,
) -> None:
    deps = make_deps(sim, FakeClock(), BATCH_FILE_UPLOADS_PER_HOUR="2")
    with pytest.raises(BadRequest):  # a refused declaration fails, and still counts
        files.presign_upload(deps, ALICE, {"filename": "x.jsonl", "purpose": "fine-tune", "bytes": 10})
    files.presign_upload(deps, ALICE, {"filename": "x.jsonl", "purpose": "batch", "bytes": 10})
    with pytest.raises(TooManyRequests):
        upload(deps)
