"""Idempotency keys of batch creates, one item per user and key, in the control table.

    pk idem#<user id>   sk <route>#<sha256 of the key>

A create with a key first *claims* it: a conditional put that only one caller wins, with
the request's fingerprint, the id its batch will have, a claim token and a short lease.
The winner creates the batch and marks the claim ``done``; a caller whose create failed
gives the claim back. A claim whose lease ran out (its caller died) may be taken over,
conditional on the token it had, so exactly one caller goes on with it.

An item whose ``ttl`` has passed counts as absent (DynamoDB's TTL deletes it later).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from batchgw.storage.dynamo import Table, Update, timestamp

KEY_KEPT_SECONDS = 86400  # a key outlives its batch's end, or its deletion, by a day

# The clauses of the idempotency items' conditional writes.
absent_or_forgotten = "(attribute_not_exists(pk) OR #ttl < :now)"
claim_is_ours = "#state = :pending AND claim_token = :token"
claim_lapsed = "#state = :pending AND claim_token = :token AND lease_until < :now"
names_batch = "batch_id = :batch"


class IdemState(StrEnum):
    PENDING = "pending"  # a create with this key is under way
    DONE = "done"  # it created ``batch_id``
    DELETED = "deleted"  # that batch was deleted


@dataclass(frozen=True, slots=True)
class IdemRecord:
    fingerprint: str
    batch_id: str
    state: IdemState
    claim: str
    lease_until: float
    ttl: int | None

    def forgotten(self, now: float) -> bool:
        return self.ttl is not None and self.ttl < now

    @classmethod
    def from_item(cls, item: dict[str, Any]) -> IdemRecord:
        ttl = item.get("ttl")
        return cls(
            fingerprint=str(item["fingerprint"]),
            batch_id=str(item["batch_id"]),
            state=IdemState(item["state"]),
            claim=str(item.get("claim_token", "")),
            lease_until=float(item.get("lease_until", 0)),
            ttl=None if ttl is None else int(ttl),
        )


class IdempotencyStore:
    def __init__(self, client: Any, table: str) -> None:
        self._table = Table(client, table)

    @staticmethod
    def _key(user_id: str, key: str) -> dict[str, Any]:
        return {"pk": {"S": f"idem#{user_id}"}, "sk": {"S": key}}

    def get(self, user_id: str, key: str) -> IdemRecord | None:
        item = self._table.get(self._key(user_id, key))
        return None if item is None else IdemRecord.from_item(item)

    def claim(
        self,
        user_id: str,
        key: str,
        *,
        fingerprint: str,
        batch_id: str,
        token: str,
        now: float,
        lease_seconds: float,
        ttl: int,
    ) -> bool:
        """Claim ``key`` for a create of ``batch_id``; False when it is claimed already."""
        values = {
            "pk": f"idem#{user_id}",
            "sk": key,
            "fingerprint": fingerprint,
            "batch_id": batch_id,
            "state": IdemState.PENDING.value,
            "claim_token": token,
            "lease_until": timestamp(now + lease_seconds),
            "ttl": ttl,
        }
        return self._table.put(
            values,
            condition=absent_or_forgotten,
            names={"#ttl": "ttl"},
            params={":now": int(now)},
            failure=f"could not claim an idempotency key of {user_id}",
        )

    def take_over(
        self, user_id: str, key: str, lapsed: IdemRecord, *, token: str, now: float, lease: float
    ) -> bool:
        """Take over a pending claim whose lease ran out (its caller died)."""
        update = Update(
            set={"claim_token": token, "lease_until": timestamp(now + lease)},
            condition=claim_lapsed,
            names={"#state": "state"},
            values={":pending": IdemState.PENDING.value, ":token": lapsed.claim, ":now": timestamp(now)},
        )
        return self._table.update(self._key(user_id, key), update, failure="could not take over a claim")

    def complete(self, user_id: str, key: str, *, token: str, ttl: int) -> bool:
        """Mark our claim done: its batch exists."""
        update = Update(
            set={"state": IdemState.DONE.value, "ttl": ttl},
            remove=["lease_until"],
            condition=claim_is_ours,
            names={"#state": "state"},
            values={":pending": IdemState.PENDING.value, ":token": token},
        )
        return self._table.update(self._key(user_id, key), update, failure="could not complete a claim")

    def give_back(self, user_id: str, key: str, *, token: str) -> None:
        """Forget our claim: the create failed, and the key may be used again."""
        self._table.delete(
            self._key(user_id, key),
            condition=claim_is_ours,
            names={"#state": "state"},
            params={":pending": IdemState.PENDING.value, ":token": token},
            failure="could not give back a claim",
        )

    def batch_ended(self, user_id: str, key: str, batch_id: str, *, ttl: int) -> None:
        """Remember the key until ``ttl`` (a day after its batch ended)."""
        update = Update(set={"ttl": ttl}, condition=names_batch, values={":batch": batch_id})
        self._table.update(self._key(user_id, key), update, failure="could not keep an idempotency key")

    def batch_deleted(self, user_id: str, key: str, batch_id: str, *, ttl: int) -> None:
        """The key's batch was deleted (which ends it): the key answers so until ``ttl``."""
        update = Update(
            set={"state": IdemState.DELETED.value, "ttl": ttl},
            condition=names_batch,
            values={":batch": batch_id},
        )
        self._table.update(self._key(user_id, key), update, failure="could not mark a key deleted")

    def delete_all_of(self, user_id: str) -> None:
        keys = [
            {"pk": raw["pk"], "sk": raw["sk"]}
            for raw in self._table.query(
                KeyConditionExpression="pk = :pk",
                ExpressionAttributeValues={":pk": {"S": f"idem#{user_id}"}},
                ProjectionExpression="pk, sk",
            )
        ]
        self._table.delete_many(keys)
