"""A Responses request body, checked as a batch can run it: independent and complete.

A batched Responses request stands on its own: nothing stored (``store`` true), no earlier
response or conversation, no background or streaming run, no hosted tools or file inputs.
A field this module does not know is refused too, since the gateway would have to drop it.
"""

from __future__ import annotations

from typing import Any

from batchgw.validation import fail, fail_one_of, is_int, is_number, shown
from batchgw.validation.common import (
    MAX_CONTENT_PARTS,
    MAX_MESSAGES,
    check_at_most,
    check_content_array,
    check_input,
    check_model,
    check_name_and_description,
    each_tool,
    fail_role,
)

ROLES = ("user", "assistant", "system", "developer")
CONTENT_TYPES = ("input_text", "output_text", "input_image")
ITEM_TYPES = ("message", "function_call", "function_call_output")
TRUNCATIONS = ("auto", "disabled")
METADATA_MAX_PAIRS = 16
METADATA_KEY_MAX_CHARS = 64
METADATA_VALUE_MAX_CHARS = 512

_OPTIONAL_FIELDS = frozenset(
    {
        "instructions",
        "max_output_tokens",
        "temperature",
        "top_p",
        "tool_choice",
        "parallel_tool_calls",
        "text",
        "reasoning",
        "metadata",
        "user",
        "truncation",
        "tools",
    }
)
# Fields that would tie the request to state or a run mode a batch does not have.
_DEPENDENT = {
    "previous_response_id": "previous_response_id is refused: a batched request must be independent",
    "conversation": "conversation is refused: a batched request must be independent",
}
# Output items of hosted tools, which only the provider's own tools produce.
_HOSTED_ITEMS = frozenset(
    {
        "web_search_call",
        "file_search_call",
        "computer_call",
        "computer_call_output",
        "code_interpreter_call",
        "image_generation_call",
        "local_shell_call",
        "local_shell_call_output",
        "mcp_call",
        "mcp_list_tools",
        "mcp_approval_request",
        "mcp_approval_response",
    }
)


def validate_responses_body(body: Any) -> str:
    """Check one ``/v1/responses`` body and return the model name it asks for.

    Raises RequestInvalid: ``unsupported_feature`` for whatever makes the request depend on
    state, run in the background or stream, hosted tools, file inputs and fields the gateway
    does not forward; ``invalid_body`` for a malformed field.
    """
    if not isinstance(body, dict):
        fail(None, "body must be a JSON object")

    model = check_model(body.get("model"))
    _check_independent(body)
    for key in body:
        if key not in _OPTIONAL_FIELDS and key not in ("model", "input", "store", "stream", "background"):
            fail(
                key,
                f"'{key}' is not supported in a batched Responses request; the gateway would have to drop it",
                "unsupported_feature",
            )

    items = check_input(body.get("input"), "a string or an array of input items", MAX_MESSAGES)
    if items is not None:
        for index, item in enumerate(items):
            _check_item(item, f"input[{index}]")
    instructions = body.get("instructions")
    if instructions is not None and not isinstance(instructions, str):
        fail("instructions", "instructions must be a string")
    max_output_tokens = body.get("max_output_tokens")
    if max_output_tokens is not None and (not is_int(max_output_tokens) or max_output_tokens < 1):
        fail(
            "max_output_tokens",
            f"max_output_tokens must be a positive integer; got {shown(max_output_tokens)}",
        )
    for key, high in (("temperature", 2), ("top_p", 1)):
        value = body.get(key)
        if value is not None and (not is_number(value) or not 0 <= value <= high):
            fail(key, f"{key} must be a number from 0 to {high}; got {shown(value)}")
    _check_tools(body.get("tools"))
    tool_choice = body.get("tool_choice")
    if tool_choice is not None and not isinstance(tool_choice, str | dict):
        fail("tool_choice", "tool_choice must be a string or an object")
    parallel = body.get("parallel_tool_calls")
    if parallel is not None and not isinstance(parallel, bool):
        fail("parallel_tool_calls", "parallel_tool_calls must be a boolean")
    for key in ("text", "reasoning"):
        value = body.get(key)
        if value is not None and not isinstance(value, dict):
            fail(key, f"{key} must be an object")
    _check_metadata(body.get("metadata"))
    user = body.get("user")
    if user is not None and not isinstance(user, str):
        fail("user", "user must be a string")
    truncation = body.get("truncation")
    if truncation is not None and truncation not in TRUNCATIONS:
        fail_one_of("truncation", truncation, TRUNCATIONS)
    return model


def _check_independent(body: dict[str, Any]) -> None:
    store = body.get("store")
    if store is True:
        fail(
            "store",
            "store must be false or left out: a batched Responses request is not stored",
            "unsupported_feature",
        )
    for key, reason in (
        ("stream", "stream must not be true in a batch"),
        ("background", "background must not be true: a batch already runs in the background"),
    ):
        value = body.get(key)
        if value is True:
            fail(key, reason, "unsupported_feature")
    for key in ("store", "stream", "background"):
        value = body.get(key)
        if value is not None and not isinstance(value, bool):
            fail(key, f"{key} must be a boolean")
    for key, reason in _DEPENDENT.items():
        if body.get(key) is not None:
            fail(key, reason, "unsupported_feature")


def _check_item(item: Any, where: str) -> None:
    if not isinstance(item, dict):
        fail(where, f"{where} must be an object")
    item_type = item.get("type", "message")
    if item_type == "message":
        _check_message(item, where)
    elif item_type == "function_call":
        for key in ("call_id", "name", "arguments"):
            if not isinstance(item.get(key), str):
                fail(f"{where}.{key}", f"{where}.{key} must be a string")
    elif item_type == "function_call_output":
        if not isinstance(item.get("call_id"), str):
            fail(f"{where}.call_id", f"{where}.call_id must be a string")
        output = item.get("output")
        if isinstance(output, list):
            check_at_most(output, f"{where}.output", MAX_CONTENT_PARTS, "parts", "message")
            _check_parts(output, f"{where}.output")
        elif not isinstance(output, str):
            fail(f"{where}.output", f"{where}.output must be a string or an array of content parts")
    elif item_type == "item_reference":
        fail(
            where,
            f"{where} refers to a stored item; a batched request must be independent",
            "unsupported_feature",
        )
    elif isinstance(item_type, str) and item_type in _HOSTED_ITEMS:
        fail(
            f"{where}.type",
            f"{where} is a hosted tool's item; hosted tools are not supported in a batch",
            "unsupported_feature",
        )
    else:
        fail_one_of(f"{where}.type", item_type, ITEM_TYPES)


def _check_message(item: dict[str, Any], where: str) -> None:
    role = item.get("role")
    if role not in ROLES:
        fail_role(where, role, ROLES)
    content = item.get("content")
    if content is None:
        fail(f"{where}.content", f"{where}.content is required")
    if not isinstance(content, str):
        _check_parts(check_content_array(content, f"{where}.content", "parts"), f"{where}.content")


def _check_parts(parts: list[Any], where: str) -> None:
    """Content parts, counted already."""
    for index, part in enumerate(parts):
        at = f"{where}[{index}]"
        if not isinstance(part, dict):
            fail(at, f"{at} must be an object")
        part_type = part.get("type")
        if part_type in ("input_text", "output_text"):
            if not isinstance(part.get("text"), str):
                fail(f"{at}.text", f"{at}.text must be a string")
        elif part_type == "input_image":
            if part.get("file_id") is not None:
                fail(
                    f"{at}.file_id",
                    f"{at}.file_id is refused: file inputs are not supported in a batch; "
                    "send the image by image_url",
                    "unsupported_feature",
                )
            if not isinstance(part.get("image_url"), str):
                fail(f"{at}.image_url", f"{at}.image_url must be a string (a URL or a data URL)")
        elif part_type in ("input_file", "input_audio"):
            fail(
                f"{at}.type",
                f"{at} is an {part_type} part; file inputs are not supported in a batch",
                "unsupported_feature",
            )
        else:
            fail_one_of(f"{at}.type", part_type, CONTENT_TYPES)


def _check_tools(tools: Any) -> None:
    if tools is None:
        return
    for at, tool in each_tool(tools):
        tool_type = tool.get("type")
        if tool_type != "function":
            if isinstance(tool_type, str) and tool_type:
                fail(
                    f"{at}.type",
                    f"{at} is a hosted tool ('{tool_type}'); only function tools are supported in a batch",
                    "unsupported_feature",
                )
            fail(f"{at}.type", f"{at}.type must be 'function'; got {shown(tool_type)}")
        check_name_and_description(tool, at)
        parameters = tool.get("parameters")
        if parameters is not None and not isinstance(parameters, dict):
            fail(f"{at}.parameters", f"{at}.parameters must be an object (a JSON schema)")
        strict = tool.get("strict")
        if strict is not None and not isinstance(strict, bool):
            fail(f"{at}.strict", f"{at}.strict must be a boolean")


def _check_metadata(metadata: Any) -> None:
    if metadata is None:
        return
    if not isinstance(metadata, dict):
        fail("metadata", "metadata must be an object of string pairs")
    if len(metadata) > METADATA_MAX_PAIRS:
        fail("metadata", f"metadata has {len(metadata)} pairs; at most {METADATA_MAX_PAIRS} are allowed")
    for key, value in metadata.items():
        if len(key) > METADATA_KEY_MAX_CHARS:
            fail("metadata", f"metadata keys may have at most {METADATA_KEY_MAX_CHARS} characters")
        if not isinstance(value, str) or len(value) > METADATA_VALUE_MAX_CHARS:
            fail(
                f"metadata.{key}",
                f"metadata['{key}'] must be a string of at most {METADATA_VALUE_MAX_CHARS} characters",
            )
