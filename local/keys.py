"""The local stack's seeded API keys (DESIGN.md's contract): key -> (user id, role)."""

from __future__ import annotations

LOCAL_KEYS: dict[str, tuple[str, str]] = {
    "sk-local-admin": ("user-admin", "admin"),
    "sk-local-alice": ("user-alice", "internal"),
    "sk-local-bob": ("user-bob", "internal"),
    "sk-local-free": ("user-free", "free"),
}
