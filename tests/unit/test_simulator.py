"""The upstream simulator keeps the contract the local stack, e2e tests and benchmark rely on."""

from __future__ import annotations

import base64
import json
import os
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from local.sim_directives import parse_directives
from local.sim_http import TRICKLE_PIECE_BYTES
from local.simulator import Simulator, parse_args
from tests.support import wait_for

ROOT = Path(__file__).resolve().parents[2]
ANTHROPIC = {"anthropic-version": "2023-06-01", "x-api-key": "sk-test"}


@pytest.fixture
def sim() -> Iterator[Simulator]:
    simulator = Simulator(port=0).start()
    try:
        yield simulator
    finally:
        simulator.stop()


@pytest.fixture
def client(sim: Simulator) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=sim.url, timeout=10, headers={"Authorization": "Bearer sk-any"}) as c:
        yield c


def chat(text: str | list[dict[str, Any]], model: str = "sim-chat", **extra: Any) -> dict[str, Any]:
    return {"model": model, "messages": [{"role": "user", "content": text}], **extra}


def claude(text: str, **extra: Any) -> dict[str, Any]:
    return {
        "model": "sim-claude",
        "max_tokens": 100,
        "messages": [{"role": "user", "content": text}],
        **extra,
    }


def stats(client: httpx.Client) -> dict[str, Any]:
    return client.get("/_sim/stats").json()["models"]


# --------------------------------------------------------------------------- echo and usage


def test_chat_completion_echoes_last_user_message_and_counts_words(client: httpx.Client) -> None:
    body = {
        "model": "sim-chat",
        "messages": [
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": "first question"},
            {"role": "assistant", "content": "first answer"},
            {"role": "user", "content": "hello big world"},
        ],
    }
    response = client.post("/v1/chat/completions", json=body)
    assert response.status_code == 200
    answer = response.json()
    assert answer["object"] == "chat.completion"
    assert answer["model"] == "sim-chat"
    assert isinstance(answer["id"], str) and isinstance(answer["created"], int)
    choice = answer["choices"][0]
    assert choice["index"] == 0
    assert choice["message"] == {"role": "assistant", "content": "echo: hello big world"}
    assert choice["finish_reason"] == "stop"
    assert answer["usage"] == {"prompt_tokens": 9, "completion_tokens": 4, "total_tokens": 13}


def test_chat_only_model_answers_chat(client: httpx.Client) -> None:
    response = client.post("/v1/chat/completions", json=chat("hi", model="sim-chat-only"))
    assert response.status_code == 200
    assert response.json()["choices"][0]["message"]["content"] == "echo: hi"


def test_chat_content_parts_are_joined_into_the_echo(client: httpx.Client) -> None:
    parts: list[dict[str, Any]] = [
        {"type": "text", "text": "one two"},
        {"type": "image_url", "image_url": {"url": "x"}},
        {"type": "text", "text": "three"},
    ]
    answer = client.post("/v1/chat/completions", json=chat(parts)).json()
    assert answer["choices"][0]["message"]["content"] == "echo: one two three"
    assert answer["usage"]["prompt_tokens"] == 3


def test_same_request_gives_the_same_answer_apart_from_ids(client: httpx.Client) -> None:
    first = client.post("/v1/chat/completions", json=chat("stable please")).json()
    second = client.post("/v1/chat/completions", json=chat("stable please")).json()
    first.pop("id")
    second.pop("id")
    assert first == second


def test_responses_echoes_the_input_string(client: httpx.Client) -> None:
    response = client.post(
        "/v1/responses", json={"model": "sim-chat", "input": "tell me more", "instructions": "be kind"}
    )
    assert response.status_code == 200
    answer = response.json()
    assert answer["id"].startswith("resp_")
    assert answer["object"] == "response"
    assert answer["status"] == "completed"
    assert answer["model"] == "sim-chat"
    [message] = answer["output"]
    assert message["type"] == "message"
    assert message["role"] == "assistant"
    assert message["status"] == "completed"
    assert isinstance(message["id"], str)
    assert message["content"] == [{"type": "output_text", "text": "echo: tell me more", "annotations": []}]
    usage = answer["usage"]
    assert (usage["input_tokens"], usage["output_tokens"], usage["total_tokens"]) == (5, 4, 9)


def test_responses_echoes_the_last_user_input_item(client: httpx.Client) -> None:
    items = [
        {"role": "user", "content": "old"},
        {"role": "assistant", "content": "reply"},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "newest words"}]},
    ]
    answer = client.post("/v1/responses", json={"model": "sim-chat", "input": items}).json()
    assert answer["output"][0]["content"][0]["text"] == "echo: newest words"
    assert answer["usage"]["input_tokens"] == 4


def test_messages_echoes_in_the_anthropic_shape(client: httpx.Client) -> None:
    body = claude("how are you", system=[{"type": "text", "text": "you are a sim"}])
    response = client.post("/v1/messages", json=body, headers=ANTHROPIC)
    assert response.status_code == 200
    answer = response.json()
    assert answer["id"].startswith("msg_")
    assert answer["type"] == "message"
    assert answer["role"] == "assistant"
    assert answer["model"] == "sim-claude"
    assert answer["content"] == [{"type": "text", "text": "echo: how are you"}]
    assert answer["stop_reason"] == "end_turn"
    assert answer["stop_sequence"] is None
    assert answer["usage"] == {"input_tokens": 7, "output_tokens": 4}


def test_messages_accepts_a_bearer_key(client: httpx.Client) -> None:
    headers = {"anthropic-version": "2023-06-01", "Authorization": "Bearer sk-x"}
    assert client.post("/v1/messages", json=claude("hi"), headers=headers).status_code == 200


def test_messages_without_anthropic_version_is_400(client: httpx.Client) -> None:
    response = client.post("/v1/messages", json=claude("hi"), headers={"x-api-key": "k"})
    assert response.status_code == 400
    assert response.json()["type"] == "error"
    assert response.json()["error"]["type"] == "invalid_request_error"


def test_embeddings_answer_one_deterministic_vector_per_input(client: httpx.Client) -> None:
    body = {"model": "sim-embed", "input": ["alpha beta", "gamma"]}
    answer = client.post("/v1/embeddings", json=body).json()
    assert answer["object"] == "list"
    assert answer["model"] == "sim-embed"
    assert [item["index"] for item in answer["data"]] == [0, 1]
    assert all(item["object"] == "embedding" and len(item["embedding"]) == 8 for item in answer["data"])
    assert answer["data"][0]["embedding"] != answer["data"][1]["embedding"]
    assert answer["usage"] == {"prompt_tokens": 3, "total_tokens": 3}
    again = client.post("/v1/embeddings", json={"model": "sim-embed", "input": "alpha beta"}).json()
    assert again["data"][0]["embedding"] == answer["data"][0]["embedding"]


def test_embeddings_honour_dimensions_and_base64(client: httpx.Client) -> None:
    floats = client.post("/v1/embeddings", json={"model": "sim-embed", "input": "x", "dimensions": 5}).json()
    vector = floats["data"][0]["embedding"]
    assert len(vector) == 5
    encoded = client.post(
        "/v1/embeddings",
        json={"model": "sim-embed", "input": "x", "dimensions": 5, "encoding_format": "base64"},
    ).json()["data"][0]["embedding"]
    assert list(struct.unpack("<5f", base64.b64decode(encoded))) == vector


def test_embeddings_accept_token_arrays(client: httpx.Client) -> None:
    single = client.post("/v1/embeddings", json={"model": "sim-embed", "input": [1, 2, 3]}).json()
    assert len(single["data"]) == 1
    assert single["usage"]["prompt_tokens"] == 3
    several = client.post("/v1/embeddings", json={"model": "sim-embed", "input": [[1, 2], [3]]}).json()
    assert len(several["data"]) == 2
    assert several["usage"]["prompt_tokens"] == 3


# --------------------------------------------------------------------------- models and options


def test_unknown_model_is_404_model_not_found(client: httpx.Client) -> None:
    response = client.post("/v1/chat/completions", json=chat("hi", model="no-such-model"))
    assert response.status_code == 404
    error = response.json()["error"]
    assert error["type"] == "not_found_error"
    assert error["code"] == "model_not_found"
    assert error["message"]


def test_known_model_on_an_endpoint_it_does_not_serve_is_400(client: httpx.Client) -> None:
    response = client.post("/v1/responses", json={"model": "sim-chat-only", "input": "hi"})
    assert response.status_code == 400
    assert response.json()["error"]["message"]
    embed = client.post("/v1/chat/completions", json=chat("hi", model="sim-embed"))
    assert embed.status_code == 400


def test_stop_sequence_truncates_the_echo(client: httpx.Client) -> None:
    answer = client.post("/v1/chat/completions", json=chat("one two STOP three", stop=["STOP"])).json()
    assert answer["choices"][0]["message"]["content"] == "echo: one two "
    assert answer["choices"][0]["finish_reason"] == "stop"
    msg = client.post(
        "/v1/messages", json=claude("a b END c", stop_sequences=["END"]), headers=ANTHROPIC
    ).json()
    assert msg["content"][0]["text"] == "echo: a b "
    assert (msg["stop_reason"], msg["stop_sequence"]) == ("stop_sequence", "END")


def test_max_tokens_truncates_the_echo_with_length(client: httpx.Client) -> None:
    answer = client.post("/v1/chat/completions", json=chat("a b c d e", max_tokens=3)).json()
    assert answer["choices"][0]["message"]["content"] == "echo: a b"
    assert answer["choices"][0]["finish_reason"] == "length"
    assert answer["usage"]["completion_tokens"] == 3
    newer = client.post("/v1/chat/completions", json=chat("a b c", max_completion_tokens=2)).json()
    assert newer["choices"][0]["finish_reason"] == "length"
    msg = client.post("/v1/messages", json=claude("a b c d", max_tokens=2), headers=ANTHROPIC).json()
    assert (msg["content"][0]["text"], msg["stop_reason"]) == ("echo: a", "max_tokens")


def test_tool_directive_calls_the_first_tool(client: httpx.Client) -> None:
    tools = [
        {"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}},
        {"type": "function", "function": {"name": "other", "parameters": {"type": "object"}}},
    ]
    answer = client.post("/v1/chat/completions", json=chat("use it [[sim tool]]", tools=tools)).json()
    choice = answer["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    [call] = choice["message"]["tool_calls"]
    assert call["type"] == "function"
    assert call["function"] == {"name": "lookup", "arguments": "{}"}
    without_tools = client.post("/v1/chat/completions", json=chat("use it [[sim tool]]")).json()
    assert without_tools["choices"][0]["finish_reason"] == "stop"


def test_tool_directive_on_messages_answers_tool_use(client: httpx.Client) -> None:
    tools = [{"name": "lookup", "input_schema": {"type": "object"}}]
    msg = client.post("/v1/messages", json=claude("go [[sim tool]]", tools=tools), headers=ANTHROPIC).json()
    assert msg["stop_reason"] == "tool_use"
    [block] = [b for b in msg["content"] if b["type"] == "tool_use"]
    assert (block["name"], block["input"]) == ("lookup", {})


# --------------------------------------------------------------------------- directives


def test_directives_parse_several_tokens_and_directives() -> None:
    directives = parse_directives(["x [[sim status=429 fail=2]] y", "[[sim latency_ms=5]] [[sim queued]]"])
    assert (directives.status, directives.fail, directives.latency_ms) == (429, 2, 5.0)
    assert "queued" in directives.flags


def test_unknown_directive_is_400(client: httpx.Client) -> None:
    response = client.post("/v1/chat/completions", json=chat("[[sim stauts=500]]"))
    assert response.status_code == 400


def test_status_directive_answers_that_status_with_an_openai_error(client: httpx.Client) -> None:
    response = client.post("/v1/chat/completions", json=chat("boom [[sim status=500]]"))
    assert response.status_code == 500
    assert response.json()["error"]["type"] == "server_error"
    again = client.post("/v1/chat/completions", json=chat("boom [[sim status=500]]"))
    assert again.status_code == 500


def test_status_directive_on_messages_answers_an_anthropic_error(client: httpx.Client) -> None:
    response = client.post("/v1/messages", json=claude("[[sim status=529]]"), headers=ANTHROPIC)
    assert response.status_code == 529
    assert response.json() == {
        "type": "error",
        "error": {"type": "overloaded_error", "message": "simulated error 529"},
    }


def test_directive_inside_system_and_content_parts_is_seen(client: httpx.Client) -> None:
    body = {
        "model": "sim-chat",
        "messages": [
            {"role": "system", "content": [{"type": "text", "text": "[[sim status=418]]"}]},
            {"role": "user", "content": "hi"},
        ],
    }
    assert client.post("/v1/chat/completions", json=body).status_code == 418
    responses = {
        "model": "sim-chat",
        "input": [{"role": "user", "content": [{"type": "input_text", "text": "x [[sim status=502]]"}]}],
    }
    assert client.post("/v1/responses", json=responses).status_code == 502


def test_fail_directive_fails_the_first_attempts_then_succeeds(client: httpx.Client) -> None:
    body = chat("flaky [[sim status=503 fail=2]]")
    statuses = [client.post("/v1/chat/completions", json=body).status_code for _ in range(4)]
    assert statuses == [503, 503, 200, 200]


def test_fail_counters_are_separate_per_request(client: httpx.Client) -> None:
    first = chat("one [[sim status=429 fail=1]]")
    second = chat("two [[sim status=429 fail=1]]")
    assert client.post("/v1/chat/completions", json=first).status_code == 429
    assert client.post("/v1/chat/completions", json=second).status_code == 429
    assert client.post("/v1/chat/completions", json=first).status_code == 200
    assert client.post("/v1/chat/completions", json=second).status_code == 200


def test_retry_after_directive_sets_the_header_on_errors(client: httpx.Client) -> None:
    response = client.post("/v1/chat/completions", json=chat("[[sim status=429 retry_after=7]]"))
    assert response.status_code == 429
    assert response.headers["Retry-After"] == "7"
    assert response.json()["error"]["type"] == "rate_limit_error"


def test_queued_directive_answers_503_model_queued(client: httpx.Client) -> None:
    response = client.post("/v1/chat/completions", json=chat("[[sim queued retry_after=3]]"))
    assert response.status_code == 503
    assert response.headers["Retry-After"] == "3"
    error = response.json()["error"]
    assert (error["type"], error["code"]) == ("service_unavailable", "model_queued")
    assert error["message"]


def test_queued_with_fail_is_queued_only_for_the_first_attempts(client: httpx.Client) -> None:
    body = chat("[[sim queued fail=1]]")
    assert client.post("/v1/chat/completions", json=body).status_code == 503
    assert client.post("/v1/chat/completions", json=body).status_code == 200


def test_garbage_directive_answers_200_with_a_body_that_is_not_json(client: httpx.Client) -> None:
    response = client.post("/v1/chat/completions", json=chat("[[sim garbage]]"))
    assert response.status_code == 200
    with pytest.raises(ValueError):
        json.loads(response.content)


@pytest.mark.parametrize("size", [400, 1000, 123_457])
def test_bytes_directive_makes_the_chat_body_exactly_n_bytes(client: httpx.Client, size: int) -> None:
    response = client.post("/v1/chat/completions", json=chat(f"pad me [[sim bytes={size}]]"))
    assert response.status_code == 200
    assert len(response.content) == size
    assert response.json()["choices"][0]["message"]["content"].startswith("echo: pad me")


def test_bytes_directive_cuts_a_long_echo_down_to_n_bytes(client: httpx.Client) -> None:
    text = "é long " * 100 + "[[sim bytes=300]]"
    response = client.post("/v1/chat/completions", json=chat(text))
    assert len(response.content) == 300
    assert response.json()["object"] == "chat.completion"


@pytest.mark.parametrize(
    ("path", "body", "headers"),
    [
        ("/v1/responses", {"model": "sim-chat", "input": "r [[sim bytes=2000]]"}, {}),
        ("/v1/messages", claude("m [[sim bytes=2000]]"), ANTHROPIC),
        ("/v1/embeddings", {"model": "sim-embed", "input": "e [[sim bytes=2000]]"}, {}),
    ],
)
def test_bytes_directive_works_on_every_endpoint(
    client: httpx.Client, path: str, body: dict[str, Any], headers: dict[str, str]
) -> None:
    response = client.post(path, json=body, headers=headers)
    assert response.status_code == 200
    assert len(response.content) == 2000
    response.json()


def test_hang_does_not_block_a_concurrent_request(sim: Simulator, client: httpx.Client) -> None:
    def hang() -> type[BaseException] | None:
        try:
            httpx.post(f"{sim.url}/v1/chat/completions", json=chat("[[sim hang]]"), timeout=8)
        except httpx.TimeoutException as exc:
            return type(exc)
        return None

    with ThreadPoolExecutor(1) as pool:
        hung = pool.submit(hang)
        time.sleep(0.2)
        started = time.monotonic()
        response = client.post("/v1/chat/completions", json=chat("still alive"))
        assert response.status_code == 200
        # Blocked behind the hang, it would have waited for its 8 s timeout: well under that
        # (with room for a loaded machine), it was not.
        assert time.monotonic() - started < 4
        assert hung.result(timeout=15) is httpx.ReadTimeout


def test_hang_with_fail_hangs_only_the_first_attempts(client: httpx.Client) -> None:
    body = chat("[[sim hang fail=1]]")
    with pytest.raises(httpx.ReadTimeout):
        client.post("/v1/chat/completions", json=body, timeout=0.5)
    assert client.post("/v1/chat/completions", json=body).status_code == 200


def test_latency_directive_delays_the_answer(client: httpx.Client) -> None:
    started = time.monotonic()
    assert client.post("/v1/chat/completions", json=chat("[[sim latency_ms=300]]")).status_code == 200
    assert time.monotonic() - started >= 0.29


def test_trickle_directive_sends_the_body_in_small_pieces_apart(client: httpx.Client) -> None:
    body = chat("slow [[sim trickle_ms=50]]")
    arrivals: list[float] = []
    with client.stream("POST", "/v1/chat/completions", json=body) as response:
        assert response.status_code == 200
        head_at = time.monotonic()
        content = b""
        for piece in response.iter_raw():
            arrivals.append(time.monotonic())
            content += piece
            if len(arrivals) == 1:  # while the body is still coming, the request is in flight
                assert stats(client)["sim-chat"]["in_flight"] == 1
    assert wait_for(lambda: stats(client)["sim-chat"]["in_flight"] == 0, timeout=5)
    assert json.loads(content)["choices"][0]["message"]["content"] == "echo: slow [[sim trickle_ms=50]]"
    pieces = -(-len(content) // TRICKLE_PIECE_BYTES)
    assert pieces >= 5 and len(arrivals) > 1  # the body came in several reads
    assert arrivals[-1] - head_at >= 0.05 * (pieces - 1)  # its pieces 50 ms apart


def test_chunked_directive_sends_the_answer_without_a_length(client: httpx.Client) -> None:
    body = {"model": "sim-embed", "input": "big [[sim chunked bytes=200000]]"}
    response = client.post("/v1/embeddings", json=body)
    assert response.status_code == 200
    assert response.headers["transfer-encoding"] == "chunked" and "content-length" not in response.headers
    assert len(response.content) == 200_000 and response.json()["object"] == "list"
    trickled = client.post("/v1/chat/completions", json=chat("[[sim chunked trickle_ms=1]]"))
    assert (
        trickled.headers["transfer-encoding"] == "chunked" and trickled.json()["object"] == "chat.completion"
    )


def test_trickle_applies_to_error_answers_too(client: httpx.Client) -> None:
    started = time.monotonic()
    response = client.post("/v1/chat/completions", json=chat("[[sim status=500 trickle_ms=20]]"))
    assert response.status_code == 500 and response.json()["error"]["message"] == "simulated error 500"
    assert time.monotonic() - started >= 0.02 * (len(response.content) // TRICKLE_PIECE_BYTES)


def test_a_401_quotes_the_key_it_was_sent_as_openai_does(client: httpx.Client) -> None:
    key = "sk-sim-local-upstream-key"
    response = client.post(
        "/v1/chat/completions",
        json=chat("[[sim status=401]]"),
        headers={"Authorization": f"Bearer {key}"},
    )
    assert response.status_code == 401
    error = response.json()["error"]
    assert error["code"] == "invalid_api_key" and error["type"] == "authentication_error"
    assert error["message"].startswith("Incorrect API key provided: sk-sim-l*************-key. ")


def test_a_401_on_messages_says_what_anthropic_says(client: httpx.Client) -> None:
    response = client.post("/v1/messages", json=claude("[[sim status=401]]"), headers=ANTHROPIC)
    assert response.status_code == 401
    assert response.json()["error"] == {"type": "authentication_error", "message": "invalid x-api-key"}


# --------------------------------------------------------------------------- stats, reset, serving


def test_stats_count_requests_in_flight_and_max_in_flight(sim: Simulator, client: httpx.Client) -> None:
    assert stats(client)["sim-embed"] == {"requests": 0, "in_flight": 0, "max_in_flight": 0}
    with httpx.Client(base_url=sim.url, timeout=30, limits=httpx.Limits(max_connections=16)) as pool_client:

        def call(i: int) -> int:
            body = chat(f"request {i} [[sim latency_ms=1000]]")
            return pool_client.post("/v1/chat/completions", json=body).status_code

        with ThreadPoolExecutor(8) as pool:
            futures = [pool.submit(call, i) for i in range(8)]
            deadline = time.monotonic() + 10
            while stats(client)["sim-chat"]["in_flight"] < 8 and time.monotonic() < deadline:
                time.sleep(0.02)
            assert stats(client)["sim-chat"]["in_flight"] == 8
            assert [f.result() for f in futures] == [200] * 8
    client.post("/v1/chat/completions", json=chat("[[sim status=500]]"))
    models = stats(client)
    assert models["sim-chat"] == {"requests": 9, "in_flight": 0, "max_in_flight": 8}
    assert models["sim-claude"] == {"requests": 0, "in_flight": 0, "max_in_flight": 0}
    assert set(models) == {"sim-chat", "sim-embed", "sim-claude", "sim-chat-only"}


def test_reset_zeroes_stats_and_attempt_counters(client: httpx.Client) -> None:
    body = chat("[[sim status=500 fail=1]]")
    assert client.post("/v1/chat/completions", json=body).status_code == 500
    assert client.post("/v1/chat/completions", json=body).status_code == 200
    assert client.post("/_sim/reset").status_code == 200
    assert stats(client)["sim-chat"] == {"requests": 0, "in_flight": 0, "max_in_flight": 0}
    assert client.post("/v1/chat/completions", json=body).status_code == 500


def test_healthz_answers_200(client: httpx.Client) -> None:
    assert client.get("/healthz").status_code == 200


def test_many_concurrent_keep_alive_connections_are_served(sim: Simulator) -> None:
    limits = httpx.Limits(max_connections=64, max_keepalive_connections=64)
    with httpx.Client(base_url=sim.url, timeout=30, limits=limits) as pool_client:

        def call(i: int) -> str:
            answer = pool_client.post("/v1/chat/completions", json=chat(f"n{i} [[sim latency_ms=50]]"))
            return str(answer.json()["choices"][0]["message"]["content"])

        with ThreadPoolExecutor(64) as pool:
            for _ in range(3):
                answers = list(pool.map(call, range(64)))
                assert answers == [f"echo: n{i} [[sim latency_ms=50]]" for i in range(64)]
    assert sim.stats()["models"]["sim-chat"]["requests"] == 192


def test_stop_releases_hung_and_idle_connections() -> None:
    sim = Simulator().start()
    with ThreadPoolExecutor(1) as pool:
        hung = pool.submit(
            httpx.post, f"{sim.url}/v1/chat/completions", json=chat("[[sim hang]]"), timeout=30
        )
        time.sleep(0.3)
        started = time.monotonic()
        sim.stop()
        with pytest.raises(httpx.HTTPError):
            hung.result(timeout=10)
        assert time.monotonic() - started < 5


def test_port_and_latency_come_from_the_environment() -> None:
    args = parse_args([], {"BATCHGW_SIM_PORT": "9999", "BATCHGW_SIM_LATENCY_MS": "12"})
    assert (args.port, args.latency_ms) == (9999, 12.0)
    assert parse_args(["--port", "7"], {"BATCHGW_SIM_PORT": "9999"}).port == 7
    assert parse_args([], {}).port == 8081


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_module_runs_as_a_server_on_the_env_port() -> None:
    port = _free_port()
    env = {**os.environ, "BATCHGW_SIM_PORT": str(port)}
    process = subprocess.Popen(
        [sys.executable, "-m", "local.simulator"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 15
        while True:
            try:
                response = httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1)
                break
            except httpx.TransportError:
                if time.monotonic() > deadline or process.poll() is not None:
                    raise
                time.sleep(0.05)
        assert response.status_code == 200
    finally:
        process.terminate()
        assert process.wait(timeout=10) == 0
