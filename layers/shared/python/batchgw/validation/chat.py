"""A chat-completions request body, checked as the endpoint would check it.

Only what the endpoint itself refuses is refused here; fields this module does not know
are passed through, as OpenAI's chat API does. Numbers are assumed finite already
(``jsonbody.parse_json`` guarantees it); a non-finite one fails the range checks anyway.
"""

from __future__ import annotations

import re
from typing import Any, NoReturn

from batchgw.validation import RequestInvalid, RequestInvalidCode

# Per-request limits, the same as an interactive request's.
MAX_MESSAGES = 2048
MAX_CONTENT_PARTS = 256
MAX_STOP_SEQUENCES = 4
MAX_TOOLS = 128
MAX_N = 128

ROLES = ("system", "developer", "user", "assistant", "tool", "function")
CONTENT_PART_TYPES = ("text", "image_url", "input_audio", "file", "refusal")
TOOL_NAME = re.compile(r"[a-zA-Z0-9_-]{1,64}")

# For each content part type, the field it must carry and whether that field is an object.
_PART_FIELD: dict[str, tuple[str, bool]] = {
    "text": ("text", False),
    "image_url": ("image_url", True),
    "input_audio": ("input_audio", True),
    "file": ("file", True),
    "refusal": ("refusal", False),
}


def _fail(param: str | None, message: str, code: RequestInvalidCode = "invalid_body") -> NoReturn:
    raise RequestInvalid(code, message, param=param)


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else f"{text[:37]}..."


def _is_int(value: Any) -> bool:
    return type(value) is int  # bool is not an integer here


def _is_number(value: Any) -> bool:
    return type(value) is int or type(value) is float


def validate_chat_body(body: Any) -> str:
    """Check one ``/v1/chat/completions`` body and return the model name it asks for.

    Raises RequestInvalid (code ``invalid_body``, or ``unsupported_feature`` for
    ``stream: true``) with ``param`` the dotted path of the first offending field.
    """
    if not isinstance(body, dict):
        _fail(None, "body must be a JSON object")

    model = body.get("model")
    if model is None:
        _fail("model", "model is required")
    if not isinstance(model, str) or not model:
        _fail("model", "model must be a non-empty string")

    _check_messages(body.get("messages"))

    stream = body.get("stream")
    if stream is True:
        _fail("stream", "stream must not be true in a batch", "unsupported_feature")
    if stream is not None and stream is not False:
        _fail("stream", "stream must be a boolean")
    stream_options = body.get("stream_options")
    if stream_options is not None and not isinstance(stream_options, dict):
        _fail("stream_options", "stream_options must be an object")

    _check_max_tokens(body)
    _check_sampling(body)
    _check_stop(body.get("stop"))
    _check_tools(body.get("tools"))
    tool_choice = body.get("tool_choice")
    if tool_choice is not None and not isinstance(tool_choice, str | dict):
        _fail("tool_choice", "tool_choice must be a string or an object")
    response_format = body.get("response_format")
    if response_format is not None and not isinstance(response_format, dict):
        _fail("response_format", "response_format must be an object")
    return model


def _check_messages(messages: Any) -> None:
    if messages is None:
        _fail("messages", "messages is required")
    if not isinstance(messages, list):
        _fail("messages", "messages must be an array")
    if not messages:
        _fail("messages", "messages must have at least one message")
    if len(messages) > MAX_MESSAGES:
        _fail("messages", f"messages has {len(messages)} items; a request may have at most {MAX_MESSAGES}")
    for index, message in enumerate(messages):
        _check_message(message, f"messages[{index}]")


def _check_message(message: Any, where: str) -> None:
    if not isinstance(message, dict):
        _fail(where, f"{where} must be an object")
    role = message.get("role")
    if role not in ROLES:
        if role is None:
            _fail(f"{where}.role", f"{where}.role is required")
        _fail(f"{where}.role", f"{where}.role must be one of {', '.join(ROLES)}; got {_shown(role)}")

    name = message.get("name")
    if name is not None and not isinstance(name, str):
        _fail(f"{where}.name", f"{where}.name must be a string")

    content = message.get("content")
    if role == "assistant":
        tool_calls = message.get("tool_calls")
        if tool_calls is not None:
            _check_tool_calls(tool_calls, f"{where}.tool_calls")
        may_omit = (
            bool(tool_calls) or message.get("function_call") is not None or message.get("audio") is not None
        )
        if content is None and not may_omit:
            _fail(f"{where}.content", f"{where}.content is required unless tool_calls is given")
    elif role == "function":
        if not isinstance(name, str) or not name:
            _fail(f"{where}.name", f"{where}.name is required for a function message")
        if content is not None and not isinstance(content, str):
            _fail(f"{where}.content", f"{where}.content must be a string or null")
        return
    else:
        if content is None:
            _fail(f"{where}.content", f"{where}.content is required")
        if role == "tool":
            tool_call_id = message.get("tool_call_id")
            if not isinstance(tool_call_id, str) or not tool_call_id:
                _fail(f"{where}.tool_call_id", f"{where}.tool_call_id is required for a tool message")
    if content is not None:
        _check_content(content, f"{where}.content")


def _check_content(content: Any, where: str) -> None:
    if isinstance(content, str):
        return
    if not isinstance(content, list):
        _fail(where, f"{where} must be a string or an array of content parts")
    if not content:
        _fail(where, f"{where} must not be an empty array")
    if len(content) > MAX_CONTENT_PARTS:
        _fail(where, f"{where} has {len(content)} parts; a message may have at most {MAX_CONTENT_PARTS}")
    for index, part in enumerate(content):
        at = f"{where}[{index}]"
        if not isinstance(part, dict):
            _fail(at, f"{at} must be an object")
        part_type = part.get("type")
        field = _PART_FIELD.get(part_type) if isinstance(part_type, str) else None
        if field is None:
            _fail(
                f"{at}.type",
                f"{at}.type must be one of {', '.join(CONTENT_PART_TYPES)}; got {_shown(part_type)}",
            )
        key, is_object = field
        value: Any = part.get(key)
        if is_object and not isinstance(value, dict):
            _fail(f"{at}.{key}", f"{at}.{key} must be an object")
        if not is_object and not isinstance(value, str):
            _fail(f"{at}.{key}", f"{at}.{key} must be a string")
        if part_type == "image_url" and not isinstance(value.get("url"), str):
            _fail(f"{at}.image_url.url", f"{at}.image_url.url must be a string")
        if part_type == "input_audio":
            for sub in ("data", "format"):
                if not isinstance(value.get(sub), str):
                    _fail(f"{at}.input_audio.{sub}", f"{at}.input_audio.{sub} must be a string")


def _check_tool_calls(tool_calls: Any, where: str) -> None:
    if not isinstance(tool_calls, list):
        _fail(where, f"{where} must be an array")
    for index, call in enumerate(tool_calls):
        at = f"{where}[{index}]"
        if not isinstance(call, dict):
            _fail(at, f"{at} must be an object")
        if not isinstance(call.get("id"), str):
            _fail(f"{at}.id", f"{at}.id must be a string")
        if call.get("type") != "function":
            _fail(f"{at}.type", f"{at}.type must be 'function'")
        function = call.get("function")
        if not isinstance(function, dict):
            _fail(f"{at}.function", f"{at}.function must be an object")
        if not isinstance(function.get("name"), str):
            _fail(f"{at}.function.name", f"{at}.function.name must be a string")
        if not isinstance(function.get("arguments"), str):
            _fail(f"{at}.function.arguments", f"{at}.function.arguments must be a string (JSON text)")


def _check_max_tokens(body: dict[str, Any]) -> None:
    max_tokens = body.get("max_tokens")
    max_completion_tokens = body.get("max_completion_tokens")
    if max_tokens is not None and max_completion_tokens is not None:
        _fail("max_completion_tokens", "max_tokens and max_completion_tokens cannot both be set; use one")
    for key, value in (("max_tokens", max_tokens), ("max_completion_tokens", max_completion_tokens)):
        if value is not None and (not _is_int(value) or value < 1):
            _fail(key, f"{key} must be a positive integer; got {_shown(value)}")


def _check_sampling(body: dict[str, Any]) -> None:
    n = body.get("n")
    if n is not None and (not _is_int(n) or not 1 <= n <= MAX_N):
        _fail("n", f"n must be an integer from 1 to {MAX_N}; got {_shown(n)}")
    for key, low, high in (
        ("temperature", 0, 2),
        ("top_p", 0, 1),
        ("presence_penalty", -2, 2),
        ("frequency_penalty", -2, 2),
    ):
        value = body.get(key)
        if value is not None and (not _is_number(value) or not low <= value <= high):
            _fail(key, f"{key} must be a number from {low} to {high}; got {_shown(value)}")


def _check_stop(stop: Any) -> None:
    if stop is None or isinstance(stop, str):
        return
    if not isinstance(stop, list) or not all(isinstance(item, str) for item in stop):
        _fail("stop", "stop must be a string or an array of strings")
    if len(stop) > MAX_STOP_SEQUENCES:
        _fail("stop", f"stop has {len(stop)} sequences; a request may have at most {MAX_STOP_SEQUENCES}")


def _check_tools(tools: Any) -> None:
    if tools is None:
        return
    if not isinstance(tools, list):
        _fail("tools", "tools must be an array")
    if len(tools) > MAX_TOOLS:
        _fail("tools", f"tools has {len(tools)} items; a request may have at most {MAX_TOOLS}")
    for index, tool in enumerate(tools):
        at = f"tools[{index}]"
        if not isinstance(tool, dict):
            _fail(at, f"{at} must be an object")
        if tool.get("type") != "function":
            _fail(f"{at}.type", f"{at}.type must be 'function'; got {_shown(tool.get('type'))}")
        function = tool.get("function")
        if not isinstance(function, dict):
            _fail(f"{at}.function", f"{at}.function must be an object")
        name = function.get("name")
        if not isinstance(name, str) or not TOOL_NAME.fullmatch(name):
            _fail(
                f"{at}.function.name",
                f"{at}.function.name must be 1-64 letters, digits, '_' or '-'; got {_shown(name)}",
            )
        description = function.get("description")
        if description is not None and not isinstance(description, str):
            _fail(f"{at}.function.description", f"{at}.function.description must be a string")
        parameters = function.get("parameters")
        if parameters is not None and not isinstance(parameters, dict):
            _fail(f"{at}.function.parameters", f"{at}.function.parameters must be an object (a JSON schema)")
