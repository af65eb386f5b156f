"""A batch's run marks: which workers run some of its work now.

A worker running a chain of the batch keeps a run mark in its partition (``run#<token>``,
with the time it lasts until, renewed while the chain runs, removed when it stops): "is
any of this batch's work running?" reads those few marks, whatever the batch's size, and
no request's claim or end writes anything for it.
"""

from __future__ import annotations

from batchgw.storage.batch_records import batch_key
from batchgw.storage.dynamo import Table, from_item, timestamp

RUN_PREFIX = "run#"  # the sort keys of the batch's run marks
_RUN_MARK_KEPT_SECONDS = 86400  # a dead worker's mark, long ended, is left to TTL after this


class RunMarks:
    """The part of ``BatchStore`` that keeps the batch's run marks."""

    _table: Table

    def mark_run(self, batch_id: str, token: str, *, until: float) -> None:
        """Say that a worker runs some of the batch's work until ``until`` (or renew that)."""
        self._table.put(
            {
                "pk": batch_id,
                "sk": f"{RUN_PREFIX}{token}",
                "until": timestamp(until),
                "ttl": int(until) + _RUN_MARK_KEPT_SECONDS,
            },
            failure=f"could not mark a run of {batch_id}",
        )

    def unmark_run(self, batch_id: str, token: str) -> None:
        self._table.delete(
            batch_key(batch_id, f"{RUN_PREFIX}{token}"), failure=f"could not unmark {batch_id}"
        )

    def runs_live(self, batch_id: str, now: float) -> bool:
        """Whether a worker runs some of the batch's work now: a mark not yet run out. Reads
        the marks alone (one per running chain, and those of workers that died within a
        day), strongly consistent, so a mark written before this read is seen."""
        for raw in self._table.query(
            KeyConditionExpression="pk = :pk AND begins_with(sk, :run)",
            ExpressionAttributeValues={":pk": {"S": batch_id}, ":run": {"S": RUN_PREFIX}},
            ProjectionExpression="#until",
            ExpressionAttributeNames={"#until": "until"},
            ConsistentRead=True,
        ):
            if float(from_item(raw)["until"]) > now:
                return True
        return False
