"""Users and their API keys, in the control table.

A user's partition holds their profile and one item per key, so one query reads an
account whole. Two small lookup items find an account from a key: by the key's hash (what
a caller presents) and by its id (what an administrator names); a registry partition
lists every user.

    pk user#<user id>   sk profile      the user
    pk user#<user id>   sk key#<key id> one of their keys (hash, prefix, expiry, budgets)
    pk key#<sha256>     sk key          -> user id, key id
    pk keyid#<key id>   sk keyid        -> user id
    pk users            sk user#<id>    the registry
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from batchgw.domain.accounts import KeyRecord, UserRecord, UserStatus
from batchgw.domain.errors import StorageError
from batchgw.storage.dynamo import Table, Update, from_item, to_item

PROFILE = "profile"
REGISTRY = "users"

# The clauses of the accounts' conditional writes.
record_not_exists = "attribute_not_exists(pk)"
record_exists = "attribute_exists(pk)"
# A write joined to this check happens only for a user still there and active: not suspended,
# not deleted (a profile stored without a status is active, as ``UserRecord.from_item`` reads it).
user_active = "attribute_exists(pk) AND (attribute_not_exists(#status) OR #status = :active)"


def _user_key(user_id: str, sk: str = PROFILE) -> dict[str, Any]:
    return {"pk": {"S": f"user#{user_id}"}, "sk": {"S": sk}}


def account_items(user: UserRecord, keys: list[KeyRecord]) -> list[dict[str, Any]]:
    """Every item that stores ``user`` and ``keys`` (the local stack seeds its accounts with them)."""
    items = [
        {"pk": f"user#{user.id}", "sk": PROFILE, **user.to_item()},
        {"pk": REGISTRY, "sk": f"user#{user.id}", "user_id": user.id},
    ]
    for key in keys:
        items += [
            {"pk": f"user#{user.id}", "sk": f"key#{key.id}", **key.to_item()},
            {"pk": f"key#{key.key_hash}", "sk": "key", "user_id": user.id, "key_id": key.id},
            {"pk": f"keyid#{key.id}", "sk": "keyid", "user_id": user.id},
        ]
    return [{k: v for k, v in item.items() if v is not None} for item in items]


class AccountStore:
    def __init__(self, client: Any, table: str) -> None:
        self._table = Table(client, table)

    # --- reads --------------------------------------------------------------------------------

    def account(self, user_id: str) -> tuple[UserRecord | None, list[KeyRecord]]:
        """A user and their keys (one query)."""
        user: UserRecord | None = None
        keys: list[KeyRecord] = []
        for raw in self._table.query(
            KeyConditionExpression="pk = :pk",
            ExpressionAttributeValues={":pk": {"S": f"user#{user_id}"}},
            ConsistentRead=True,
        ):
            item = from_item(raw)
            if item["sk"] == PROFILE:
                user = UserRecord.from_item(item)
            elif str(item["sk"]).startswith("key#"):
                keys.append(KeyRecord.from_item(item))
        return user, keys

    def user(self, user_id: str) -> UserRecord | None:
        item = self._table.get(_user_key(user_id))
        return None if item is None else UserRecord.from_item(item)

    def users(self) -> list[UserRecord]:
        ids = [
            str(from_item(raw)["user_id"])
            for raw in self._table.query(
                KeyConditionExpression="pk = :pk", ExpressionAttributeValues={":pk": {"S": REGISTRY}}
            )
        ]
        found = (self.user(user_id) for user_id in ids)
        return [user for user in found if user is not None]

    def by_hash(self, key_hash: str) -> tuple[str, str] | None:
        """(user id, key id) of the key whose SHA-256 is ``key_hash``."""
        item = self._table.get({"pk": {"S": f"key#{key_hash}"}, "sk": {"S": "key"}}, consistent=False)
        return None if item is None else (str(item["user_id"]), str(item["key_id"]))

    def owner_of_key(self, key_id: str) -> str | None:
        item = self._table.get({"pk": {"S": f"keyid#{key_id}"}, "sk": {"S": "keyid"}})
        return None if item is None else str(item["user_id"])

    def key(self, user_id: str, key_id: str) -> KeyRecord | None:
        item = self._table.get(_user_key(user_id, f"key#{key_id}"))
        return None if item is None else KeyRecord.from_item(item)

    def active_check(self, user_id: str) -> dict[str, Any]:
        """A transaction's ``ConditionCheck`` that ``user_id`` is still active: a write joined
        to it does not happen once the account is suspended or deleted, however late."""
        return {
            "ConditionCheck": {
                "TableName": self._table.name,
                "Key": _user_key(user_id),
                "ConditionExpression": user_active,
                "ExpressionAttributeNames": {"#status": "status"},
                "ExpressionAttributeValues": to_item({":active": UserStatus.ACTIVE.value}),
            }
        }

    # --- writes -------------------------------------------------------------------------------

    def create(self, user: UserRecord, keys: Sequence[KeyRecord] = ()) -> None:
        """Store a new user (and keys) at once; refused if the user exists."""
        self._put_all(account_items(user, list(keys)), f"could not create user {user.id}")

    def add_key(self, key: KeyRecord) -> None:
        items = account_items(UserRecord(key.user_id, "", "", ""), [key])[2:]
        self._put_all(items, f"could not create key {key.id}")

    def _put_all(self, items: list[dict[str, Any]], failure: str) -> None:
        actions = [
            {
                "Put": {
                    "TableName": self._table.name,
                    "Item": to_item(item),
                    "ConditionExpression": record_not_exists,
                }
            }
            for item in items
        ]
        if self._table.transact(actions, failure=failure) is not None:
            raise StorageError(f"{failure}: it exists already")

    def change_user(self, user_id: str, fields: dict[str, Any]) -> UserRecord | None:
        """Set ``fields`` on the user's profile (None clears one); the user after, or None if unknown."""
        after, _ = self._table.update_returning(
            _user_key(user_id),
            Update(set=fields, condition=record_exists),
            failure=f"could not update {user_id}",
        )
        return None if after is None else UserRecord.from_item(after)

    def change_key(self, user_id: str, key_id: str, fields: dict[str, Any]) -> KeyRecord | None:
        after, _ = self._table.update_returning(
            _user_key(user_id, f"key#{key_id}"),
            Update(set=fields, condition=record_exists),
            failure=f"could not update {key_id}",
        )
        return None if after is None else KeyRecord.from_item(after)
