"""Deleting what a provider-run batch's parts left at the provider: the files or message
batch of a collected part, tried at each step until done (``discard``), and, at the batch's
purge, whatever is left there, a provider batch that may still run cancelled first
(``provider_purge``).
"""

from __future__ import annotations

from typing import Any

import httpx

from batchgw.deps import Deps
from batchgw.domain.batch import BatchRecord
from batchgw.domain.provider import Part, PartStatus
from batchgw.observability import logger, metrics
from batchgw.provider.parts import save_part, service_for, service_of
from batchgw.run import lifecycle


def discard(deps: Deps, batch: BatchRecord, part: Part) -> None:
    """Delete what the collected part's provider batch left at the provider (its files,
    or the message batch with its results): our records hold every line now, and the
    provider need not keep the batch's requests and answers for its own retention. Tried at
    each step until it is done; a provider that cannot be reached by the batch's last step
    leaves them (``ProviderCleanupFailed``; the purge asks once more, ``provider_purge``)."""
    assert part.provider_batch_id is not None
    try:
        service_for(deps, batch, part).discard(part.provider_batch_id, part.provider_file_id)
    except httpx.HTTPError as exc:
        metrics.count("ProviderCleanupFailed", model=part.model)
        logger.warning(
            "provider batch not deleted",
            extra={"batch_id": batch.id, "part": part.n, "error": type(exc).__name__},
        )
        return
    save_part(deps, batch, part.replace(cleaned=True))


def provider_purge(deps: Deps, batch_id: str) -> dict[str, Any]:
    """The batch's purge (``lifecycle.purge``), once what its parts left at the provider is
    deleted there as far as the provider can be reached now: a provider batch that may still
    run there (a delete after its workflow failed, which no longer marks it running) is
    cancelled, and the files or message batch of one that ended are deleted. What cannot be
    deleted now is counted (``ProviderCleanupFailed``) and logged with the provider's ids, for
    the operator: the gateway's own records are purged all the same."""
    batch = deps.batches.get_record(batch_id)
    version = None if batch is None else batch.anthropic_version
    for part in deps.provider_parts.parts(batch_id):
        if part.provider_batch_id is None or part.cleaned or part.status is PartStatus.SKIPPED:
            continue
        service = service_of(deps, part, version)
        try:
            if service is None:
                raise httpx.HTTPError("its route is no longer configured")
            if part.live:
                service.cancel(part.provider_batch_id)
            service.discard(part.provider_batch_id, part.provider_file_id)
        except httpx.HTTPError as exc:
            metrics.count("ProviderCleanupFailed", model=part.model)
            logger.error(
                "provider batch left at the provider by a purge",
                extra={
                    "batch_id": batch_id,
                    "part": part.n,
                    "provider_batch_id": part.provider_batch_id,
                    "provider_file_id": part.provider_file_id,
                    "error": str(exc),
                },
            )
    return lifecycle.purge(deps, batch_id)
