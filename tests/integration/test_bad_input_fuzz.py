"""Bad input never answers 5xx: property-based fuzzing (hypothesis) of the create, list and
results routes through the api handler, on moto.

Every answer must be below 500, and an error must be in the spec's shape
(``{"error": {"message", "type", "param", "code"}}``).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from functions.api import handler as api
from functions.interactive import handler as interactive
from local.simulator import Simulator
from tests.integration.conftest import make_deps
from tests.support import FakeClock, LambdaContext, http_event

pytestmark = pytest.mark.usefixtures("aws_env")

FUZZ = settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    derandomize=True,
    database=None,
)


@pytest.fixture
def deps_installed(sim: Simulator, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    # the fake clock never refills a key's request bucket: the rate limit is not what is fuzzed
    deps = make_deps(sim, FakeClock(), BATCH_MAX_ACTIVE_PER_USER="100000", BATCH_API_RATE_PER_KEY="0")
    monkeypatch.setattr(api, "get_deps", lambda: deps)
    yield


@pytest.fixture
def interactive_installed(sim: Simulator, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    deps = make_deps(sim, FakeClock(), BATCH_API_RATE_PER_KEY="0")
    monkeypatch.setattr(interactive, "get_deps", lambda: deps)
    yield


def answer(event: dict[str, Any]) -> tuple[int, Any]:
    response = api.handler(event, LambdaContext(request_id="req-fuzz"))  # type: ignore[arg-type]
    status = int(response["statusCode"])
    body = response.get("body")
    assert status < 500, (status, body)
    parsed = (
        json.loads(body)
        if body and response.get("headers", {}).get("Content-Type") == "application/json"
        else body
    )
    if status >= 400:
        assert isinstance(parsed, dict) and isinstance(parsed.get("error"), dict), parsed
        assert {"message", "type", "param", "code"} <= set(parsed["error"]), parsed
    return status, parsed


# --- JSON values anywhere ------------------------------------------------------------------------

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**30), max_value=10**30),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=20),
    st.sampled_from(["", "sim-chat", "/v1/chat/completions", "user", "24h", "auto", "\u0000", "🙂" * 3]),
)
json_values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=12), inner, max_size=4)
    ),
    max_leaves=12,
)

CHAT = {"model": "sim-chat", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 5}
FUNCTION = {"name": "lookup", "description": "find", "parameters": {"type": "object", "properties": {}}}
BODIES = {
    "/v1/chat/completions": {
        "model": "sim-chat",
        "messages": [
            {"role": "system", "content": "be brief"},
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "hi"},
                    {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
                ],
            },
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "lookup", "arguments": "{}"}}
                ],
            },
            {"role": "tool", "tool_call_id": "c1", "content": "found"},
        ],
        "tools": [{"type": "function", "function": FUNCTION}],
        "tool_choice": {"type": "function", "function": {"name": "lookup"}},
        "response_format": {"type": "json_object"},
        "stop": ["x", "y"],
        "max_tokens": 5,
        "temperature": 0.5,
    },
    "/v1/embeddings": {
        "model": "sim-embed",
        "input": ["a", "b"],
        "dimensions": 8,
        "encoding_format": "float",
    },
    "/v1/responses": {
        "model": "sim-chat",
        "input": [
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]},
            {"type": "function_call", "call_id": "c1", "name": "lookup", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c1", "output": "found"},
        ],
        "tools": [{"type": "function", **FUNCTION}],
        "text": {"format": {"type": "text"}},
        "max_output_tokens": 20,
    },
    "/v1/messages": {
        "model": "sim-claude",
        "max_tokens": 5,
        "system": [{"type": "text", "text": "be brief"}],
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "hi"},
                    {
                        "type": "image",
                        "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"},
                    },
                ],
            },
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": "t1", "name": "lookup", "input": {}}],
            },
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "found"}]},
        ],
        "tools": [{"name": "lookup", "description": "find", "input_schema": {"type": "object"}}],
        "tool_choice": {"type": "auto"},
        "stop_sequences": ["x"],
    },
}


def valid_create(url: str) -> dict[str, Any]:
    return {
        "requests": [
            {"custom_id": "a", "method": "POST", "url": url, "body": json.loads(json.dumps(BODIES[url]))}
        ],
        "metadata": {"k": "v"},
    }


def paths(value: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    yield prefix
    if isinstance(value, dict):
        for key, inner in value.items():
            yield from paths(inner, (*prefix, key))
    elif isinstance(value, list):
        for index, inner in enumerate(value):
            yield from paths(inner, (*prefix, index))


def replaced(value: Any, path: tuple[Any, ...], new: Any) -> Any:
    if not path:
        return new
    copy = json.loads(json.dumps(value))
    node = copy
    for step in path[:-1]:
        node = node[step]
    node[path[-1]] = new
    return copy


@st.composite
def mutated_creates(draw: st.DrawFn) -> tuple[str, dict[str, Any]]:
    url = draw(st.sampled_from(sorted(BODIES)))
    body = valid_create(url)
    path = draw(st.sampled_from(list(paths(body))))
    return url, replaced(body, path, draw(json_values))


@FUZZ
@given(case=mutated_creates())
@example(case=("/v1/chat/completions", {"requests": "x", "completion_window": ["24h"]}))
@example(case=("/v1/chat/completions", {"input_file_id": ["file-x"], "endpoint": {}, "metadata": 3}))
@example(
    case=("/v1/chat/completions", {"input_file_id": "file-x", "completion_window": 24, "endpoint": None})
)
def test_a_create_body_with_unexpected_json_types_anywhere_answers_400(
    deps_installed: None, case: tuple[str, dict[str, Any]]
) -> None:
    url, body = case
    headers = {"anthropic-version": "2023-06-01"} if url == "/v1/messages" else {}
    event = http_event("POST", "/v1/batches", body=body)
    event["headers"] = {**event["headers"], **headers}
    status, _ = answer(event)
    assert status in (200, 400, 404, 413, 429)


RAW_BODIES = [
    b"[" * 50_000 + b"]" * 50_000,  # deeper than the JSON parser's recursion limit
    b'{"requests": NaN}',
    b'{"requests": [{"custom_id": "a", "body": {"model": "sim-chat", "temperature": Infinity}}]}',
    b'{"requests": [{"custom_id": "\\ud800", "body": {}}]}',
    b"\xff\xfe not utf-8",
    b'{"requests": [1e400]}',
    b"",
    b"null",
]


@pytest.mark.parametrize("raw", RAW_BODIES, ids=range(len(RAW_BODIES)))
def test_a_create_body_that_is_not_usable_json_answers_400(deps_installed: None, raw: bytes) -> None:
    event = http_event("POST", "/v1/batches")
    event["body"] = raw.decode("latin-1")
    status, _ = answer(event)
    assert status == 400


# --- query parameters --------------------------------------------------------------------------

odd_values = st.one_of(
    st.sampled_from(
        [
            "inf",
            "-inf",
            "1e400",
            "nan",
            "NaN",
            "-1",
            "0",
            "",
            " ",
            "1.5",
            "0x10",
            "9" * 40,
            "null",
            "[]",
            "2026-13-45",
            "2026-01-01T00:00:00",
            "2026-01-01T00:00:00+25:00",
            "batch_nope",
            "file-nope",
            "batch_req_x_1",
            "completed,nope",
            "%00",
            "\u0000",
            "🙂",
        ]
    ),
    st.text(max_size=30),
    st.integers().map(str),
    st.floats().map(str),
)
LIST_PARAMS = ["limit", "after", "status", "created_after", "created_before"]
RESULT_PARAMS = ["limit", "after"]


def query_of(params: dict[str, str]) -> str:
    from urllib.parse import quote

    return "&".join(f"{name}={quote(value, safe='')}" for name, value in params.items())


def event_with_query(method: str, path: str, params: dict[str, str]) -> dict[str, Any]:
    event = http_event(method, path)
    event["rawQueryString"] = query_of(params)
    event["queryStringParameters"] = dict(params) or None
    return event


@FUZZ
@given(params=st.dictionaries(st.sampled_from(LIST_PARAMS), odd_values, max_size=4))
@example(params={"created_after": "1e400"})
@example(params={"created_before": "inf"})
@example(params={"created_after": "2000000000", "created_before": "1000000000"})
@example(params={"after": "batch_00000000000000000000000000000000"})
def test_odd_list_parameters_answer_200_or_400(deps_installed: None, params: dict[str, str]) -> None:
    status, _ = answer(event_with_query("GET", "/v1/batches", params))
    assert status in (200, 400)


@pytest.fixture
def a_batch(deps_installed: None) -> str:
    body = {"requests": [{"custom_id": "a", "body": CHAT}]}
    status, created = answer(http_event("POST", "/v1/batches", body=body))
    assert status == 200
    return str(created["id"])


@FUZZ
@given(params=st.dictionaries(st.sampled_from(RESULT_PARAMS), odd_values, max_size=2))
@example(params={"limit": "1e400"})
@example(params={"after": "batch_req_00000000000000000000000000000000_99999999999999999999999"})
def test_odd_results_parameters_answer_200_or_400(a_batch: str, params: dict[str, str]) -> None:
    status, _ = answer(event_with_query("GET", f"/v1/batches/{a_batch}/results", params))
    assert status in (200, 400)


@FUZZ
@given(
    params=st.dictionaries(st.sampled_from(["limit", "after", "purpose", "order"]), odd_values, max_size=3)
)
def test_odd_file_list_parameters_answer_200_or_400(deps_installed: None, params: dict[str, str]) -> None:
    status, _ = answer(event_with_query("GET", "/v1/files", params))
    assert status in (200, 400)


@pytest.mark.parametrize("url", sorted(BODIES))
def test_the_bodies_the_fuzzing_mutates_start_valid(deps_installed: None, url: str) -> None:
    event = http_event("POST", "/v1/batches", body=valid_create(url))
    if url == "/v1/messages":
        event["headers"] = {**event["headers"], "anthropic-version": "2023-06-01"}
    status, body = answer(event)
    assert status == 200, body


# --- the interactive path ------------------------------------------------------------------------


@st.composite
def mutated_interactive(draw: st.DrawFn) -> tuple[str, Any]:
    url = draw(st.sampled_from(sorted(BODIES)))
    body = json.loads(json.dumps(BODIES[url]))
    path = draw(st.sampled_from(list(paths(body))))
    return url, replaced(body, path, draw(json_values))


@FUZZ
@given(case=mutated_interactive())
@example(case=("/v1/messages", {"model": "sim-claude", "max_tokens": 5, "messages": [], "stream": True}))
@example(case=("/v1/embeddings", [1, 2]))
def test_an_interactive_body_with_unexpected_json_types_anywhere_never_answers_5xx(
    interactive_installed: None, case: tuple[str, Any]
) -> None:
    url, body = case
    event = http_event("POST", url, body=body, headers={"anthropic-version": "2023-06-01"})
    response = interactive.handler(event, LambdaContext(request_id="req-fuzz"))  # type: ignore[arg-type]
    status, answer_ = int(response["statusCode"]), json.loads(response["body"])
    assert status < 500, (status, answer_)
    if status >= 400 and url == "/v1/messages":
        assert answer_["type"] == "error" and {"type", "message"} <= set(answer_["error"]), answer_
    elif status >= 400:
        assert {"message", "type", "param", "code"} <= set(answer_["error"]), answer_
    else:
        assert status == 200 and isinstance(answer_, dict)
