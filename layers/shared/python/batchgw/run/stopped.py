"""The requests of a stopped batch that will never run, ended: its unstarted ones (queued,
or waiting for a retry) swept when it expires, is cancelled or fails, and a running one
whose worker is gone (its lease ran out) ended as abandoned. Each attempt lost with a worker
is charged to the batch's owner and key at the most it could have cost.

Used by the workflow's steps (``lifecycle``, ``ending``) and the reconciler (``reconcile``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from batchgw.deps import Deps
from batchgw.domain.batch import BatchRecord, Tally
from batchgw.domain.decisions import Verdict, abandoned, not_run
from batchgw.domain.request import RequestEnd, RequestRecord
from batchgw.domain.states import RequestStatus
from batchgw.observability import metrics
from batchgw.run.owner import priced
from batchgw.storage.spend import Payer
from batchgw.storage.spend import shard_of as spend_shard


def sweep(
    deps: Deps,
    batch: BatchRecord,
    status: RequestStatus,
    error: dict[str, Any],
    tally: Tally,
    *,
    failed_retries: bool = False,
) -> None:
    """End every unstarted request of the batch (queued, or waiting for a retry) as
    ``status`` with ``error``. With ``failed_retries``, a request that has run before fails
    with the last error it got instead: it is not a request that never ran. Only requests
    before the ``written`` frontier: past it, none is written for certain (a batch that
    failed while prepare wrote counts those with ``count_unwritten``)."""
    now = deps.clock()
    model = batch.models[0] if len(batch.models) == 1 else "several"
    below = None if batch.all_written else batch.written_count
    lost: tuple[int, ...] = ()
    if failed_retries:
        failed = deps.requests.sweep(
            batch.id,
            end=RequestEnd(RequestStatus.FAILED, ended_at=now),
            tally=Tally(failed=1),
            shards=batch.shard_count,
            attempted=True,
            below=below,
        )
        metrics.ended(RequestStatus.FAILED.value, failed.ended, model=model)
        lost = failed.lost
    swept = deps.requests.sweep(
        batch.id,
        end=RequestEnd(status, ended_at=now, error=error),
        tally=tally,
        shards=batch.shard_count,
        attempted=False if failed_retries else None,
        below=below,
    )
    metrics.ended(status.value, swept.ended, model=model)
    _end_lost_unstarted(deps, batch, _VERDICTS[status], (*lost, *swept.lost))


# How a sweep's status reads as the verdict a chain would have found (``domain.decisions``).
_VERDICTS = {
    RequestStatus.CANCELLED: Verdict.CANCELLED,
    RequestStatus.EXPIRED: Verdict.EXPIRED,
    RequestStatus.FAILED: Verdict.OWNER_FAILED,
}


def _end_lost_unstarted(deps: Deps, batch: BatchRecord, reason: Verdict, indexes: Iterable[int]) -> None:
    """End what a sweep left unstarted: requests that lost attempts with their workers, each
    charged to its owner and key at the most each lost attempt could have cost (as a chain
    that claimed it would end it), in the write that ends it."""
    now = deps.clock()
    for index in indexes:
        request = deps.requests.get(batch.id, index)  # with its body, to price it
        if request is None or request.status not in (RequestStatus.QUEUED, RequestStatus.RETRY_WAIT):
            continue  # a worker claimed it meanwhile
        end = not_run(reason, request, deps.settings)
        if deps.requests.end_unstarted(
            request,
            shard=batch.shard_of(request.index),
            end=RequestEnd(end.status, ended_at=now, error=end.error),
            tally=end.tally,
            charges=_unknown_cost_charges(deps, batch, request, end.tally.cost_unknown, now),
        ):
            metrics.ended(end.status.value, model=request.model)


def _unknown_cost_charges(
    deps: Deps, batch: BatchRecord, request: RequestRecord, attempts: int, now: float
) -> list[dict[str, Any]]:
    """The writes that charge ``attempts`` of unknown cost of ``request`` (as stored, with its
    body) to its batch's owner and key, each at the most it could have cost."""
    most = priced(deps, batch.endpoint, request)[1]
    return deps.spend.charge_actions(
        Payer(batch.owner, batch.key_id),
        0,
        now=now,
        shard=spend_shard(batch.id, request.index),
        unknown_nano=most * attempts,
    )


def lease_ran_out(request: RequestRecord, now: float) -> bool:
    """Running, but its worker's lease ran out: the worker is gone."""
    return request.status is RequestStatus.RUNNING and (request.lease_until or 0) < now


def end_abandoned(deps: Deps, batch: BatchRecord, request: RequestRecord, now: float) -> bool:
    """End a request whose worker is gone, in a batch that stopped (no worker takes it over).
    Its lost attempts are charged to its owner and key at the most each could have cost, as
    any attempt of unknown cost is."""
    decision = abandoned(batch, request)
    stored = deps.requests.get(batch.id, request.index) or request  # with its body, to price it
    charges = _unknown_cost_charges(deps, batch, stored, decision.tally.cost_unknown, now)
    ended = deps.requests.end_abandoned(
        request,
        now=now,
        shard=batch.shard_of(request.index),
        end=RequestEnd(decision.status, ended_at=now, error=decision.error),
        tally=decision.tally,
        charges=charges,
    )
    if ended:
        metrics.ended(decision.status.value, model=request.model)
    return ended
