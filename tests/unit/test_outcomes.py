"""The retry rules, as pure functions of an attempt's outcome."""

from __future__ import annotations

import math
import random

import pytest
from batchgw.outcomes import (
    MAX_QUEUED_WAIT_SECONDS,
    MAX_TRIES_WITHOUT_WINDOW,
    End,
    Retry,
    backoff_seconds,
    next_step,
)
from batchgw.settings import Settings
from batchgw.upstream import classify

SETTINGS = Settings.model_validate({})
NOW = 1_000_000.0
ERR = b'{"error": {"message": "busy", "code": "x"}}'


def outcome(status: int, body: bytes = ERR, headers: dict[str, str] | None = None):  # type: ignore[no-untyped-def]
    return classify("/v1/chat/completions", status, body, headers or {})


@pytest.mark.parametrize("status", [408, 425, 429, 500, 502, 503])
def test_statuses_that_may_pass_are_retried(status: int) -> None:
    step = next_step(outcome(status), attempts=1, now=NOW, expires_at=NOW + 3600, settings=SETTINGS)
    assert isinstance(step, Retry) and step.uses_attempt


@pytest.mark.parametrize("status", [400, 401, 403, 404, 422])
def test_other_client_errors_fail_at_once(status: int) -> None:
    result = outcome(status)
    assert result.kind == "failed"
    assert next_step(result, attempts=1, now=NOW, expires_at=None, settings=SETTINGS) is None


def test_a_504_fails_at_once_with_code_timeout() -> None:
    result = outcome(504)
    assert result.kind == "failed" and result.error is not None
    assert result.error["code"] == "timeout" and result.error["status"] == 504


def test_error_codes_follow_the_spec_table() -> None:
    codes = {s: outcome(s).error["code"] for s in (400, 403, 404, 422, 429, 500, 503)}  # type: ignore[index]
    assert codes == {
        400: "invalid_request",
        403: "forbidden",
        404: "model_not_found",
        422: "invalid_request",
        429: "rate_limited",
        500: "upstream_error",
        503: "service_unavailable",
    }


def test_a_200_that_is_not_json_fails_permanently_as_upstream_error() -> None:
    result = outcome(200, b"\xff\xfenot json{")
    assert result.kind == "failed" and result.error == {
        "code": "upstream_error",
        "status": 502,
        "message": "the upstream answer is not valid JSON or UTF-8",
    }


def test_backoff_doubles_from_the_base_to_the_cap_with_jitter() -> None:
    rng = random.Random(7)
    for attempt, full in [(1, 5), (2, 10), (3, 20), (8, 640), (9, 900), (30, 900)]:
        delay = backoff_seconds(attempt, SETTINGS, rng)
        assert full / 2 <= delay <= full


def test_a_longer_retry_after_is_honoured() -> None:
    step = next_step(
        outcome(429, headers={"retry-after": "120"}),
        attempts=1,
        now=NOW,
        expires_at=NOW + 3600,
        settings=SETTINGS,
    )
    assert isinstance(step, Retry) and step.next_at == NOW + 120


def test_a_retry_that_would_start_after_the_window_fails_with_the_last_error() -> None:
    step = next_step(outcome(503), attempts=1, now=NOW, expires_at=NOW + 1, settings=SETTINGS)
    assert isinstance(step, End)
    assert step.error is not None and step.error["code"] == "service_unavailable"
    assert step.counters == {"failed": 1}


def test_without_a_window_a_request_is_tried_at_most_2000_times() -> None:
    assert isinstance(
        next_step(
            outcome(500), attempts=MAX_TRIES_WITHOUT_WINDOW - 1, now=NOW, expires_at=None, settings=SETTINGS
        ),
        Retry,
    )
    assert isinstance(
        next_step(
            outcome(500), attempts=MAX_TRIES_WITHOUT_WINDOW, now=NOW, expires_at=None, settings=SETTINGS
        ),
        End,
    )


def queued(retry_after: str | None):  # type: ignore[no-untyped-def]
    body = b'{"error": {"message": "waiting for a GPU", "code": "model_queued"}}'
    return outcome(503, body, {"retry-after": retry_after} if retry_after is not None else {})


def test_model_queued_uses_no_attempt_and_pauses_the_model() -> None:
    step = next_step(queued("300"), attempts=1, now=NOW, expires_at=NOW + 60, settings=SETTINGS)
    assert isinstance(step, Retry)
    assert not step.uses_attempt
    assert step.next_at == NOW + 300  # waits even past the window: the window's end expires it
    assert step.pause_model_until == NOW + 300


@pytest.mark.parametrize("header", [None, "-5", "nan", "inf", "soon"])
def test_model_queued_without_a_usable_retry_after_waits_120_seconds(header: str | None) -> None:
    step = next_step(queued(header), attempts=1, now=NOW, expires_at=None, settings=SETTINGS)
    assert isinstance(step, Retry) and step.next_at == NOW + 120


def test_model_queued_waits_are_capped_at_168_hours_and_pauses_at_15_minutes() -> None:
    step = next_step(
        queued(str(10 * MAX_QUEUED_WAIT_SECONDS)), attempts=1, now=NOW, expires_at=None, settings=SETTINGS
    )
    assert isinstance(step, Retry)
    assert step.next_at == NOW + 168 * 3600
    assert step.pause_model_until == NOW + 900
    assert math.isfinite(step.next_at)
