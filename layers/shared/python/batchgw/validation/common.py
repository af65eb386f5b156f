"""The checks several body validators share, so that one rule reads the same on every endpoint.

Chat completions, Messages, Responses and embeddings bodies all name a model, most carry
a messages or input array and content that is a string or an array of parts; the checks
of those, and the limits they apply, live here. What runs once per message stays inline
in the validators, which call a helper here only to refuse: the valid case costs no call.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any, NoReturn

from batchgw.validation import fail, fail_one_of, shown

# Per-request limits, the same as an interactive request's.
MAX_MESSAGES = 2048
MAX_CONTENT_PARTS = 256
MAX_STOP_SEQUENCES = 4
MAX_TOOLS = 128

TOOL_NAME = re.compile(r"[a-zA-Z0-9_-]{1,64}")


def check_model(model: Any) -> str:
    """A body's ``model``: a non-empty string, returned."""
    if model is None:
        fail("model", "model is required")
    if not isinstance(model, str) or not model:
        fail("model", "model must be a non-empty string")
    return model


def check_stream(stream: Any, refusal: str = "stream must not be true in a batch") -> None:
    """``stream``: false or left out; true is refused as ``unsupported_feature``, saying ``refusal``."""
    if stream is True:
        fail("stream", refusal, "unsupported_feature")
    if stream is not None and stream is not False:
        fail("stream", "stream must be a boolean")


def check_at_most(
    items: list[Any], param: str, limit: int, noun: str = "items", per: str = "request"
) -> None:
    """``items`` at ``param`` are at most ``limit``: "tools has 129 items; a request may have at most 128"."""
    if len(items) > limit:
        fail(param, f"{param} has {len(items)} {noun}; a {per} may have at most {limit}")


def check_messages(messages: Any) -> list[Any]:
    """A body's ``messages``: an array of 1 to ``MAX_MESSAGES`` items (not checked here), returned."""
    if messages is None:
        fail("messages", "messages is required")
    if not isinstance(messages, list):
        fail("messages", "messages must be an array")
    if not messages:
        fail("messages", "messages must have at least one message")
    check_at_most(messages, "messages", MAX_MESSAGES)
    return messages


def fail_role(where: str, role: Any, roles: tuple[str, ...]) -> NoReturn:
    """Refuse the message at ``where``, whose ``role`` is none of ``roles``."""
    param = f"{where}.role"
    if role is None:
        fail(param, f"{param} is required")
    fail_one_of(param, role, roles)


def check_content_array(content: Any, where: str, noun: str) -> list[Any]:
    """A message's ``content`` at ``where`` when it is not a string: an array of 1 to
    ``MAX_CONTENT_PARTS`` content ``noun`` ("parts" or "blocks"; not checked here), returned."""
    if not isinstance(content, list):
        fail(where, f"{where} must be a string or an array of content {noun}")
    if not content:
        fail(where, f"{where} must not be an empty array")
    check_at_most(content, where, MAX_CONTENT_PARTS, noun, "message")
    return content


def check_input(value: Any, must_be: str, limit: int) -> list[Any] | None:
    """A body's ``input``: a non-empty string (None is returned), or else ``must_be`` ("a string
    or an array of ..."), an array of 1 to ``limit`` items (not checked here), returned."""
    if value is None:
        fail("input", "input is required")
    if isinstance(value, str):
        if not value:
            fail("input", "input must not be an empty string")
        return None
    if not isinstance(value, list):
        fail("input", f"input must be {must_be}")
    if not value:
        fail("input", "input must not be an empty array")
    check_at_most(value, "input", limit)
    return value


def check_stop_sequences(stop: Any, param: str, must_be: str) -> None:
    """Stop sequences at ``param``, given and not a string: ``must_be`` ("... an array of
    strings"), at most ``MAX_STOP_SEQUENCES`` of them."""
    if not isinstance(stop, list) or not all(isinstance(item, str) for item in stop):
        fail(param, f"{param} must be {must_be}")
    check_at_most(stop, param, MAX_STOP_SEQUENCES, "sequences")


def each_tool(tools: Any) -> Iterator[tuple[str, dict[str, Any]]]:
    """A body's ``tools``, given: an array of at most ``MAX_TOOLS`` objects, each yielded
    with its param, ``tools[i]``, for the endpoint to check."""
    if not isinstance(tools, list):
        fail("tools", "tools must be an array")
    check_at_most(tools, "tools", MAX_TOOLS)
    for index, tool in enumerate(tools):
        at = f"tools[{index}]"
        if not isinstance(tool, dict):
            fail(at, f"{at} must be an object")
        yield at, tool


def check_name_and_description(spec: dict[str, Any], where: str) -> None:
    """A tool's ``name`` (1-64 letters, digits, '_' or '-') and optional ``description`` in
    ``spec``, the tool at ``where`` (or its ``function`` object)."""
    name = spec.get("name")
    if not isinstance(name, str) or not TOOL_NAME.fullmatch(name):
        fail(f"{where}.name", f"{where}.name must be 1-64 letters, digits, '_' or '-'; got {shown(name)}")
    description = spec.get("description")
    if description is not None and not isinstance(description, str):
        fail(f"{where}.description", f"{where}.description must be a string")
