"""Chat-completions bodies in a batch are checked as the endpoint would check them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from batchgw.config.catalog import Catalog, load_catalog
from batchgw.config.settings import Settings
from batchgw.domain.errors import BadRequest
from batchgw.validation import RequestInvalid
from batchgw.validation.chat import (
    MAX_CONTENT_PARTS,
    MAX_MESSAGES,
    MAX_STOP_SEQUENCES,
    MAX_TOOLS,
    validate_chat_body,
)
from batchgw.validation.create import CreatePlan, validate_create

CONFIG = Path(__file__).resolve().parents[2] / "config" / "models.local.json"
SETTINGS = Settings.model_validate({})


@pytest.fixture(scope="module")
def catalog() -> Catalog:
    return load_catalog(CONFIG)


_DROP = object()  # a field value meaning "leave the field out"


def _body(**fields: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"model": "sim-chat", "messages": [{"role": "user", "content": "hi"}]}
    body.update(fields)
    return {key: value for key, value in body.items() if value is not _DROP}


def _create(catalog: Catalog, body: Any) -> CreatePlan:
    """A batch whose second request (custom_id 'q-2') carries ``body``."""
    requests = [
        {"custom_id": "q-1", "body": _body()},
        {"custom_id": "q-2", "method": "POST", "url": "/v1/chat/completions", "body": body},
    ]
    return validate_create({"requests": requests}, settings=SETTINGS, catalog=catalog, role="internal")


def _refused(catalog: Catalog, body: Any) -> tuple[BadRequest, RequestInvalid]:
    with pytest.raises(BadRequest) as caught:
        _create(catalog, body)
    error = caught.value
    assert error.message.startswith("requests[1] (custom_id 'q-2'): ")
    assert error.code == 400
    cause = error.__cause__
    assert isinstance(cause, RequestInvalid)
    return error, cause


def _invalid(body: Any) -> RequestInvalid:
    with pytest.raises(RequestInvalid) as caught:
        validate_chat_body(body)
    return caught.value


# --- the body and its model ---------------------------------------------------------------


def test_valid_body_returns_the_model_name_it_asks_for() -> None:
    assert validate_chat_body(_body(model="sim-chat-latest")) == "sim-chat-latest"


def test_body_that_is_not_an_object_is_refused() -> None:
    error = _invalid(["model"])
    assert error.code == "invalid_body"
    assert error.param is None


@pytest.mark.parametrize("model", [_DROP, None, "", 42])
def test_missing_or_non_string_model_is_refused(catalog: Catalog, model: Any) -> None:
    error, cause = _refused(catalog, _body(model=model))
    assert error.param == "requests[1].body.model"
    assert cause.code == "invalid_body"


def test_unknown_fields_are_passed_through(catalog: Catalog) -> None:
    body = _body(seed=7, user="u-1", logit_bias={"50256": -100}, reasoning_effort="low", x_custom={"a": 1})
    plan = _create(catalog, body)
    assert plan.requests[1].body is body
    assert plan.requests[1].body["x_custom"] == {"a": 1}


# --- stream -----------------------------------------------------------------------------


def test_stream_true_is_refused_naming_the_request(catalog: Catalog) -> None:
    error, cause = _refused(catalog, _body(stream=True))
    assert "stream" in error.message
    assert error.param == "requests[1].body.stream"
    assert cause.code == "unsupported_feature"


@pytest.mark.parametrize("stream", [False, None])
def test_stream_false_or_null_is_accepted(catalog: Catalog, stream: Any) -> None:
    assert _create(catalog, _body(stream=stream)).requests[1].body["stream"] is stream


def test_non_boolean_stream_is_refused(catalog: Catalog) -> None:
    _, cause = _refused(catalog, _body(stream="yes"))
    assert cause.code == "invalid_body"


def test_stream_options_without_stream_is_passed_through(catalog: Catalog) -> None:
    _create(catalog, _body(stream_options={"include_usage": True}))
    _create(catalog, _body(stream=False, stream_options={"include_usage": True}))


def test_stream_options_with_stream_true_is_refused(catalog: Catalog) -> None:
    _, cause = _refused(catalog, _body(stream=True, stream_options={"include_usage": True}))
    assert cause.code == "unsupported_feature"


def test_stream_options_that_is_not_an_object_is_refused(catalog: Catalog) -> None:
    error, _ = _refused(catalog, _body(stream_options="usage"))
    assert error.param == "requests[1].body.stream_options"


# --- messages ---------------------------------------------------------------------------


@pytest.mark.parametrize("messages", [_DROP, None, "hi", {"role": "user", "content": "hi"}])
def test_messages_that_are_not_an_array_are_refused(catalog: Catalog, messages: Any) -> None:
    error, cause = _refused(catalog, _body(messages=messages))
    assert error.param == "requests[1].body.messages"
    assert cause.code == "invalid_body"


def test_empty_messages_are_refused(catalog: Catalog) -> None:
    error, _ = _refused(catalog, _body(messages=[]))
    assert "at least one message" in error.message


def test_more_messages_than_the_limit_are_refused(catalog: Catalog) -> None:
    messages = [{"role": "user", "content": "hi"}] * (MAX_MESSAGES + 1)
    error, _ = _refused(catalog, _body(messages=messages))
    assert f"at most {MAX_MESSAGES}" in error.message


def test_messages_up_to_the_limit_are_accepted(catalog: Catalog) -> None:
    _create(catalog, _body(messages=[{"role": "user", "content": "hi"}] * MAX_MESSAGES))


def test_message_that_is_not_an_object_is_refused(catalog: Catalog) -> None:
    error, _ = _refused(catalog, _body(messages=["hi"]))
    assert error.param == "requests[1].body.messages[0]"


@pytest.mark.parametrize("role", ["bot", None, "", 1])
def test_unknown_or_missing_role_is_refused(catalog: Catalog, role: Any) -> None:
    error, _ = _refused(catalog, _body(messages=[{"role": role, "content": "hi"}]))
    assert error.param == "requests[1].body.messages[0].role"


@pytest.mark.parametrize("role", ["system", "developer", "user", "assistant"])
def test_each_role_with_text_content_is_accepted(catalog: Catalog, role: str) -> None:
    _create(catalog, _body(messages=[{"role": role, "content": "text"}]))


def test_user_message_without_content_is_refused(catalog: Catalog) -> None:
    error, _ = _refused(catalog, _body(messages=[{"role": "user"}]))
    assert error.param == "requests[1].body.messages[0].content"


@pytest.mark.parametrize("content", [42, {"type": "text", "text": "hi"}, True])
def test_content_that_is_neither_string_nor_parts_is_refused(catalog: Catalog, content: Any) -> None:
    error, _ = _refused(catalog, _body(messages=[{"role": "user", "content": content}]))
    assert error.param == "requests[1].body.messages[0].content"


def test_content_parts_of_every_type_are_accepted(catalog: Catalog) -> None:
    parts = [
        {"type": "text", "text": "what is this?"},
        {"type": "image_url", "image_url": {"url": "https://example.com/a.png", "detail": "low"}},
        {"type": "input_audio", "input_audio": {"data": "AAAA", "format": "wav"}},
        {"type": "file", "file": {"file_id": "file-1"}},
    ]
    assistant = {"role": "assistant", "content": [{"type": "refusal", "refusal": "no"}]}
    _create(catalog, _body(messages=[{"role": "user", "content": parts}, assistant]))


def test_unknown_content_part_type_is_refused(catalog: Catalog) -> None:
    parts = [{"type": "text", "text": "hi"}, {"type": "video", "video": {}}]
    error, _ = _refused(catalog, _body(messages=[{"role": "user", "content": parts}]))
    assert error.param == "requests[1].body.messages[0].content[1].type"


@pytest.mark.parametrize(
    ("part", "param"),
    [
        ({"type": "text"}, "content[0].text"),
        ({"type": "text", "text": 1}, "content[0].text"),
        ({"type": "image_url", "image_url": "https://example.com/a.png"}, "content[0].image_url"),
        ({"type": "image_url", "image_url": {}}, "content[0].image_url.url"),
        ({"type": "input_audio", "input_audio": {"data": "AAAA"}}, "content[0].input_audio.format"),
        ({"type": "file", "file": "file-1"}, "content[0].file"),
        ("hi", "content[0]"),
    ],
)
def test_malformed_content_part_is_refused(catalog: Catalog, part: Any, param: str) -> None:
    error, _ = _refused(catalog, _body(messages=[{"role": "user", "content": [part]}]))
    assert error.param == f"requests[1].body.messages[0].{param}"


def test_empty_content_parts_are_refused(catalog: Catalog) -> None:
    _refused(catalog, _body(messages=[{"role": "user", "content": []}]))


def test_more_content_parts_than_the_limit_are_refused(catalog: Catalog) -> None:
    parts = [{"type": "text", "text": "x"}] * (MAX_CONTENT_PARTS + 1)
    error, _ = _refused(catalog, _body(messages=[{"role": "user", "content": parts}]))
    assert f"at most {MAX_CONTENT_PARTS}" in error.message


def test_content_parts_up_to_the_limit_are_accepted(catalog: Catalog) -> None:
    parts = [{"type": "text", "text": "x"}] * MAX_CONTENT_PARTS
    _create(catalog, _body(messages=[{"role": "user", "content": parts}]))


# --- tool calls and tool messages -------------------------------------------------------

_CALL = {"id": "call_1", "type": "function", "function": {"name": "lookup", "arguments": "{}"}}


def test_assistant_with_tool_calls_may_have_null_content(catalog: Catalog) -> None:
    messages = [
        {"role": "user", "content": "look it up"},
        {"role": "assistant", "content": None, "tool_calls": [_CALL]},
        {"role": "tool", "tool_call_id": "call_1", "content": "42"},
    ]
    _create(catalog, _body(messages=messages))


def test_assistant_without_content_or_tool_calls_is_refused(catalog: Catalog) -> None:
    error, _ = _refused(catalog, _body(messages=[{"role": "assistant", "content": None}]))
    assert error.param == "requests[1].body.messages[0].content"


def test_malformed_tool_call_is_refused(catalog: Catalog) -> None:
    call = {"id": "call_1", "type": "function", "function": {"name": "lookup", "arguments": {"q": 1}}}
    error, _ = _refused(catalog, _body(messages=[{"role": "assistant", "tool_calls": [call]}]))
    assert error.param == "requests[1].body.messages[0].tool_calls[0].function.arguments"


@pytest.mark.parametrize("tool_call_id", [_DROP, "", 7])
def test_tool_message_needs_a_tool_call_id(catalog: Catalog, tool_call_id: Any) -> None:
    message = {"role": "tool", "content": "42", "tool_call_id": tool_call_id}
    message = {key: value for key, value in message.items() if value is not _DROP}
    error, _ = _refused(catalog, _body(messages=[message]))
    assert error.param == "requests[1].body.messages[0].tool_call_id"


def test_function_message_needs_a_name(catalog: Catalog) -> None:
    _create(catalog, _body(messages=[{"role": "function", "name": "lookup", "content": "42"}]))
    error, _ = _refused(catalog, _body(messages=[{"role": "function", "content": "42"}]))
    assert error.param == "requests[1].body.messages[0].name"


# --- max tokens and sampling ------------------------------------------------------------


def test_max_tokens_and_max_completion_tokens_together_are_refused(catalog: Catalog) -> None:
    error, cause = _refused(catalog, _body(max_tokens=10, max_completion_tokens=10))
    assert "max_tokens and max_completion_tokens" in error.message
    assert cause.code == "invalid_body"


@pytest.mark.parametrize("field", ["max_tokens", "max_completion_tokens"])
def test_either_max_tokens_field_alone_is_accepted(catalog: Catalog, field: str) -> None:
    _create(catalog, _body(**{field: 50}))


@pytest.mark.parametrize("field", ["max_tokens", "max_completion_tokens"])
@pytest.mark.parametrize("value", ["50", True, 0, -1, 1.5])
def test_max_tokens_must_be_a_positive_integer(catalog: Catalog, field: str, value: Any) -> None:
    error, _ = _refused(catalog, _body(**{field: value}))
    assert error.param == f"requests[1].body.{field}"


@pytest.mark.parametrize("n", [0, 129, 1.0, True, "2"])
def test_n_outside_1_to_128_is_refused(catalog: Catalog, n: Any) -> None:
    error, _ = _refused(catalog, _body(n=n))
    assert error.param == "requests[1].body.n"


def test_n_of_128_is_accepted(catalog: Catalog) -> None:
    _create(catalog, _body(n=128))


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("temperature", -0.1),
        ("temperature", 2.01),
        ("temperature", "1"),
        ("temperature", True),
        ("top_p", 1.5),
        ("top_p", -1),
        ("presence_penalty", 3),
        ("frequency_penalty", -2.5),
    ],
)
def test_sampling_parameter_out_of_range_is_refused(catalog: Catalog, field: str, value: Any) -> None:
    error, _ = _refused(catalog, _body(**{field: value}))
    assert error.param == f"requests[1].body.{field}"


def test_sampling_parameters_at_their_bounds_are_accepted(catalog: Catalog) -> None:
    _create(catalog, _body(temperature=2, top_p=0, presence_penalty=-2, frequency_penalty=2.0))
    _create(catalog, _body(temperature=0.0, top_p=1))


# --- stop -------------------------------------------------------------------------------


def test_more_than_four_stop_sequences_are_refused(catalog: Catalog) -> None:
    error, _ = _refused(catalog, _body(stop=["a", "b", "c", "d", "e"]))
    assert f"at most {MAX_STOP_SEQUENCES}" in error.message
    assert error.param == "requests[1].body.stop"


@pytest.mark.parametrize("stop", ["END", ["a", "b", "c", "d"], [], None])
def test_stop_string_or_up_to_four_strings_is_accepted(catalog: Catalog, stop: Any) -> None:
    _create(catalog, _body(stop=stop))


@pytest.mark.parametrize("stop", [1, ["a", 2], {"a": "b"}])
def test_stop_that_is_not_strings_is_refused(catalog: Catalog, stop: Any) -> None:
    _refused(catalog, _body(stop=stop))


# --- tools ------------------------------------------------------------------------------


def _tool(name: Any = "lookup", **function: Any) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, **function}}


def test_more_than_128_tools_are_refused(catalog: Catalog) -> None:
    tools = [_tool(f"t{i}") for i in range(MAX_TOOLS + 1)]
    error, _ = _refused(catalog, _body(tools=tools))
    assert f"at most {MAX_TOOLS}" in error.message
    assert error.param == "requests[1].body.tools"


def test_128_tools_with_schemas_are_accepted(catalog: Catalog) -> None:
    schema = {"type": "object", "properties": {"q": {"type": "string", "maximum": 1.5}}}
    tools = [_tool(f"t-{i}_x", description="d", parameters=schema) for i in range(MAX_TOOLS)]
    _create(catalog, _body(tools=tools, tool_choice="auto"))


@pytest.mark.parametrize("name", ["has space", "", "x" * 65, "dotted.name", None, 7])
def test_tool_with_invalid_name_is_refused(catalog: Catalog, name: Any) -> None:
    error, _ = _refused(catalog, _body(tools=[_tool("ok"), _tool(name)]))
    assert error.param == "requests[1].body.tools[1].function.name"


def test_tool_name_of_64_characters_is_accepted(catalog: Catalog) -> None:
    _create(catalog, _body(tools=[_tool("x" * 64)]))


@pytest.mark.parametrize(
    ("tool", "param"),
    [
        ({"type": "retrieval"}, "tools[0].type"),
        ({"type": "function"}, "tools[0].function"),
        ({"type": "function", "function": {"name": "f", "parameters": "{}"}}, "tools[0].function.parameters"),
        ("lookup", "tools[0]"),
    ],
)
def test_malformed_tool_is_refused(catalog: Catalog, tool: Any, param: str) -> None:
    error, _ = _refused(catalog, _body(tools=[tool]))
    assert error.param == f"requests[1].body.{param}"


def test_tools_that_are_not_an_array_are_refused(catalog: Catalog) -> None:
    _refused(catalog, _body(tools={"type": "function"}))


def test_error_param_is_the_dotted_path_inside_the_body() -> None:
    parts = [{"type": "text", "text": "a"}, {"type": "text", "text": 2}]
    error = _invalid(_body(messages=[{"role": "system", "content": "s"}, {"role": "user", "content": parts}]))
    assert error.param == "messages[1].content[1].text"
    assert error.message == "messages[1].content[1].text must be a string"
