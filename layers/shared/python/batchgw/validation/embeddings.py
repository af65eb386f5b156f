"""An embeddings request body, checked as the endpoint would check it.

Unlike chat, every field is known here: embeddings take few parameters, and one the
gateway does not know would be silently dropped on the way upstream, so it is refused.
"""

from __future__ import annotations

from typing import Any

from batchgw.validation import fail, fail_one_of, is_int, shown
from batchgw.validation.common import check_input, check_model, check_stream

MAX_INPUTS = 2048  # strings or token arrays in one request, as OpenAI's endpoint allows
ENCODING_FORMATS = ("float", "base64")

_FIELDS = frozenset({"model", "input", "dimensions", "encoding_format", "user", "stream"})


def validate_embeddings_body(body: Any) -> str:
    """Check one ``/v1/embeddings`` body and return the model name it asks for.

    ``input`` is a non-empty string, or a non-empty array of non-empty strings, of token ids
    (non-negative integers) or of non-empty token-id arrays. Raises RequestInvalid
    (``invalid_body``; ``unsupported_feature`` for ``stream: true``) naming the field.
    """
    if not isinstance(body, dict):
        fail(None, "body must be a JSON object")
    for key in body:
        if key not in _FIELDS:
            fail(
                key,
                f"unknown field '{key}'; an embeddings request takes "
                f"{', '.join(sorted(_FIELDS - {'stream'}))} and nothing is silently dropped",
            )

    model = check_model(body.get("model"))
    items = check_input(
        body.get("input"), "a string, an array of strings or an array of token arrays", MAX_INPUTS
    )
    if items is not None:
        _check_items(items)
    check_stream(body.get("stream"), "stream does not apply to embeddings and must not be true in a batch")

    dimensions = body.get("dimensions")
    if dimensions is not None and (not is_int(dimensions) or dimensions < 1):
        fail("dimensions", f"dimensions must be a positive integer; got {shown(dimensions)}")
    encoding_format = body.get("encoding_format")
    if encoding_format is not None and encoding_format not in ENCODING_FORMATS:
        fail_one_of("encoding_format", encoding_format, ENCODING_FORMATS)
    user = body.get("user")
    if user is not None and not isinstance(user, str):
        fail("user", "user must be a string")
    return model


def _check_items(items: list[Any]) -> None:
    """An input array's items: all non-empty strings, all token ids or all token arrays, as the first."""
    first = items[0]
    if isinstance(first, str):
        for index, text in enumerate(items):
            if not isinstance(text, str) or not text:
                fail(f"input[{index}]", f"input[{index}] must be a non-empty string, as input[0] is")
    elif is_int(first):
        _check_tokens(items, "input")
    elif isinstance(first, list):
        for index, tokens in enumerate(items):
            at = f"input[{index}]"
            if not isinstance(tokens, list) or not tokens:
                fail(at, f"{at} must be a non-empty array of token ids, as input[0] is")
            _check_tokens(tokens, at)
    else:
        fail("input[0]", "input items must be strings, token ids or token arrays")


def _check_tokens(tokens: list[Any], where: str) -> None:
    for index, token in enumerate(tokens):
        if not is_int(token) or token < 0:
            fail(f"{where}[{index}]", f"{where}[{index}] must be a token id, a non-negative integer")
