"""API keys: stored hashed in the control table, resolved to a principal per request."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from batchgw.settings import role_rank

KEY_SK = "key"

# The local stack's seeded keys (DESIGN.md's contract): key -> (user id, role).
LOCAL_KEYS: dict[str, tuple[str, str]] = {
    "sk-local-admin": ("user-admin", "admin"),
    "sk-local-alice": ("user-alice", "internal"),
    "sk-local-bob": ("user-bob", "internal"),
    "sk-local-free": ("user-free", "free"),
}


def hash_key(api_key: str) -> str:
    return hashlib.sha256(api_key.encode()).hexdigest()


def key_pk(key_hash: str) -> str:
    return f"key#{key_hash}"


@dataclass(frozen=True)
class Principal:
    """Who is calling: the user, their role, and which key (by hash prefix) they used."""

    user_id: str
    role: str
    key_id: str

    @property
    def is_admin(self) -> bool:
        return self.role == "admin"

    def at_least(self, role: str) -> bool:
        return role_rank(self.role) >= role_rank(role)


def key_record(api_key: str, user_id: str, role: str, name: str = "") -> dict[str, str]:
    """The control-table item that stores one API key (only its hash is kept)."""
    digest = hash_key(api_key)
    return {
        "pk": key_pk(digest),
        "sk": KEY_SK,
        "user_id": user_id,
        "role": role,
        "name": name,
        "key_id": digest[:16],
    }
