"""Spend, quotas and budgets: what an owner may still start, judged before each request.

Spend is counted per user and per key, per UTC day and month, in nano-dollars. A user's
daily and monthly quotas and a key's own daily and monthly budgets limit it (None:
unlimited). Requests still running count at what they may cost (their reservation) until
their cost is charged.

Before a request of a batch starts, ``judge`` says what becomes of it:

- the batch's key was revoked or has expired, or its owner was suspended or deleted: the
  batch fails (``owner_unauthorized``);
- its owner's role is below ``BATCH_MIN_ROLE``: the batch pauses until it is not;
- a quota or budget is used up by what was charged: the batch pauses, until the day
  (00:00 UTC) or month (the 1st) renews it, checked again meanwhile in case it is raised;
- only the reservations of requests still running stand in the way: nothing pauses, the
  request waits a little and is checked again;
- else it runs, reserving what it may cost.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Any

from batchgw.domain import codec, money
from batchgw.domain.accounts import KeyRecord, UserRecord, UserStatus
from batchgw.domain.principal import role_rank

# --- the UTC calendar ------------------------------------------------------------------------


def _utc(now: float) -> datetime:
    return datetime.fromtimestamp(now, tz=UTC)


def month_of(now: float) -> str:
    """The UTC month ``now`` falls in: ``2026-12``."""
    return _utc(now).strftime("%Y-%m")


def day_of(now: float) -> str:
    """The day of the month ``now`` falls in (UTC), as stored: ``d01`` .. ``d31``."""
    return _utc(now).strftime("d%d")


def next_day(now: float) -> int:
    """The next 00:00 UTC after ``now`` (unix seconds)."""
    midnight = _utc(now).replace(hour=0, minute=0, second=0, microsecond=0)
    return int((midnight + timedelta(days=1)).timestamp())


def next_month(now: float) -> int:
    """The 1st of the next UTC month, 00:00 (unix seconds)."""
    first = _utc(now).replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    return int((first + timedelta(days=32)).replace(day=1).timestamp())


# --- what was spent --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Spend:
    """What one user or key was charged today and this month, and what its requests still
    running may cost (their reservations), in nano-dollars.

    ``today`` and ``month`` count, beside the known costs, each attempt whose cost is unknown
    (its answer was lost, too large or never came) at what it could have cost at most, its
    reservation: the upstream may bill it in full. ``unknown_today`` and ``unknown_month``
    say how much of them that is."""

    today: int = 0
    month: int = 0
    reserved: int = 0
    unknown_today: int = 0
    unknown_month: int = 0


@dataclass(frozen=True, slots=True)
class Limit:
    """A daily and a monthly ceiling (None: unlimited)."""

    daily: int | None = None
    monthly: int | None = None

    @property
    def unlimited(self) -> bool:
        return self.daily is None and self.monthly is None


def limit_of_user(user: UserRecord) -> Limit:
    return Limit(user.daily_quota_nano, user.monthly_quota_nano)


def limit_of_key(key: KeyRecord) -> Limit:
    return Limit(key.daily_budget_nano, key.monthly_budget_nano)


class PauseReason(StrEnum):
    DAILY_QUOTA = "daily_quota"
    MONTHLY_QUOTA = "monthly_quota"
    KEY_BUDGET = "key_budget"
    ROLE = "role"


_REFUSALS = {
    PauseReason.DAILY_QUOTA: "Your daily cost quota is used up; it renews at 00:00 UTC.",
    PauseReason.MONTHLY_QUOTA: "Your monthly cost quota is used up; it renews on the 1st (UTC).",
    PauseReason.KEY_BUDGET: "This API key has spent its own budget.",
}


def used_up(user: UserRecord, key: KeyRecord, user_spend: Spend, key_spend: Spend) -> PauseReason | None:
    """Which quota or budget what was charged has used up, if any (reservations aside)."""
    user_limit = limit_of_user(user)
    if _reached(user_spend.today, user_limit.daily):
        return PauseReason.DAILY_QUOTA
    if _reached(user_spend.month, user_limit.monthly):
        return PauseReason.MONTHLY_QUOTA
    key_limit = limit_of_key(key)
    if _reached(key_spend.today, key_limit.daily) or _reached(key_spend.month, key_limit.monthly):
        return PauseReason.KEY_BUDGET
    return None


def refusal(reason: PauseReason) -> str:
    """What a create refused for ``reason`` says (a 429)."""
    return _REFUSALS[reason]


def _reached(spent: int, limit: int | None) -> bool:
    return limit is not None and spent >= limit


# --- the judgement before a request starts --------------------------------------------------


class Judgement(StrEnum):
    RUN = "run"
    WAIT = "wait"  # reservations stand in the way: check again shortly
    PAUSE = "pause"  # a quota, budget or the role: the batch pauses
    UNAUTHORIZED = "unauthorized"  # the batch fails


@dataclass(frozen=True, slots=True)
class Standing:
    """What the owner's account allows a request of the batch now."""

    judgement: Judgement
    reason: PauseReason | None = None
    until: int | None = None  # when the pause ends on its own (None: not by itself)
    check_at: float | None = None  # when to look again (a pause or a wait)
    message: str | None = None  # why the batch fails

    @property
    def runs(self) -> bool:
        return self.judgement is Judgement.RUN


RUN = Standing(Judgement.RUN)


def owner_refusal(user: UserRecord | None, key: KeyRecord | None, now: float) -> str | None:
    """Why the batch's key or account may no longer run it (None: it may)."""
    if user is None or user.status is UserStatus.DELETED:
        return "The batch's owner account was deleted."
    if user.status is UserStatus.SUSPENDED:
        return "The batch's owner account is suspended."
    if key is None or key.revoked_at is not None:
        return "The API key that created the batch was revoked."
    if not key.usable(now):
        return "The API key that created the batch has expired."
    return None


def owner_standing(
    user: UserRecord | None, key: KeyRecord | None, *, now: float, min_role: str, recheck_seconds: float
) -> Standing | None:
    """What the batch's key and its owner's account alone say of its next request, quotas
    and budgets aside: it fails (the key or account may no longer run it), it pauses (the
    owner's role is below ``min_role``, checked again ``recheck_seconds`` on), or None: they
    let it run. The first judgement of ``judge``, and all a provider-run batch's step asks."""
    refused = owner_refusal(user, key, now)
    if refused is not None:
        return Standing(Judgement.UNAUTHORIZED, message=refused)
    assert user is not None
    if role_rank(user.role) < role_rank(min_role):
        return Standing(Judgement.PAUSE, PauseReason.ROLE, until=None, check_at=now + recheck_seconds)
    return None


def judge(
    user: UserRecord | None,
    key: KeyRecord | None,
    *,
    now: float,
    min_role: str,
    user_spend: Spend,
    key_spend: Spend,
    recheck_seconds: float,
    reservation_wait_seconds: float,
) -> Standing:
    """What the owner's account allows the batch's next request now (see the module)."""
    standing = owner_standing(user, key, now=now, min_role=min_role, recheck_seconds=recheck_seconds)
    if standing is not None:
        return standing
    assert user is not None and key is not None
    recheck = now + recheck_seconds
    reason = used_up(user, key, user_spend, key_spend)
    if reason is not None:
        until = _renewal(reason, key, key_spend, now)
        check_at = recheck if until is None else min(recheck, until)
        return Standing(Judgement.PAUSE, reason, until=until, check_at=check_at)
    user_limit, key_limit = limit_of_user(user), limit_of_key(key)
    if _reserved_in_the_way(user_spend, user_limit) or _reserved_in_the_way(key_spend, key_limit):
        return Standing(Judgement.WAIT, check_at=now + reservation_wait_seconds)
    return RUN


def _renewal(reason: PauseReason, key: KeyRecord, key_spend: Spend, now: float) -> int | None:
    """When the used-up quota or budget renews by itself."""
    if reason is PauseReason.DAILY_QUOTA:
        return next_day(now)
    if reason is PauseReason.MONTHLY_QUOTA:
        return next_month(now)
    # A key's budget: its monthly budget, if spent, renews last.
    if _reached(key_spend.month, key.monthly_budget_nano):
        return next_month(now)
    return next_day(now)


def _reserved_in_the_way(spend: Spend, limit: Limit) -> bool:
    """What was charged leaves room, but with the reservations of requests still running
    the quota or budget would be reached."""
    if not spend.reserved:
        return False
    return (limit.daily is not None and spend.today + spend.reserved >= limit.daily) or (
        limit.monthly is not None and spend.month + spend.reserved >= limit.monthly
    )


@dataclass(frozen=True, slots=True)
class Blocked:
    """Why a request that cannot wait (an interactive one) is refused now: the quota or
    budget in the way, and whether only the reservations of requests still running put it
    there (what was charged leaves room: it may be tried again once they end)."""

    reason: PauseReason
    by_reservations: bool = False


def blocked(user: UserRecord, key: KeyRecord, user_spend: Spend, key_spend: Spend) -> Blocked | None:
    """What stops a request now, counting the requests still running at what they may cost
    (None: it may run). A request is let through only while what was charged and reserved
    stays under every ceiling, so a burst passes one by at most one request's most."""
    reason = used_up(user, key, user_spend, key_spend)
    if reason is not None:
        return Blocked(reason)
    user_limit, key_limit = limit_of_user(user), limit_of_key(key)
    if _reserved_in_the_way(user_spend, Limit(user_limit.daily)):
        return Blocked(PauseReason.DAILY_QUOTA, by_reservations=True)
    if _reserved_in_the_way(user_spend, Limit(monthly=user_limit.monthly)):
        return Blocked(PauseReason.MONTHLY_QUOTA, by_reservations=True)
    if _reserved_in_the_way(key_spend, key_limit):
        return Blocked(PauseReason.KEY_BUDGET, by_reservations=True)
    return None


_HELD_REFUSALS = {
    PauseReason.DAILY_QUOTA: "daily cost quota",
    PauseReason.MONTHLY_QUOTA: "monthly cost quota",
    PauseReason.KEY_BUDGET: "API key's budget",
}


def held_refusal(reason: PauseReason) -> str:
    """What a request refused because requests still running may use up ``reason`` says."""
    return (
        f"Your requests still running may use up your {_HELD_REFUSALS[reason]} (each counts at "
        "the most it may cost until its cost is charged); try again once they end."
    )


def room_left(user: UserRecord, key: KeyRecord, user_spend: Spend, key_spend: Spend) -> int | None:
    """What the owner may still spend, in nano-dollars, before a quota or budget is reached,
    with the reservations of requests still running counted (None: nothing limits them)."""
    rooms = [
        ceiling - spent - spend.reserved
        for spend, limit in ((user_spend, limit_of_user(user)), (key_spend, limit_of_key(key)))
        for spent, ceiling in ((spend.today, limit.daily), (spend.month, limit.monthly))
        if ceiling is not None
    ]
    return max(0, min(rooms)) if rooms else None


@dataclass(frozen=True, slots=True)
class Deferred:
    """An attempt's charge that its batch's counter shard keeps, in the transaction that
    records the attempt, until it is rolled up into its payer's spend (an owner no quota or
    budget limits: ``needs_spend``): its known cost, and an unknown cost at its most."""

    user_id: str
    key_id: str | None
    known_nano: int = 0
    unknown_nano: int = 0

    def __bool__(self) -> bool:
        return self.known_nano > 0 or self.unknown_nano > 0


def needs_spend(user: UserRecord, key: KeyRecord) -> bool:
    """Whether any quota or budget limits the owner (else spend need not be read to judge)."""
    return not (limit_of_user(user).unlimited and limit_of_key(key).unlimited)


# --- what a request may cost --------------------------------------------------------------------

DEFAULT_MAX_OUTPUT_TOKENS = 4096  # when neither the request nor its model bounds the output
_BYTES_PER_TOKEN = 3  # a generous estimate of input tokens from the body's JSON size
_OUTPUT_LIMITS = ("max_tokens", "max_completion_tokens", "max_output_tokens")


def reservation_tokens(body: Any, endpoint: str, *, model_max_output: int | None) -> tuple[int, int]:
    """The most tokens a request may use, as (input, output): its input estimated from its
    size, its output what it asks for at most (its model's limit, else a default)."""
    size = len(codec.dumps(body)) if body is not None else 0
    input_tokens = size // _BYTES_PER_TOKEN + 1
    if endpoint == "/v1/embeddings":
        return input_tokens, 0
    asked = next(
        (body[name] for name in _OUTPUT_LIMITS if isinstance(body, dict) and isinstance(body.get(name), int)),
        None,
    )
    output = asked if asked is not None else (model_max_output or DEFAULT_MAX_OUTPUT_TOKENS)
    return input_tokens, max(0, int(output))


# The price of a request's tokens, (input, output) to nano-dollars.
TokenCost = Callable[[int, int], int]


def most_cost(lines: Iterable[tuple[TokenCost, Any, int | None]], endpoint: str) -> int:
    """What ``lines`` could cost at most, in nano-dollars: each (its price, its body, its
    model's output limit) at its reservation (``reservation_tokens``)."""
    return sum(
        cost(*reservation_tokens(body, endpoint, model_max_output=model_max_output))
        for cost, body, model_max_output in lines
    )


def over_budget_message(most: int, room: int) -> str:
    """Why a batch run at its batch price is refused (``budget_exceeded``)."""
    return (
        f"The batch could cost up to ${money.usd_float(most):.4f} at its batch price, more than your "
        f"quotas and budget leave (${money.usd_float(room):.4f})."
    )
