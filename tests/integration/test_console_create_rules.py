"""The console's routes that make a file or a batch keep the public routes' rules, by calling
the same functions: the export of a batch's unfinished requests
(``POST /console/api/batches/{id}/export-unfinished``) is refused below BATCH_MIN_ROLE with
the error ``POST /v1/files`` gives, takes one upload of the hour's BATCH_FILE_UPLOADS_PER_HOUR
and counts against BATCH_FILES_MAX_TOTAL_MB_PER_USER; the create page's submission
(``POST /console/api/batches``) is refused below it with the error ``POST /v1/batches`` gives."""

from __future__ import annotations

from typing import Any

import pytest
from batchgw.deps import Deps
from batchgw.domain.states import BatchStatus

from local.simulator import Simulator
from tests.integration.conftest import make_deps
from tests.integration.test_console_batches import ALICE, call, chat, checked_submission, create, end, submit
from tests.integration.test_file_quotas import multipart
from tests.support import FakeClock

pytestmark = pytest.mark.usefixtures("aws_env")

ADMIN = "sk-local-admin"
FREE = "sk-local-free"


def upload(deps: Deps, monkeypatch: pytest.MonkeyPatch, data: bytes, key: str) -> tuple[int, Any]:
    content_type, body = multipart(data)
    return call(
        deps,
        monkeypatch,
        "POST",
        "/v1/files",
        body=body.decode(),
        key=key,
        headers={"content-type": content_type},
    )


def export(deps: Deps, monkeypatch: pytest.MonkeyPatch, batch_id: str, key: str = "sk-local-alice") -> Any:
    return call(deps, monkeypatch, "POST", f"/console/api/batches/{batch_id}/export-unfinished", key=key)


def ended_batch(deps: Deps, monkeypatch: pytest.MonkeyPatch, key: str = "sk-local-alice") -> str:
    """A cancelled batch of two requests, none run: both are exported."""
    batch_id = create(deps, monkeypatch, "to export", n=2, key=key)
    end(deps, batch_id, BatchStatus.CANCELLED)
    return batch_id


def set_role(deps: Deps, monkeypatch: pytest.MonkeyPatch, user: str, role: str) -> None:
    status, _ = call(deps, monkeypatch, "PATCH", f"/admin/users/{user}", body={"role": role}, key=ADMIN)
    assert status == 200


def test_a_free_user_is_refused_on_every_console_route_that_makes_a_file_or_a_batch_as_on_the_public_ones(
    sim: Simulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    deps = make_deps(sim, FakeClock())
    # A batch the free user made while their role allowed it; their role is free again now.
    set_role(deps, monkeypatch, "user-free", "internal")
    batch_id = ended_batch(deps, monkeypatch, key=FREE)
    set_role(deps, monkeypatch, "user-free", "free")

    status, public = upload(deps, monkeypatch, b'{"custom_id": "a"}\n', FREE)
    assert status == 403, public
    assert export(deps, monkeypatch, batch_id, key=FREE) == (403, public)
    status, listed = call(deps, monkeypatch, "GET", "/v1/files", key=FREE)
    assert status == 200 and listed["data"] == []  # no file was made

    status, public = call(deps, monkeypatch, "POST", "/v1/batches", body={"requests": [chat("a")]}, key=FREE)
    assert status == 403, public
    assert submit(deps, monkeypatch, checked_submission(deps, monkeypatch, [chat("a")]), key=FREE) == (
        403,
        public,
    )
    assert [b.id for b in deps.batches.list_for_owner("user-free", limit=10)[0]] == [batch_id]


def test_an_export_takes_one_upload_of_the_hour_as_post_v1_files_does(
    sim: Simulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = FakeClock()
    deps = make_deps(sim, clock, BATCH_FILE_UPLOADS_PER_HOUR="2")
    batch_id = ended_batch(deps, monkeypatch)
    assert export(deps, monkeypatch, batch_id)[0] == 200
    assert upload(deps, monkeypatch, b'{"custom_id": "a"}\n', "sk-local-alice")[0] == 200
    status, public = upload(deps, monkeypatch, b'{"custom_id": "a"}\n', "sk-local-alice")
    assert (status, public["error"]["code"]) == (429, "upload_rate_limited")
    assert export(deps, monkeypatch, batch_id) == (429, public)
    clock.advance(3600)  # the next hour
    assert export(deps, monkeypatch, batch_id)[0] == 200


def test_an_export_counts_against_the_storage_limit_as_an_upload_does(
    sim: Simulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    deps = make_deps(sim, FakeClock())
    batch_id = ended_batch(deps, monkeypatch)
    status, first = export(deps, monkeypatch, batch_id)
    assert status == 200, first
    # Room for what is stored now and one byte less than another export.
    most = deps.usage.read(ALICE.user_id).file_bytes + first["bytes"] - 1
    status, _ = call(
        deps,
        monkeypatch,
        "PATCH",
        "/admin/config/BATCH_FILES_MAX_TOTAL_MB_PER_USER",
        body={"value": most / 1048576},
        key=ADMIN,
    )
    assert status == 200
    status, refused = export(deps, monkeypatch, batch_id)
    assert (status, refused["error"]["code"]) == (429, "file_storage_limit")
    _, content = call(deps, monkeypatch, "GET", f"/v1/files/{first['id']}/content")
    assert upload(deps, monkeypatch, content.encode(), "sk-local-alice") == (429, refused)
    # The first export took the room: deleting it makes room for the next.
    assert call(deps, monkeypatch, "DELETE", f"/v1/files/{first['id']}")[0] == 200
    assert export(deps, monkeypatch, batch_id)[0] == 200
