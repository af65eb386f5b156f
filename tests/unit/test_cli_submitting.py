"""``batchgw submit``'s ``--priority`` and ``--complete-by`` (``batchgw_cli.submitting``): the
times ``--complete-by`` takes, and the submission key they are part of."""

from __future__ import annotations

import pytest
from batchgw_cli import submitting
from batchgw_cli.client import Api

NOW = 1_800_000_000.5


@pytest.mark.parametrize(
    ("given", "seconds"),
    [
        ("1800003600", 1_800_003_600),
        ("+90m", 1_800_005_400),
        ("+2h", 1_800_007_200),
        ("+1d", 1_800_086_400),
        ("+30s", 1_800_000_030),
        ("2027-01-15T08:00:00Z", 1_800_000_000),
        ("2027-01-15T09:00:00+01:00", 1_800_000_000),
    ],
)
def test_complete_by_takes_unix_seconds_an_iso_time_with_a_timezone_or_a_time_from_now(
    given: str, seconds: int
) -> None:
    assert submitting.complete_by_of(given, NOW) == seconds


@pytest.mark.parametrize("given", ["2027-01-15T08:00:00", "tomorrow", "+2w", "+h", "-5", "", "1.5"])
def test_complete_by_refuses_anything_else_saying_what_it_takes(given: str) -> None:
    with pytest.raises(ValueError, match="ISO 8601 time with a timezone"):
        submitting.complete_by_of(given, NOW)


def test_the_submission_key_keeps_its_old_value_without_them_and_changes_with_them() -> None:
    api = Api("http://127.0.0.1:8080/v1", "sk-local-alice")
    plain = submitting.Options(None, "24h", "n", {})
    key = submitting.idempotency_key(api, "sha", plain, "/v1/chat/completions")
    assert key == submitting.idempotency_key(
        api, "sha", submitting.Options(None, "24h", "n", {}, priority=None), "/v1/chat/completions"
    )
    urgent = submitting.Options(None, "24h", "n", {}, priority=5, complete_by="+2h")
    urgent_key = submitting.idempotency_key(api, "sha", urgent, "/v1/chat/completions")
    assert urgent_key != key  # and the same command (``+2h`` as given) has the same key again
    assert urgent_key == submitting.idempotency_key(api, "sha", urgent, "/v1/chat/completions")
