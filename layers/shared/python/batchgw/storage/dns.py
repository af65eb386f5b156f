"""Name resolution, as one function to swap in tests (a fake resolver) and to resolve once
per connection (the address checked is the address connected to)."""

from __future__ import annotations

import socket
from collections.abc import Callable

Resolver = Callable[[str, int], list[str]]


def resolve(host: str, port: int) -> list[str]:
    """Every address ``host`` resolves to (empty when it does not)."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError):
        return []
    return list(dict.fromkeys(str(info[4][0]) for info in infos))
