"""A batch's scheduling fields, as a create or a ``PATCH /v1/batches/{id}`` gives them:
``priority`` (a whole number, higher first; a user's range is narrower than an
administrator's) and ``complete_by`` (unix seconds by which its owner wants it done, in the
future and not after its window's end). Pure: the caller says whether it is an
administrator, what time it is and when the batch's window ends.

The engine does not order work by them yet: they are stored and shown (issue 56).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from batchgw.domain.batch import ScheduleChange
from batchgw.domain.errors import BadRequest
from batchgw.validation import shown

DEFAULT_PRIORITY = 0
USER_PRIORITIES = (-10, 10)  # a user, on their own batches (inclusive)
ADMIN_PRIORITIES = (-100, 100)  # an administrator, on any batch
FIELDS = ("priority", "complete_by")


@dataclass(frozen=True, slots=True)
class Scheduling:
    """What a new batch is created with (the defaults when the create gave neither)."""

    priority: int = DEFAULT_PRIORITY
    complete_by: int | None = None  # None: no wish beyond its window's end (``expires_at``)


def whole_number(value: Any) -> int | None:
    """``value`` as an int when it is a whole JSON number (5 or 5.0; not true, not 5.5)."""
    if type(value) is int:
        return value
    if type(value) is float and value.is_integer():
        return int(value)
    return None


def check_priority(value: Any, *, admin: bool) -> int:
    """A priority: a whole number in the caller's range, else 400 naming the range."""
    low, high = ADMIN_PRIORITIES if admin else USER_PRIORITIES
    number = whole_number(value)
    if number is None or not low <= number <= high:
        raise BadRequest(
            f"'priority' must be an integer from {low} to {high}; got {shown(value)}.", param="priority"
        )
    return number


def check_complete_by_type(value: Any) -> int | None:
    """A ``complete_by`` as sent: null, or whole unix seconds (its time is checked apart)."""
    if value is None:
        return None
    number = whole_number(value)
    if number is None or number < 0:
        raise BadRequest(
            f"'complete_by' must be unix seconds (an integer), or null; got {shown(value)}.",
            param="complete_by",
        )
    return number


def check_complete_by_time(complete_by: int | None, *, now: float, expires_at: int | None) -> None:
    """400 when ``complete_by`` is not after ``now``, or after the batch's window ends
    (``expires_at``; a batch without a window takes any future time)."""
    if complete_by is None:
        return
    if complete_by <= now:
        raise BadRequest(
            f"'complete_by' ({complete_by}) is in the past: give a unix time after now ({int(now)}).",
            param="complete_by",
        )
    if expires_at is not None and complete_by > expires_at:
        raise BadRequest(
            f"'complete_by' ({complete_by}) is after the batch's window ends (expires_at "
            f"{expires_at}): give a time up to then.",
            param="complete_by",
        )


def scheduling_of(body: dict[str, Any], *, admin: bool) -> Scheduling:
    """The scheduling fields of a create's body, checked as far as they can be before the
    batch's window is known (``check_complete_by_time`` follows, once it is)."""
    priority = DEFAULT_PRIORITY
    if body.get("priority") is not None:
        priority = check_priority(body["priority"], admin=admin)
    return Scheduling(priority=priority, complete_by=check_complete_by_type(body.get("complete_by")))


def schedule_change(body: Any, *, admin: bool, now: float, expires_at: int | None) -> ScheduleChange:
    """The change a ``PATCH /v1/batches/{id}`` body asks for: ``priority`` and/or
    ``complete_by`` (null clears it). 400 for anything else, an empty body, or a bad value."""
    if not isinstance(body, dict):
        raise BadRequest("The body must be a JSON object with 'priority', 'complete_by' or both.")
    unknown = sorted(set(body) - set(FIELDS))
    if unknown:
        raise BadRequest(
            f"Unknown field '{unknown[0]}': a batch's priority and complete_by may be changed.",
            param=unknown[0],
        )
    if not body:
        raise BadRequest("Give 'priority', 'complete_by' or both to change.")
    change: ScheduleChange = {}
    if "priority" in body:
        change["priority"] = check_priority(body["priority"], admin=admin)
    if "complete_by" in body:
        complete_by = check_complete_by_type(body["complete_by"])
        check_complete_by_time(complete_by, now=now, expires_at=expires_at)
        change["complete_by"] = complete_by
    return change
