"""Every answer fits Lambda's 6 MB response: results pages, output.jsonl and file content
are sized in the bytes that actually go out (the function's JSON response, with text
escaped and binary base64-encoded); what would not fit answers 302 to a presigned URL."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import os
from typing import Any
from urllib.parse import urlencode

import pytest
from batchgw.api import batches
from batchgw.deps import Deps
from batchgw.domain.chains import decode
from batchgw.domain.principal import Principal
from batchgw.run import lifecycle
from batchgw.run.chain import run_message

from functions.api import handler as api
from local.simulator import Simulator
from tests.integration.conftest import body_of, chat_request, make_deps, receive_all
from tests.support import FakeClock, http_event

pytestmark = pytest.mark.usefixtures("aws_env")

ALICE = Principal(user_id="user-alice", role="internal", key_id="alice")
LAMBDA_RESPONSE_LIMIT = 6 * 1024 * 1024  # what Lambda takes back from a synchronous invoke


class Context:
    function_name = "batchgw-api"
    memory_limit_in_mb = 1024
    invoked_function_arn = "arn:aws:lambda:us-east-1:123456789012:function:batchgw-api"
    aws_request_id = "req-fit"

    @staticmethod
    def get_remaining_time_in_millis() -> int:
        return 30_000


def invoke(deps: Deps, monkeypatch: pytest.MonkeyPatch, event: dict[str, Any]) -> dict[str, Any]:
    """The api handler's response, checked as Lambda would check it."""
    monkeypatch.setattr(api, "get_deps", lambda: deps)
    response = api.handler(event, Context())  # type: ignore[arg-type]
    assert len(json.dumps(response).encode()) <= LAMBDA_RESPONSE_LIMIT
    return dict(response)


def run_batch(deps: Deps, texts: list[str]) -> str:
    batch = batches.create_batch(
        deps, ALICE, body_of([chat_request(f"f-{i}", t) for i, t in enumerate(texts)])
    )
    lifecycle.prepare(deps, batch["id"])
    for message in receive_all(deps):
        asyncio.run(run_message(deps, decode(message["Body"]), owner="w", deadline=deps.clock() + 900))
    lifecycle.park(deps, batch["id"], "t")
    lifecycle.finalize(deps, batch["id"])
    return str(batch["id"])


def test_results_pages_of_multibyte_text_are_sized_as_they_go_out(
    sim: Simulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    deps = make_deps(sim, FakeClock())
    # ~0.5 MB of UTF-8 each, but 1.5 MB in the response: every emoji is a 12-byte \\u escape.
    batch_id = run_batch(deps, ["🙂" * 125_000 for _ in range(8)])
    seen, pages, after = [], 0, None
    while True:
        query = urlencode({"limit": 1000, **({"after": after} if after else {})})
        response = invoke(
            deps, monkeypatch, http_event("GET", f"/v1/batches/{batch_id}/results", query=query)
        )
        assert response["statusCode"] == 200
        page = json.loads(response["body"])
        pages += 1
        seen += [r["custom_id"] for r in page["data"]]
        if not page["has_more"]:
            break
        after = page["last_id"]
    assert seen == [f"f-{i}" for i in range(8)] and pages >= 2


def test_a_result_too_large_to_fit_a_page_alone_is_answered_by_redirect(
    sim: Simulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    deps = make_deps(sim, FakeClock())
    # 3.2 MB stored (each quote is \" in the answer), 6.4 MB as it goes out (\\\" each).
    batch_id = run_batch(deps, ['"' * 1_600_000])
    response = invoke(deps, monkeypatch, http_event("GET", f"/v1/batches/{batch_id}/results"))
    assert response["statusCode"] == 302 and response["headers"]["Location"].startswith("http")


def test_output_jsonl_of_quote_heavy_json_is_redirected_once_it_would_not_fit(
    sim: Simulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    deps = make_deps(sim, FakeClock())
    # 3 MB of JSONL, but 7.5 MB as it goes out: each quote is \" in a line, \\\" in the response.
    batch_id = run_batch(deps, ['"q" ' * 250_000 for _ in range(3)])
    response = invoke(deps, monkeypatch, http_event("GET", f"/v1/batches/{batch_id}/output.jsonl"))
    assert response["statusCode"] == 302
    small = run_batch(deps, ["tiny"])
    response = invoke(deps, monkeypatch, http_event("GET", f"/v1/batches/{small}/output.jsonl"))
    assert (
        response["statusCode"] == 200 and json.loads(response["body"].splitlines()[0])["custom_id"] == "f-0"
    )


@pytest.mark.parametrize(
    ("size", "inline"), [(1024 * 1024, True), (4_600_000, True), (5_000_000, False), (5_900_000, False)]
)
def test_file_content_is_inline_only_when_its_base64_fits(
    sim: Simulator, monkeypatch: pytest.MonkeyPatch, size: int, inline: bool
) -> None:
    deps = make_deps(sim, FakeClock(), BATCH_MAX_BODY_MB="8")
    data = base64.b64encode(os.urandom(size * 3 // 4 + 3))[:size]
    boundary = "fItBoUnDaRy"
    body = (
        (
            f'--{boundary}\r\nContent-Disposition: form-data; name="purpose"\r\n\r\nbatch\r\n'
            f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="f.jsonl"\r\n\r\n'
        ).encode()
        + data
        + f"\r\n--{boundary}--\r\n".encode()
    )
    event = http_event("POST", "/v1/files")
    event["headers"] = {**event["headers"], "content-type": f"multipart/form-data; boundary={boundary}"}
    event["body"], event["isBase64Encoded"] = base64.b64encode(body).decode(), True
    uploaded = invoke(deps, monkeypatch, event)
    file_id = json.loads(uploaded["body"])["id"]
    response = invoke(deps, monkeypatch, http_event("GET", f"/v1/files/{file_id}/content"))
    assert response["statusCode"] == (200 if inline else 302)
    assert response["headers"]["ETag"].strip('"') == hashlib.sha256(data).hexdigest()
    if inline:
        assert base64.b64decode(response["body"]) == data
