"""What an owner's account allows a batch's next request (pure rules, no AWS)."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

import pytest
from batchgw.domain.accounts import KeyRecord, UserRecord, UserStatus
from batchgw.domain.spend import (
    Blocked,
    Judgement,
    PauseReason,
    Spend,
    blocked,
    day_of,
    judge,
    month_of,
    next_day,
    next_month,
    reservation_tokens,
    room_left,
)


def at(text: str) -> float:
    return datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp()


NOW = at("2026-12-31T23:59:30")
USER = UserRecord("u", "U", "u@x", "internal")
KEY = KeyRecord("k", "u", "hash", "sk-abc")
NOTHING = Spend()


def verdict(
    user: UserRecord | None = USER,
    key: KeyRecord | None = KEY,
    *,
    user_spend: Spend = NOTHING,
    key_spend: Spend = NOTHING,
    min_role: str = "internal",
) -> tuple[Judgement, PauseReason | None, int | None, float | None]:
    standing = judge(
        user,
        key,
        now=NOW,
        min_role=min_role,
        user_spend=user_spend,
        key_spend=key_spend,
        recheck_seconds=3600,
        reservation_wait_seconds=30,
    )
    return standing.judgement, standing.reason, standing.until, standing.check_at


def test_the_utc_calendar_rolls_over_at_midnight_and_on_the_first() -> None:
    assert (month_of(NOW), day_of(NOW)) == ("2026-12", "d31")
    assert next_day(NOW) == next_month(NOW) == at("2027-01-01T00:00:00")
    assert (month_of(next_day(NOW)), day_of(next_day(NOW))) == ("2027-01", "d01")
    assert next_month(at("2027-02-15T12:00:00")) == at("2027-03-01T00:00:00")


def test_an_owner_without_limits_runs() -> None:
    assert verdict()[0] is Judgement.RUN


@pytest.mark.parametrize(
    ("user", "key", "why"),
    [
        (None, KEY, "deleted"),
        (USER.replace(status=UserStatus.DELETED), KEY, "deleted"),
        (USER.replace(status=UserStatus.SUSPENDED), KEY, "suspended"),
        (USER, None, "revoked"),
        (USER, KEY.replace(revoked_at=1), "revoked"),
        (USER, KEY.replace(expires_at=int(NOW)), "expired"),
    ],
)
def test_an_unusable_key_or_account_fails_the_batch(
    user: UserRecord | None, key: KeyRecord | None, why: str
) -> None:
    standing = judge(
        user,
        key,
        now=NOW,
        min_role="internal",
        user_spend=Spend(),
        key_spend=Spend(),
        recheck_seconds=3600,
        reservation_wait_seconds=30,
    )
    assert standing.judgement is Judgement.UNAUTHORIZED and why in (standing.message or "")


def test_a_role_below_the_minimum_pauses_without_an_end() -> None:
    assert verdict(USER.replace(role="pro")) == (Judgement.PAUSE, PauseReason.ROLE, None, NOW + 3600)


def test_a_used_up_daily_quota_pauses_until_midnight() -> None:
    user = USER.replace(daily_quota_nano=100)
    midnight = next_day(NOW)
    assert verdict(user, user_spend=Spend(today=100)) == (
        Judgement.PAUSE,
        PauseReason.DAILY_QUOTA,
        midnight,
        midnight,  # sooner than the re-check
    )
    assert verdict(user, user_spend=Spend(today=99))[0] is Judgement.RUN


def test_a_used_up_monthly_quota_pauses_until_the_first_checked_again_within_the_hour() -> None:
    user = USER.replace(monthly_quota_nano=100)
    mid_month = at("2026-12-15T10:00:00")
    standing = judge(
        user,
        KEY,
        now=mid_month,
        min_role="internal",
        user_spend=Spend(month=150),
        key_spend=Spend(),
        recheck_seconds=3600,
        reservation_wait_seconds=30,
    )
    assert (standing.reason, standing.until, standing.check_at) == (
        PauseReason.MONTHLY_QUOTA,
        at("2027-01-01T00:00:00"),
        mid_month + 3600,
    )


def test_a_spent_key_budget_pauses_that_key() -> None:
    key = KEY.replace(daily_budget_nano=10)
    assert verdict(key=key, key_spend=Spend(today=10))[1] is PauseReason.KEY_BUDGET
    assert (
        verdict(key=key, user_spend=Spend(today=10**6))[0] is Judgement.RUN
    )  # the user's spend is not the key's


def test_reservations_alone_in_the_way_make_the_request_wait() -> None:
    user = USER.replace(daily_quota_nano=100)
    assert verdict(user, user_spend=Spend(today=60, reserved=40)) == (
        Judgement.WAIT,
        None,
        None,
        NOW + 30,
    )
    assert verdict(user, user_spend=Spend(today=60, reserved=39))[0] is Judgement.RUN
    assert verdict(user, user_spend=Spend(today=100, reserved=40))[0] is Judgement.PAUSE


def test_what_a_request_may_cost_counts_its_asked_or_its_models_output() -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": "x" * 300}], "max_tokens": 50}
    tokens_in, tokens_out = reservation_tokens(body, "/v1/chat/completions", model_max_output=4000)
    assert tokens_in >= 100 and tokens_out == 50
    del body["max_tokens"]
    assert reservation_tokens(body, "/v1/chat/completions", model_max_output=4000)[1] == 4000
    assert reservation_tokens(body, "/v1/embeddings", model_max_output=None)[1] == 0


def test_what_is_left_to_spend_is_the_least_room_of_every_quota_and_budget_reservations_counted() -> None:
    assert room_left(USER, KEY, NOTHING, NOTHING) is None  # nothing limits them
    user = replace(USER, daily_quota_nano=1_000, monthly_quota_nano=10_000)
    key = replace(KEY, monthly_budget_nano=5_000)
    assert room_left(user, key, Spend(today=300, month=9_500, reserved=100), NOTHING) == 400
    assert room_left(user, key, Spend(today=100, month=100), Spend(month=4_800)) == 200  # the key's
    assert room_left(user, key, Spend(today=2_000, month=2_000), NOTHING) == 0  # over: none left


def test_a_request_that_cannot_wait_is_blocked_by_charges_or_by_reservations_saying_which() -> None:
    user = replace(USER, daily_quota_nano=100, monthly_quota_nano=1_000)
    key = replace(KEY, daily_budget_nano=50)
    assert blocked(USER, KEY, NOTHING, NOTHING) is None
    assert blocked(user, KEY, Spend(today=60, month=60, reserved=39), NOTHING) is None
    # Charges alone used it up: not worth trying again today.
    assert blocked(user, KEY, Spend(today=100, month=100), NOTHING) == Blocked(PauseReason.DAILY_QUOTA)
    # Requests still running, at their most, would reach it: try again once they end.
    assert blocked(user, KEY, Spend(today=60, month=60, reserved=40), NOTHING) == Blocked(
        PauseReason.DAILY_QUOTA, by_reservations=True
    )
    assert blocked(user, KEY, Spend(today=0, month=990, reserved=10), NOTHING) == Blocked(
        PauseReason.MONTHLY_QUOTA, by_reservations=True
    )
    assert blocked(USER, key, NOTHING, Spend(today=10, reserved=40)) == Blocked(
        PauseReason.KEY_BUDGET, by_reservations=True
    )
