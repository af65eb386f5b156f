"""The gateway's public API, as the command line calls it: one httpx client, and every
answer that is not a success turned into one ``ApiFailure`` naming the API's error code."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx

DEFAULT_BASE_URL = "http://127.0.0.1:8080/v1"  # the local stack (make run)
# Tries of a call that got no answer, a 502/503/504, or a 429 with Retry-After.
TRIES = 4


class CliError(Exception):
    """A failure shown as one line (never a traceback), with the exit code it ends in."""

    exit_code = 1

    def __init__(self, message: str, *, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.code = code


class ApiFailure(CliError):
    """The API answered an error: its HTTP status, code and message."""

    def __init__(
        self, status: int, message: str, *, code: str | None = None, param: str | None = None
    ) -> None:
        super().__init__(message, code=code)
        self.status = status
        self.param = param


@dataclass
class Api:
    base_url: str
    api_key: str
    timeout: float = 60.0

    def __post_init__(self) -> None:
        self.http = httpx.Client(
            base_url=self.base_url.rstrip("/"),
            headers={"Authorization": f"Bearer {self.api_key}", "User-Agent": "batchgw-cli/0.1"},
            timeout=self.timeout,
        )

    def close(self) -> None:
        self.http.close()

    def call(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        """The answer to one call, tried again on no answer or a passing refusal."""
        for attempt in range(1, TRIES + 1):
            try:
                answer = self.http.request(method, path, **kwargs)
            except httpx.TransportError as exc:
                if attempt == TRIES:
                    raise CliError(f"could not reach {self.base_url}: {exc}", code="unreachable") from None
                time.sleep(min(2**attempt, 10))
                continue
            # A rate's 429 says when to come back; a quota's does not, and is not tried again.
            passing = answer.status_code in (502, 503, 504) or (
                answer.status_code == 429 and "retry-after" in answer.headers
            )
            if passing and attempt < TRIES:
                time.sleep(_retry_after(answer) or min(2**attempt, 10))
                continue
            if answer.status_code >= 400:
                raise _failure(answer)
            return answer
        raise AssertionError("unreachable")

    def json(self, method: str, path: str, **kwargs: Any) -> Any:
        return self.call(method, path, **kwargs).json()

    def pages(self, path: str, params: dict[str, Any]) -> Iterator[dict[str, Any]]:
        """Every item of a paged list, following ``after``."""
        after: str | None = None
        while True:
            page = self.json("GET", path, params={**params, **({"after": after} if after else {})})
            yield from page["data"]
            if not page.get("has_more") or not page["data"]:
                return
            after = page.get("last_id") or page["data"][-1]["id"]


def _retry_after(answer: httpx.Response) -> float | None:
    try:
        return min(float(answer.headers.get("retry-after", "")), 30.0)
    except ValueError:
        return None


def _failure(answer: httpx.Response) -> ApiFailure:
    try:
        error = answer.json().get("error") or {}
    except ValueError:
        error = {}
    message = error.get("message") or answer.text[:200] or answer.reason_phrase
    code = error.get("code")
    return ApiFailure(
        answer.status_code, str(message), code=None if code is None else str(code), param=error.get("param")
    )
