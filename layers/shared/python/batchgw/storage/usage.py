"""Each user's usage record, in the control table (see ``domain.usage``):

    pk usage#<user id>   sk usage   batches, requests, v, held:<batch id>...,
                                    fbytes, fnext, f<hour>..., hb:<batch id>...

Nothing is written here on its own but the dropping of expired file hours: charges and
releases join the transaction of the change they count (``storage.batches``,
``storage.files``), each under a condition against a bound computed before the write. A
charge over the limit is tried again with the ``credit`` of requests already ended, and a
batch whose record vanished unreleased is released by the next charge (``release_vanished``).

The conditions, the credit and why: docs/design/ledger.md, "From the code: storage/usage.py".
"""

from __future__ import annotations

from typing import Any

from batchgw.domain.usage import (
    Usage,
    bucket_attribute,
    current_hour,
    file_bucket,
    held_attribute,
    held_bytes_attribute,
)
from batchgw.storage.dynamo import Table, Update

USAGE_SK = "usage"

# The clauses of the usage record's conditional writes.
batches_below_limit = "(attribute_not_exists(batches) OR batches <= :most_batches)"
requests_below_limit = "(attribute_not_exists(requests) OR requests <= :most_requests)"
no_release_since_read = "(attribute_not_exists(v) OR v = :releases)"
no_release_since_read_of = "v = :releases"
still_held_as_read = "#held = :held"
bytes_below_limit = "(attribute_not_exists(fbytes) OR fbytes <= :most_bytes)"
no_hour_due = "(attribute_not_exists(fnext) OR fnext > :hour)"
hour_held = "attribute_exists(#hour)"
copy_held = "attribute_exists(#copy)"
copy_held_as_read = "#copy = :copy"
first_hour_is = "fnext = :first"


class UsageStore:
    def __init__(self, client: Any, table: str) -> None:
        self._table = Table(client, table)

    @staticmethod
    def key(user_id: str) -> dict[str, Any]:
        return {"pk": {"S": f"usage#{user_id}"}, "sk": {"S": USAGE_SK}}

    def read(self, user_id: str) -> Usage:
        """The user's usage record (strongly consistent; all zero before their first charge)."""
        return Usage.from_item(self._table.get(self.key(user_id)))

    def action(self, user_id: str, update: Update) -> dict[str, Any]:
        """``update`` as an action of a transaction."""
        return {"Update": update.request(self._table.name, self.key(user_id))}

    # --- batches -------------------------------------------------------------------------------

    @staticmethod
    def charge_batch(
        batch_id: str,
        *,
        batches: int,
        requests: int,
        most_batches: int,
        most_requests: int,
        releases: int | None = None,
    ) -> Update:
        """Count ``batches`` more unfinished batches (0 or 1: batch ``batch_id`` itself) and
        ``requests`` more requests of it, if the record holds at most ``most_batches`` and
        ``most_requests`` before; with ``releases``, only if no batch was released since the
        record was read."""
        conditions = [requests_below_limit]
        values: dict[str, Any] = {":most_requests": most_requests}
        if batches:
            conditions.append(batches_below_limit)
            values[":most_batches"] = most_batches
        if releases is not None:
            conditions.append(no_release_since_read if releases == 0 else no_release_since_read_of)
            values[":releases"] = releases
        return Update(
            add={"batches": batches, "requests": requests, held_attribute(batch_id): requests},
            condition=" AND ".join(conditions),
            values=values,
        )

    @staticmethod
    def release_batch(batch_id: str, requests: int) -> Update:
        """One unfinished batch fewer, and the ``requests`` it charged. Joins the write that
        ends or deletes the batch, whose own condition makes it happen once."""
        return Update(add={"batches": -1, "requests": -requests, "v": 1}, remove=[held_attribute(batch_id)])

    def release_vanished(self, user_id: str, batch_id: str, requests: int, copy_bytes: int = 0) -> bool:
        """Release a batch whose record is gone without its release (and its input copy's
        ``copy_bytes`` held while it was unfinished), if the record still counts it as read
        (False otherwise)."""
        release = self.release_batch(batch_id, requests)
        names = {"#held": held_attribute(batch_id)}
        values: dict[str, Any] = {":held": requests}
        condition = still_held_as_read
        copy = self.release_copy(batch_id, copy_bytes) if copy_bytes else None
        if copy is not None:
            release = self.joined(release, copy)
            names |= {"#copy": held_bytes_attribute(batch_id)}
            values[":copy"] = copy_bytes
            condition += f" AND {copy_held_as_read}"
        return self._table.update(
            self.key(user_id),
            Update(
                add=release.add,
                remove=release.remove,
                condition=condition,
                names={**release.names, **names},
                values=values,
            ),
            failure=f"could not release {batch_id} of {user_id}",
        )

    # --- input files ---------------------------------------------------------------------------

    @staticmethod
    def joined(first: Update, second: Update) -> Update:
        """Two changes of the record (a batch's and its input copy's) as one update, both
        conditions holding: a transaction writes an item once."""
        return Update(
            add={**first.add, **second.add},
            remove=[*first.remove, *second.remove],
            extra_set=[*first.extra_set, *second.extra_set],
            condition=" AND ".join(c for c in (first.condition, second.condition) if c) or None,
            names={**first.names, **second.names},
            values={**first.values, **second.values},
        )

    @staticmethod
    def charge_file(*, size: int, expires_at: int, most_bytes: int, now: float) -> Update:
        """Count ``size`` more bytes of input files, in the file's expiry hour, if the record
        holds at most ``most_bytes`` and no expired hour is left to drop (one is dropped
        first: ``drop_due_hours``)."""
        bucket = file_bucket(expires_at)
        return Update(
            add={"fbytes": size, bucket_attribute(bucket): size},
            extra_set=["fnext = if_not_exists(fnext, :bucket)"],
            condition=f"{bytes_below_limit} AND {no_hour_due}",
            values={":most_bytes": most_bytes, ":hour": current_hour(now), ":bucket": bucket},
        )

    @staticmethod
    def charge_copy(batch_id: str, size: int, until: int | None, most_bytes: int, now: float) -> Update:
        """Count a new batch's input copy, ``size`` bytes, under its own entry while it is
        unfinished (``until`` None; else in the hour of ``until``, as a batch stored before
        entries were), if the record holds at most ``most_bytes`` and no expired hour is left
        to drop."""
        if until is not None:
            return UsageStore.charge_file(size=size, expires_at=until, most_bytes=most_bytes, now=now)
        return Update(
            add={"fbytes": size, held_bytes_attribute(batch_id): size},
            condition=f"{bytes_below_limit} AND {no_hour_due}",
            values={":most_bytes": most_bytes, ":hour": current_hour(now)},
        )

    @staticmethod
    def release_copy(batch_id: str, size: int, until: int | None = None, now: float = 0.0) -> Update | None:
        """What deleting a batch's record releases of its input copy's ``size`` bytes: its own
        entry while it is unfinished (``until`` None), if still held; from its end, the bytes
        of the hour of ``until`` unless that hour has passed (dropped, the bytes with it: None).
        None too when nothing was counted (``size`` 0)."""
        if not size:
            return None
        if until is None:
            return Update(
                add={"fbytes": -size},
                remove=[held_bytes_attribute(batch_id)],
                condition=copy_held,
                names={"#copy": held_bytes_attribute(batch_id)},
            )
        if file_bucket(until) > current_hour(now):
            return UsageStore.release_file(size=size, expires_at=until)
        return None

    @staticmethod
    def settle_copy(batch_id: str, size: int, until: int) -> Update:
        """A batch ends: its input copy's ``size`` bytes move from its own entry to the hour of
        ``until`` (its record's TTL backstop), where they count until its purge releases them
        (``release_file``) or that hour passes. The total does not change."""
        bucket = file_bucket(until)
        return Update(
            add={bucket_attribute(bucket): size},
            remove=[held_bytes_attribute(batch_id)],
            extra_set=["fnext = if_not_exists(fnext, :bucket)"],
            condition=copy_held,
            names={"#copy": held_bytes_attribute(batch_id)},
            values={":bucket": bucket},
        )

    @staticmethod
    def release_file(*, size: int, expires_at: int) -> Update:
        """``size`` bytes fewer, from the file's expiry hour, if that hour was not dropped
        already (then its bytes left the count with it)."""
        hour = bucket_attribute(file_bucket(expires_at))
        return Update(add={"fbytes": -size, hour: -size}, condition=hour_held, names={"#hour": hour})

    def drop_due_hours(self, user_id: str, usage: Usage, now: float) -> bool:
        """Take the hours that have passed off the record (their files all expired), if the
        record still holds them as read. False when it changed meanwhile."""
        if not usage.drop_due(now):
            return True
        due = usage.due_buckets(now)
        left = [bucket for bucket in usage.buckets if bucket not in due]
        names = {f"#d{i}": bucket_attribute(bucket) for i, bucket in enumerate(due)}
        values: dict[str, Any] = {f":d{i}": size for i, size in enumerate(due.values())}
        conditions = [f"#d{i} = :d{i}" for i in range(len(due))]
        if usage.first_bucket is not None:
            conditions.append(first_hour_is)
            values[":first"] = usage.first_bucket
        return self._table.update(
            self.key(user_id),
            Update(
                add={"fbytes": -sum(due.values())},
                set={"fnext": min(left) if left else None},
                extra_remove=list(names),
                condition=" AND ".join(conditions),
                names=names,
                values=values,
            ),
            failure=f"could not drop the expired files of {user_id}",
        )
