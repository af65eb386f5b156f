"""The local stack's seeded accounts (DESIGN.md's contract): API key -> (user id, role)."""

from __future__ import annotations

from batchgw.domain.accounts import KeyRecord, UserRecord
from batchgw.domain.principal import hash_key

LOCAL_KEYS: dict[str, tuple[str, str]] = {
    "sk-local-admin": ("user-admin", "admin"),
    "sk-local-alice": ("user-alice", "internal"),
    "sk-local-bob": ("user-bob", "internal"),
    "sk-local-free": ("user-free", "free"),
}


def local_accounts() -> list[tuple[UserRecord, KeyRecord]]:
    """The seeded users, each with their one key (key id ``key_local_<name>``)."""
    accounts = []
    for api_key, (user_id, role) in LOCAL_KEYS.items():
        name = user_id.removeprefix("user-")
        user = UserRecord(id=user_id, name=name, email=f"{name}@batchgw.local", role=role)
        key = KeyRecord(
            id=f"key_local_{name}",
            user_id=user_id,
            key_hash=hash_key(api_key),
            prefix=api_key[:12],
            name="local",
        )
        accounts.append((user, key))
    return accounts
