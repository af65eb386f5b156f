"""A chat-completions request body, checked as the endpoint would check it.

Only what the endpoint itself refuses is refused here; fields this module does not know
are passed through, as OpenAI's chat API does. Numbers are assumed finite already
(``jsonbody.parse_json`` guarantees it); a non-finite one fails the range checks anyway.
"""

from __future__ import annotations

from typing import Any

from batchgw.validation import fail, fail_one_of, is_int, is_number, shown
from batchgw.validation.common import (
    MAX_CONTENT_PARTS,
    MAX_MESSAGES,
    MAX_STOP_SEQUENCES,
    MAX_TOOLS,
    check_content_array,
    check_messages,
    check_model,
    check_name_and_description,
    check_stop_sequences,
    check_stream,
    each_tool,
    fail_role,
)

MAX_N = 128

ROLES = ("system", "developer", "user", "assistant", "tool", "function")
CONTENT_PART_TYPES = ("text", "image_url", "input_audio", "file", "refusal")

# For each content part type, the field it must carry and whether that field is an object.
_PART_FIELD: dict[str, tuple[str, bool]] = {
    "text": ("text", False),
    "image_url": ("image_url", True),
    "input_audio": ("input_audio", True),
    "file": ("file", True),
    "refusal": ("refusal", False),
}


def validate_chat_body(body: Any) -> str:
    """Check one ``/v1/chat/completions`` body and return the model name it asks for.

    Raises RequestInvalid (code ``invalid_body``, or ``unsupported_feature`` for
    ``stream: true`` and web search) with ``param`` the dotted path of the first offending field.
    """
    if not isinstance(body, dict):
        fail(None, "body must be a JSON object")

    model = check_model(body.get("model"))
    for index, message in enumerate(check_messages(body.get("messages"))):
        _check_message(message, f"messages[{index}]")
    check_stream(body.get("stream"))
    if body.get("web_search_options") is not None:
        fail(
            "web_search_options",
            "web_search_options: web search is not supported; the gateway's models answer from "
            "the request alone",
            "unsupported_feature",
        )
    stream_options = body.get("stream_options")
    if stream_options is not None and not isinstance(stream_options, dict):
        fail("stream_options", "stream_options must be an object")

    _check_max_tokens(body)
    _check_sampling(body)
    stop = body.get("stop")
    if stop is not None and not isinstance(stop, str):
        check_stop_sequences(stop, "stop", "a string or an array of strings")
    _check_tools(body.get("tools"))
    tool_choice = body.get("tool_choice")
    if tool_choice is not None and not isinstance(tool_choice, str | dict):
        fail("tool_choice", "tool_choice must be a string or an object")
    response_format = body.get("response_format")
    if response_format is not None and not isinstance(response_format, dict):
        fail("response_format", "response_format must be an object")
    return model


def _check_message(message: Any, where: str) -> None:
    if not isinstance(message, dict):
        fail(where, f"{where} must be an object")
    role = message.get("role")
    if role not in ROLES:
        fail_role(where, role, ROLES)

    name = message.get("name")
    if name is not None and not isinstance(name, str):
        fail(f"{where}.name", f"{where}.name must be a string")

    content = message.get("content")
    if role == "assistant":
        tool_calls = message.get("tool_calls")
        if tool_calls is not None:
            _check_tool_calls(tool_calls, f"{where}.tool_calls")
        may_omit = (
            bool(tool_calls) or message.get("function_call") is not None or message.get("audio") is not None
        )
        if content is None and not may_omit:
            fail(f"{where}.content", f"{where}.content is required unless tool_calls is given")
    elif role == "function":
        if not isinstance(name, str) or not name:
            fail(f"{where}.name", f"{where}.name is required for a function message")
        if content is not None and not isinstance(content, str):
            fail(f"{where}.content", f"{where}.content must be a string or null")
        return
    else:
        if content is None:
            fail(f"{where}.content", f"{where}.content is required")
        if role == "tool":
            tool_call_id = message.get("tool_call_id")
            if not isinstance(tool_call_id, str) or not tool_call_id:
                fail(f"{where}.tool_call_id", f"{where}.tool_call_id is required for a tool message")
    if content is not None and not isinstance(content, str):
        _check_content_parts(content, f"{where}.content")


def _check_content_parts(content: Any, where: str) -> None:
    for index, part in enumerate(check_content_array(content, where, "parts")):
        at = f"{where}[{index}]"
        if not isinstance(part, dict):
            fail(at, f"{at} must be an object")
        part_type = part.get("type")
        field = _PART_FIELD.get(part_type) if isinstance(part_type, str) else None
        if field is None:
            fail_one_of(f"{at}.type", part_type, CONTENT_PART_TYPES)
        key, is_object = field
        value: Any = part.get(key)
        if is_object and not isinstance(value, dict):
            fail(f"{at}.{key}", f"{at}.{key} must be an object")
        if not is_object and not isinstance(value, str):
            fail(f"{at}.{key}", f"{at}.{key} must be a string")
        if part_type == "image_url" and not isinstance(value.get("url"), str):
            fail(f"{at}.image_url.url", f"{at}.image_url.url must be a string")
        if part_type == "input_audio":
            for sub in ("data", "format"):
                if not isinstance(value.get(sub), str):
                    fail(f"{at}.input_audio.{sub}", f"{at}.input_audio.{sub} must be a string")


def _check_tool_calls(tool_calls: Any, where: str) -> None:
    if not isinstance(tool_calls, list):
        fail(where, f"{where} must be an array")
    for index, call in enumerate(tool_calls):
        at = f"{where}[{index}]"
        if not isinstance(call, dict):
            fail(at, f"{at} must be an object")
        if not isinstance(call.get("id"), str):
            fail(f"{at}.id", f"{at}.id must be a string")
        if call.get("type") != "function":
            fail(f"{at}.type", f"{at}.type must be 'function'")
        function = call.get("function")
        if not isinstance(function, dict):
            fail(f"{at}.function", f"{at}.function must be an object")
        if not isinstance(function.get("name"), str):
            fail(f"{at}.function.name", f"{at}.function.name must be a string")
        if not isinstance(function.get("arguments"), str):
            fail(f"{at}.function.arguments", f"{at}.function.arguments must be a string (JSON text)")


def _check_max_tokens(body: dict[str, Any]) -> None:
    max_tokens = body.get("max_tokens")
    max_completion_tokens = body.get("max_completion_tokens")
    if max_tokens is not None and max_completion_tokens is not None:
        fail("max_completion_tokens", "max_tokens and max_completion_tokens cannot both be set; use one")
    for key, value in (("max_tokens", max_tokens), ("max_completion_tokens", max_completion_tokens)):
        if value is not None and (not is_int(value) or value < 1):
            fail(key, f"{key} must be a positive integer; got {shown(value)}")


def _check_sampling(body: dict[str, Any]) -> None:
    n = body.get("n")
    if n is not None and (not is_int(n) or not 1 <= n <= MAX_N):
        fail("n", f"n must be an integer from 1 to {MAX_N}; got {shown(n)}")
    for key, low, high in (
        ("temperature", 0, 2),
        ("top_p", 0, 1),
        ("presence_penalty", -2, 2),
        ("frequency_penalty", -2, 2),
    ):
        value = body.get(key)
        if value is not None and (not is_number(value) or not low <= value <= high):
            fail(key, f"{key} must be a number from {low} to {high}; got {shown(value)}")


def _check_tools(tools: Any) -> None:
    if tools is None:
        return
    for at, tool in each_tool(tools):
        if tool.get("type") != "function":
            fail(f"{at}.type", f"{at}.type must be 'function'; got {shown(tool.get('type'))}")
        function = tool.get("function")
        if not isinstance(function, dict):
            fail(f"{at}.function", f"{at}.function must be an object")
        check_name_and_description(function, f"{at}.function")
        parameters = function.get("parameters")
        if parameters is not None and not isinstance(parameters, dict):
            fail(f"{at}.function.parameters", f"{at}.function.parameters must be an object (a JSON schema)")


__all__ = [
    "CONTENT_PART_TYPES",
    "MAX_CONTENT_PARTS",
    "MAX_MESSAGES",
    "MAX_N",
    "MAX_STOP_SEQUENCES",
    "MAX_TOOLS",
    "ROLES",
    "validate_chat_body",
]
