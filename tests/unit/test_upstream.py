"""Upstream answers the gateway cannot use become outcomes, and stored messages stay safe."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import httpx
import pytest
from batchgw.config.catalog import load_catalog
from batchgw.domain.outcome import Outcome
from batchgw.domain.request import MAX_ERROR_MESSAGE_CHARS, clean_message
from batchgw.run.upstream import call, classify


@pytest.mark.parametrize(
    "body",
    [
        b"[1, 2, 3]",
        b'"just a string"',
        b'{"choices": [], "usage": "lots"}',
        b'{"choices": [], "usage": {"prompt_tokens": "12"}}',
        b'{"choices": [], "usage": {"prompt_tokens": -1}}',
        b'{"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 1.5}}',
        b'{"choices": [], "usage": {"input_tokens": true}}',
    ],
)
def test_a_malformed_2xx_answer_fails_permanently_as_upstream_error(body: bytes) -> None:
    outcome = classify("/v1/chat/completions", 200, body, {})
    assert outcome.kind == "failed" and outcome.status_code == 502
    assert outcome.error is not None and outcome.error["code"] == "upstream_error"
    assert not outcome.usage_known


def test_an_answer_id_that_is_not_a_string_is_not_taken_as_the_request_id() -> None:
    outcome = classify("/v1/chat/completions", 200, b'{"id": {"x": 1}, "choices": []}', {})
    assert outcome.kind == "success" and outcome.request_id is None


def test_an_upstream_error_never_keeps_the_routes_key_or_other_credentials() -> None:
    key = "sim-secret-key-123"
    message = (
        f"Incorrect API key provided: {key}. Also saw Authorization: Bearer sk-abcdefghijkl "
        "at https://admin:hunter2@upstream.example/v1"
    )
    body = json.dumps({"error": {"message": message}}).encode()
    outcome = classify("/v1/chat/completions", 401, body, {}, secrets=(key,))
    assert outcome.error is not None
    stored = outcome.error["message"]
    assert key not in stored and "sk-abcdefghijkl" not in stored and "hunter2" not in stored
    assert "[redacted]" in stored and "Incorrect API key provided" in stored


def test_a_stored_error_message_is_capped() -> None:
    body = json.dumps({"error": {"message": "x" * 100_000}}).encode()
    outcome = classify("/v1/chat/completions", 400, body, {})
    assert outcome.error is not None and len(outcome.error["message"]) == MAX_ERROR_MESSAGE_CHARS
    assert len(clean_message("short")) == len("short")


# --- answers that are not JSON the gateway could keep (rule 10) -----------------------------

USAGE = b'"usage": {"prompt_tokens": 7, "completion_tokens": 3}'


@pytest.mark.parametrize(
    "body",
    [
        b'{"choices": [], "score": NaN, ' + USAGE + b"}",
        b'{"choices": [], "score": -Infinity, ' + USAGE + b"}",
        b'{"choices": [], "score": 1e400, ' + USAGE + b"}",
        b'{"choices": [{"message": {"content": "\\ud800"}}], ' + USAGE + b"}",
    ],
)
def test_an_answer_with_non_finite_numbers_or_lone_surrogates_fails_keeping_its_known_charge(
    body: bytes,
) -> None:
    outcome = classify("/v1/chat/completions", 200, body, {})
    assert outcome.kind == "failed" and outcome.status_code == 502
    assert outcome.error is not None and outcome.error["code"] == "upstream_error"
    assert outcome.usage_known and (outcome.input_tokens, outcome.output_tokens) == (7, 3)


def test_an_answer_that_is_not_json_at_all_fails_with_its_cost_unknown() -> None:
    outcome = classify("/v1/chat/completions", 200, b"\xff\xfe{garbage", {})
    assert outcome.kind == "failed" and not outcome.usage_known


# --- transport errors (rule 11) ------------------------------------------------------------------

CATALOG = load_catalog(Path(__file__).resolve().parents[2] / "config" / "models.local.json")


@pytest.mark.parametrize(
    ("error", "kind", "usage_known"),
    [
        (httpx.ConnectError("refused"), "retry", True),
        (httpx.ConnectTimeout("slow to open"), "retry", True),
        (httpx.PoolTimeout("no connection free"), "retry", True),
        (httpx.WriteError("broken pipe"), "retry", True),
        (httpx.WriteTimeout("slow to send"), "retry", True),
        (httpx.ReadTimeout("slow to answer"), "failed", False),
        (httpx.RemoteProtocolError("dropped mid-answer"), "retry", False),
    ],
)
def test_what_reached_the_provider_decides_between_retry_and_timeout(
    error: Exception, kind: str, usage_known: bool
) -> None:
    def raising(request: httpx.Request) -> httpx.Response:
        raise error

    async def attempt() -> Outcome:
        async with httpx.AsyncClient(transport=httpx.MockTransport(raising)) as client:
            body = {"messages": [{"role": "user", "content": "hi"}]}
            return await call(client, CATALOG.models["sim-chat"], "/v1/chat/completions", body, timeout=1)

    outcome = asyncio.run(attempt())
    assert (outcome.kind, outcome.usage_known) == (kind, usage_known)
    if kind == "failed":
        assert outcome.error is not None and outcome.error["code"] == "timeout"
