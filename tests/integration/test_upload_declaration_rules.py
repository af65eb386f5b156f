"""``POST /v1/uploads`` (a file declared, to arrive in parts) checks the rule every route that
makes an input file checks (``files.may_create_file``), as ``POST /v1/files`` does: refused
below BATCH_MIN_ROLE with the error ``POST /v1/files`` gives, and one upload of the hour's
BATCH_FILE_UPLOADS_PER_HOUR taken, a refused declaration's too."""

from __future__ import annotations

from typing import Any

import pytest
from batchgw.deps import Deps

from local.simulator import Simulator
from tests.integration.conftest import make_deps
from tests.integration.test_console_batches import call
from tests.integration.test_console_create_rules import FREE, upload
from tests.support import FakeClock

pytestmark = pytest.mark.usefixtures("aws_env")

DECLARED = {"filename": "p.jsonl", "purpose": "batch", "bytes": 10, "mime_type": "text/plain"}


def declare(deps: Deps, monkeypatch: pytest.MonkeyPatch, body: Any, key: str = "sk-local-alice") -> Any:
    return call(deps, monkeypatch, "POST", "/v1/uploads", body=body, key=key)


def test_a_declaration_below_the_role_is_refused_with_the_error_post_v1_files_gives(
    sim: Simulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    deps = make_deps(sim, FakeClock())
    status, public = upload(deps, monkeypatch, b'{"custom_id": "a"}\n', FREE)
    assert status == 403, public
    assert declare(deps, monkeypatch, DECLARED, key=FREE) == (403, public)


def test_a_declaration_takes_one_upload_of_the_hour_a_refused_one_too(
    sim: Simulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = FakeClock()
    deps = make_deps(sim, clock, BATCH_FILE_UPLOADS_PER_HOUR="2")
    status, refused = declare(deps, monkeypatch, {**DECLARED, "mime_type": ""})
    assert (status, refused["error"]["param"]) == (400, "mime_type")
    status, made = declare(deps, monkeypatch, DECLARED)
    assert status == 200 and made["object"] == "upload", made
    status, public = upload(deps, monkeypatch, b'{"custom_id": "a"}\n', "sk-local-alice")
    assert (status, public["error"]["code"]) == (429, "upload_rate_limited")
    assert declare(deps, monkeypatch, DECLARED) == (429, public)
    clock.advance(3600)  # the next hour
    assert declare(deps, monkeypatch, DECLARED)[0] == 200
