"""A batch's completion: counting its finished shards and waking its workflow.

Every request that ends is counted in one of the batch's counter shards; the writer of
a shard's last request counts the shard as done in the batch's record (exactly once,
``BatchStore.count_shard_done``), and whoever counts the last shard wakes the parked
workflow to finalize. ``settle`` recounts every emptied shard, for a writer that died
between the two steps. The worker and the workflow's steps share these.
"""

from __future__ import annotations

from batchgw.deps import Deps
from batchgw.storage.workflow import Next


def shard_finished(deps: Deps, batch_id: str, shard: int) -> None:
    """Count a finished shard once, and wake the workflow if it was the last.

    The wake is tried even when this call did not count the shard: a count whose answer
    was lost (the SDK's retry then finds it done) must still lead to the wake-up.
    """
    deps.batches.count_shard_done(batch_id, shard)
    wake_if_done(deps, batch_id)


def wake_if_done(deps: Deps, batch_id: str) -> None:
    """Wake the parked workflow to finalize, if every shard is done."""
    record = deps.batches.get_record(batch_id)
    if record is None or record.task_token is None or not record.all_shards_done:
        return
    deps.workflow.wake(record.task_token, Next.FINALIZE)
    deps.batches.clear_token(batch_id, record.task_token)


def settle(deps: Deps, batch_id: str) -> None:
    """Count every emptied shard (idempotent: each is counted once, whoever gets there)."""
    for shard in deps.batches.shards(batch_id):
        if shard.left == 0 and not shard.done:
            deps.batches.count_shard_done(batch_id, shard.shard)
