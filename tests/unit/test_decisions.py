"""What an attempt's outcome means for its request: the pure decision, branch by branch."""

from __future__ import annotations

import json
import math
import random

import pytest
from batchgw.config.catalog import Price
from batchgw.config.settings import Settings
from batchgw.domain import codec
from batchgw.domain.batch import Tally
from batchgw.domain.decisions import (
    MAX_QUEUED_WAIT_SECONDS,
    MAX_TRIES_WITHOUT_WINDOW,
    RETRY_JITTER,
    Decision,
    End,
    Retry,
    Verdict,
    backoff_seconds,
    decide,
    not_run,
)
from batchgw.domain.outcome import Outcome
from batchgw.domain.request import RequestRecord
from batchgw.domain.states import RequestStatus
from batchgw.upstream.client import classify

SETTINGS = Settings.model_validate({})
NOW = 1_000_000.0
ERR = b'{"error": {"message": "busy", "code": "x"}}'


def outcome(status: int, body: bytes = ERR, headers: dict[str, str] | None = None) -> Outcome:
    return classify("/v1/chat/completions", status, body, headers or {})


def request(attempts: int = 1, lost: int = 0) -> RequestRecord:
    return RequestRecord("batch_x", 0, "c-0", "sim-chat", RequestStatus.RUNNING, attempts=attempts, lost=lost)


def next_step(
    result: Outcome,
    *,
    attempts: int,
    now: float,
    expires_at: float | None,
    settings: Settings,
    price: Price | None = None,
    stored_bytes: int = 0,
    lost: int = 0,
) -> Decision:
    return decide(
        result,
        request(attempts, lost),
        settings,
        now=now,
        expires_at=expires_at,
        price=price,
        stored_bytes=stored_bytes,
    )


@pytest.mark.parametrize("status", [408, 425, 429, 500, 502, 503])
def test_statuses_that_may_pass_are_retried(status: int) -> None:
    step = next_step(outcome(status), attempts=1, now=NOW, expires_at=NOW + 3600, settings=SETTINGS)
    assert isinstance(step, Retry) and step.uses_attempt


@pytest.mark.parametrize("status", [400, 401, 403, 404, 422])
def test_other_client_errors_fail_at_once(status: int) -> None:
    result = outcome(status)
    assert result.kind == "failed"
    step = next_step(result, attempts=1, now=NOW, expires_at=None, settings=SETTINGS)
    assert isinstance(step, End) and step.status is RequestStatus.FAILED and step.tally == Tally(failed=1)


def test_a_504_fails_at_once_with_code_timeout() -> None:
    result = outcome(504)
    assert result.kind == "failed" and result.error is not None
    assert result.error["code"] == "timeout" and result.error["status"] == 504


def test_error_codes_follow_the_spec_table() -> None:
    statuses = (400, 401, 403, 404, 408, 409, 422, 425, 429, 500, 503)
    codes = {s: outcome(s).error["code"] for s in statuses}  # type: ignore[index]
    assert codes == {
        400: "invalid_request",
        401: "forbidden",  # the provider refused the gateway's credentials, as with a 403
        403: "forbidden",
        404: "model_not_found",
        408: "upstream_error",  # retried: `timeout` is a 504's, never retried
        409: "invalid_request",
        422: "invalid_request",
        425: "upstream_error",  # retried: never the model rejecting the request
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


def test_backoff_starts_at_5_seconds_doubles_to_15_minutes_and_jitters_only_on_top() -> None:
    rng = random.Random(7)
    for attempt, nominal in [(1, 5), (2, 10), (3, 20), (8, 640), (9, 900), (30, 900), (10_000, 900)]:
        delay = backoff_seconds(attempt, SETTINGS, rng)
        assert nominal <= delay <= nominal * (1 + RETRY_JITTER)


def test_backoff_is_never_below_its_nominal_delay_and_its_jitter_stays_bounded() -> None:
    rng = random.Random(11)
    delays = [backoff_seconds(1, SETTINGS, rng) for _ in range(5000)]
    assert min(delays) >= 5 and max(delays) <= 5 * (1 + RETRY_JITTER)
    assert max(delays) - min(delays) > 0.9 * 5 * RETRY_JITTER  # jittered over its whole range
    assert RETRY_JITTER <= 0.5


def test_a_retry_waits_at_least_its_nominal_delay_whatever_the_draw() -> None:
    class Extreme(random.Random):
        def __init__(self, draw: float) -> None:
            super().__init__()
            self.draw = draw

        def random(self) -> float:
            return self.draw

    for draw in (0.0, 0.999999):
        step = decide(
            outcome(503), request(3), SETTINGS, now=NOW, expires_at=NOW + 3600, price=None, rng=Extreme(draw)
        )
        assert isinstance(step, Retry) and NOW + 20 <= step.next_at <= NOW + 20 * (1 + RETRY_JITTER)


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
    assert step.tally == Tally(failed=1)


def test_without_a_window_a_request_is_tried_at_most_2000_times() -> None:
    assert isinstance(
        next_step(
            outcome(500), attempts=MAX_TRIES_WITHOUT_WINDOW - 1, now=NOW, expires_at=None, settings=SETTINGS
        ),
        Retry,
    )
    last = next_step(
        outcome(500), attempts=MAX_TRIES_WITHOUT_WINDOW, now=NOW, expires_at=None, settings=SETTINGS
    )
    assert isinstance(last, End) and last.status is RequestStatus.FAILED


def queued(retry_after: str | None):  # type: ignore[no-untyped-def]
    body = b'{"error": {"message": "waiting for a GPU", "code": "model_queued"}}'
    return outcome(503, body, {"retry-after": retry_after} if retry_after is not None else {})


def test_model_queued_uses_no_attempt_and_pauses_the_model() -> None:
    step = next_step(queued("300"), attempts=1, now=NOW, expires_at=NOW + 3600, settings=SETTINGS)
    assert isinstance(step, Retry)
    assert not step.uses_attempt
    assert step.next_at == NOW + 300
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


# --- decide: every way a request that ran can go ----------------------------------------------

PRICE = Price(input_per_mtok=2, output_per_mtok=8)  # $2 / $8 per million tokens


def answered(text: str = "hello", prompt: int = 1000, completion: int = 500) -> Outcome:
    body = {
        "id": "chatcmpl-1",
        "choices": [{"message": {"role": "assistant", "content": text}}],
        "usage": {"prompt_tokens": prompt, "completion_tokens": completion},
    }
    return classify("/v1/chat/completions", 200, json.dumps(body).encode(), {"x-request-id": "up-1"})


def test_a_success_is_stored_packed_and_counted_with_its_tokens_and_cost() -> None:
    result = answered()
    step = next_step(result, attempts=1, now=NOW, expires_at=None, settings=SETTINGS, price=PRICE, lost=1)
    cost = 1000 * 2_000 + 500 * 8_000  # nano-dollars: $2/M input, $8/M output
    assert isinstance(step, End) and step.status is RequestStatus.SUCCEEDED and step.error is None
    assert step.response is not None and codec.unpack(step.response) == result.body
    assert step.cost_nano == cost and not step.results_full
    assert step.tally == Tally(
        completed=1,
        input_tokens=1000,
        output_tokens=500,
        cost_nano=cost,
        cost_unknown=1,  # an earlier attempt lost with its worker
        stored_bytes=len(step.response),
    )


def test_a_success_larger_than_one_request_may_store_fails_result_too_large_and_still_costs() -> None:
    small = SETTINGS.model_copy(update={"batch_max_result_kb": 1})
    step = next_step(answered("x" * 2000), attempts=1, now=NOW, expires_at=None, settings=small, price=PRICE)
    assert isinstance(step, End) and step.status is RequestStatus.FAILED and step.response is None
    assert step.error is not None and step.error["code"] == "result_too_large"
    assert step.cost_nano > 0 and step.tally.failed == 1 and step.tally.cost_nano == step.cost_nano
    assert not step.results_full


def test_a_success_that_does_not_fit_the_batchs_result_storage_fails_and_fills_the_batch() -> None:
    limited = SETTINGS.model_copy(update={"batch_max_results_mb_per_batch": 0.001})  # 1,048 bytes
    fits = next_step(answered(), attempts=1, now=NOW, expires_at=None, settings=limited, stored_bytes=0)
    assert isinstance(fits, End) and fits.status is RequestStatus.SUCCEEDED
    full = next_step(answered(), attempts=1, now=NOW, expires_at=None, settings=limited, stored_bytes=1000)
    assert isinstance(full, End) and full.status is RequestStatus.FAILED and full.results_full
    assert full.error is not None and full.error["code"] == "result_too_large" and full.response is None
    assert full.tally.failed == 1 and full.tally.stored_bytes == 0


def test_a_retried_attempt_is_charged_as_it_is_recorded() -> None:
    busy = outcome(503).replace(input_tokens=10)  # an error that still reports usage
    step = next_step(busy, attempts=2, now=NOW, expires_at=NOW + 3600, settings=SETTINGS, price=PRICE, lost=1)
    assert isinstance(step, Retry) and step.uses_attempt and step.pause_model_until is None
    assert NOW + 10 <= step.next_at <= NOW + 10 * (1 + RETRY_JITTER)  # the second retry: base doubled
    assert step.error["code"] == "service_unavailable"
    assert step.charge == Tally(input_tokens=10, cost_nano=10 * 2_000)  # lost attempts count at the end
    lost = Outcome("retry", error={"code": "upstream_error"}, usage_known=False)
    dropped = next_step(lost, attempts=1, now=NOW, expires_at=NOW + 3600, settings=SETTINGS, price=PRICE)
    assert isinstance(dropped, Retry) and dropped.charge == Tally(cost_unknown=1)


def test_a_model_queued_wait_that_would_outlast_the_window_fails_with_that_error() -> None:
    step = next_step(queued("60"), attempts=1, now=NOW, expires_at=NOW + 10, settings=SETTINGS)
    assert isinstance(step, End) and step.status is RequestStatus.FAILED and step.tally.failed == 1
    assert step.error is not None and step.error["status"] == 503 and "GPU" in step.error["message"]


def test_a_permanent_failure_with_its_usage_known_costs_what_it_used() -> None:
    refused = classify("/v1/chat/completions", 400, b'{"error": {"message": "bad"}}', {}).replace(
        input_tokens=100
    )
    step = next_step(refused, attempts=1, now=NOW, expires_at=None, settings=SETTINGS, price=PRICE)
    assert isinstance(step, End) and step.status is RequestStatus.FAILED
    assert step.cost_nano == 100 * 2_000 and step.tally.cost_unknown == 0
    assert step.error is not None and step.error["code"] == "invalid_request"


def test_a_timeout_fails_at_once_with_its_cost_unknown() -> None:
    timed_out = Outcome(
        "failed", error={"code": "timeout", "message": "timed out", "status": 504}, usage_known=False
    )
    step = next_step(timed_out, attempts=1, now=NOW, expires_at=None, settings=SETTINGS, price=PRICE, lost=2)
    assert isinstance(step, End) and step.status is RequestStatus.FAILED
    assert step.cost_nano == 0
    assert step.tally == Tally(failed=1, cost_unknown=3)  # this attempt and the two lost before


def test_a_retry_claimed_as_the_window_closes_fails_with_its_last_error_and_an_unrun_request_expires() -> (
    None
):
    error = {"code": "service_unavailable", "message": "busy", "status": 503}
    ran = RequestRecord("batch_x", 0, "c-0", "sim-chat", RequestStatus.RUNNING, attempts=3, error=error)
    end = not_run(Verdict.EXPIRED, ran, SETTINGS)
    assert (end.status, end.error, end.tally.failed, end.tally.expired) == (RequestStatus.FAILED, error, 1, 0)
    never = not_run(Verdict.EXPIRED, request(attempts=0), SETTINGS)
    assert (never.status, never.error["code"], never.tally.expired) == (
        RequestStatus.EXPIRED,
        "batch_expired",
        1,
    )
    cancelled = not_run(Verdict.CANCELLED, ran, SETTINGS)
    assert cancelled.status is RequestStatus.CANCELLED
