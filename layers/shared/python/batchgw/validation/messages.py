"""An Anthropic Messages request body, checked under the batch's ``anthropic-version``.

A Messages batch names its API version once, in the create call's header, and every
request is checked (and later runs) under it. What a
batch cannot run as written is refused with ``unsupported_feature``: server tools, Files
API sources, MCP servers, containers, betas. Unknown fields are refused too, as
Anthropic's API refuses them; nothing is silently dropped.

Whether the model's route can carry the request (an OpenAI-protocol route gets it
translated to a chat completion) is checked separately, by ``validation.translatable``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from batchgw.validation import fail, fail_one_of, is_int, is_number, shown
from batchgw.validation.common import (
    MAX_CONTENT_PARTS,
    check_content_array,
    check_messages,
    check_model,
    check_name_and_description,
    check_stop_sequences,
    check_stream,
    each_tool,
    fail_role,
)


@dataclass(frozen=True, slots=True)
class VersionRules:
    """What one ``anthropic-version`` accepts beyond the common Messages shape."""

    sampling: bool  # temperature, top_p and top_k
    assistant_documents: bool  # document blocks in assistant messages
    user_text_citations: bool  # citations on text blocks of user messages


VERSION_RULES: dict[str, VersionRules] = {
    "2023-06-01": VersionRules(sampling=True, assistant_documents=True, user_text_citations=True),
    "2026-10-21": VersionRules(sampling=False, assistant_documents=False, user_text_citations=False),
}
KNOWN_ANTHROPIC_VERSIONS: tuple[str, ...] = tuple(VERSION_RULES)

ROLES = ("user", "assistant")
BLOCK_TYPES = ("text", "image", "document", "tool_use", "tool_result", "thinking", "redacted_thinking")
IMAGE_MEDIA_TYPES = ("image/jpeg", "image/png", "image/gif", "image/webp")
TOOL_CHOICE_TYPES = ("auto", "any", "tool", "none")
THINKING_TYPES = ("enabled", "disabled", "adaptive")
MIN_THINKING_BUDGET = 1024

_FIELDS = frozenset(
    {
        "model",
        "messages",
        "max_tokens",
        "system",
        "stop_sequences",
        "stream",
        "temperature",
        "top_p",
        "top_k",
        "tools",
        "tool_choice",
        "metadata",
        "thinking",
        "output_config",
        "output_format",
    }
)
# Known Messages fields a batch cannot run, and why.
_UNSUPPORTED_FIELDS = {
    "mcp_servers": "MCP servers are not supported in a batch",
    "container": "containers are not supported in a batch",
    "service_tier": "service_tier is not supported in a batch; batch work runs on the gateway's own capacity",
    "betas": "betas are not supported in a batch",
    "context_management": "context_management is a beta; betas are not supported in a batch",
}
_BLOCK_KEYS: dict[str, frozenset[str]] = {
    "text": frozenset({"type", "text", "citations", "cache_control"}),
    "image": frozenset({"type", "source", "cache_control"}),
    "document": frozenset({"type", "source", "title", "context", "citations", "cache_control"}),
    "tool_use": frozenset({"type", "id", "name", "input", "cache_control"}),
    "tool_result": frozenset({"type", "tool_use_id", "content", "is_error", "cache_control"}),
    "thinking": frozenset({"type", "thinking", "signature"}),
    "redacted_thinking": frozenset({"type", "data"}),
}
# The role a block type may appear under, when only one may carry it.
_BLOCK_ROLE = {
    "tool_use": "assistant",
    "tool_result": "user",
    "thinking": "assistant",
    "redacted_thinking": "assistant",
}
# Blocks only Anthropic's server tools, MCP connector or containers produce.
_SERVER_BLOCKS = frozenset(
    {
        "server_tool_use",
        "web_search_tool_result",
        "web_fetch_tool_result",
        "code_execution_tool_result",
        "bash_code_execution_tool_result",
        "text_editor_code_execution_tool_result",
        "tool_search_tool_result",
        "mcp_tool_use",
        "mcp_tool_result",
        "container_upload",
    }
)
_TOOL_KEYS = frozenset({"type", "name", "description", "input_schema", "cache_control", "strict"})
_DOCUMENT_SOURCE_TYPES = ("base64", "text", "url", "content")
_FILES_API = "Files API sources are not supported in a batch; send the content as base64, text or by URL"


def validate_messages_body(body: Any, version: str) -> str:
    """Check one ``/v1/messages`` body under anthropic-version ``version``; return its model name.

    ``version`` must be one of ``KNOWN_ANTHROPIC_VERSIONS`` (the caller checks the header
    first; anything else is a ValueError). Raises RequestInvalid: ``missing_max_tokens``,
    ``unsupported_feature`` for what a batch cannot run, ``invalid_body`` otherwise.
    """
    rules = VERSION_RULES.get(version)
    if rules is None:
        raise ValueError(f"unknown anthropic-version {version!r}")
    if not isinstance(body, dict):
        fail(None, "body must be a JSON object")
    _check_fields(body)

    model = check_model(body.get("model"))
    max_tokens = body.get("max_tokens")
    if max_tokens is None:
        fail("max_tokens", "max_tokens is required for a /v1/messages request", "missing_max_tokens")
    if not is_int(max_tokens) or max_tokens < 1:
        fail("max_tokens", f"max_tokens must be a positive integer; got {shown(max_tokens)}")

    _check_messages(body.get("messages"), rules, version)
    _check_system(body.get("system"))
    stop_sequences = body.get("stop_sequences")
    if stop_sequences is not None:
        check_stop_sequences(stop_sequences, "stop_sequences", "an array of strings")
    check_stream(body.get("stream"))
    _check_sampling(body, rules, version)
    _check_tools(body.get("tools"))
    _check_tool_choice(body.get("tool_choice"))
    _check_metadata(body.get("metadata"))
    _check_thinking(body.get("thinking"), max_tokens)
    for key in ("output_config", "output_format"):
        value = body.get(key)
        if value is not None and not isinstance(value, dict):
            fail(key, f"{key} must be an object")
    return model


def _check_fields(body: dict[str, Any]) -> None:
    if "anthropic_version" in body:
        fail(
            "anthropic_version",
            "anthropic_version is not a body field; a Messages batch names its version in the "
            "anthropic-version header of the create call",
        )
    for key in body:
        reason = _UNSUPPORTED_FIELDS.get(key)
        if reason is not None:
            fail(key, f"{key} is refused: {reason}", "unsupported_feature")
        if key not in _FIELDS:
            fail(key, f"unknown field '{key}'; a Messages request does not take it")


def _check_sampling(body: dict[str, Any], rules: VersionRules, version: str) -> None:
    for key in ("temperature", "top_p", "top_k"):
        if body.get(key) is not None and not rules.sampling:
            fail(key, f"{key} is not accepted under anthropic-version {version}")
    for key in ("temperature", "top_p"):
        value = body.get(key)
        if value is not None and (not is_number(value) or not 0 <= value <= 1):
            fail(key, f"{key} must be a number from 0 to 1; got {shown(value)}")
    top_k = body.get("top_k")
    if top_k is not None and (not is_int(top_k) or top_k < 0):
        fail("top_k", f"top_k must be a non-negative integer; got {shown(top_k)}")


def _check_messages(messages: Any, rules: VersionRules, version: str) -> None:
    for index, message in enumerate(check_messages(messages)):
        where = f"messages[{index}]"
        if not isinstance(message, dict):
            fail(where, f"{where} must be an object")
        for key in message:
            if key not in ("role", "content"):
                fail(f"{where}.{key}", f"unknown field '{key}' in {where}; a message has role and content")
        role = message.get("role")
        if role not in ROLES:
            fail_role(where, role, ROLES)
        content = message.get("content")
        if content is None:
            fail(f"{where}.content", f"{where}.content is required")
        if isinstance(content, str):
            continue
        for position, block in enumerate(check_content_array(content, f"{where}.content", "blocks")):
            _check_block(block, f"{where}.content[{position}]", role, rules, version)


def _check_block(block: Any, where: str, role: str, rules: VersionRules, version: str) -> None:
    if not isinstance(block, dict):
        fail(where, f"{where} must be an object")
    block_type = block.get("type")
    if isinstance(block_type, str) and block_type in _SERVER_BLOCKS:
        fail(
            f"{where}.type",
            f"{where} is a '{block_type}' block; server tools, MCP servers and containers are not "
            "supported in a batch",
            "unsupported_feature",
        )
    if not isinstance(block_type, str) or block_type not in _BLOCK_KEYS:
        fail_one_of(f"{where}.type", block_type, BLOCK_TYPES)
    for key in block:
        if key not in _BLOCK_KEYS[block_type]:
            fail(f"{where}.{key}", f"unknown field '{key}' in a {block_type} block")
    only = _BLOCK_ROLE.get(block_type)
    if only is not None and role != only:
        fail(
            f"{where}.type",
            f"a {block_type} block may only appear in a{'n' if only == 'assistant' else ''} {only} message",
        )
    _check_cache_control(block.get("cache_control"), f"{where}.cache_control")

    if block_type == "text":
        _check_text_block(block, where)
        if block.get("citations") is not None and role == "user" and not rules.user_text_citations:
            fail(
                f"{where}.citations",
                f"citations on user text blocks are not accepted under anthropic-version {version}",
            )
    elif block_type == "image":
        _check_image_source(block.get("source"), f"{where}.source")
    elif block_type == "document":
        if role == "assistant" and not rules.assistant_documents:
            fail(
                where,
                f"document blocks in assistant messages are not accepted under anthropic-version {version}",
            )
        _check_document(block, where)
    elif block_type == "tool_use":
        for key in ("id", "name"):
            value = block.get(key)
            if not isinstance(value, str) or not value:
                fail(f"{where}.{key}", f"{where}.{key} must be a non-empty string")
        if not isinstance(block.get("input"), dict):
            fail(f"{where}.input", f"{where}.input must be an object")
    elif block_type == "tool_result":
        _check_tool_result(block, where)
    elif block_type == "thinking":
        for key in ("thinking", "signature"):
            if not isinstance(block.get(key), str):
                fail(f"{where}.{key}", f"{where}.{key} must be a string")
    elif not isinstance(block.get("data"), str):  # redacted_thinking
        fail(f"{where}.data", f"{where}.data must be a string")


def _check_text_block(block: dict[str, Any], where: str) -> None:
    text = block.get("text")
    if not isinstance(text, str) or not text:
        fail(f"{where}.text", f"{where}.text must be a non-empty string")
    citations = block.get("citations")
    if citations is not None and not isinstance(citations, list):
        fail(f"{where}.citations", f"{where}.citations must be an array")


def _check_cache_control(value: Any, where: str) -> None:
    if value is None:
        return
    if not isinstance(value, dict) or value.get("type") != "ephemeral":
        fail(where, f"{where} must be an object of type 'ephemeral'")
    ttl = value.get("ttl")
    if ttl is not None and ttl not in ("5m", "1h"):
        fail(f"{where}.ttl", f"{where}.ttl must be '5m' or '1h'; got {shown(ttl)}")


def _is_files_api(source: dict[str, Any]) -> bool:
    return source.get("type") == "file" or "file_id" in source


def _check_image_source(source: Any, where: str) -> None:
    if not isinstance(source, dict):
        fail(where, f"{where} must be an object")
    if _is_files_api(source):
        fail(where, _FILES_API, "unsupported_feature")
    source_type = source.get("type")
    if source_type == "base64":
        media_type = source.get("media_type")
        if media_type not in IMAGE_MEDIA_TYPES:
            fail_one_of(f"{where}.media_type", media_type, IMAGE_MEDIA_TYPES)
        if not isinstance(source.get("data"), str):
            fail(f"{where}.data", f"{where}.data must be a base64 string")
    elif source_type == "url":
        if not isinstance(source.get("url"), str):
            fail(f"{where}.url", f"{where}.url must be a string")
    else:
        fail(f"{where}.type", f"{where}.type must be 'base64' or 'url'; got {shown(source_type)}")


def _check_document(block: dict[str, Any], where: str) -> None:
    source = block.get("source")
    at = f"{where}.source"
    if not isinstance(source, dict):
        fail(at, f"{at} must be an object")
    if _is_files_api(source):
        fail(at, _FILES_API, "unsupported_feature")
    source_type = source.get("type")
    if source_type in ("base64", "text"):
        media_type = "application/pdf" if source_type == "base64" else "text/plain"
        if source.get("media_type") != media_type:
            fail(f"{at}.media_type", f"{at}.media_type must be '{media_type}' for a {source_type} source")
        if not isinstance(source.get("data"), str):
            fail(f"{at}.data", f"{at}.data must be a string")
    elif source_type == "url":
        if not isinstance(source.get("url"), str):
            fail(f"{at}.url", f"{at}.url must be a string")
    elif source_type == "content":
        content = source.get("content")
        if isinstance(content, list):
            _check_nested_blocks(content, f"{at}.content", ("text", "image"))
        elif not isinstance(content, str):
            fail(f"{at}.content", f"{at}.content must be a string or an array of text and image blocks")
    else:
        fail_one_of(f"{at}.type", source_type, _DOCUMENT_SOURCE_TYPES)
    for key in ("title", "context"):
        value = block.get(key)
        if value is not None and not isinstance(value, str):
            fail(f"{where}.{key}", f"{where}.{key} must be a string")
    citations = block.get("citations")
    if citations is not None and (
        not isinstance(citations, dict) or not isinstance(citations.get("enabled"), bool)
    ):
        fail(f"{where}.citations", f"{where}.citations must be an object with a boolean 'enabled'")


def _check_tool_result(block: dict[str, Any], where: str) -> None:
    tool_use_id = block.get("tool_use_id")
    if not isinstance(tool_use_id, str) or not tool_use_id:
        fail(f"{where}.tool_use_id", f"{where}.tool_use_id must be a non-empty string")
    is_error = block.get("is_error")
    if is_error is not None and not isinstance(is_error, bool):
        fail(f"{where}.is_error", f"{where}.is_error must be a boolean")
    content = block.get("content")
    if isinstance(content, list):
        _check_nested_blocks(content, f"{where}.content", ("text", "image", "document"))
    elif content is not None and not isinstance(content, str):
        fail(f"{where}.content", f"{where}.content must be a string or an array of content blocks")


def _check_nested_blocks(blocks: list[Any], where: str, types: tuple[str, ...]) -> None:
    """Blocks inside a tool result or a content document: only ``types``, checked as usual."""
    if len(blocks) > MAX_CONTENT_PARTS:
        fail(where, f"{where} has {len(blocks)} blocks; at most {MAX_CONTENT_PARTS} are allowed")
    for index, block in enumerate(blocks):
        at = f"{where}[{index}]"
        if not isinstance(block, dict):
            fail(at, f"{at} must be an object")
        block_type = block.get("type")
        if block_type not in types:
            fail_one_of(f"{at}.type", block_type, types)
        for key in block:
            if key not in _BLOCK_KEYS[block_type]:
                fail(f"{at}.{key}", f"unknown field '{key}' in a {block_type} block")
        _check_cache_control(block.get("cache_control"), f"{at}.cache_control")
        if block_type == "text":
            _check_text_block(block, at)
        elif block_type == "image":
            _check_image_source(block.get("source"), f"{at}.source")
        else:
            _check_document(block, at)


def _check_system(system: Any) -> None:
    if system is None or isinstance(system, str):
        return
    if not isinstance(system, list):
        fail("system", "system must be a string or an array of text blocks")
    for index, block in enumerate(system):
        at = f"system[{index}]"
        if not isinstance(block, dict) or block.get("type") != "text":
            fail(at, f"{at} must be a text block")
        for key in block:
            if key not in _BLOCK_KEYS["text"]:
                fail(f"{at}.{key}", f"unknown field '{key}' in a text block")
        _check_text_block(block, at)
        _check_cache_control(block.get("cache_control"), f"{at}.cache_control")


def _check_tools(tools: Any) -> None:
    if tools is None:
        return
    for at, tool in each_tool(tools):
        tool_type = tool.get("type")
        if tool_type is not None and tool_type != "custom":
            if isinstance(tool_type, str):
                fail(
                    f"{at}.type",
                    f"{at} is a server tool ('{tool_type}'); server tools are not supported in a batch, "
                    "only client tools with a name and an input_schema",
                    "unsupported_feature",
                )
            fail(f"{at}.type", f"{at}.type must be 'custom' or left out")
        for key in tool:
            if key not in _TOOL_KEYS:
                fail(f"{at}.{key}", f"unknown field '{key}' in a tool")
        check_name_and_description(tool, at)
        schema = tool.get("input_schema")
        if not isinstance(schema, dict) or schema.get("type") != "object":
            fail(f"{at}.input_schema", f"{at}.input_schema must be a JSON schema object of type 'object'")
        strict = tool.get("strict")
        if strict is not None and not isinstance(strict, bool):
            fail(f"{at}.strict", f"{at}.strict must be a boolean")
        _check_cache_control(tool.get("cache_control"), f"{at}.cache_control")


def _check_tool_choice(choice: Any) -> None:
    if choice is None:
        return
    if not isinstance(choice, dict):
        fail("tool_choice", "tool_choice must be an object")
    choice_type = choice.get("type")
    if choice_type not in TOOL_CHOICE_TYPES:
        fail_one_of("tool_choice.type", choice_type, TOOL_CHOICE_TYPES)
    for key in choice:
        if key not in ("type", "name", "disable_parallel_tool_use"):
            fail(f"tool_choice.{key}", f"unknown field '{key}' in tool_choice")
    if choice_type == "tool" and not isinstance(choice.get("name"), str):
        fail("tool_choice.name", "tool_choice.name is required when tool_choice.type is 'tool'")
    disable = choice.get("disable_parallel_tool_use")
    if disable is not None and not isinstance(disable, bool):
        fail(
            "tool_choice.disable_parallel_tool_use", "tool_choice.disable_parallel_tool_use must be a boolean"
        )


def _check_metadata(metadata: Any) -> None:
    if metadata is None:
        return
    if not isinstance(metadata, dict):
        fail("metadata", "metadata must be an object")
    for key in metadata:
        if key != "user_id":
            fail(f"metadata.{key}", f"unknown field '{key}' in metadata; Messages metadata has only user_id")
    user_id = metadata.get("user_id")
    if user_id is not None and not isinstance(user_id, str):
        fail("metadata.user_id", "metadata.user_id must be a string")


def _check_thinking(thinking: Any, max_tokens: int) -> None:
    if thinking is None:
        return
    if not isinstance(thinking, dict):
        fail("thinking", "thinking must be an object")
    thinking_type = thinking.get("type")
    if thinking_type not in THINKING_TYPES:
        fail_one_of("thinking.type", thinking_type, THINKING_TYPES)
    if thinking_type != "enabled":
        return
    budget = thinking.get("budget_tokens")
    if not isinstance(budget, int) or not is_int(budget) or not MIN_THINKING_BUDGET <= budget < max_tokens:
        fail(
            "thinking.budget_tokens",
            f"thinking.budget_tokens must be an integer of at least {MIN_THINKING_BUDGET} "
            f"and below max_tokens; got {shown(budget)}",
        )
