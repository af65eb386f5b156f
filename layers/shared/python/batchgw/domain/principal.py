"""Who is calling: a user with a role, through one of their API keys."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

ROLES = ("free", "pro", "internal", "admin")


def role_rank(role: str) -> int:
    """A role's rank (free < pro < internal < admin); -1 for an unknown role."""
    return ROLES.index(role) if role in ROLES else -1


def hash_key(api_key: str) -> str:
    """An API key as it is stored: only its SHA-256 is kept."""
    return hashlib.sha256(api_key.encode()).hexdigest()


@dataclass(frozen=True)
class Principal:
    """The caller: the user, their role, and which key (by hash prefix) they used."""

    user_id: str
    role: str
    key_id: str

    @property
    def is_admin(self) -> bool:
        return self.role == "admin"

    def at_least(self, role: str) -> bool:
        return role_rank(self.role) >= role_rank(role)
