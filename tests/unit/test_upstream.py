"""Upstream answers the gateway cannot use become outcomes, and stored messages stay safe."""

from __future__ import annotations

import asyncio
import json
import re
import time
from pathlib import Path

import httpx
import pytest
from batchgw.config.catalog import Route, load_catalog
from batchgw.domain.outcome import Outcome
from batchgw.domain.request import MAX_ERROR_MESSAGE_CHARS, clean_message
from batchgw.domain.scrub import MAX_UPSTREAM_MESSAGE_CHARS, scrub
from batchgw.upstream.client import (
    COULD_NOT_CONNECT,
    ERROR_BODY_BYTES,
    REFUSED_CREDENTIALS,
    RouteKeys,
    call,
    classify,
)

from tests.support import FakeClock


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
        f"Bad request with {key}. Also saw Authorization: Bearer sk-abcdefghijkl "
        "at https://admin:hunter2@upstream.example/v1, AKIAIOSFODNN7EXAMPLE and ?key=AIzaSyA1b2"
    )
    body = json.dumps({"error": {"message": message}}).encode()
    outcome = classify("/v1/chat/completions", 400, body, {}, secrets=(key,))
    assert outcome.error is not None
    stored = outcome.error["message"]
    for leaked in (key, "sk-abcdefghijkl", "hunter2", "AKIAIOSFODNN7EXAMPLE", "AIzaSyA1b2"):
        assert leaked not in stored
    assert "[redacted]" in stored and stored.startswith("Bad request with")


@pytest.mark.parametrize("status", [401, 403])
def test_a_refusal_of_the_gateways_credentials_is_reported_generically(status: int) -> None:
    message = "Incorrect API key provided: sk-proj-ab**************************wxyz. See https://x"
    body = json.dumps({"error": {"message": message, "code": "invalid_api_key"}}).encode()
    outcome = classify("/v1/chat/completions", status, body, {}, secrets=("sk-proj-abcdefwxyz",))
    assert outcome.kind == "failed" and outcome.error is not None
    assert outcome.error["message"] == REFUSED_CREDENTIALS
    assert outcome.error["status"] == status


def test_an_upstream_message_is_cut_to_its_bound() -> None:
    body = json.dumps({"error": {"message": "x " * 50_000}}).encode()
    outcome = classify("/v1/chat/completions", 400, body, {})
    assert outcome.error is not None and len(outcome.error["message"]) == MAX_UPSTREAM_MESSAGE_CHARS
    assert len(clean_message("short")) == len("short")
    assert len(clean_message("y " * 50_000)) == MAX_ERROR_MESSAGE_CHARS


@pytest.mark.parametrize(
    ("text", "hidden"),
    [
        ("Incorrect API key provided: sk-sim-l*************-key. You can find it", "sk-sim-l"),
        ("header x-api-key: abc123secret was refused", "abc123secret"),
        ('{"api_key": "zz-top-secret"}', "zz-top-secret"),
        ("Authorization: Bearer eyJhbGciOi.payload.sig", "eyJhbGciOi"),
        ("token 0123456789abcdef0123456789abcdef0123 seen", "0123456789abcdef0123456789abcdef0123"),
        ("blob QWxhZGRpbjpvcGVuIHNlc2FtZQQWxhZGRpbjpvcGVuIHNlc2FtZQ== seen", "QWxhZGRpbjpvcGVu"),
        ("https://h/v1?key=AIzaSyExample1&x=1", "AIzaSyExample1"),
        ("aws ASIAIOSFODNN7EXAMPLE used", "ASIAIOSFODNN7EXAMPLE"),
    ],
)
def test_anything_shaped_like_a_credential_is_scrubbed(text: str, hidden: str) -> None:
    scrubbed = scrub(text)
    assert hidden not in scrubbed and "[redacted]" in scrubbed


def test_ordinary_error_text_survives_scrubbing() -> None:
    text = "max_tokens: 5000 is too large for gpt-4o-mini-2024-07-18; unknown key: temperature2"
    assert scrub(text) == text


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


def test_a_connection_error_never_names_the_host_it_tried() -> None:
    def refusing(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("[Errno 111] could not connect to llm.internal.corp:8443 (10.1.2.3)")

    outcome = asyncio.run(_call(refusing))
    assert outcome.kind == "retry" and outcome.unreachable and outcome.error is not None
    assert outcome.error["message"] == COULD_NOT_CONNECT


def test_an_answer_lost_mid_way_is_reported_without_the_transports_words() -> None:
    def dropping(request: httpx.Request) -> httpx.Response:
        raise httpx.RemoteProtocolError("peer llm.internal.corp closed the connection")

    outcome = asyncio.run(_call(dropping))
    assert outcome.kind == "retry" and outcome.error is not None
    assert "internal" not in outcome.error["message"]


@pytest.mark.parametrize(
    "error",
    [
        httpx.ConnectError("refused"),
        httpx.WriteError("broken pipe"),
        httpx.ReadError("connection reset"),
        httpx.RemoteProtocolError("dropped mid-answer"),
        httpx.ReadTimeout("slow to answer"),
        httpx.DecodingError("bad gzip"),
    ],
)
def test_a_transport_error_is_told_in_words_never_by_the_exceptions_name(error: httpx.HTTPError) -> None:
    def raising(request: httpx.Request) -> httpx.Response:
        raise error

    outcome = asyncio.run(_call(raising))
    assert outcome.error is not None
    message = outcome.error["message"]
    assert type(error).__name__ not in message and not re.search(r"\b[A-Z]\w*(?:Error|Timeout)\b", message)
    assert "upstream" in message, message


# --- no upstream can exhaust a worker ----------------------------------------------------------

ANSWER = json.dumps(
    {"id": "chatcmpl-1", "choices": [], "usage": {"prompt_tokens": 2, "completion_tokens": 1}}
).encode()


class Pieces(httpx.AsyncByteStream):
    """An answer body sent piece by piece (``pause`` seconds apart), counting what was read."""

    def __init__(self, pieces: int, size: int, pause: float = 0.0) -> None:
        self.pieces, self.size, self.pause = pieces, size, pause
        self.sent = 0

    async def __aiter__(self):  # type: ignore[no-untyped-def]
        for _ in range(self.pieces):
            if self.pause:
                await asyncio.sleep(self.pause)
            self.sent += self.size
            yield b" " * self.size


async def _call(handler, **options) -> Outcome:  # type: ignore[no-untyped-def]
    async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
        body = {"messages": [{"role": "user", "content": "hi"}]}
        options.setdefault("timeout", 5)
        return await call(client, CATALOG.models["sim-chat"], "/v1/chat/completions", body, **options)


def test_an_answer_past_the_byte_cap_fails_result_too_large_without_being_read_whole() -> None:
    stream = Pieces(pieces=10_000, size=64 * 1024)  # 640 MB if it were all read

    outcome = asyncio.run(_call(lambda request: httpx.Response(200, stream=stream), max_bytes=1024 * 1024))
    assert outcome.kind == "failed" and outcome.error is not None
    assert outcome.error["code"] == "result_too_large"
    assert not outcome.usage_known  # the provider ran it: its cost is unknown, and counted so
    assert stream.sent <= 1024 * 1024 + 64 * 1024  # read up to the cap and one piece, no more


def test_an_answer_declaring_a_length_past_the_cap_is_not_read_at_all() -> None:
    stream = Pieces(pieces=100, size=1024)
    headers = {"content-length": str(100 * 1024)}

    outcome = asyncio.run(
        _call(lambda request: httpx.Response(200, headers=headers, stream=stream), max_bytes=4096)
    )
    assert outcome.error is not None and outcome.error["code"] == "result_too_large"
    assert stream.sent == 0


def test_an_answer_within_the_cap_is_read_and_parsed() -> None:
    outcome = asyncio.run(_call(lambda request: httpx.Response(200, content=ANSWER), max_bytes=len(ANSWER)))
    assert outcome.kind == "success" and outcome.body_bytes == len(ANSWER)
    assert (outcome.input_tokens, outcome.output_tokens) == (2, 1)


def test_a_huge_error_answer_is_read_only_up_to_the_error_bound() -> None:
    stream = Pieces(pieces=10_000, size=64 * 1024)

    outcome = asyncio.run(_call(lambda request: httpx.Response(500, stream=stream)))
    assert outcome.kind == "retry" and outcome.status_code == 500
    assert stream.sent <= ERROR_BODY_BYTES + 64 * 1024


def test_an_answer_trickled_past_the_total_deadline_fails_with_timeout_at_the_deadline() -> None:
    # Every piece comes quickly (no read ever waits long), but the whole takes 100 s.
    stream = Pieces(pieces=1000, size=8, pause=0.1)

    started = time.monotonic()
    outcome = asyncio.run(_call(lambda request: httpx.Response(200, stream=stream), timeout=0.5))
    took = time.monotonic() - started
    assert outcome.kind == "failed" and outcome.error is not None
    assert outcome.error["code"] == "timeout" and not outcome.usage_known
    assert 0.5 <= took < 3


def test_a_set_stop_abandons_the_call_as_a_retry_of_unknown_cost() -> None:
    stream = Pieces(pieces=1000, size=8, pause=0.1)

    async def run() -> Outcome:
        stop = asyncio.Event()
        asyncio.get_running_loop().call_later(0.2, stop.set)
        return await _call(lambda request: httpx.Response(200, stream=stream), stop=stop, timeout=30)

    outcome = asyncio.run(run())
    assert outcome.kind == "retry" and not outcome.usage_known
    assert stream.sent < 100 * 8


# --- route keys: read again after a TTL, and after a 401 ---------------------------------------

SECRET_ROUTE = Route(
    id="cloud", protocol="openai", base_url="https://llm.internal.corp/v1", api_key_secret="batchgw/openai"
)
SPEC = CATALOG.models["sim-chat"].model_copy(update={"routes": [SECRET_ROUTE]})


class Vault:
    """Secrets Manager as the keys see it: the value now, and how often it was read."""

    def __init__(self, value: str) -> None:
        self.value = value
        self.reads = 0

    def read(self, secret_id: str) -> str:
        assert secret_id == "batchgw/openai"
        self.reads += 1
        return self.value


def test_a_routes_secret_is_read_again_only_after_its_ttl() -> None:
    vault, clock = Vault("sk-old-000000"), FakeClock()
    keys = RouteKeys(vault.read, clock)
    assert keys.key(SECRET_ROUTE, ttl=300) == "sk-old-000000"
    vault.value = "sk-new-111111"
    clock.advance(299)
    assert keys.key(SECRET_ROUTE, ttl=300) == "sk-old-000000" and vault.reads == 1
    clock.advance(1)
    assert keys.key(SECRET_ROUTE, ttl=300) == "sk-new-111111" and vault.reads == 2


def _accepting(key: str, sent: list[str]):  # type: ignore[no-untyped-def]
    def answer(request: httpx.Request) -> httpx.Response:
        sent.append(request.headers["authorization"])
        if request.headers["authorization"] != f"Bearer {key}":
            message = {
                "error": {"message": "Incorrect API key provided: sk-old-000000", "code": "invalid_api_key"}
            }
            return httpx.Response(401, json=message)
        return httpx.Response(200, content=ANSWER)

    return answer


def _call_spec(handler, keys: RouteKeys) -> Outcome:  # type: ignore[no-untyped-def]
    async def run() -> Outcome:
        async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
            body = {"messages": [{"role": "user", "content": "hi"}]}
            return await call(client, SPEC, "/v1/chat/completions", body, timeout=5, keys=keys)

    return asyncio.run(run())


def test_a_401_after_a_key_rotation_reads_the_key_again_and_calls_once_more_with_it() -> None:
    vault = Vault("sk-old-000000")
    keys = RouteKeys(vault.read, FakeClock())
    keys.key(SECRET_ROUTE, ttl=300)  # read before the rotation, well within its TTL
    vault.value = "sk-new-111111"
    sent: list[str] = []

    outcome = _call_spec(_accepting("sk-new-111111", sent), keys)
    assert outcome.kind == "success" and (outcome.input_tokens, outcome.output_tokens) == (2, 1)
    assert sent == ["Bearer sk-old-000000", "Bearer sk-new-111111"] and vault.reads == 2
    # the next request uses the new key at once
    assert _call_spec(_accepting("sk-new-111111", sent), keys).kind == "success"
    assert sent[-1] == "Bearer sk-new-111111" and vault.reads == 2


def test_a_401_with_an_unchanged_key_is_not_called_again_and_is_reported_generically() -> None:
    vault = Vault("sk-old-000000")
    keys = RouteKeys(vault.read, FakeClock())
    sent: list[str] = []

    outcome = _call_spec(_accepting("sk-other-222222", sent), keys)
    assert outcome.kind == "failed" and outcome.status_code == 401 and outcome.error is not None
    assert outcome.error["message"] == REFUSED_CREDENTIALS
    assert len(sent) == 1 and vault.reads == 2  # read once more on the 401: same key, no call


def test_batch_requests_say_they_are_batch_work_to_the_gateways_own_servers_only() -> None:
    from batchgw.upstream.client import SOURCE_HEADER, _headers

    own = Route(protocol="openai", base_url="http://10.0.0.5:8000/v1", deployment_type="self_hosted")
    local = Route(protocol="anthropic", base_url="http://127.0.0.1:8081/v1")
    provider = Route(protocol="openai", base_url="https://api.openai.com/v1", deployment_type="provider_api")
    assert _headers(own, "k", None)[SOURCE_HEADER] == "batch"
    assert _headers(local, "k", None)[SOURCE_HEADER] == "batch"
    assert SOURCE_HEADER not in _headers(provider, "k", None)
