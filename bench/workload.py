"""The benchmark's requests: N distinct chat requests, some told to fail twice with 503."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

MODEL = "sim-chat"
ENDPOINT = "/v1/chat/completions"
# The simulator answers 503 to the first two attempts of a request carrying this, then 200.
FAIL_DIRECTIVE = "[[sim status=503 fail=2]]"
FAILS_PER_FAILING_REQUEST = 2
FAIL_EVERY = 10  # every 10th request (10%) carries the directive in the retry run


@dataclass(frozen=True)
class Workload:
    """The same N requests, as batch lines for the gateway and as bodies for the direct client."""

    name: str
    texts: tuple[str, ...]
    custom_id_prefix: str

    @property
    def n(self) -> int:
        return len(self.texts)

    def custom_id(self, index: int) -> str:
        return f"{self.custom_id_prefix}-{index}"

    def body(self, index: int) -> dict[str, Any]:
        return {"model": MODEL, "messages": [{"role": "user", "content": self.texts[index]}]}

    def batch_lines(self) -> list[dict[str, Any]]:
        return [{"custom_id": self.custom_id(i), "body": self.body(i)} for i in range(self.n)]

    def expected_content(self, index: int) -> str:
        """What the simulator answers: an echo of the user text (directives included)."""
        return "echo: " + self.texts[index]

    @property
    def failing(self) -> int:
        return sum(1 for text in self.texts if FAIL_DIRECTIVE in text)

    @property
    def expected_upstream_requests(self) -> int:
        """Requests the simulator must see for every result to complete once."""
        return self.n + FAILS_PER_FAILING_REQUEST * self.failing


def dispatch_workload(n: int) -> Workload:
    return Workload("dispatch", tuple(f"benchmark request {i}" for i in range(n)), "b")


def retry_workload(n: int) -> Workload:
    """Like ``dispatch_workload`` but every 10th request fails twice with 503 before succeeding."""
    texts = tuple(
        f"benchmark retry request {i}" + (f" {FAIL_DIRECTIVE}" if i % FAIL_EVERY == 0 else "")
        for i in range(n)
    )
    return Workload("retry", texts, "r")
