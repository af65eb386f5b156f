"""``PATCH /v1/batches/{id}``: change a batch's scheduling (``priority``, ``complete_by``)
while it runs. A ``complete_by`` the gateway cannot meet is refused as at create
(``api.capacity.rescheduled``), and a new rank reaches the batch's slot maps at once."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from batchgw.api.batches import visible_batch
from batchgw.api.capacity import rescheduled
from batchgw.api.shapes import batch_object
from batchgw.deps import Deps
from batchgw.domain import contention
from batchgw.domain.batch import BatchRecord
from batchgw.domain.errors import Conflict, NotFound, StorageError
from batchgw.domain.principal import Principal
from batchgw.observability import logger
from batchgw.validation.priority import schedule_change


def update_batch(deps: Deps, principal: Principal, batch_id: str, body: Any) -> dict[str, Any]:
    """PATCH /v1/batches/{id}: change its ``priority`` and/or ``complete_by`` until it ends
    (``validation.priority``: an administrator's range is wider, on any batch). 422
    ``deadline_infeasible`` when the new ``complete_by`` comes before its estimate. 409
    ``batch_finalized`` once it has ended, also when it ends between this read and the
    write, which is conditional on it."""
    batch = visible_batch(deps, principal, batch_id)
    if batch.record.status.is_final:
        raise _finalized(batch.record)
    now = deps.clock()
    change = schedule_change(body, admin=principal.is_admin, now=now, expires_at=batch.record.expires_at)
    change = rescheduled(deps, batch, change)
    after = deps.batches.reschedule(batch.record.id, change)
    if after is None:  # it ended (or was deleted) meanwhile
        ended = deps.batches.get_record(batch.record.id)
        if ended is None:
            raise NotFound(f"No batch found with id '{batch_id}'.", code="batch_not_found")
        raise _finalized(ended)
    logger.info("batch rescheduled", extra={"batch_id": after.id, **change})
    _retag(deps, after)
    return batch_object(replace(batch, record=after), now)


def _retag(deps: Deps, record: BatchRecord) -> None:
    """The batch's new rank on its models' slot maps at once (``domain.contention``): its
    chains go by it from their next request, before they read the batch again. Nothing while
    ``BATCH_TENANT_SHARES`` is off: no chain reads tags then, and none would drop them."""
    if not deps.settings.batch_tenant_shares:
        return
    owner = deps.accounts.user(record.owner)
    tag = contention.tag_of(contention.batch_tag(record, 1.0 if owner is None else float(owner.weight)))
    for model in record.models:
        try:
            deps.slots.set_tag(model, record.id, tag)
        except StorageError:  # its chains write it as they read the batch again
            logger.warning("could not retag a batch", extra={"batch_id": record.id, "model": model})


def _finalized(record: BatchRecord) -> Conflict:
    return Conflict(
        f"Batch '{record.id}' has ended (status {record.status.value}): its priority and "
        "complete_by can no longer change.",
        code="batch_finalized",
    )
