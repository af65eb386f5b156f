"""Messages ⇄ chat completions, for a Messages request whose model has an OpenAI route.

A ``/v1/messages`` batch request for a model whose catalog route speaks the OpenAI
protocol runs as a chat completion: ``messages_to_chat`` turns the request into one, and
``chat_to_message`` turns the chat completion back into an Anthropic ``message``.

A request is translated only if nothing in it would be lost on the way; that is checked
when the batch is created (``validation.translatable``). ``messages_to_chat`` assumes a
body that passed ``validate_messages_body`` and ``check_translatable``.

Everything here is pure: dicts in, dicts out.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from typing import Any

_TOOL_CHOICE = {"auto": "auto", "any": "required", "none": "none"}
_CHAT_ID_PREFIXES = ("chatcmpl-", "chatcmpl_", "cmpl-")


class TranslationError(ValueError):
    """A chat completion that cannot be expressed as an Anthropic message (e.g. tool-call
    arguments that are not a JSON object). The request should fail as an upstream error."""


# --------------------------------------------------------------------------- request


def messages_to_chat(body: dict[str, Any]) -> dict[str, Any]:
    """The chat-completions request that runs Messages request ``body``.

    ``system`` becomes a system message; text and image blocks become content parts
    (a base64 image a data URL); ``tool_use`` blocks become the assistant's ``tool_calls``
    (arguments as JSON text) and ``tool_result`` blocks ``tool`` messages; tools become
    function tools. ``stop_sequences``, ``max_tokens``, ``temperature``, ``top_p``,
    ``tool_choice`` and ``metadata.user_id`` map to their chat counterparts.
    """
    messages: list[dict[str, Any]] = []
    system = body.get("system")
    if system is not None:
        messages.append({"role": "system", "content": _text_content(system)})
    for message in body["messages"]:
        if message["role"] == "assistant":
            messages.append(_assistant_message(message["content"]))
        else:
            messages.extend(_user_messages(message["content"]))

    chat: dict[str, Any] = {"model": body["model"], "messages": messages, "max_tokens": body["max_tokens"]}
    for key in ("temperature", "top_p"):
        if body.get(key) is not None:
            chat[key] = body[key]
    if body.get("stop_sequences"):
        chat["stop"] = list(body["stop_sequences"])
    tools = body.get("tools")
    if tools:
        chat["tools"] = [_function_tool(tool) for tool in tools]
    choice = body.get("tool_choice")
    if choice is not None:
        chat["tool_choice"] = _chat_tool_choice(choice)
        if choice.get("disable_parallel_tool_use") and tools:
            chat["parallel_tool_calls"] = False
    user_id = (body.get("metadata") or {}).get("user_id")
    if user_id is not None:
        chat["user"] = user_id
    return chat


def _text_content(content: str | list[dict[str, Any]]) -> str | list[dict[str, Any]]:
    if isinstance(content, str):
        return content
    return [{"type": "text", "text": block["text"]} for block in content]


def _image_part(source: dict[str, Any]) -> dict[str, Any]:
    if source["type"] == "url":
        return {"type": "image_url", "image_url": {"url": source["url"]}}
    url = f"data:{source['media_type']};base64,{source['data']}"
    return {"type": "image_url", "image_url": {"url": url}}


def _assistant_message(content: str | list[dict[str, Any]]) -> dict[str, Any]:
    if isinstance(content, str):
        return {"role": "assistant", "content": content}
    parts = [{"type": "text", "text": block["text"]} for block in content if block["type"] == "text"]
    calls = [
        {
            "id": block["id"],
            "type": "function",
            "function": {
                "name": block["name"],
                "arguments": json.dumps(block["input"], separators=(",", ":")),
            },
        }
        for block in content
        if block["type"] == "tool_use"
    ]
    message: dict[str, Any] = {"role": "assistant", "content": parts or None}
    if calls:
        message["tool_calls"] = calls
    return message


def _user_messages(content: str | list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A user message: its tool results first, as ``tool`` messages, then the rest."""
    if isinstance(content, str):
        return [{"role": "user", "content": content}]
    messages: list[dict[str, Any]] = []
    parts: list[dict[str, Any]] = []
    for block in content:
        if block["type"] == "tool_result":
            result = block.get("content")
            messages.append(
                {
                    "role": "tool",
                    "tool_call_id": block["tool_use_id"],
                    "content": "" if result is None else _text_content(result),
                }
            )
        elif block["type"] == "image":
            parts.append(_image_part(block["source"]))
        else:
            parts.append({"type": "text", "text": block["text"]})
    if parts:
        messages.append({"role": "user", "content": parts})
    return messages


def _function_tool(tool: dict[str, Any]) -> dict[str, Any]:
    function: dict[str, Any] = {"name": tool["name"]}
    if tool.get("description") is not None:
        function["description"] = tool["description"]
    function["parameters"] = tool["input_schema"]
    return {"type": "function", "function": function}


def _chat_tool_choice(choice: dict[str, Any]) -> str | dict[str, Any]:
    if choice["type"] == "tool":
        return {"type": "function", "function": {"name": choice["name"]}}
    return _TOOL_CHOICE[choice["type"]]


# --------------------------------------------------------------------------- response


def chat_to_message(
    chat_response: dict[str, Any], *, model: str, stop_sequences: Sequence[str] | None = None
) -> dict[str, Any]:
    """The Anthropic ``message`` a chat completion answers a translated request with.

    ``model`` is the model name the message reports (the one the request named);
    ``stop_sequences`` are the request's, used to tell a stop sequence from the end of the
    turn when the backend reports which one matched (vLLM's ``stop_reason``): the chat API
    itself does not, so otherwise a stop reads as ``end_turn``. Raises TranslationError
    when the completion has no choice or a tool call whose arguments are not a JSON object.
    """
    choices = chat_response.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise TranslationError("the chat completion has no choice")
    choice = choices[0]
    message = choice.get("message")
    if not isinstance(message, dict):
        raise TranslationError("the chat completion's choice has no message")

    content: list[dict[str, Any]] = []
    text = _chat_text(message.get("content"))
    refusal = message.get("refusal")
    if text:
        content.append({"type": "text", "text": text})
    elif isinstance(refusal, str) and refusal:
        content.append({"type": "text", "text": refusal})
    for index, call in enumerate(message.get("tool_calls") or []):
        content.append(_tool_use(call, index))

    finish = choice.get("finish_reason")
    stop_sequence = _matched_stop(choice, stop_sequences) if finish == "stop" else None
    if finish == "length":
        stop_reason = "max_tokens"
    elif finish in ("tool_calls", "function_call") or any(block["type"] == "tool_use" for block in content):
        stop_reason = "tool_use"
    elif finish == "content_filter" or (not text and isinstance(refusal, str) and refusal):
        stop_reason = "refusal"
    elif stop_sequence is not None:
        stop_reason = "stop_sequence"
    else:
        stop_reason = "end_turn"

    usage = chat_response.get("usage")
    if not isinstance(usage, dict):
        usage = {}
    return {
        "id": _message_id(chat_response),
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": stop_reason,
        "stop_sequence": stop_sequence,
        "usage": _messages_usage(usage),
    }


def _messages_usage(usage: dict[str, Any]) -> dict[str, int]:
    """A chat answer's usage in Anthropic's words: prompt-cache reads apart from the input."""
    prompt = int(usage.get("prompt_tokens") or 0)
    details = usage.get("prompt_tokens_details")
    cached = min(prompt, int(details.get("cached_tokens") or 0)) if isinstance(details, dict) else 0
    counted = {"input_tokens": prompt - cached, "output_tokens": int(usage.get("completion_tokens") or 0)}
    return counted | ({"cache_read_input_tokens": cached} if cached else {})


def _chat_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            part["text"] for part in content if isinstance(part, dict) and isinstance(part.get("text"), str)
        )
    return ""


def _tool_use(call: Any, index: int) -> dict[str, Any]:
    function = call.get("function") if isinstance(call, dict) else None
    if not isinstance(function, dict) or not isinstance(function.get("name"), str):
        raise TranslationError("a tool call of the chat completion has no function name")
    arguments = function.get("arguments") or "{}"
    try:
        tool_input = json.loads(arguments) if isinstance(arguments, str) else arguments
    except ValueError as exc:
        raise TranslationError(f"tool call '{function['name']}' has arguments that are not JSON") from exc
    if not isinstance(tool_input, dict):
        raise TranslationError(f"tool call '{function['name']}' has arguments that are not a JSON object")
    return {
        "type": "tool_use",
        "id": str(call.get("id") or f"toolu_{index}"),
        "name": function["name"],
        "input": tool_input,
    }


def _matched_stop(choice: dict[str, Any], stop_sequences: Sequence[str] | None) -> str | None:
    matched = choice.get("stop_reason")  # vLLM: the stop string that matched, or a token id
    if not isinstance(matched, str):
        return None
    if stop_sequences is not None and matched not in stop_sequences:
        return None
    return matched


def _message_id(chat_response: dict[str, Any]) -> str:
    chat_id = chat_response.get("id")
    if isinstance(chat_id, str) and chat_id:
        for prefix in _CHAT_ID_PREFIXES:
            if chat_id.startswith(prefix):
                chat_id = chat_id[len(prefix) :]
                break
        return f"msg_{chat_id}"
    digest = hashlib.sha256(json.dumps(chat_response, sort_keys=True, default=str).encode()).hexdigest()
    return f"msg_{digest[:24]}"
