"""Media a provider's batch service cannot take (spec 003, ``unsupported_batch_media``).

A batch sent to a provider's batch service carries its media by public ``http`` or ``https``
URL, which the provider fetches later, outside the gateway: a ``data:`` URI or base64, a
private, loopback, link-local or ``localhost`` address, and a vendor's file id are refused.
A host name is not resolved here (the provider resolves it); a literal address is checked
with the webhooks' rules (``domain.addresses``). Gateway-run batches keep the interactive
rules: this applies to provider-run batches only. Pure.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

from batchgw.domain import addresses

CODE = "unsupported_batch_media"
# A host written as integers (``2130706433``, ``0x7f.1``): resolvers read it as an address.
_INTEGER_HOST = re.compile(r"^(0x[0-9a-f]+|[0-9]+)(\.(0x[0-9a-f]+|[0-9]+)){0,3}$", re.IGNORECASE)


def unsupported_media(body: Any) -> tuple[str, str] | None:
    """The first medium of a request ``body`` a provider's batch service cannot take, as
    (param under the body, why), or None. Looks in ``messages`` (chat, Messages) and
    ``input`` (Responses), nested content included."""
    if not isinstance(body, dict):
        return None
    for field in ("messages", "input"):
        for where, part in _parts(body.get(field), field):
            why = _refusal(where, part)
            if why is not None:
                return why
    return None


def _parts(value: Any, where: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """Every object under ``value`` with its path (``messages[0].content[1]``)."""
    if isinstance(value, dict):
        yield where, value
        for key, inner in value.items():
            yield from _parts(inner, f"{where}.{key}")
    elif isinstance(value, list):
        for index, inner in enumerate(value):
            yield from _parts(inner, f"{where}[{index}]")


def _refusal(where: str, part: dict[str, Any]) -> tuple[str, str] | None:
    kind = part.get("type")
    if kind == "image_url" and isinstance(part.get("image_url"), dict):  # chat
        return _url(f"{where}.image_url.url", part["image_url"].get("url"))
    if kind == "input_audio":  # chat: always inline base64
        return f"{where}.input_audio", "audio is sent inline as base64"
    if kind == "file" and isinstance(part.get("file"), dict):  # chat
        file = part["file"]
        if file.get("file_id") is not None:
            return f"{where}.file.file_id", "a vendor file id names a file the provider's batch cannot read"
        return _url(f"{where}.file.file_data", file.get("file_data"))
    if kind in ("input_image", "input_file"):  # Responses
        if part.get("file_id") is not None:
            return f"{where}.file_id", "a vendor file id names a file the provider's batch cannot read"
        if "file_data" in part:
            return _url(f"{where}.file_data", part.get("file_data"))
        key = "image_url" if kind == "input_image" else "file_url"
        return _url(f"{where}.{key}", part.get(key))
    if kind in ("image", "document") and isinstance(part.get("source"), dict):  # Messages
        source = part["source"]
        source_type = source.get("type")
        if source_type == "base64":
            return f"{where}.source", "base64 media is sent inline"
        if source_type == "file" or "file_id" in source:
            return f"{where}.source", "a vendor file id names a file the provider's batch cannot read"
        if source_type == "url":
            return _url(f"{where}.source.url", source.get("url"))
    return None


def _url(where: str, url: Any) -> tuple[str, str] | None:
    """Why ``url`` is not a public http(s) URL a provider could fetch (None: it is)."""
    if not isinstance(url, str):
        return None  # the endpoint's own validation words a missing or odd URL
    try:
        parts = urlsplit(url.strip())
        host = (parts.hostname or "").rstrip(".").lower()
    except ValueError:
        return where, "the URL cannot be read"
    scheme = parts.scheme.lower()
    if scheme == "data":
        return where, "a data: URI is sent inline"
    if scheme not in ("http", "https"):
        return where, "only a public http or https URL can be fetched by the provider"
    if not host:
        return where, "the URL has no host"
    if host == "localhost" or host.endswith(".localhost"):
        return where, f"the host {host} is this machine"
    try:
        literal = ipaddress.ip_address(host)
    except ValueError:
        if _INTEGER_HOST.match(host):
            return where, f"the host {host} is an address written as integers"
        return None  # a name: the provider resolves it
    reason = addresses.forbidden(literal)
    return None if reason is None else (where, f"the host {host} is {reason}")


def message(param: str, why: str) -> str:
    """The error's words for a medium refused at ``param``."""
    return (
        f"{param}: media in a batch run on a provider's batch service must be a public http or "
        f"https URL ({why}); send the batch with execution_mode 'gateway' to run it here"
    )
