"""The console's sessions, in the control table: one item per session, under the SHA-256 of
its token (the token itself, like an API key, is never stored).

- ``pk`` ``session#<sha256 of the token>``, ``sk`` ``session``;
- ``user_id`` and ``key_id``: the API key the session signed in with, which every call of
  the session acts as (looked up again each time: a revoked key ends its sessions);
- ``csrf``: the token every state-changing call of the session must carry in a header;
- ``expires_at``; ``ttl``: DynamoDB's expiry of the item, an hour later (housekeeping only).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from batchgw.storage.dynamo import Table, timestamp

HOUSEKEEPING_SECONDS = 3600


@dataclass(frozen=True)
class Session:
    user_id: str
    key_id: str
    csrf: str
    expires_at: float


class SessionStore:
    def __init__(self, client: Any, table: str) -> None:
        self._table = Table(client, table)

    @staticmethod
    def _key(token_hash: str) -> dict[str, Any]:
        return {"pk": {"S": f"session#{token_hash}"}, "sk": {"S": "session"}}

    def create(self, token_hash: str, session: Session) -> None:
        self._table.put(
            {
                "pk": f"session#{token_hash}",
                "sk": "session",
                "user_id": session.user_id,
                "key_id": session.key_id,
                "csrf": session.csrf,
                "expires_at": timestamp(session.expires_at),
                "ttl": int(session.expires_at) + HOUSEKEEPING_SECONDS,
            },
            condition="attribute_not_exists(pk)",
            failure="could not store a console session",
        )

    def get(self, token_hash: str, *, now: float) -> Session | None:
        """The live session, None when there is none (or it has expired)."""
        item = self._table.get(self._key(token_hash))
        if item is None or float(item.get("expires_at", 0)) <= now:
            return None
        return Session(
            str(item["user_id"]), str(item["key_id"]), str(item["csrf"]), float(item["expires_at"])
        )

    def delete(self, token_hash: str) -> None:
        self._table.delete(self._key(token_hash), failure="could not end a console session")
