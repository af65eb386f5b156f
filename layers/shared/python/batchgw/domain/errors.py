"""Typed errors that carry their API status, mapped once to the ``{"error": {...}}`` shape."""

from __future__ import annotations

from typing import Any


class ApiError(Exception):
    """An error the API answers with. ``code`` defaults to the HTTP status, as the spec shows."""

    status: int = 400
    type: str = "invalid_request_error"

    def __init__(
        self,
        message: str,
        *,
        code: str | int | None = None,
        param: str | None = None,
        extra: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.code: str | int = self.status if code is None else code
        self.param = param
        self.extra = extra or {}

    def body(self) -> dict[str, Any]:
        error: dict[str, Any] = {
            "message": self.message,
            "type": self.type,
            "param": self.param,
            "code": self.code,
        }
        return {"error": error, **self.extra}

    def headers(self) -> dict[str, str]:
        """HTTP headers the answer carries besides its body (none, unless a subclass says)."""
        return {}


class BadRequest(ApiError):
    status = 400


class Unauthorized(ApiError):
    status = 401
    type = "authentication_error"


class AccountUnavailable(Unauthorized):
    """A create whose account is suspended or deleted, when it is authenticated or at any
    moment before its batch is stored: the spec's 401 for the create call."""

    def __init__(self) -> None:
        super().__init__(
            "Your account is suspended or deleted: the batch was not created.", code="account_unavailable"
        )


class Forbidden(ApiError):
    status = 403
    type = "permission_error"


class AccountSuspended(Forbidden):
    """A suspended account's key: recognised, and refused (403 on every route but the create's)."""

    def __init__(self) -> None:
        super().__init__("Your account is suspended.", code="account_suspended")


class NotFound(ApiError):
    status = 404
    type = "not_found_error"


class Conflict(ApiError):
    status = 409
    type = "conflict_error"


# How a ``DeadlineInfeasible`` came to its earliest time: a create's forecast, a running
# batch's forecast of its unfinished requests, or the pace that batch has kept so far.
BY_FORECAST = "at the model's pace now, beside the batches queued on it, the batch would end"
BY_FORECAST_LEFT = (
    "at the model's pace now, beside the batches queued on it, the batch's unfinished requests would end"
)
BY_OWN_PACE = "at the pace it has kept so far, the batch would end"


class DeadlineInfeasible(ApiError):
    """A create (or a ``PATCH``) whose ``complete_by`` comes before the earliest time the
    gateway could end the batch (``scheduling.forecast``, or the batch's own pace): the
    error object names that time too. ``outcome`` says that nothing was stored."""

    status = 422

    def __init__(
        self,
        *,
        complete_by: int,
        earliest: int,
        basis: str = BY_FORECAST,
        outcome: str = "Nothing was created.",
    ) -> None:
        super().__init__(
            f"complete_by ({complete_by}) cannot be met: {basis} at {earliest} at the earliest. {outcome}",
            code="deadline_infeasible",
            param="complete_by",
        )
        self.earliest_completion_at = earliest

    def body(self) -> dict[str, Any]:
        answer = super().body()
        answer["error"]["earliest_completion_at"] = self.earliest_completion_at
        return answer


class PayloadTooLarge(ApiError):
    status = 413
    type = "request_too_large"


class TooManyRequests(ApiError):
    status = 429
    type = "rate_limit_error"


class RateLimited(TooManyRequests):
    """The key sent more requests than BATCH_API_RATE_PER_KEY allows; ``Retry-After`` says
    in how many whole seconds (at least one) the next one is taken."""

    def __init__(self, retry_after: int) -> None:
        self.retry_after = max(1, retry_after)
        super().__init__(
            f"Too many requests with this API key; retry after {self.retry_after} s.", code="rate_limited"
        )

    def headers(self) -> dict[str, str]:
        return {"Retry-After": str(self.retry_after)}


class InternalError(ApiError):
    """An unexpected failure: the answer says nothing of it (the log has the traceback)."""

    status = 500
    type = "server_error"


class ServiceUnavailable(ApiError):
    status = 503
    type = "service_unavailable"


# --- domain errors that are not API answers ---------------------------------------------


class StorageError(Exception):
    """An AWS call failed in a way the caller cannot handle; raised from the SDK error."""


class StoreNotReady(StorageError):
    """The table a read needs does not exist (yet): the store is not deployed or not ready,
    which no retry of the same call changes."""
