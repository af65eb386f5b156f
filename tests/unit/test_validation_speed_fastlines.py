"""The fast path of file validation (``validation.fastlines``) agrees with the full path.

``validate_file`` reads each line through a reader that may vouch for it without the
full checks; the full path decides every line it does not vouch for. These tests hold the
two to the same report: the same verdict, the same errors (codes, messages, params, line
numbers), the same totals and model, on generated files of good and bad chat lines,
including JSON the two parsers could read differently.
"""

from __future__ import annotations

import copy
import json
import math
import sys
from pathlib import Path
from typing import Any
from unittest.mock import patch

import pytest
from batchgw.config.catalog import Catalog
from batchgw.config.settings import Settings
from batchgw.validation.chat import ROLES
from batchgw.validation.fastlines import FAST_LINE_READERS, MAX_DEPTH, read_chat_line
from batchgw.validation.file import FileReport, validate_file
from hypothesis import given, settings
from hypothesis import strategies as st

CONFIG = Path(__file__).resolve().parents[2] / "config" / "models.local.json"
CHAT = "/v1/chat/completions"
SETTINGS = Settings.model_validate({})


def _catalog() -> Catalog:
    """The local catalog, plus models that exercise every catalog refusal."""
    config = json.loads(CONFIG.read_text())
    models = config["models"]
    models["sim-unpriced"] = {k: v for k, v in models["sim-chat-only"].items() if k != "price"}
    models["sim-pro-only"] = {**models["sim-chat-only"], "roles": ["pro"]}
    models["sim-small"] = {**models["sim-chat-only"], "max_output_tokens": 100}
    return Catalog.model_validate(config)


CATALOG = _catalog()


def _validate(lines: list[bytes], *, fast: bool) -> FileReport:
    """The report of a file, with the fast path on, or off (every line on the full path)."""
    if fast:
        return validate_file(lines, endpoint=CHAT, settings=SETTINGS, catalog=CATALOG, role="internal")
    with patch.dict(FAST_LINE_READERS, clear=True):
        return validate_file(lines, endpoint=CHAT, settings=SETTINGS, catalog=CATALOG, role="internal")


# --- generated chat lines: valid ones, then a few changes, right or wrong ----------------


def often(value: st.SearchStrategy[Any], other: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """Mostly ``value`` (right), one time in ten ``other`` (wrong)."""
    return one_in(10).flatmap(lambda wrong: other if wrong else value)


def one_in(count: int) -> st.SearchStrategy[bool]:
    """True one time in ``count``."""
    return st.sampled_from([True] + [False] * (count - 1))


texts = st.sampled_from(["hi", "", "Summarize item 7.", "é\u2028😀", "[[sim status=429]]"])
odd = st.sampled_from([None, 0, -1, 1.5, True, "", "x", "robot", [], {}, [1], {"a": 1}, 10**20, 2.5])
parts = st.one_of(
    st.fixed_dictionaries({"type": st.just("text"), "text": texts}),
    st.fixed_dictionaries(
        {
            "type": st.just("image_url"),
            "image_url": st.fixed_dictionaries(
                {"url": st.just("https://x/y.png")}, optional={"detail": st.just("low")}
            ),
        }
    ),
    st.fixed_dictionaries(
        {
            "type": st.just("input_audio"),
            "input_audio": st.fixed_dictionaries({"data": texts, "format": st.just("wav")}),
        }
    ),
    st.fixed_dictionaries({"type": st.just("file"), "file": st.just({"file_id": "file-1"})}),
    st.fixed_dictionaries({"type": st.just("refusal"), "refusal": texts}),
    # a part of any type, with any of the parts' fields, or none
    st.fixed_dictionaries(
        {"type": st.sampled_from(["text", "image_url", "input_audio", "file", "refusal", "video"])},
        optional={
            "text": texts,
            "image_url": st.one_of(st.just({"url": "https://x/y.png"}), st.just({}), odd),
            "input_audio": st.one_of(st.just({"data": "x", "format": "wav"}), st.just({"data": "x"}), odd),
            "file": st.one_of(st.just({"file_id": "file-1"}), odd),
            "refusal": st.one_of(texts, odd),
        },
    ),
)
contents = st.one_of(texts, texts, st.lists(parts, min_size=1, max_size=3))
tool_calls = st.lists(
    st.fixed_dictionaries(
        {
            "id": often(st.just("call-1"), odd),
            "type": often(st.just("function"), odd),
            "function": often(
                st.fixed_dictionaries(
                    {"name": often(st.just("f"), odd), "arguments": often(st.just("{}"), odd)}
                ),
                odd,
            ),
        }
    ),
    min_size=1,
    max_size=2,
)
messages = st.one_of(
    st.fixed_dictionaries(
        {"role": st.sampled_from(["system", "developer", "user"]), "content": contents},
        optional={"name": st.just("bob")},
    ),
    st.fixed_dictionaries(
        {"role": st.just("assistant"), "content": contents},
        optional={"tool_calls": tool_calls, "refusal": st.none(), "name": st.just("bot")},
    ),
    st.fixed_dictionaries({"role": st.just("assistant"), "content": st.none(), "tool_calls": tool_calls}),
    st.fixed_dictionaries(
        {"role": st.just("assistant"), "function_call": st.just({"name": "f", "arguments": "{}"})}
    ),
    st.fixed_dictionaries({"role": st.just("assistant"), "audio": st.just({"id": "a-1"})}),
    st.fixed_dictionaries(
        {"role": st.just("tool"), "content": contents, "tool_call_id": often(st.just("call-1"), odd)}
    ),
    # a message of any role, with any of the messages' fields, or none
    st.fixed_dictionaries(
        {"role": st.sampled_from([*ROLES, "robot"])},
        optional={
            "content": st.one_of(contents, odd),
            "name": st.one_of(st.just("f"), odd),
            "tool_calls": st.one_of(tool_calls, odd),
            "tool_call_id": st.one_of(st.just("call-1"), odd),
            "function_call": st.one_of(st.just({"name": "f"}), st.none()),
            "audio": st.one_of(st.just({"id": "a-1"}), st.none()),
        },
    ),
    st.fixed_dictionaries(
        {"role": st.just("function"), "name": st.just("f")},
        optional={"content": st.one_of(contents, st.none())},
    ),
)
tools = st.lists(
    st.fixed_dictionaries(
        {
            "type": often(st.just("function"), odd),
            "function": st.fixed_dictionaries(
                {
                    "name": often(
                        st.sampled_from(["get_weather", "a-b_9", "x" * 64]),
                        st.sampled_from(["a b", "ok\n", "", "x" * 65, "é", 5]),
                    )
                },
                optional={
                    "description": often(texts, odd),
                    "parameters": often(
                        st.just({"type": "object", "properties": {"a": {"type": "string"}}}), odd
                    ),
                    "strict": st.booleans(),
                },
            ),
        }
    ),
    max_size=2,
)


def _in(low: int, high: int) -> st.SearchStrategy[float | int]:
    """Numbers from ``low`` to ``high``, and sometimes just outside."""
    edges = [low, high, float(low), float(high), -0.0, low - 1, high + 1]
    edges += [math.nextafter(high, math.inf), math.nextafter(low, -math.inf)]
    return often(
        st.one_of(st.sampled_from(edges), st.integers(low, high), st.floats(low, high)),
        st.one_of(st.sampled_from(edges), st.integers(low - 1, high + 1), st.floats(low - 1, high + 1)),
    )


bodies = st.fixed_dictionaries(
    {
        "model": st.sampled_from(["sim-chat", "sim-chat", "sim-chat-latest", "sim-chat-only", "sim-small"]),
        "messages": st.lists(messages, min_size=1, max_size=3),
    },
    optional={
        "max_tokens": often(st.integers(1, 20_000), st.integers(-1, 1)),
        "stream": often(st.just(False), st.just(True)),
        "max_completion_tokens": often(st.integers(1, 20_000), st.integers(-1, 1)),
        "stream_options": often(st.just({"include_usage": True}), odd),
        "n": _in(1, 128),
        "temperature": _in(0, 2),
        "top_p": _in(0, 1),
        "presence_penalty": _in(-2, 2),
        "frequency_penalty": _in(-2, 2),
        "stop": st.one_of(texts, st.lists(texts, max_size=5)),
        "tools": tools,
        "tool_choice": often(st.sampled_from(["auto", {"type": "function", "function": {"name": "f"}}]), odd),
        "response_format": often(st.just({"type": "json_object"}), odd),
        "seed": st.integers(),
        "user": texts,
        "metadata": st.just({"k": "v"}),
    },
)
valid_lines = st.fixed_dictionaries(
    {
        "custom_id": often(
            st.sampled_from(["q-1", "q-2", "q-3", "é😀", "x" * 512]),
            st.sampled_from(["", "x" * 513, 7, None]),
        ),
        "method": st.just("POST"),
        "url": st.just(CHAT),
        "body": bodies,
    }
)
# Values a change may set: wrong ones, and right ones out of place.
replacements = st.one_of(
    odd,
    st.sampled_from(
        [
            "POST",
            CHAT,
            "/v1/embeddings",
            "sim-embed",
            "sim-claude",
            "sim-unpriced",
            "sim-pro-only",
            "auto",
            "auto-x",
            "nope",
            "x" * 513,
            "assistant",
            "tool",
            "function",
            "text",
            "image_url",
            "a b",
            "ok\n",
            64.0,
            0,
            101,
            129,
            16385,
            2.0000000000000004,
            -2.0000000000000004,
            1.0000000000000002,
            True,
            False,
            ["a", "b", "c", "d", "e"],
            [{"type": "video"}],
            [],
        ]
    ),
    texts,
)
extra_keys = st.sampled_from(
    [
        "extra",
        "anthropic_version",
        "max_completion_tokens",
        "max_tokens",
        "stream",
        "tool_call_id",
        "tool_calls",
        "content",
        "name",
        "detail",
    ]
)


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [prefix]
    if isinstance(value, dict):
        for key, inner in value.items():
            found += _paths(inner, (*prefix, key))
    elif isinstance(value, list):
        for index, inner in enumerate(value):
            found += _paths(inner, (*prefix, index))
    return found


@st.composite
def line_objects(draw: st.DrawFn) -> Any:
    """A valid line, then up to two changes: a value replaced, a key removed, a key added."""
    line: Any = copy.deepcopy(draw(valid_lines))  # st.just() values are shared: never change them
    for _ in range(draw(st.sampled_from([0, 0, 0, 1, 2]))):
        path = draw(st.sampled_from(_paths(line)))
        node = line
        for step in path[:-1]:
            node = node[step]
        change = draw(st.sampled_from(["replace", "replace", "remove", "add"]))
        new = copy.deepcopy(draw(replacements))
        if not path:
            line = new
        elif change == "replace":
            node[path[-1]] = new
        elif change == "remove":
            del node[path[-1]]
        else:
            target = node[path[-1]]
            if isinstance(target, dict):
                target[draw(extra_keys)] = new
    return line


# Text-level changes: JSON the two parsers must refuse alike, or read alike.
_DEEP = "[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1)
edits = st.sampled_from(
    [
        lambda t: t,
        lambda t: (
            t.replace('"seed": ', '"seed": 1e999, "seed": ', 1)
            if '"seed"' in t
            else t[:-2] + ', "seed": 1e999}}'
        ),
        lambda t: t[:-2] + ', "user": NaN}}',
        lambda t: t[:-2] + ', "user": Infinity}}',
        lambda t: t[:-2] + ', "user": "\\ud800"}}',
        lambda t: t[:-2] + ', "user": "\\udc00\\ud800"}}',
        lambda t: t[:-2] + ', "user": "\\ud83d\\ude00"}}',
        lambda t: t[:-2] + f', "seed": {"9" * 4301}}}}}',
        lambda t: t[:-2] + f', "seed": {"9" * 4300}}}}}',
        lambda t: t[:-2] + f', "seed": {_DEEP}}}}}',
        lambda t: t[:-1] + ', "body": {"model": "sim-chat"}}',  # a duplicate key: the last one counts
        lambda t: '{"custom_id": "dup", ' + t[1:],  # a duplicate custom_id, the first of two
        lambda t: t.replace('"role": "user"', '"role": "user", "role": "tool"', 1),
        lambda t: t.replace('"role": "tool"', '"role": "tool", "role": "user"', 1),
        lambda t: t.replace('"model": "sim-chat"', '"model": "sim-chat", "model": 5', 1),
        lambda t: t.replace("\\u00e9", "\u00e9"),  # raw UTF-8 instead of escapes
        lambda t: t.replace('"custom_id"', '"custom\\u005fid"', 1),
        lambda t: t + " x",
        lambda t: t[:-1],
        lambda t: "\ufeff" + t,
        lambda t: t.replace(": ", ":\u00a0", 1),
        lambda t: t.replace('"hi"', '"h\x01i"', 1),
    ]
)


@st.composite
def raw_lines(draw: st.DrawFn) -> bytes:
    text = json.dumps(draw(line_objects()))
    if draw(one_in(6)):
        text = draw(edits)(text)
    raw = text.encode("utf-8", "surrogatepass")
    if draw(one_in(50)):  # a byte that is not UTF-8
        at = draw(st.integers(0, len(raw)))
        raw = raw[:at] + draw(st.sampled_from([b"\xff", b"\xc0\x80", b"\xed\xa0\x80"])) + raw[at:]
    return raw


def _same(fast: FileReport, full: FileReport) -> None:
    assert fast.errors == full.errors
    assert (fast.ok, fast.total, fast.line_count, fast.models, fast.complete) == (
        full.ok,
        full.total,
        full.line_count,
        full.models,
        full.complete,
    )


@settings(max_examples=1500, deadline=None, derandomize=True)
@given(line=raw_lines())
def test_a_line_gets_the_same_verdict_and_error_on_the_fast_and_the_full_path(line: bytes) -> None:
    _same(_validate([line], fast=True), _validate([line], fast=False))


@settings(max_examples=300, deadline=None, derandomize=True)
@given(lines=st.lists(st.one_of(raw_lines(), st.just(b""), st.just(b"  \r")), min_size=1, max_size=5))
def test_a_file_gets_the_same_report_on_the_fast_and_the_full_path(lines: list[bytes]) -> None:
    # Across lines: repeated custom_ids, mixed models, blank lines, line numbers.
    _same(_validate(lines, fast=True), _validate(lines, fast=False))


# --- the fast path does vouch for the usual shapes (else the speed is silently lost) -------


def _line(body: dict[str, Any], custom_id: str = "q-1") -> bytes:
    return json.dumps({"custom_id": custom_id, "method": "POST", "url": CHAT, "body": body}).encode()


USUAL_BODIES = [
    {
        "model": "sim-chat",
        "max_tokens": 64,
        "messages": [{"role": "system", "content": "Be terse."}, {"role": "user", "content": "hi"}],
    },
    {
        "model": "sim-chat-latest",
        "temperature": 0.2,
        "top_p": 1,
        "stop": ["\n"],
        "seed": 7,
        "response_format": {
            "type": "json_schema",
            "json_schema": {"name": "x", "schema": {"type": "object"}},
        },
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "what is this?"},
                    {"type": "image_url", "image_url": {"url": "https://x/y.png", "detail": "low"}},
                ],
            },
        ],
    },
    {
        "model": "sim-chat",
        "tools": [
            {
                "type": "function",
                "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {}}},
            }
        ],
        "tool_choice": "auto",
        "messages": [
            {"role": "user", "content": "weather?"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}
                ],
            },
            {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
        ],
    },
]


@pytest.mark.parametrize("body", USUAL_BODIES)
def test_the_fast_path_vouches_for_a_usual_valid_chat_line(body: dict[str, Any]) -> None:
    line = _line(body)
    assert read_chat_line(line) is not None
    assert _validate([line], fast=True).ok


def _message(**fields: Any) -> dict[str, Any]:
    return {"model": "sim-chat", "messages": [fields]}


def _user(**fields: Any) -> dict[str, Any]:
    return {"model": "sim-chat", "messages": [{"role": "user", "content": "hi"}], **fields}


def _part(**fields: Any) -> dict[str, Any]:
    return _message(role="user", content=[fields])


def _tool(**function: Any) -> dict[str, Any]:
    return _user(tools=[{"type": "function", "function": function}])


# One rule broken per line, for every rule of the chat body and of a file line.
ONE_RULE_BROKEN = {
    "model missing": {"messages": [{"role": "user", "content": "hi"}]},
    "model empty": {**_user(), "model": ""},
    "model unknown": {**_user(), "model": "nope"},
    "model auto": {**_user(), "model": "auto"},
    "model of another endpoint": {**_user(), "model": "sim-embed"},
    "model not priced": {**_user(), "model": "sim-unpriced"},
    "model not the role's": {**_user(), "model": "sim-pro-only"},
    "max_tokens over the model's": {**_user(max_tokens=101), "model": "sim-small"},
    "max_completion_tokens over the model's": {**_user(max_completion_tokens=101), "model": "sim-small"},
    "no messages": {"model": "sim-chat", "messages": []},
    "too many messages": {"model": "sim-chat", "messages": [{"role": "user", "content": "hi"}] * 2049},
    "a role unknown": _message(role="robot", content="hi"),
    "a user message without content": _message(role="user"),
    "a system message with null content": _message(role="system", content=None),
    "an assistant message without content or calls": _message(role="assistant"),
    "an assistant message with empty tool_calls": _message(role="assistant", tool_calls=[]),
    "a tool message without tool_call_id": _message(role="tool", content="x"),
    "a tool message with an empty tool_call_id": _message(role="tool", content="x", tool_call_id=""),
    "a function message without name": _message(role="function", content="x"),
    "a function message with parts": _message(
        role="function", name="f", content=[{"type": "text", "text": "x"}]
    ),
    "a name not a string": _message(role="user", content="x", name=5),
    "content not a string or parts": _message(role="user", content=5),
    "content an empty array": _message(role="user", content=[]),
    "content of 257 parts": _message(role="user", content=[{"type": "text", "text": "x"}] * 257),
    "a part type unknown": _part(type="video"),
    "a text part without text": _part(type="text"),
    "an image part without image_url": _part(type="image_url"),
    "an image part without url": _part(type="image_url", image_url={}),
    "an audio part without format": _part(type="input_audio", input_audio={"data": "x"}),
    "a file part not an object": _part(type="file", file="x"),
    "a refusal part not a string": _part(type="refusal", refusal=5),
    "a tool call without id": _message(
        role="assistant", tool_calls=[{"type": "function", "function": {"name": "f", "arguments": "{}"}}]
    ),
    "a tool call with arguments not a string": _message(
        role="assistant",
        tool_calls=[{"id": "c", "type": "function", "function": {"name": "f", "arguments": {}}}],
    ),
    "stream true": _user(stream=True),
    "stream not a boolean": _user(stream="no"),
    "stream_options not an object": _user(stream_options=1),
    "max_tokens and max_completion_tokens": _user(max_tokens=5, max_completion_tokens=5),
    "max_tokens zero": _user(max_tokens=0),
    "max_tokens a float": _user(max_tokens=64.0),
    "max_tokens a boolean": _user(max_tokens=True),
    "n zero": _user(n=0),
    "n 129": _user(n=129),
    "temperature over 2": _user(temperature=2.0000000000000004),
    "temperature a boolean": _user(temperature=True),
    "top_p over 1": _user(top_p=1.0000000000000002),
    "presence_penalty under -2": _user(presence_penalty=-2.0000000000000004),
    "frequency_penalty over 2": _user(frequency_penalty=3),
    "stop of 5": _user(stop=["a", "b", "c", "d", "e"]),
    "stop with a number": _user(stop=["a", 1]),
    "tools not an array": _user(tools={}),
    "129 tools": _user(tools=[{"type": "function", "function": {"name": "f"}}] * 129),
    "a tool type unknown": _user(tools=[{"type": "web", "function": {"name": "f"}}]),
    "a tool name with a space": _tool(name="a b"),
    "a tool name with a newline": _tool(name="ok\n"),
    "a tool name of 65": _tool(name="x" * 65),
    "a tool description not a string": _tool(name="f", description=5),
    "a tool's parameters not an object": _tool(name="f", parameters=[]),
    "tool_choice a number": _user(tool_choice=1),
    "response_format a string": _user(response_format="json"),
    "anthropic_version in the body": _user(anthropic_version="2023-06-01"),
}
ONE_LINE_RULE_BROKEN = {
    "custom_id empty": {"custom_id": ""},
    "custom_id of 513": {"custom_id": "x" * 513},
    "custom_id a number": {"custom_id": 7},
    "method GET": {"method": "GET"},
    "url another endpoint": {"url": "/v1/embeddings"},
    "an unknown key": {"extra": 1},
    "body not an object": {"body": []},
}


@pytest.mark.parametrize("body", ONE_RULE_BROKEN.values(), ids=ONE_RULE_BROKEN.keys())
def test_a_body_breaking_one_rule_is_refused_alike_on_both_paths(body: dict[str, Any]) -> None:
    line = _line(body)
    full = _validate([line], fast=False)
    assert not full.ok
    _same(_validate([line], fast=True), full)


@pytest.mark.parametrize("change", ONE_LINE_RULE_BROKEN.values(), ids=ONE_LINE_RULE_BROKEN.keys())
def test_a_line_breaking_one_rule_is_refused_alike_on_both_paths(change: dict[str, Any]) -> None:
    item = {"custom_id": "q-1", "method": "POST", "url": CHAT, "body": _user(), **change}
    line = json.dumps(item).encode()
    assert read_chat_line(line) is None
    full = _validate([line], fast=False)
    assert not full.ok
    _same(_validate([line], fast=True), full)


def test_the_fast_path_leaves_a_bad_line_to_the_full_path_which_words_the_error() -> None:
    line = _line({"model": "sim-chat", "messages": [{"role": "tool", "content": "x"}]})
    assert read_chat_line(line) is None
    report = _validate([line], fast=True)
    assert report.errors == [
        {
            "code": "invalid_body",
            "message": "messages[0].tool_call_id is required for a tool message",
            "line": 1,
            "param": "body.messages[0].tool_call_id",
        }
    ]


def test_a_deeply_nested_line_gets_the_same_verdict_at_every_depth_up_to_the_recursion_limit() -> None:
    # The two parsers' nesting limits differ by a few levels near the recursion limit.
    for depth in range(MAX_DEPTH - 2, sys.getrecursionlimit() + 10):
        line = _line({"model": "sim-chat", "seed": 0, "messages": [{"role": "user", "content": "hi"}]})
        line = line.replace(b'"seed": 0', b'"seed": ' + b"[" * depth + b"]" * depth)
        _same(_validate([line], fast=True), _validate([line], fast=False))


def test_fast_lines_still_claim_their_custom_ids_and_set_the_model() -> None:
    lines = [
        _line({"model": "sim-chat-latest", "messages": [{"role": "user", "content": "a"}]}, "q-1"),
        _line({"model": "sim-chat", "messages": [{"role": "user", "content": "b"}]}, "q-1"),
        _line({"model": "sim-chat-only", "messages": [{"role": "user", "content": "c"}]}, "q-2"),
    ]
    report = _validate(lines, fast=True)
    assert [(e["line"], e["code"], e["message"]) for e in report.errors] == [
        (2, "duplicate_custom_id", "custom_id must be unique within the file."),
        (
            3,
            "invalid_body",
            "all lines must use the same model: this line uses 'sim-chat-only', "
            "line 1 uses 'sim-chat-latest'",
        ),
    ]
    assert report.total == 1 and report.model == "sim-chat"
