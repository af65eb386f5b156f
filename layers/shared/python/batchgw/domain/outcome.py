"""What one upstream call came back with, classified (``upstream.client`` makes these)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Literal

# success: a JSON answer; failed: permanent; retry: may pass (408, 425, 429, 5xx but 504,
# a connection that could not be opened); queued: 503 model_queued (uses no attempt).
OutcomeKind = Literal["success", "failed", "retry", "queued"]


@dataclass(frozen=True, slots=True)
class Outcome:
    kind: OutcomeKind
    status_code: int | None = None
    body: Any = None
    body_bytes: int = 0
    request_id: str | None = None
    error: dict[str, Any] | None = None
    retry_after: float | None = None
    input_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = 0  # of the input tokens: read from the upstream's prompt cache
    usage_known: bool = True
    # The route that answered (or was tried last), and those that refused the connection
    # before it; ``unreachable``: nothing was sent (the connection could not be made).
    route: str | None = None
    refused_routes: tuple[str, ...] = ()
    unreachable: bool = False

    def replace(self, **changes: Any) -> Outcome:
        return replace(self, **changes)
