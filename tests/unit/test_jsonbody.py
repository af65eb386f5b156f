"""Strict JSON parsing of request bodies: valid UTF-8 JSON with finite numbers only."""

from __future__ import annotations

import json

import pytest
from batchgw.domain.errors import BadRequest
from batchgw.validation.jsonbody import parse_json


def _tool_body(schema_number: str) -> str:
    return (
        '{"requests": [{"custom_id": "q-1", "body": {"model": "sim-chat", "messages": '
        '[{"role": "user", "content": "hi"}], "tools": [{"type": "function", "function": '
        '{"name": "f", "parameters": {"type": "number", "maximum": ' + schema_number + "}}}]}}]}"
    )


def test_valid_json_bytes_and_text_parse_to_the_same_value() -> None:
    raw = '{"a": [1, 2.5, "é", null, true]}'
    assert parse_json(raw.encode()) == parse_json(raw) == {"a": [1, 2.5, "é", None, True]}


def test_invalid_json_is_refused_as_not_valid_json() -> None:
    with pytest.raises(BadRequest, match="not valid JSON") as caught:
        parse_json(b'{"requests": [}')
    assert caught.value.status == 400
    assert caught.value.code == 400


def test_invalid_utf8_is_refused_as_not_valid_json() -> None:
    with pytest.raises(BadRequest, match=r"not valid JSON.*UTF-8"):
        parse_json(b'{"a": "\xff"}')


def test_a_byte_order_mark_at_the_start_is_dropped_unless_refused() -> None:
    assert parse_json(b'\xef\xbb\xbf{"a": 1}') == {"a": 1}
    with pytest.raises(BadRequest, match="not valid JSON"):
        parse_json(b'\xef\xbb\xbf{"a": 1}', bom=False)
    with pytest.raises(BadRequest, match="not valid JSON"):
        parse_json(b'{"a": \xef\xbb\xbf1}')


@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity"])
def test_non_finite_literal_nested_in_a_tool_schema_is_refused(literal: str) -> None:
    with pytest.raises(BadRequest, match=f"every number must be finite, got {literal}"):
        parse_json(_tool_body(literal))


@pytest.mark.parametrize("literal", ["1e999", "-1e999", "1.5e400"])
def test_overflowing_float_is_refused(literal: str) -> None:
    with pytest.raises(BadRequest, match=f"every number must be finite, got {literal}"):
        parse_json(_tool_body(literal).encode())


def test_finite_numbers_in_a_tool_schema_are_kept() -> None:
    value = parse_json(_tool_body("1e300"))
    schema = value["requests"][0]["body"]["tools"][0]["function"]["parameters"]
    assert schema["maximum"] == 1e300


def test_float_underflow_is_finite_and_accepted() -> None:
    assert parse_json("[1e-999]") == [0.0]


def test_large_integer_is_accepted() -> None:
    assert parse_json("[" + "9" * 400 + "]") == [int("9" * 400)]


def test_lone_surrogate_escape_is_refused() -> None:
    with pytest.raises(BadRequest, match="lone surrogate"):
        parse_json(b'{"a": "\\ud800"}')


def test_lone_surrogate_in_text_is_refused() -> None:
    with pytest.raises(BadRequest, match="not valid JSON"):
        parse_json('{"a": "\ud800"}')


def test_surrogate_pair_escape_is_one_character() -> None:
    assert parse_json(b'{"a": "\\ud83d\\ude00"}') == {"a": "\U0001f600"}


def test_deeply_nested_json_is_refused_not_crashed() -> None:
    depth = 200_000
    with pytest.raises(BadRequest, match="nested too deeply"):
        parse_json("[" * depth + "]" * depth)


def test_error_names_the_input() -> None:
    with pytest.raises(BadRequest, match=r"^Line 3 is not valid JSON"):
        parse_json("{", what="Line 3")


def test_round_trip_of_a_parsed_body_is_plain_json() -> None:
    value = parse_json(_tool_body("2"))
    assert json.loads(json.dumps(value, allow_nan=False)) == value
