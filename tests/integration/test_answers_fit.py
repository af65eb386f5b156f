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
from batchgw.api import batches, files
from batchgw.deps import Deps
from batchgw.domain.chains import decode
from batchgw.domain.principal import Principal
from batchgw.run import ending, lifecycle
from batchgw.run.chain import run_message
from batchgw.storage.blobs import export_key

from functions.api import handler as api
from local.adapter import lambda_payload_bytes
from local.simulator import Simulator
from tests.integration.conftest import chat_request, make_deps, receive_all
from tests.support import FakeClock, LambdaContext, http_event

pytestmark = pytest.mark.usefixtures("aws_env")

ALICE = Principal(user_id="user-alice", role="internal", key_id="key_local_alice")
LAMBDA_RESPONSE_LIMIT = 6 * 1024 * 1024  # what Lambda takes back from a synchronous invoke
CHAT_URL = "/v1/chat/completions"


def invoke(deps: Deps, monkeypatch: pytest.MonkeyPatch, event: dict[str, Any]) -> dict[str, Any]:
    """The api handler's response, checked as Lambda would check it: serialized as either of
    its Python runtimes sends it (3.12's UTF-8, 3.11's escapes), the larger, and encodable."""
    monkeypatch.setattr(api, "get_deps", lambda: deps)
    response = api.handler(event, LambdaContext(request_id="req-fit"))  # type: ignore[arg-type]
    assert lambda_payload_bytes(response) <= LAMBDA_RESPONSE_LIMIT
    return dict(response)


def run_batch(deps: Deps, texts: list[str]) -> str:
    """A batch of ``texts``, sent as a file (larger than a create body may be), run to its end."""
    lines = [
        json.dumps(
            {"custom_id": f"f-{i}", "method": "POST", "url": CHAT_URL, "body": chat_request("", t)["body"]},
            ensure_ascii=False,  # as UTF-8: an emoji is 4 bytes of the line, not a 12-byte escape
        )
        for i, t in enumerate(texts)
    ]
    upload = files.new_input_file(deps, ALICE, "big.jsonl", "\n".join(lines).encode())
    raw = {"input_file_id": upload.id, "endpoint": "/v1/chat/completions", "completion_window": "24h"}
    batch = batches.create_batch(deps, ALICE, json.dumps(raw).encode())
    lifecycle.prepare(deps, batch["id"])
    for message in receive_all(deps):
        asyncio.run(run_message(deps, decode(message["Body"]), owner="w", deadline=deps.clock() + 900))
    lifecycle.park(deps, batch["id"], "t")
    ending.finalize(deps, batch["id"])
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


def read_every_page(deps: Deps, monkeypatch: pytest.MonkeyPatch, path: str) -> tuple[list[str], int]:
    """Every id a paged list answers, following ``after``, and how many pages it took; each
    page checked by ``invoke`` against Lambda's 6 MB."""
    seen: list[str] = []
    pages, after = 0, None
    while True:
        query = urlencode({"limit": 1000, **({"after": after} if after else {})})
        response = invoke(deps, monkeypatch, http_event("GET", path, query=query))
        assert response["statusCode"] == 200, response
        page = json.loads(response["body"])
        pages += 1
        seen += [item["custom_id"] if "custom_id" in item else item["id"] for item in page["data"]]
        if not page["has_more"]:
            return seen, pages
        after = page["last_id"]


@pytest.mark.parametrize(
    "text",
    [
        "中文字符" * 60_000,  # 0.7 MB of UTF-8 each, 1.4 MB escaped: six are more than a page
        "🙂🚀" * 60_000,  # 0.5 MB of UTF-8 each, 1.4 MB escaped (12-byte surrogate pairs)
        "\\ud83d\\ude42 \\u0000" * 50_000,  # escape-looking text: every backslash doubles as it goes out
    ],
    ids=["cjk", "emoji", "escaped"],
)
def test_every_results_page_of_non_ascii_text_fits_lambdas_answer_whichever_runtime_sends_it(
    sim: Simulator, monkeypatch: pytest.MonkeyPatch, text: str
) -> None:
    deps = make_deps(sim, FakeClock())
    batch_id = run_batch(deps, [f"{i} {text}" for i in range(6)])
    seen, pages = read_every_page(deps, monkeypatch, f"/v1/batches/{batch_id}/results")
    assert seen == [f"f-{i}" for i in range(6)] and pages >= 2


def test_a_first_result_of_emoji_too_large_alone_is_answered_by_redirect(
    sim: Simulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A result may be stored up to BATCH_MAX_RESULT_KB, here raised past what one answer takes.
    deps = make_deps(sim, FakeClock(), BATCH_MAX_RESULT_KB=8192)
    # 2.1 MB of UTF-8 (what 3.12 would send), 6.3 MB escaped (what 3.11 would): too large alone.
    batch_id = run_batch(deps, ["🙂" * 525_000, "small"])
    response = invoke(deps, monkeypatch, http_event("GET", f"/v1/batches/{batch_id}/results"))
    assert response["statusCode"] == 302
    assert response["headers"]["Location"].startswith("http")
    page = json.loads(deps.blobs.get(f"{export_key(batch_id)}.page-0.json"))  # what the URL signs
    assert [r["custom_id"] for r in page["data"]] == ["f-0"] and page["has_more"] is True
    query = urlencode({"after": page["last_id"]})
    rest = invoke(deps, monkeypatch, http_event("GET", f"/v1/batches/{batch_id}/results", query=query))
    assert [r["custom_id"] for r in json.loads(rest["body"])["data"]] == ["f-1"]


def test_a_list_of_files_with_long_non_ascii_names_is_paged_within_the_answer(
    sim: Simulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    deps = make_deps(sim, FakeClock())
    # 512 emoji a name: 6 KB escaped per file, so 1,200 files are more than one answer takes.
    made = {files.new_input_file(deps, ALICE, "🙂" * 512, b"{}").id for _ in range(1_200)}
    seen, pages = read_every_page(deps, monkeypatch, "/v1/files")
    assert set(seen) == made and len(seen) == len(made) and pages >= 2


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
    deps = make_deps(sim, FakeClock())
    data = base64.b64encode(os.urandom(size * 3 // 4 + 3))[:size]
    file_id = files.new_input_file(deps, ALICE, "f.jsonl", data).id  # as the Uploads API stores it
    response = invoke(deps, monkeypatch, http_event("GET", f"/v1/files/{file_id}/content"))
    assert response["statusCode"] == (200 if inline else 302)
    assert response["headers"]["ETag"].strip('"') == hashlib.sha256(data).hexdigest()
    if inline:
        assert base64.b64decode(response["body"]) == data
