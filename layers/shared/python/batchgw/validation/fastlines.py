"""A fast path for the common file line: the same rules, mostly checked by msgspec in C.

``validate_file`` reads a line here first: it is decoded into strict msgspec Structs whose
types are the endpoint's rules (or stricter), then checked in Python for what a type cannot
say. A ``FastLine`` comes back only when the full path (``parse_json`` and ``plan_request``)
would take the line too; anything else returns None and the full path checks it again. So a
reader may refuse more than the full path, never less
(``tests/unit/test_validation_speed_fastlines.py``). The catalog checks stay with the caller
(``file._Scanner``).

Why that holds for the JSON itself: docs/design/validation.md, "From the code: validation/fastlines.py".
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, Literal, Protocol

import msgspec

from batchgw.validation.chat import MAX_N
from batchgw.validation.common import (
    MAX_CONTENT_PARTS,
    MAX_MESSAGES,
    MAX_STOP_SEQUENCES,
    MAX_TOOLS,
    TOOL_NAME,
)
from batchgw.validation.create import CUSTOM_ID_MAX_CHARS

# Below either parser's nesting limit (the recursion limit, 1,000, less the caller's stack)
# with room to spare; a line needs a bracket per level, so one with fewer brackets than
# this is shallow enough. (Counting is cheap; it also sends lines of hundreds of messages
# or parts to the full path, which is only slower.)
MAX_DEPTH = 512


class FastLine(Protocol):
    """A line the fast path vouches for, but for what the catalog decides: the decoded
    line itself, so that vouching for it makes no object of its own."""

    @property
    def custom_id(self) -> str: ...

    @property
    def url(self) -> str: ...

    @property
    def model(self) -> str:
        """The model as the body names it (an alias keeps its name)."""

    @property
    def output_tokens(self) -> int | None:
        """The output limit the body asks for, if any."""


FastLineReader = Callable[[bytes], FastLine | None]


class _Strict(msgspec.Struct, forbid_unknown_fields=True, gc=False):
    """Every Struct here refuses unknown fields: msgspec would skip them unchecked."""


_PositiveInt = Annotated[int, msgspec.Meta(ge=1)]
# The sampling ranges of chat._check_sampling; msgspec takes an integer for a float, refuses a bool.
_ZeroToTwo = Annotated[float, msgspec.Meta(ge=0, le=2)]
_ZeroToOne = Annotated[float, msgspec.Meta(ge=0, le=1)]
_Penalty = Annotated[float, msgspec.Meta(ge=-2, le=2)]


# --- /v1/chat/completions, as chat.validate_chat_body checks it --------------------------


class _ImageUrl(_Strict):
    url: str
    detail: Any = None


class _InputAudio(_Strict):
    data: str
    format: str


class _ContentPart(_Strict):
    type: Literal["text", "image_url", "input_audio", "file", "refusal"]
    text: str | None = None
    image_url: _ImageUrl | None = None
    input_audio: _InputAudio | None = None
    file: dict[str, Any] | None = None
    refusal: str | None = None


class _CalledFunction(_Strict):
    name: str
    arguments: str


class _ToolCall(_Strict):
    id: str
    type: Literal["function"]
    function: _CalledFunction


class _ChatMessage(_Strict):
    role: Literal["system", "developer", "user", "assistant", "tool", "function"]
    content: (
        str | Annotated[list[_ContentPart], msgspec.Meta(min_length=1, max_length=MAX_CONTENT_PARTS)] | None
    ) = None
    name: str | None = None
    tool_calls: list[_ToolCall] | None = None
    tool_call_id: str | None = None
    function_call: Any = None
    audio: Any = None
    refusal: Any = None


class _ToolFunction(_Strict):
    name: str
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: Any = None


class _Tool(_Strict):
    type: Literal["function"]
    function: _ToolFunction


class _ChatBody(_Strict):
    model: Annotated[str, msgspec.Meta(min_length=1)]
    messages: Annotated[list[_ChatMessage], msgspec.Meta(min_length=1, max_length=MAX_MESSAGES)]
    stream: bool | None = None
    stream_options: dict[str, Any] | None = None
    max_tokens: _PositiveInt | None = None
    max_completion_tokens: _PositiveInt | None = None
    n: Annotated[int, msgspec.Meta(ge=1, le=MAX_N)] | None = None
    temperature: _ZeroToTwo | None = None
    top_p: _ZeroToOne | None = None
    presence_penalty: _Penalty | None = None
    frequency_penalty: _Penalty | None = None
    stop: str | Annotated[list[str], msgspec.Meta(max_length=MAX_STOP_SEQUENCES)] | None = None
    tools: Annotated[list[_Tool], msgspec.Meta(max_length=MAX_TOOLS)] | None = None
    tool_choice: str | dict[str, Any] | None = None
    response_format: dict[str, Any] | None = None
    # Fields the chat validator passes through unread.
    user: Any = None
    seed: Any = None
    logprobs: Any = None
    top_logprobs: Any = None
    logit_bias: Any = None
    metadata: Any = None
    store: Any = None
    parallel_tool_calls: Any = None
    reasoning_effort: Any = None
    service_tier: Any = None
    modalities: Any = None
    prediction: Any = None
    audio: Any = None


class _ChatLine(_Strict):
    custom_id: Annotated[str, msgspec.Meta(min_length=1, max_length=CUSTOM_ID_MAX_CHARS)]
    method: Literal["POST"]
    url: Literal["/v1/chat/completions"]  # a Literal decodes to one shared str
    body: _ChatBody

    @property
    def model(self) -> str:
        return self.body.model

    @property
    def output_tokens(self) -> int | None:
        body = self.body  # read_chat_line has refused both at once
        return body.max_tokens if body.max_completion_tokens is None else body.max_completion_tokens


_CHAT_LINE = msgspec.json.Decoder(_ChatLine)


def read_chat_line(text: bytes) -> FastLine | None:
    """A chat-completions line (surrounding whitespace stripped) the full path would take,
    but for its model; None when the full path must decide."""
    if _too_deep(text):
        return None
    try:
        line = _CHAT_LINE.decode(text)
    except (msgspec.MsgspecError, RecursionError):
        return None
    body = line.body
    if body.stream is True or (body.max_tokens is not None and body.max_completion_tokens is not None):
        return None
    if not _chat_messages_ok(body.messages):
        return None
    if body.tools is not None and not _tool_names_ok(body.tools):
        return None
    return line


def _too_deep(text: bytes) -> bool:
    # Nesting needs a bracket per level. (Counting makes no object for a usual line, where
    # len() would: this runs for every line.)
    return text.count(b"[") + text.count(b"{") > MAX_DEPTH


def _chat_messages_ok(messages: list[_ChatMessage]) -> bool:
    # A loop rather than all() over a generator, which would be one more object per line.
    for message in messages:  # noqa: SIM110
        if not _chat_message_ok(message):
            return False
    return True


def _tool_names_ok(tools: list[_Tool]) -> bool:
    return all(TOOL_NAME.fullmatch(tool.function.name) for tool in tools)


def _chat_message_ok(message: _ChatMessage) -> bool:
    role, content = message.role, message.content
    if role == "function":
        return bool(message.name) and not isinstance(content, list)
    if content is None:
        if role != "assistant":
            return False
        return bool(message.tool_calls) or message.function_call is not None or message.audio is not None
    if role == "tool" and not message.tool_call_id:
        return False
    if isinstance(content, list):
        for part in content:
            if getattr(part, part.type) is None:  # a part carries the field its type names
                return False
    return True


# The endpoints with a fast path; a file for any other is read by the full path only.
FAST_LINE_READERS: dict[str, FastLineReader] = {
    "/v1/chat/completions": read_chat_line,
}


__all__ = ["FAST_LINE_READERS", "MAX_DEPTH", "FastLine", "FastLineReader", "read_chat_line"]
