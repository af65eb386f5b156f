"""Submitting a planned part to its provider's batch service: its lines under the
provider's own ids (``domain.provider.line_id``), a refusal tried again later, run on the
gateway or failing the part; a submit whose answer was lost found again by its mark before
it is sent again (OpenAI; Anthropic keeps no mark, see ``recover``), and the provider
batches such a lost submit may have made cancelled once no step can still claim them.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import httpx

from batchgw.deps import Deps
from batchgw.domain.batch import BatchRecord, Tally
from batchgw.domain.decisions import End
from batchgw.domain.modes import Mode, ModeReason
from batchgw.domain.provider import (
    ORPHAN_SKEW_SECONDS,
    PROVIDER_WINDOW_SECONDS,
    SUBMIT_RETRY_SECONDS,
    Part,
    PartStatus,
    line_id,
    scrub_ids,
)
from batchgw.domain.request import clean_message
from batchgw.domain.states import RequestStatus
from batchgw.observability import logger, metrics
from batchgw.provider.collecting import end_left
from batchgw.provider.parts import requests_of, save_part, service_for
from batchgw.provider.services import BatchService, Refused, Submitted
from batchgw.run import lifecycle

_STATUS_CODES = {"queue_full": "provider_batch_queue_full", "rate_limited": "provider_rate_limited"}


def submit(deps: Deps, batch: BatchRecord, part: Part) -> int | dict[str, Any] | None:
    ref = uuid.uuid4().hex
    marked = save_part(
        deps,
        batch,
        part.replace(status=PartStatus.SUBMITTING, ref=ref, error=None, submit_sent_at=deps.clock()),
    )
    if marked is None:
        return 0  # another step moved it: look again
    service = service_for(deps, batch, marked)
    try:
        submitted = service.submit(list(_lines(deps, batch, marked)), endpoint=batch.endpoint, ref=ref)
    except Refused as refused:
        return _refused(deps, batch, marked, refused)
    except httpx.HTTPError:
        # Sent, perhaps: the next step looks for it by its mark before sending it again.
        logger.warning("provider batch submit unanswered", extra={"batch_id": batch.id, "part": part.n})
        return 1
    metrics.count("ProviderBatchesSubmitted", model=part.model)
    logger.info(
        "provider batch submitted",
        extra={"batch_id": batch.id, "part": part.n, "lines": part.lines, "model": part.model},
    )
    return _submitted(deps, batch, marked, submitted)


def _submitted(deps: Deps, batch: BatchRecord, part: Part, submitted: Submitted) -> int:
    """Record the provider batch ``part`` is (its first poll a second later): first as
    ours (``ProviderParts.own``: what a part's step that died before it recorded the batch
    finds it again by, where the provider keeps no mark), then in the part."""
    # As long as the batch could be looked for: its provider's window, then our retention.
    keep_until = deps.clock() + PROVIDER_WINDOW_SECONDS + deps.settings.retention_seconds
    deps.provider_parts.own(submitted.batch_id, batch.id, part, keep_until=keep_until)
    save_part(
        deps,
        batch,
        part.replace(
            status=PartStatus.SUBMITTED,
            provider_batch_id=submitted.batch_id,
            provider_file_id=submitted.file_id,
            submitted_at=deps.clock(),
            polls=0,
        ),
    )
    return 1


def _lines(deps: Deps, batch: BatchRecord, part: Part) -> Iterator[tuple[str, dict[str, Any]]]:
    """The part's requests as the provider takes them: its own id for each, and the body
    with the provider's name of the model."""
    spec = deps.catalog.models[part.model]
    route = next(r for r in spec.routes if r.id == part.route)
    upstream = spec.upstream_model_on(route)
    for request in requests_of(deps, batch, part):
        body = deps.blobs.load_body(request.request_packed, request.request_ref)
        yield line_id(request.index), {**body, "model": upstream}


def _refused(deps: Deps, batch: BatchRecord, part: Part, refused: Refused) -> int | dict[str, Any] | None:
    """A submit the provider refused: tried again later (queue full, rate limited), or,
    for an ``auto`` batch the provider took nothing of, run on the gateway instead; a
    submit it rejects fails the part's requests."""
    message = clean_message(scrub_ids(refused.message, (part.provider_batch_id, part.provider_file_id)))
    logger.warning(
        "provider refused a batch",
        extra={"batch_id": batch.id, "part": part.n, "code": refused.code, "reason": message},
    )
    if refused.later:
        others = [p for p in deps.provider_parts.parts(batch.id) if p.n != part.n]
        untouched = all(p.status in (PartStatus.PLANNED, PartStatus.SKIPPED) for p in others)
        if batch.mode_requested == Mode.AUTO.value and untouched:
            for other in [part, *others]:
                if not other.ended:
                    save_part(deps, batch, other.replace(status=PartStatus.SKIPPED))
            return lifecycle.run_on_gateway(deps, batch.id, reason=ModeReason.SUBMIT_FAILED.value)
        wait = refused.retry_after or SUBMIT_RETRY_SECONDS
        error = {"code": _STATUS_CODES[refused.code], "message": message}
        save_part(
            deps, batch, part.replace(status=PartStatus.PLANNED, retry_at=deps.clock() + wait, error=error)
        )
        return int(wait)
    error = {"code": "provider_rejected", "message": f"the provider's batch service refused it: {message}"}
    end_left(deps, batch, part, End(RequestStatus.FAILED, Tally(failed=1), error={**error, "status": None}))
    save_part(deps, batch, part.replace(status=PartStatus.COLLECTED, error=error))
    return None


def recover(deps: Deps, batch: BatchRecord, part: Part) -> int | None:
    """A part whose submit was sent and whose answer was lost (with the step that sent it,
    or on the way): the provider batch it made, found by its mark (OpenAI's metadata), or
    by the note that it is ours (``ProviderParts.own``) among those made since; else a new
    submit. Where the provider keeps no mark (Anthropic), a batch the lost submit made may
    run unclaimed: the part notes when, and cancels it once no step can still claim it
    (``cancel_orphans``)."""
    service = service_for(deps, batch, part)
    if service.finds_by_mark:
        found = service.find(part.ref) if part.ref else None
    else:
        found = _found_by_note(deps, service, part)
    if found is not None:
        return _submitted(deps, batch, part, found)
    again = part.replace(status=PartStatus.PLANNED, ref=None)
    if not service.finds_by_mark:
        again = again.suspecting(part.submit_sent_at or deps.clock(), deps.clock())
    save_part(deps, batch, again)
    return 0


def _found_by_note(deps: Deps, service: BatchService, part: Part) -> Submitted | None:
    if not part.ref:
        return None
    since = (part.submit_sent_at or deps.clock()) - ORPHAN_SKEW_SECONDS
    for listed in service.made_since(since):
        owner = deps.provider_parts.owner(listed.batch_id)
        if owner is not None and owner.get("ref") == part.ref:
            return Submitted(listed.batch_id)
    return None


def orphan_grace(deps: Deps) -> float:
    """How long after a lost submit a step could still record the batch it made: one step's
    longest run (the lifecycle function's timeout)."""
    return deps.settings.batch_worker_timeout_seconds


def cancel_orphans(deps: Deps, batch: BatchRecord, part: Part) -> Part:
    """Cancel the provider batches a lost submit of ``part`` may have made: of those created
    in its suspect window with as many lines as the part, any no part notes as its own
    (every step that got an answer noted it, within one step's run). The route's key must be
    this deployment's alone: a batch someone else made with it then would look lost too."""
    assert part.suspect_from is not None and part.suspect_to is not None
    service = service_for(deps, batch, part)
    try:
        made = service.made_since(part.suspect_from)
    except httpx.HTTPError:
        logger.warning("provider batch list unreachable", extra={"batch_id": batch.id, "part": part.n})
        return part
    for listed in made:
        if listed.ended or listed.lines != part.lines or listed.created_at > part.suspect_to:
            continue
        if deps.provider_parts.owner(listed.batch_id) is not None:
            continue
        try:
            service.cancel(listed.batch_id)
        except httpx.HTTPError:
            logger.warning("lost provider batch not cancelled", extra={"batch_id": batch.id, "part": part.n})
            return part  # looked for again at the next step
        metrics.count("ProviderOrphansCancelled", model=part.model)
        logger.warning(
            "lost provider batch cancelled",
            extra={"batch_id": batch.id, "part": part.n, "provider_batch_id": listed.batch_id},
        )
    return save_part(deps, batch, part.replace(suspect_from=None, suspect_to=None)) or part
