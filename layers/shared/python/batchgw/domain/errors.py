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


class BadRequest(ApiError):
    status = 400


class Unauthorized(ApiError):
    status = 401
    type = "authentication_error"


class Forbidden(ApiError):
    status = 403
    type = "permission_error"


class NotFound(ApiError):
    status = 404
    type = "not_found_error"


class Conflict(ApiError):
    status = 409
    type = "conflict_error"


class PayloadTooLarge(ApiError):
    status = 413
    type = "request_too_large"


class TooManyRequests(ApiError):
    status = 429
    type = "rate_limit_error"


class ServiceUnavailable(ApiError):
    status = 503
    type = "service_unavailable"


# --- domain errors that are not API answers ---------------------------------------------


class StorageError(Exception):
    """An AWS call failed in a way the caller cannot handle; raised from the SDK error."""
