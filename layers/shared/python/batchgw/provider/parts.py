"""A provider part as each module of the provider step handles it: its conditional save
(``ProviderParts.save`` on the part as read), the batch service of its route, the requests
it runs, and whether its batch stops (cancel, its owner's failure, its window's end).
"""

from __future__ import annotations

from collections.abc import Iterator

from batchgw.deps import Deps
from batchgw.domain.batch import BatchRecord
from batchgw.domain.provider import Part
from batchgw.domain.request import RequestRecord
from batchgw.domain.states import RequestStatus
from batchgw.observability import logger
from batchgw.provider.services import BatchService


def save_part(deps: Deps, batch: BatchRecord, part: Part) -> Part | None:
    saved = deps.provider_parts.save(batch.id, part)
    if saved is None:
        logger.warning("provider part changed meanwhile", extra={"batch_id": batch.id, "part": part.n})
    return saved


def service_for(deps: Deps, batch: BatchRecord, part: Part) -> BatchService:
    service = service_of(deps, part, batch.anthropic_version)
    if service is None:
        raise ValueError(f"{batch.id}: route {part.route!r} of {part.model!r} is no longer configured")
    return service


def service_of(deps: Deps, part: Part, anthropic_version: str | None) -> BatchService | None:
    """The batch service of ``part``'s route (None: its model or route left the config)."""
    spec = deps.catalog.models.get(part.model)
    route = None if spec is None else next((r for r in spec.routes if r.id == part.route), None)
    if route is None:
        return None
    return BatchService(
        route,
        secret_ttl=deps.settings.batch_upstream_secret_ttl_seconds,
        anthropic_version=anthropic_version,
    )


def requests_of(deps: Deps, batch: BatchRecord, part: Part) -> Iterator[RequestRecord]:
    after = part.start - 1
    while after < part.end - 1:
        page, more = deps.requests.page(batch.id, after_index=after, limit=500)
        for request in page:
            if request.index >= part.end:
                return
            if part.rerun and request.status not in (RequestStatus.RETRY_WAIT, RequestStatus.RUNNING):
                continue  # not one of those it runs again
            if request.model == part.model:
                yield request
        if not more or not page:
            return
        after = page[-1].index


def is_stopping(batch: BatchRecord, now: float) -> bool:
    return batch.stopping or batch.window_closed(now)
