"""Whether a Messages request can run translated, as a chat completion.

A ``/v1/messages`` batch request for a model whose catalog route speaks the OpenAI
protocol runs as a chat completion (``upstream.translate``). It is taken only if nothing in
it would be lost on the way: ``check_translatable`` refuses, when the batch is created,
every parameter a chat completion cannot carry (extended thinking, cache control,
structured output, citations, documents, ``top_k``...).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NoReturn

from batchgw.validation import fail

# Top-level Messages fields a chat completion cannot carry, and what they are.
_UNCARRIED_FIELDS = {
    "top_k": "top_k",
    "output_format": "structured output (output_format)",
    "output_config": "structured output (output_config)",
    "container": "a container",
    "mcp_servers": "MCP servers",
    "service_tier": "service_tier",
}


def check_translatable(body: dict[str, Any]) -> None:
    """Refuse a (valid) Messages body that a chat completion cannot carry whole.

    Raises RequestInvalid (``unsupported_feature``) naming the first such parameter, with
    ``param`` its path in the body.
    """
    model = body.get("model")

    def refuse(param: str, what: str) -> NoReturn:
        fail(
            param,
            f"{what} cannot be carried to model '{model}', whose backend is not Anthropic's; "
            "the gateway would have to drop it",
            "unsupported_feature",
        )

    thinking = body.get("thinking")
    if thinking is not None and not (isinstance(thinking, dict) and thinking.get("type") == "disabled"):
        refuse("thinking", "extended thinking (thinking)")
    for key, what in _UNCARRIED_FIELDS.items():
        if body.get(key) is not None:
            refuse(key, what)

    system = body.get("system")
    if isinstance(system, list):
        for index, block in enumerate(system):
            _check_block(block, f"system[{index}]", "system", refuse)
    for index, tool in enumerate(body.get("tools") or []):
        if tool.get("cache_control") is not None:
            refuse(f"tools[{index}].cache_control", "cache control (cache_control)")
        if tool.get("strict") is not None:
            refuse(f"tools[{index}].strict", "structured output (strict tool use)")
    for index, message in enumerate(body.get("messages") or []):
        content = message.get("content")
        if isinstance(content, list):
            for position, block in enumerate(content):
                _check_block(block, f"messages[{index}].content[{position}]", message.get("role"), refuse)


def _check_block(
    block: dict[str, Any], where: str, role: Any, refuse: Callable[[str, str], NoReturn]
) -> None:
    block_type = block.get("type")
    if block.get("cache_control") is not None:
        refuse(f"{where}.cache_control", "cache control (cache_control)")
    if block_type == "document":
        refuse(where, "a document block")
    if block_type in ("thinking", "redacted_thinking"):
        refuse(where, f"a {block_type} block")
    if block.get("citations"):
        refuse(f"{where}.citations", "citations")
    if block_type == "image" and role != "user":
        refuse(where, f"an image in {'the system prompt' if role == 'system' else 'an assistant message'}")
    if block_type == "tool_result":
        if block.get("is_error"):
            refuse(f"{where}.is_error", "a tool result marked is_error")
        content = block.get("content")
        if isinstance(content, list):
            for index, inner in enumerate(content):
                at = f"{where}.content[{index}]"
                inner_type = inner.get("type")
                if inner_type != "text":
                    refuse(at, f"a{'n' if inner_type == 'image' else ''} {inner_type} block in a tool result")
                _check_block(inner, at, "tool", refuse)
