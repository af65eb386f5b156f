"""Messages bodies in a batch: checked under the batch's anthropic-version, and refused
whole when the model's route cannot carry them as written."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from batchgw.config.catalog import Catalog, load_catalog
from batchgw.config.settings import Settings
from batchgw.domain.errors import BadRequest
from batchgw.validation import RequestInvalid
from batchgw.validation.create import CreatePlan, check_anthropic_version, plan_request, validate_create
from batchgw.validation.messages import KNOWN_ANTHROPIC_VERSIONS, validate_messages_body

CONFIG = Path(__file__).resolve().parents[2] / "config" / "models.local.json"
SETTINGS = Settings.model_validate({})
OLD = "2023-06-01"
NEW = "2026-10-21"


@pytest.fixture(scope="module")
def catalog() -> Catalog:
    return load_catalog(CONFIG)


def _body(model: str = "sim-claude", **fields: Any) -> dict[str, Any]:
    return {"model": model, "max_tokens": 512, "messages": [{"role": "user", "content": "Hello"}], **fields}


def _user(*blocks: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"role": "user", "content": list(blocks)}]


def _create(
    catalog: Catalog,
    body: Any,
    *,
    version: str | None = OLD,
    settings: Settings = SETTINGS,
    url: str = "/v1/messages",
) -> CreatePlan:
    request = {"custom_id": "m-1", "url": url, "body": body}
    return validate_create(
        {"requests": [request]},
        settings=settings,
        catalog=catalog,
        role="internal",
        anthropic_version=version,
    )


def _batch_refused(catalog: Catalog, body: Any, **kwargs: Any) -> BadRequest:
    """A refusal of the batch as a whole (its version), naming no request."""
    with pytest.raises(BadRequest) as caught:
        _create(catalog, body, **kwargs)
    assert caught.value.status == 400
    assert caught.value.__cause__ is None
    return caught.value


def _refused(catalog: Catalog, body: Any, **kwargs: Any) -> tuple[BadRequest, RequestInvalid]:
    with pytest.raises(BadRequest) as caught:
        _create(catalog, body, **kwargs)
    error = caught.value
    assert error.message.startswith("requests[0] (custom_id 'm-1'): ")
    assert isinstance(error.__cause__, RequestInvalid)
    return error, error.__cause__


_CLIENT_TOOL = {
    "name": "get_weather",
    "description": "The weather in a city",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}
_TOOL_TURN = [
    {"role": "user", "content": "Weather in Paris?"},
    {
        "role": "assistant",
        "content": [
            {"type": "text", "text": "Let me look."},
            {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}},
        ],
    },
    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "sunny"}]},
]
_PDF = {"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": "JVBERi0="}}


# --- a valid batch ----------------------------------------------------------------------


def test_spec_example_is_accepted_with_its_version(catalog: Catalog) -> None:
    plan = _create(catalog, _body(), version=OLD)
    assert plan.endpoint == "/v1/messages"
    assert plan.requests[0].model == "sim-claude"
    assert plan.requests[0].url == "/v1/messages"


@pytest.mark.parametrize("version", KNOWN_ANTHROPIC_VERSIONS)
def test_a_rich_request_is_accepted_under_every_version(catalog: Catalog, version: str) -> None:
    body = _body(
        system=[{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}],
        messages=[
            *_TOOL_TURN,
            {"role": "assistant", "content": "It is sunny."},
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "And this?"},
                    {"type": "image", "source": {"type": "url", "url": "https://example.com/a.png"}},
                    {
                        "type": "image",
                        "source": {"type": "base64", "media_type": "image/png", "data": "iVBO"},
                    },
                    {**_PDF, "citations": {"enabled": True}, "title": "Report"},
                ],
            },
        ],
        tools=[_CLIENT_TOOL],
        tool_choice={"type": "auto", "disable_parallel_tool_use": True},
        stop_sequences=["\n\nHuman:"],
        metadata={"user_id": "u-1"},
        max_tokens=2048,
        thinking={"type": "enabled", "budget_tokens": 1024},
        stream=False,
    )
    assert _create(catalog, body, version=version).requests[0].body is body


def test_validator_returns_the_model_name() -> None:
    assert validate_messages_body(_body(model="claude-x"), OLD) == "claude-x"


def test_known_versions_are_the_specs() -> None:
    assert KNOWN_ANTHROPIC_VERSIONS == ("2023-06-01", "2026-10-21")


def test_validator_called_with_an_unknown_version_is_a_programming_error() -> None:
    with pytest.raises(ValueError):
        validate_messages_body(_body(), "2024-01-01")


# --- the anthropic-version header -------------------------------------------------------


def test_messages_batch_without_a_version_is_refused(catalog: Catalog) -> None:
    error = _batch_refused(catalog, _body(), version=None)
    assert error.message == "anthropic-version header is required for a /v1/messages batch"


def test_chat_batch_with_a_version_is_refused(catalog: Catalog) -> None:
    chat = {"model": "sim-chat", "messages": [{"role": "user", "content": "hi"}]}
    error = _batch_refused(catalog, chat, version=OLD, url="/v1/chat/completions")
    assert error.message == "the anthropic-version header is only for /v1/messages batches"


def test_defaulted_chat_url_with_a_version_is_refused(catalog: Catalog) -> None:
    request = {
        "custom_id": "q-1",
        "body": {"model": "sim-chat", "messages": [{"role": "user", "content": "x"}]},
    }
    with pytest.raises(BadRequest) as caught:
        validate_create(
            {"requests": [request]},
            settings=SETTINGS,
            catalog=catalog,
            role="internal",
            anthropic_version=OLD,
        )
    assert "only for /v1/messages batches" in caught.value.message


def test_unknown_version_is_refused(catalog: Catalog) -> None:
    error = _batch_refused(catalog, _body(), version="2024-02-30")
    assert error.message == (
        "anthropic-version '2024-02-30' is not a known version; use one of 2023-06-01, 2026-10-21"
    )


def test_version_the_operator_does_not_allow_is_refused(catalog: Catalog) -> None:
    settings = Settings.model_validate({"BATCH_ANTHROPIC_VERSIONS": OLD})
    error = _batch_refused(catalog, _body(), version=NEW, settings=settings)
    assert error.message == (
        "anthropic-version '2026-10-21' is not allowed for new batches on this gateway; use one of 2023-06-01"
    )
    assert _create(catalog, _body(), version=OLD, settings=settings).requests[0].model == "sim-claude"


def test_anthropic_version_field_in_the_create_body_is_refused(catalog: Catalog) -> None:
    request = {"custom_id": "m-1", "url": "/v1/messages", "body": _body()}
    with pytest.raises(BadRequest) as caught:
        validate_create(
            {"requests": [request], "anthropic_version": OLD},
            settings=SETTINGS,
            catalog=catalog,
            role="internal",
            anthropic_version=OLD,
        )
    assert caught.value.param == "anthropic_version"
    assert "anthropic-version header" in caught.value.message


def test_anthropic_version_field_in_a_request_body_is_refused(catalog: Catalog) -> None:
    error, cause = _refused(catalog, _body(anthropic_version=OLD))
    assert error.param == "requests[0].body.anthropic_version"
    assert cause.code == "invalid_body"


def test_anthropic_version_field_in_a_chat_body_is_refused_too(catalog: Catalog) -> None:
    chat = {"model": "sim-chat", "messages": [{"role": "user", "content": "hi"}], "anthropic_version": OLD}
    error, _ = _refused(catalog, chat, version=None, url="/v1/chat/completions")
    assert error.param == "requests[0].body.anthropic_version"


def test_check_anthropic_version_keeps_the_version_of_a_messages_batch_only() -> None:
    assert check_anthropic_version("/v1/messages", NEW, settings=SETTINGS) == NEW
    assert check_anthropic_version("/v1/embeddings", None, settings=SETTINGS) is None


def test_file_lines_are_checked_under_the_batch_version(catalog: Catalog) -> None:
    line = {"custom_id": "m-1", "method": "POST", "url": "/v1/messages", "body": _body(temperature=0.5)}
    kwargs: dict[str, Any] = {"endpoint": "/v1/messages", "catalog": catalog, "role": "internal"}
    assert plan_request(line, anthropic_version=OLD, **kwargs).model == "sim-claude"
    with pytest.raises(RequestInvalid) as caught:
        plan_request(line, anthropic_version=NEW, **kwargs)
    assert caught.value.param == "body.temperature"


def test_messages_line_without_a_version_is_refused(catalog: Catalog) -> None:
    line = {"custom_id": "m-1", "url": "/v1/messages", "body": _body()}
    with pytest.raises(RequestInvalid) as caught:
        plan_request(line, endpoint="/v1/messages", catalog=catalog, role="internal")
    assert caught.value.code == "invalid_url"


# --- what 2026-10-21 refuses ------------------------------------------------------------


@pytest.mark.parametrize(("field", "value"), [("temperature", 0.2), ("top_p", 0.9), ("top_k", 40)])
def test_new_version_refuses_sampling_parameters(catalog: Catalog, field: str, value: Any) -> None:
    error, cause = _refused(catalog, _body(**{field: value}), version=NEW)
    assert error.message.endswith(f"{field} is not accepted under anthropic-version 2026-10-21")
    assert error.param == f"requests[0].body.{field}"
    assert cause.code == "invalid_body"
    _create(catalog, _body(**{field: value}), version=OLD)


def test_new_version_refuses_documents_in_assistant_messages(catalog: Catalog) -> None:
    messages = [{"role": "user", "content": "Draft it."}, {"role": "assistant", "content": [_PDF]}]
    error, _ = _refused(catalog, _body(messages=messages), version=NEW)
    assert error.param == "requests[0].body.messages[1].content[0]"
    assert "document blocks in assistant messages" in error.message
    _create(catalog, _body(messages=messages), version=OLD)


def test_new_version_refuses_citations_on_user_text(catalog: Catalog) -> None:
    text = {"type": "text", "text": "Quoted.", "citations": []}
    error, _ = _refused(catalog, _body(messages=_user(text)), version=NEW)
    assert error.param == "requests[0].body.messages[0].content[0].citations"
    _create(catalog, _body(messages=_user(text)), version=OLD)


def test_new_version_accepts_citations_on_assistant_text(catalog: Catalog) -> None:
    messages = [
        {"role": "user", "content": "Cite."},
        {"role": "assistant", "content": [{"type": "text", "text": "Quoted.", "citations": []}]},
    ]
    _create(catalog, _body(messages=messages), version=NEW)


# --- what a batch cannot run -------------------------------------------------------------


@pytest.mark.parametrize(
    "tool_type",
    [
        "web_search_20250305",
        "web_fetch_20250910",
        "code_execution_20250825",
        "bash_20250124",
        "text_editor_20250728",
        "computer_20250124",
    ],
)
def test_server_tools_are_refused(catalog: Catalog, tool_type: str) -> None:
    tools = [_CLIENT_TOOL, {"type": tool_type, "name": "server"}]
    error, cause = _refused(catalog, _body(tools=tools))
    assert error.param == "requests[0].body.tools[1].type"
    assert f"server tool ('{tool_type}')" in error.message
    assert cause.code == "unsupported_feature"


def test_custom_typed_client_tool_is_accepted(catalog: Catalog) -> None:
    _create(catalog, _body(tools=[{**_CLIENT_TOOL, "type": "custom"}]))


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("mcp_servers", [{"type": "url", "url": "https://mcp.example.com", "name": "x"}]),
        ("container", "container_1"),
        ("service_tier", "auto"),
        ("betas", ["files-api-2025-04-14"]),
    ],
)
def test_mcp_containers_service_tier_and_betas_are_refused(catalog: Catalog, field: str, value: Any) -> None:
    error, cause = _refused(catalog, _body(**{field: value}))
    assert error.param == f"requests[0].body.{field}"
    assert cause.code == "unsupported_feature"


@pytest.mark.parametrize(
    "block",
    [
        {"type": "image", "source": {"type": "file", "file_id": "file_1"}},
        {"type": "document", "source": {"type": "file", "file_id": "file_1"}},
        {"type": "document", "source": {"type": "base64", "file_id": "file_1"}},
    ],
)
def test_files_api_sources_are_refused(catalog: Catalog, block: dict[str, Any]) -> None:
    error, cause = _refused(catalog, _body(messages=_user(block)))
    assert error.param == "requests[0].body.messages[0].content[0].source"
    assert "Files API" in error.message
    assert cause.code == "unsupported_feature"


def test_server_tool_blocks_are_refused(catalog: Catalog) -> None:
    messages = [
        {"role": "user", "content": "Search."},
        {
            "role": "assistant",
            "content": [{"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search"}],
        },
    ]
    _, cause = _refused(catalog, _body(messages=messages))
    assert cause.code == "unsupported_feature"


def test_stream_true_is_refused(catalog: Catalog) -> None:
    error, cause = _refused(catalog, _body(stream=True))
    assert error.param == "requests[0].body.stream"
    assert cause.code == "unsupported_feature"


@pytest.mark.parametrize("field", ["n", "response_format", "stop", "inference_geo"])
def test_unknown_fields_are_refused(catalog: Catalog, field: str) -> None:
    fields: dict[str, Any] = {field: 1}
    error, cause = _refused(catalog, _body(**fields))
    assert error.param == f"requests[0].body.{field}"
    assert cause.code == "invalid_body"


# --- the body's shape --------------------------------------------------------------------


def test_missing_max_tokens_is_refused_with_its_own_code(catalog: Catalog) -> None:
    body = _body()
    del body["max_tokens"]
    error, cause = _refused(catalog, body)
    assert error.param == "requests[0].body.max_tokens"
    assert cause.code == "missing_max_tokens"


@pytest.mark.parametrize("value", [0, -5, 1.5, "512", True])
def test_max_tokens_must_be_a_positive_integer(catalog: Catalog, value: Any) -> None:
    _, cause = _refused(catalog, _body(max_tokens=value))
    assert cause.code == "invalid_body"


@pytest.mark.parametrize("model", [None, "", 5])
def test_missing_or_non_string_model_is_refused(catalog: Catalog, model: Any) -> None:
    error, _ = _refused(catalog, _body(model=model))
    assert error.param == "requests[0].body.model"


@pytest.mark.parametrize(
    ("messages", "param"),
    [
        (None, "messages"),
        ([], "messages"),
        ("hi", "messages"),
        (["hi"], "messages[0]"),
        ([{"role": "system", "content": "x"}], "messages[0].role"),
        ([{"content": "x"}], "messages[0].role"),
        ([{"role": "user"}], "messages[0].content"),
        ([{"role": "user", "content": []}], "messages[0].content"),
        ([{"role": "user", "content": 3}], "messages[0].content"),
        ([{"role": "user", "content": "x", "name": "bob"}], "messages[0].name"),
        (_user({"type": "text"}), "messages[0].content[0].text"),
        (_user({"type": "text", "text": ""}), "messages[0].content[0].text"),
        (_user({"type": "text", "text": "x", "extra": 1}), "messages[0].content[0].extra"),
        (_user({"type": "video"}), "messages[0].content[0].type"),
        (
            _user({"type": "image", "source": {"type": "base64", "media_type": "image/bmp", "data": "x"}}),
            "messages[0].content[0].source.media_type",
        ),
        (_user({"type": "image", "source": {"type": "url"}}), "messages[0].content[0].source.url"),
        (
            _user({"type": "document", "source": {"type": "text", "media_type": "text/html", "data": "x"}}),
            "messages[0].content[0].source.media_type",
        ),
        (
            _user({"type": "text", "text": "x", "cache_control": {"type": "forever"}}),
            "messages[0].content[0].cache_control",
        ),
        (_user({"type": "tool_use", "id": "t", "name": "f", "input": {}}), "messages[0].content[0].type"),
        (
            [{"role": "assistant", "content": [{"type": "tool_result", "tool_use_id": "t"}]}],
            "messages[0].content[0].type",
        ),
        (
            [{"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "f", "input": "{}"}]}],
            "messages[0].content[0].input",
        ),
        (
            _user({"type": "tool_result", "tool_use_id": "t", "is_error": "no"}),
            "messages[0].content[0].is_error",
        ),
        (
            _user({"type": "tool_result", "tool_use_id": "t", "content": [{"type": "tool_use"}]}),
            "messages[0].content[0].content[0].type",
        ),
    ],
)
def test_malformed_messages_are_refused_naming_the_field(catalog: Catalog, messages: Any, param: str) -> None:
    error, cause = _refused(catalog, _body(messages=messages))
    assert error.param == f"requests[0].body.{param}"
    assert cause.code == "invalid_body"


@pytest.mark.parametrize(
    ("field", "value", "param"),
    [
        ("system", 3, "system"),
        ("system", [{"type": "image"}], "system[0]"),
        ("stop_sequences", "STOP", "stop_sequences"),
        ("stop_sequences", ["a", "b", "c", "d", "e"], "stop_sequences"),
        ("temperature", 1.5, "temperature"),
        ("top_p", -0.1, "top_p"),
        ("top_k", -1, "top_k"),
        ("tools", {"name": "f"}, "tools"),
        ("tools", [{"name": "f"}], "tools[0].input_schema"),
        ("tools", [{"name": "f", "input_schema": {"type": "string"}}], "tools[0].input_schema"),
        ("tools", [{**_CLIENT_TOOL, "name": "bad name"}], "tools[0].name"),
        ("tools", [{**_CLIENT_TOOL, "input_examples": []}], "tools[0].input_examples"),
        ("tool_choice", "auto", "tool_choice"),
        ("tool_choice", {"type": "required"}, "tool_choice.type"),
        ("tool_choice", {"type": "tool"}, "tool_choice.name"),
        ("metadata", {"user_id": 5}, "metadata.user_id"),
        ("metadata", {"trace": "x"}, "metadata.trace"),
        ("thinking", {"type": "on"}, "thinking.type"),
        ("thinking", {"type": "enabled", "budget_tokens": 100}, "thinking.budget_tokens"),
        ("thinking", {"type": "enabled", "budget_tokens": 4096}, "thinking.budget_tokens"),
        ("output_config", "json", "output_config"),
        ("stream", "no", "stream"),
    ],
)
def test_malformed_parameters_are_refused(catalog: Catalog, field: str, value: Any, param: str) -> None:
    error, cause = _refused(catalog, _body(**{field: value}))
    assert error.param == f"requests[0].body.{param}"
    assert cause.code == "invalid_body"


# --- routing by capability ---------------------------------------------------------------


def test_thinking_on_a_chat_route_is_refused_but_runs_on_an_anthropic_route(catalog: Catalog) -> None:
    thinking = {"type": "enabled", "budget_tokens": 2048}
    error, cause = _refused(catalog, _body("sim-chat-only", max_tokens=4096, thinking=thinking))
    assert error.param == "requests[0].body.thinking"
    assert "model 'sim-chat-only', whose backend is not Anthropic's" in error.message
    assert cause.code == "unsupported_feature"
    _create(catalog, _body("sim-claude", max_tokens=4096, thinking=thinking))


def test_disabled_thinking_is_carried_to_a_chat_route(catalog: Catalog) -> None:
    _create(catalog, _body("sim-chat-only", thinking={"type": "disabled"}))


def test_plain_messages_run_on_chat_routes_by_translation(catalog: Catalog) -> None:
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBO"}}
    body = _body(
        "sim-chat-latest",
        system="Be brief.",
        messages=[*_TOOL_TURN, {"role": "user", "content": [{"type": "text", "text": "Look:"}, image]}],
        tools=[_CLIENT_TOOL],
        tool_choice={"type": "any"},
        stop_sequences=["END"],
        temperature=0.3,
        metadata={"user_id": "u-1"},
    )
    plan = _create(catalog, body)
    assert plan.requests[0].model == "sim-chat"
    assert _create(catalog, _body("sim-chat-only")).requests[0].model == "sim-chat-only"


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"top_k": 5}, "top_k"),
        ({"output_format": {"type": "json_schema", "schema": {"type": "object"}}}, "output_format"),
        (
            {"output_config": {"format": {"type": "json_schema", "schema": {"type": "object"}}}},
            "output_config",
        ),
        (
            {"system": [{"type": "text", "text": "x", "cache_control": {"type": "ephemeral"}}]},
            "system[0].cache_control",
        ),
        ({"tools": [{**_CLIENT_TOOL, "cache_control": {"type": "ephemeral"}}]}, "tools[0].cache_control"),
        ({"tools": [{**_CLIENT_TOOL, "strict": True}]}, "tools[0].strict"),
        (
            {
                "messages": _user(
                    {"type": "text", "text": "x", "cache_control": {"type": "ephemeral", "ttl": "1h"}}
                )
            },
            "messages[0].content[0].cache_control",
        ),
        ({"messages": _user(_PDF)}, "messages[0].content[0]"),
        (
            {
                "messages": _user(
                    {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "x"}}
                )
            },
            "messages[0].content[0]",
        ),
        (
            {
                "messages": [
                    {"role": "user", "content": "q"},
                    {
                        "role": "assistant",
                        "content": [{"type": "text", "text": "a", "citations": [{"x": 1}]}],
                    },
                ]
            },
            "messages[1].content[0].citations",
        ),
        (
            {
                "messages": [
                    {"role": "user", "content": "q"},
                    {
                        "role": "assistant",
                        "content": [{"type": "thinking", "thinking": "t", "signature": "s"}],
                    },
                ]
            },
            "messages[1].content[0]",
        ),
        (
            {
                "messages": _user(
                    {"type": "tool_result", "tool_use_id": "t", "is_error": True, "content": "boom"}
                )
            },
            "messages[0].content[0].is_error",
        ),
        (
            {
                "messages": _user(
                    {
                        "type": "tool_result",
                        "tool_use_id": "t",
                        "content": [
                            {"type": "image", "source": {"type": "url", "url": "https://example.com/a.png"}}
                        ],
                    }
                )
            },
            "messages[0].content[0].content[0]",
        ),
        (
            {
                "messages": _user(
                    {
                        "type": "tool_result",
                        "tool_use_id": "t",
                        "content": [{"type": "text", "text": "x", "cache_control": {"type": "ephemeral"}}],
                    }
                )
            },
            "messages[0].content[0].content[0].cache_control",
        ),
    ],
)
def test_what_a_chat_route_cannot_carry_is_refused(
    catalog: Catalog, fields: dict[str, Any], param: str
) -> None:
    body = _body("sim-chat-only", **fields)
    error, cause = _refused(catalog, body)
    assert error.param == f"requests[0].body.{param}"
    assert cause.code == "unsupported_feature"
    _create(catalog, _body("sim-claude", **fields))  # the Anthropic route carries it


def test_embeddings_model_is_refused_for_messages(catalog: Catalog) -> None:
    error, cause = _refused(catalog, _body("sim-embed"))
    assert error.message.endswith("Model 'sim-embed' does not serve /v1/messages")
    assert cause.code == "model_unsupported"


def test_chat_request_on_an_anthropic_route_is_refused(catalog: Catalog) -> None:
    chat = {"model": "sim-claude", "messages": [{"role": "user", "content": "hi"}]}
    error, cause = _refused(catalog, chat, version=None, url="/v1/chat/completions")
    assert error.message.endswith("Model 'sim-claude' does not serve /v1/chat/completions")
    assert cause.code == "model_unsupported"
