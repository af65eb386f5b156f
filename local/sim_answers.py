"""Each API shape's normal answer: the deterministic echo of the request's text for chat
completions, Responses and Anthropic Messages (stop sequences, token limits, tool calls),
SHA-256 vectors for embeddings, sized to ``bytes=N`` and with ``cached=N`` prompt-cache tokens
(``local.simulator`` describes them).
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
import struct
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from local.sim_directives import parse_directives
from local.sim_protocol import Endpoint, JsonObject, RequestError, dumps

DEFAULT_DIMENSIONS = 8
MAX_DIMENSIONS = 8192
CREATED = 1_700_000_000  # fixed, so the same request gives the same bytes apart from ids


# --------------------------------------------------------------------------- request text

# Keys whose string values (directly, or in a list) are text a model would read.
_TEXT_KEYS = frozenset({"content", "text", "input", "system", "instructions", "output", "prompt"})
# Request parameters that are configuration, not text, even when they contain strings.
_SKIP_KEYS = frozenset(
    {
        "model",
        "tools",
        "tool_choice",
        "functions",
        "function_call",
        "metadata",
        "response_format",
        "stop",
        "stop_sequences",
        "user",
    }
)


def collect_texts(obj: object, is_text: bool = False) -> Iterator[str]:
    """Every text string of a request body: message contents, content parts, system, input..."""
    if isinstance(obj, str):
        if is_text:
            yield obj
    elif isinstance(obj, list):
        for item in obj:
            yield from collect_texts(item, is_text)
    elif isinstance(obj, dict):
        for key, value in obj.items():
            if key not in _SKIP_KEYS:
                yield from collect_texts(value, key in _TEXT_KEYS)


def count_words(texts: Iterable[str]) -> int:
    """Token usage as the simulator counts it: whitespace-separated words, at least 1."""
    return max(1, sum(len(text.split()) for text in texts))


def content_text(content: object) -> str:
    """The text of a message content: a string, or its text parts joined by a space."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(
            part["text"] for part in content if isinstance(part, dict) and isinstance(part.get("text"), str)
        )
    return ""


def last_user_text(messages: list[Any]) -> str:
    for message in reversed(messages):
        if isinstance(message, dict) and message.get("role") == "user":
            return content_text(message.get("content"))
    return ""


def _first_tool_name(tools: object) -> str | None:
    if not isinstance(tools, list) or not tools or not isinstance(tools[0], dict):
        return None
    tool = tools[0]
    function = tool.get("function")
    name = tool.get("name") or (function.get("name") if isinstance(function, dict) else None)
    return name if isinstance(name, str) and name else None


def _wants_tool(tools: object, user_text: str) -> str | None:
    """The tool to call when the request has tools and its last user text says ``[[sim tool]]``."""
    name = _first_tool_name(tools)
    if name is None or "[[sim" not in user_text:
        return None
    try:
        wanted = "tool" in parse_directives([user_text]).flags
    except RequestError:
        return None
    return name if wanted else None


def _stop_list(value: object) -> list[str]:
    if isinstance(value, str):
        return [value] if value else []
    if isinstance(value, list):
        return [s for s in value if isinstance(s, str) and s]
    if value is None:
        return []
    raise RequestError("stop must be a string or a list of strings")


def _max_tokens(body: JsonObject, *keys: str) -> int | None:
    for key in keys:
        value = body.get(key)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise RequestError(f"{key} must be a non-negative integer")
        return value
    return None


@dataclass(frozen=True)
class Completion:
    """The echo after stop sequences and the token limit: ``reason`` is end, stop or length."""

    text: str
    reason: str
    stop_sequence: str | None = None

    @property
    def tokens(self) -> int:
        return count_words([self.text])


def complete(user_text: str, stops: list[str], max_tokens: int | None) -> Completion:
    """The deterministic answer: ``echo: <text>``, cut at the first stop sequence or token limit."""
    text = "echo: " + user_text
    matched: str | None = None
    cut = len(text) + 1
    for stop in stops:
        at = text.find(stop)
        if 0 <= at < cut:
            cut, matched = at, stop
    if matched is not None:
        text = text[:cut]
    if max_tokens is not None:
        words = text.split()
        if len(words) > max_tokens:
            return Completion(" ".join(words[:max_tokens]), "length")
    return Completion(text, "stop" if matched is not None else "end", matched)


def _new_id(prefix: str) -> str:
    return prefix + uuid.uuid4().hex[:24]


# --------------------------------------------------------------------------- answers


@dataclass(frozen=True)
class Draft:
    """A successful answer as a function of its padded text, so ``bytes=N`` can size it."""

    render: Callable[[str], JsonObject]
    text: str = ""


def _padded(obj: JsonObject) -> Callable[[str], JsonObject]:
    """For answers without a text slot: padding goes into a top-level ``x_sim_padding``."""
    return lambda pad: {**obj, "x_sim_padding": pad} if pad else obj


def _json_len(char: str) -> int:
    return len(json.dumps(char)) - 2


def with_cached(answer: bytes, endpoint: Endpoint, cached: int) -> bytes:
    """``answer`` with ``cached`` of its input tokens (at most all) reported as read from a
    prompt cache, in the endpoint's own words."""
    body = json.loads(answer)
    usage = body.get("usage")
    if not isinstance(usage, dict) or endpoint is Endpoint.EMBEDDINGS:
        return answer
    if endpoint is Endpoint.CHAT:
        usage["prompt_tokens_details"] = {"cached_tokens": min(cached, usage["prompt_tokens"])}
    elif endpoint is Endpoint.RESPONSES:
        usage["input_tokens_details"] = {"cached_tokens": min(cached, usage["input_tokens"])}
    else:  # Anthropic counts cache reads apart from input_tokens
        read = min(cached, usage["input_tokens"])
        usage["input_tokens"] -= read
        usage["cache_read_input_tokens"] = read
    return json.dumps(body).encode()


def fit_to_size(draft: Draft, size: int | None) -> bytes:
    """The answer's bytes; with ``size``, padded or cut with spaces to exactly that length if it can be."""
    text = draft.text
    body = dumps(draft.render(text))
    if size is None:
        return body
    # A few rounds settle it even when an empty text renders differently (null, missing key).
    for _ in range(4):
        diff = size - len(body)
        if diff == 0:
            return body
        if diff > 0:
            text += " " * diff
        else:
            excess, cut = -diff, len(text)
            while cut > 0 and excess > 0:
                cut -= 1
                excess -= _json_len(text[cut])
            if excess > 0:
                return dumps(draft.render(""))
            text = text[:cut]
        body = dumps(draft.render(text))
    return body


def _messages_of(body: JsonObject) -> list[Any]:
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise RequestError("messages must be a non-empty list")
    return messages


def chat_answer(model: str, body: JsonObject, input_tokens: int) -> Draft:
    messages = _messages_of(body)
    user_text = last_user_text(messages)
    last = messages[-1]
    tool = (
        None
        if isinstance(last, dict) and last.get("role") == "tool"
        else _wants_tool(body.get("tools"), user_text)
    )
    answer_id = _new_id("chatcmpl-")

    def chat(
        message: JsonObject, finish_reason: str, output_tokens: int, stop_reason: str | None = None
    ) -> JsonObject:
        choice: JsonObject = {
            "index": 0,
            "message": message,
            "logprobs": None,
            "finish_reason": finish_reason,
        }
        if stop_reason is not None:
            choice["stop_reason"] = stop_reason  # which stop sequence matched, as vLLM says
        return {
            "id": answer_id,
            "object": "chat.completion",
            "created": CREATED,
            "model": model,
            "choices": [choice],
            "usage": {
                "prompt_tokens": input_tokens,
                "completion_tokens": output_tokens,
                "total_tokens": input_tokens + output_tokens,
            },
        }

    if tool is not None:
        call = {"id": _new_id("call_"), "type": "function", "function": {"name": tool, "arguments": "{}"}}
        message = {"role": "assistant", "content": None, "tool_calls": [call]}
        return Draft(_padded(chat(message, "tool_calls", 1)))
    done = complete(
        user_text, _stop_list(body.get("stop")), _max_tokens(body, "max_completion_tokens", "max_tokens")
    )
    finish = "length" if done.reason == "length" else "stop"
    return Draft(
        lambda text: chat({"role": "assistant", "content": text}, finish, done.tokens, done.stop_sequence),
        done.text,
    )


def _responses_user_text(items: object) -> str:
    if isinstance(items, str):
        return items
    if isinstance(items, list):
        return last_user_text(items)
    raise RequestError("input must be a string or a list of input items")


def responses_answer(model: str, body: JsonObject, input_tokens: int) -> Draft:
    items = body.get("input")
    user_text = _responses_user_text(items)
    last = items[-1] if isinstance(items, list) and items else None
    ends_with_tool_output = isinstance(last, dict) and last.get("type") == "function_call_output"
    tool = None if ends_with_tool_output else _wants_tool(body.get("tools"), user_text)
    answer_id = _new_id("resp_")

    def response(output: list[JsonObject], output_tokens: int, incomplete: bool) -> JsonObject:
        return {
            "id": answer_id,
            "object": "response",
            "created_at": CREATED,
            "status": "incomplete" if incomplete else "completed",
            "error": None,
            "incomplete_details": {"reason": "max_output_tokens"} if incomplete else None,
            "model": model,
            "output": output,
            "usage": {
                "input_tokens": input_tokens,
                "input_tokens_details": {"cached_tokens": 0},
                "output_tokens": output_tokens,
                "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": input_tokens + output_tokens,
            },
        }

    if tool is not None:
        call = {
            "type": "function_call",
            "id": _new_id("fc_"),
            "call_id": _new_id("call_"),
            "name": tool,
            "arguments": "{}",
            "status": "completed",
        }
        return Draft(_padded(response([call], 1, incomplete=False)))
    done = complete(user_text, [], _max_tokens(body, "max_output_tokens"))
    incomplete = done.reason == "length"
    message_id = _new_id("msg_")

    def render(text: str) -> JsonObject:
        message = {
            "type": "message",
            "id": message_id,
            "role": "assistant",
            "status": "incomplete" if incomplete else "completed",
            "content": [{"type": "output_text", "text": text, "annotations": []}],
        }
        return response([message], done.tokens, incomplete)

    return Draft(render, done.text)


def messages_answer(model: str, body: JsonObject, input_tokens: int) -> Draft:
    messages = _messages_of(body)
    user_text = last_user_text(messages)
    last_content = messages[-1].get("content") if isinstance(messages[-1], dict) else None
    ends_with_tool_result = isinstance(last_content, list) and any(
        isinstance(block, dict) and block.get("type") == "tool_result" for block in last_content
    )
    tool = None if ends_with_tool_result else _wants_tool(body.get("tools"), user_text)
    answer_id = _new_id("msg_")

    def message(content: list[JsonObject], stop_reason: str, stop: str | None, tokens: int) -> JsonObject:
        return {
            "id": answer_id,
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": content,
            "stop_reason": stop_reason,
            "stop_sequence": stop,
            "usage": {"input_tokens": input_tokens, "output_tokens": tokens},
        }

    if tool is not None:
        use = {"type": "tool_use", "id": _new_id("toolu_"), "name": tool, "input": {}}
        return Draft(_padded(message([use], "tool_use", None, 1)))
    done = complete(user_text, _stop_list(body.get("stop_sequences")), _max_tokens(body, "max_tokens"))
    stop_reason = {"end": "end_turn", "stop": "stop_sequence", "length": "max_tokens"}[done.reason]
    return Draft(
        lambda text: message([{"type": "text", "text": text}], stop_reason, done.stop_sequence, done.tokens),
        done.text,
    )


def embedding_vector(seed: bytes, dimensions: int) -> bytes:
    """A deterministic unit vector for ``seed``, as little-endian float32 bytes."""
    raw = bytearray()
    counter = 0
    while len(raw) < 4 * dimensions:
        raw += hashlib.sha256(seed + counter.to_bytes(4, "little")).digest()
        counter += 1
    values = [u / 2**31 - 1.0 for u in struct.unpack(f"<{dimensions}I", raw[: 4 * dimensions])]
    norm = math.sqrt(sum(v * v for v in values)) or 1.0
    return struct.pack(f"<{dimensions}f", *(v / norm for v in values))


def _is_token(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _embedding_inputs(value: object) -> list[str | list[int]]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and value:
        if all(isinstance(item, str) for item in value):
            return list(value)
        if all(_is_token(item) for item in value):
            return [list(value)]
        if all(isinstance(item, list) and item and all(_is_token(t) for t in item) for item in value):
            return list(value)
    raise RequestError("input must be a string, a list of strings, or token arrays")


def embeddings_answer(model: str, body: JsonObject, input_tokens: int) -> Draft:
    del input_tokens  # embeddings count their own inputs, token arrays included
    inputs = _embedding_inputs(body.get("input"))
    dimensions = body.get("dimensions", DEFAULT_DIMENSIONS)
    if not _is_token(dimensions) or not 1 <= dimensions <= MAX_DIMENSIONS:
        raise RequestError(f"dimensions must be an integer between 1 and {MAX_DIMENSIONS}")
    encoding = body.get("encoding_format") or "float"
    if encoding not in ("float", "base64"):
        raise RequestError("encoding_format must be 'float' or 'base64'")
    data: list[JsonObject] = []
    tokens = 0
    for index, item in enumerate(inputs):
        if isinstance(item, str):
            seed, tokens = item.encode(), tokens + len(item.split())
        else:
            seed, tokens = ("tokens:" + ",".join(map(str, item))).encode(), tokens + len(item)
        packed = embedding_vector(seed, dimensions)
        vector: str | list[float] = (
            base64.b64encode(packed).decode()
            if encoding == "base64"
            else list(struct.unpack(f"<{dimensions}f", packed))
        )
        data.append({"object": "embedding", "index": index, "embedding": vector})
    tokens = max(1, tokens)
    answer = {
        "object": "list",
        "data": data,
        "model": model,
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
    }
    return Draft(_padded(answer))


ANSWERS: dict[Endpoint, Callable[[str, JsonObject, int], Draft]] = {
    Endpoint.CHAT: chat_answer,
    Endpoint.EMBEDDINGS: embeddings_answer,
    Endpoint.RESPONSES: responses_answer,
    Endpoint.MESSAGES: messages_answer,
}
