"""Responses bodies in a batch: independent requests only, and nothing the gateway would drop."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from batchgw.config.catalog import Catalog, load_catalog
from batchgw.config.settings import Settings
from batchgw.domain.errors import BadRequest
from batchgw.validation import RequestInvalid
from batchgw.validation.create import CreatePlan, validate_create
from batchgw.validation.responses import validate_responses_body

CONFIG = Path(__file__).resolve().parents[2] / "config" / "models.local.json"
SETTINGS = Settings.model_validate({})


@pytest.fixture(scope="module")
def catalog() -> Catalog:
    return load_catalog(CONFIG)


def _body(**fields: Any) -> dict[str, Any]:
    return {"model": "sim-chat", "input": "Summarize the plot of Hamlet.", **fields}


def _create(catalog: Catalog, body: Any) -> CreatePlan:
    request = {"custom_id": "r-1", "url": "/v1/responses", "body": body}
    return validate_create({"requests": [request]}, settings=SETTINGS, catalog=catalog, role="internal")


def _refused(catalog: Catalog, body: Any) -> tuple[BadRequest, RequestInvalid]:
    with pytest.raises(BadRequest) as caught:
        _create(catalog, body)
    error = caught.value
    assert error.message.startswith("requests[0] (custom_id 'r-1'): ")
    assert isinstance(error.__cause__, RequestInvalid)
    return error, error.__cause__


_FUNCTION_TOOL = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    "strict": True,
}


def test_valid_responses_batch_plans_the_model(catalog: Catalog) -> None:
    plan = _create(catalog, _body(model="sim-chat-latest"))
    assert plan.endpoint == "/v1/responses"
    assert plan.requests[0].model == "sim-chat"


def test_validator_returns_the_model_name() -> None:
    assert validate_responses_body(_body()) == "sim-chat"


def test_every_known_optional_field_is_accepted(catalog: Catalog) -> None:
    body = _body(
        instructions="Be brief.",
        max_output_tokens=200,
        temperature=1.5,
        top_p=0.9,
        tools=[_FUNCTION_TOOL],
        tool_choice="auto",
        parallel_tool_calls=False,
        text={"format": {"type": "text"}},
        reasoning={"effort": "low"},
        metadata={"run": "7"},
        user="u-1",
        truncation="auto",
        store=False,
        stream=False,
        background=False,
    )
    assert _create(catalog, body).requests[0].body is body


def test_input_items_of_every_accepted_kind_are_accepted(catalog: Catalog) -> None:
    items = [
        {"role": "developer", "content": "Answer in French."},
        {
            "type": "message",
            "role": "user",
            "content": [
                {"type": "input_text", "text": "What is in this image?"},
                {"type": "input_image", "image_url": "https://example.com/a.png", "detail": "low"},
            ],
        },
        {"role": "assistant", "content": [{"type": "output_text", "text": "A cat."}]},
        {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "call_1", "output": "sunny"},
    ]
    _create(catalog, _body(input=items, tools=[_FUNCTION_TOOL]))


# --- independence -----------------------------------------------------------------------


def test_store_true_is_refused(catalog: Catalog) -> None:
    error, cause = _refused(catalog, _body(store=True))
    assert error.param == "requests[0].body.store"
    assert cause.code == "unsupported_feature"


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("previous_response_id", "resp_123"),
        ("conversation", "conv_123"),
        ("background", True),
        ("stream", True),
    ],
)
def test_what_makes_a_request_dependent_is_refused(catalog: Catalog, field: str, value: Any) -> None:
    error, cause = _refused(catalog, _body(**{field: value}))
    assert error.param == f"requests[0].body.{field}"
    assert cause.code == "unsupported_feature"


def test_item_reference_is_refused(catalog: Catalog) -> None:
    error, cause = _refused(catalog, _body(input=[{"type": "item_reference", "id": "msg_1"}]))
    assert error.param == "requests[0].body.input[0]"
    assert cause.code == "unsupported_feature"


# --- hosted tools and file inputs ---------------------------------------------------------


@pytest.mark.parametrize(
    "tool_type",
    [
        "web_search",
        "web_search_preview",
        "file_search",
        "code_interpreter",
        "computer_use_preview",
        "image_generation",
        "mcp",
    ],
)
def test_hosted_tools_are_refused(catalog: Catalog, tool_type: str) -> None:
    error, cause = _refused(catalog, _body(tools=[_FUNCTION_TOOL, {"type": tool_type}]))
    assert error.param == "requests[0].body.tools[1].type"
    assert tool_type in error.message
    assert cause.code == "unsupported_feature"


def test_web_search_tool_is_refused(catalog: Catalog) -> None:
    error, cause = _refused(catalog, _body(tools=[{"type": "web_search"}]))
    assert "only function tools are supported" in error.message
    assert cause.code == "unsupported_feature"


def test_hosted_tool_items_in_the_input_are_refused(catalog: Catalog) -> None:
    _, cause = _refused(
        catalog, _body(input=[{"type": "web_search_call", "id": "ws_1", "status": "completed"}])
    )
    assert cause.code == "unsupported_feature"


def test_image_by_file_id_is_refused(catalog: Catalog) -> None:
    content = [{"type": "input_image", "file_id": "file-123"}]
    error, cause = _refused(catalog, _body(input=[{"role": "user", "content": content}]))
    assert error.param == "requests[0].body.input[0].content[0].file_id"
    assert cause.code == "unsupported_feature"


def test_file_inputs_are_refused(catalog: Catalog) -> None:
    content = [{"type": "input_file", "file_url": "https://example.com/a.pdf"}]
    error, cause = _refused(catalog, _body(input=[{"role": "user", "content": content}]))
    assert error.param == "requests[0].body.input[0].content[0].type"
    assert cause.code == "unsupported_feature"


@pytest.mark.parametrize("field", ["include", "prompt", "service_tier", "prompt_cache_key", "max_tool_calls"])
def test_unknown_fields_are_refused_as_the_gateway_would_drop_them(catalog: Catalog, field: str) -> None:
    error, cause = _refused(catalog, _body(**{field: "x"}))
    assert f"'{field}'" in error.message
    assert "the gateway would have to drop it" in error.message
    assert error.param == f"requests[0].body.{field}"
    assert cause.code == "unsupported_feature"


# --- the input ---------------------------------------------------------------------------


@pytest.mark.parametrize("value", [None, "", [], 3])
def test_missing_or_empty_input_is_refused(catalog: Catalog, value: Any) -> None:
    body = _body(input=value)
    error, cause = _refused(catalog, body)
    assert error.param == "requests[0].body.input"
    assert cause.code == "invalid_body"


@pytest.mark.parametrize(
    ("item", "param"),
    [
        ("hi", "input[0]"),
        ({"role": "tool", "content": "x"}, "input[0].role"),
        ({"content": "x"}, "input[0].role"),
        ({"role": "user"}, "input[0].content"),
        ({"role": "user", "content": []}, "input[0].content"),
        ({"role": "user", "content": [{"type": "text", "text": "x"}]}, "input[0].content[0].type"),
        ({"role": "user", "content": [{"type": "input_text"}]}, "input[0].content[0].text"),
        ({"role": "user", "content": [{"type": "input_image"}]}, "input[0].content[0].image_url"),
        ({"type": "function_call", "call_id": "c", "name": "f"}, "input[0].arguments"),
        ({"type": "function_call_output", "call_id": "c", "output": 3}, "input[0].output"),
        ({"type": "reasoning_summary"}, "input[0].type"),
    ],
)
def test_malformed_input_items_are_refused(catalog: Catalog, item: Any, param: str) -> None:
    error, cause = _refused(catalog, _body(input=[item]))
    assert error.param == f"requests[0].body.{param}"
    assert cause.code == "invalid_body"


# --- other fields ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("max_output_tokens", 0),
        ("max_output_tokens", "100"),
        ("temperature", 2.5),
        ("top_p", 1.5),
        ("instructions", 3),
        ("tool_choice", 3),
        ("parallel_tool_calls", "yes"),
        ("text", "json"),
        ("reasoning", "high"),
        ("user", 3),
        ("truncation", "sometimes"),
        ("metadata", {"k": 1}),
        ("metadata", {f"k{i}": "v" for i in range(17)}),
        ("store", "no"),
    ],
)
def test_malformed_optional_fields_are_refused(catalog: Catalog, field: str, value: Any) -> None:
    error, cause = _refused(catalog, _body(**{field: value}))
    assert error.param is not None and error.param.startswith(f"requests[0].body.{field}")
    assert cause.code == "invalid_body"


@pytest.mark.parametrize(
    ("tool", "param"),
    [
        ({"type": "function", "name": "has space"}, "tools[0].name"),
        ({"type": "function", "name": "f", "parameters": "x"}, "tools[0].parameters"),
        ({"name": "f"}, "tools[0].type"),
    ],
)
def test_malformed_function_tools_are_refused(catalog: Catalog, tool: Any, param: str) -> None:
    error, cause = _refused(catalog, _body(tools=[tool]))
    assert error.param == f"requests[0].body.{param}"
    assert cause.code == "invalid_body"


def test_model_without_the_responses_endpoint_is_refused(catalog: Catalog) -> None:
    error, cause = _refused(catalog, _body(model="sim-chat-only"))
    assert error.message.endswith("Model 'sim-chat-only' does not serve /v1/responses")
    assert cause.code == "model_unsupported"
