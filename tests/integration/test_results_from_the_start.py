"""Every request is listed from the first moment (rule 6): right after create, before the
workflow has written the batch's requests, the results page lists them all as queued."""

from __future__ import annotations

import json

import pytest
from batchgw.api import batches, files
from batchgw.api import results as results_api

from local.simulator import Simulator
from tests.integration.conftest import body_of, chat_request, make_deps
from tests.integration.test_every_batch_ends import ALICE
from tests.support import FakeClock

pytestmark = pytest.mark.usefixtures("aws_env")


def test_a_new_inline_batch_lists_every_request_as_queued_with_its_paging(sim: Simulator) -> None:
    deps = make_deps(sim, FakeClock())
    batch = batches.create_batch(deps, ALICE, body_of([chat_request(f"r-{i}", "hi") for i in range(5)]))
    page = results_api.results_page(deps, ALICE, batch["id"], {"limit": ["2"]})
    assert isinstance(page, dict)
    assert [(r["custom_id"], r["status"]) for r in page["data"]] == [("r-0", "queued"), ("r-1", "queued")]
    assert page["has_more"] is True
    rest = results_api.results_page(deps, ALICE, batch["id"], {"after": [page["last_id"]]})
    assert isinstance(rest, dict)
    assert [r["custom_id"] for r in rest["data"]] == ["r-2", "r-3", "r-4"] and rest["has_more"] is False


def test_a_file_batch_still_validating_lists_its_lines_as_queued(sim: Simulator) -> None:
    deps = make_deps(sim, FakeClock())
    lines = [
        json.dumps(
            {
                "custom_id": f"f-{i}",
                "method": "POST",
                "url": "/v1/chat/completions",
                "body": {"model": "sim-chat", "messages": [{"role": "user", "content": "x"}]},
            }
        )
        for i in range(3)
    ]
    data = ("\n".join(lines) + "\n\n").encode()
    boundary = "bOuNd"
    body = (
        (
            f'--{boundary}\r\nContent-Disposition: form-data; name="purpose"\r\n\r\nbatch\r\n'
            f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="in.jsonl"\r\n\r\n'
        ).encode()
        + data
        + f"\r\n--{boundary}--\r\n".encode()
    )
    upload = files.upload_file(deps, ALICE, f"multipart/form-data; boundary={boundary}", body)
    raw = {"input_file_id": upload["id"], "endpoint": "/v1/chat/completions", "completion_window": "24h"}
    batch = batches.create_batch(deps, ALICE, json.dumps(raw).encode())
    assert batch["status"] == "validating"
    page = results_api.results_page(deps, ALICE, batch["id"], {})
    assert isinstance(page, dict)
    assert [(r["custom_id"], r["status"]) for r in page["data"]] == [(f"f-{i}", "queued") for i in range(3)]
