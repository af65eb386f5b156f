"""Users and their API keys, as stored.

A user has a role, a status, optional daily and monthly cost quotas and a weight (their
share of batch capacity against other users', 1 by default; issue 56); a key belongs to
one user, is stored hashed with a visible prefix, may expire or be revoked, and may carry
its own daily and monthly budget. Amounts are integer nano-dollars (None: unlimited).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from decimal import Decimal
from enum import StrEnum
from typing import Any

DEFAULT_WEIGHT = Decimal(1)


class UserStatus(StrEnum):
    ACTIVE = "active"
    SUSPENDED = "suspended"
    DELETED = "deleted"


def _num(item: dict[str, Any], name: str) -> int | None:
    value = item.get(name)
    return None if value is None else int(value)


@dataclass(frozen=True, slots=True)
class UserRecord:
    id: str
    name: str
    email: str
    role: str
    status: UserStatus = UserStatus.ACTIVE
    daily_quota_nano: int | None = None
    monthly_quota_nano: int | None = None
    created_at: int = 0
    weight: Decimal = DEFAULT_WEIGHT  # an administrator's choice, > 0 and <= 100

    @property
    def active(self) -> bool:
        return self.status is UserStatus.ACTIVE

    def replace(self, **changes: Any) -> UserRecord:
        return replace(self, **changes)

    @classmethod
    def from_item(cls, item: dict[str, Any]) -> UserRecord:
        return cls(
            id=str(item["user_id"]),
            name=str(item.get("name", "")),
            email=str(item.get("email", "")),
            role=str(item["role"]),
            status=UserStatus(item.get("status", UserStatus.ACTIVE.value)),
            daily_quota_nano=_num(item, "daily_quota_nano"),
            monthly_quota_nano=_num(item, "monthly_quota_nano"),
            created_at=int(item.get("created_at", 0)),
            weight=Decimal(str(item.get("weight", DEFAULT_WEIGHT))),
        )

    def to_item(self) -> dict[str, Any]:
        return {
            "user_id": self.id,
            "name": self.name,
            "email": self.email,
            "role": self.role,
            "status": self.status.value,
            "daily_quota_nano": self.daily_quota_nano,
            "monthly_quota_nano": self.monthly_quota_nano,
            "created_at": self.created_at,
            "weight": self.weight,
        }


@dataclass(frozen=True, slots=True)
class KeyRecord:
    id: str
    user_id: str
    key_hash: str
    prefix: str
    name: str = ""
    created_at: int = 0
    expires_at: int | None = None
    revoked_at: int | None = None
    daily_budget_nano: int | None = None
    monthly_budget_nano: int | None = None

    def usable(self, now: float) -> bool:
        """Neither revoked nor expired."""
        return self.revoked_at is None and (self.expires_at is None or now < self.expires_at)

    def replace(self, **changes: Any) -> KeyRecord:
        return replace(self, **changes)

    @classmethod
    def from_item(cls, item: dict[str, Any]) -> KeyRecord:
        return cls(
            id=str(item["key_id"]),
            user_id=str(item["user_id"]),
            key_hash=str(item["key_hash"]),
            prefix=str(item.get("prefix", "")),
            name=str(item.get("name", "")),
            created_at=int(item.get("created_at", 0)),
            expires_at=_num(item, "expires_at"),
            revoked_at=_num(item, "revoked_at"),
            daily_budget_nano=_num(item, "daily_budget_nano"),
            monthly_budget_nano=_num(item, "monthly_budget_nano"),
        )

    def to_item(self) -> dict[str, Any]:
        return {
            "key_id": self.id,
            "user_id": self.user_id,
            "key_hash": self.key_hash,
            "prefix": self.prefix,
            "name": self.name,
            "created_at": self.created_at,
            "expires_at": self.expires_at,
            "revoked_at": self.revoked_at,
            "daily_budget_nano": self.daily_budget_nano,
            "monthly_budget_nano": self.monthly_budget_nano,
        }
