"""Upstream answers the gateway cannot use become outcomes, and stored messages stay safe."""

from __future__ import annotations

import json

import pytest
from batchgw.domain.request import MAX_ERROR_MESSAGE_CHARS, clean_message
from batchgw.run.upstream import classify


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
