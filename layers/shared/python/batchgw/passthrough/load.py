"""An interactive request's own load report: a lease, renewed while the request runs.

Each request in flight is one report in the interactive load's partition
(``storage.interactive``), under a reporter id of its own (``own:<token>``), with source
``own`` and one request on its model: the workers sum the reports, so the model's batch
share drops by one while it runs (``domain.interactive``). The report lasts
``LEASE_SECONDS`` and is renewed every ``RENEW_SECONDS`` while the call runs; the request's
end removes it. A process that dies mid-call leaves a report that stops counting within
``LEASE_SECONDS``: nothing leaks.

Bookkeeping never fails the request it counts: a report that cannot be written is logged,
and the request runs uncounted (batch work then gives way to it only through the
upstream's own backpressure).
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable

from batchgw.deps import Deps
from batchgw.domain.interactive import OWN
from batchgw.observability import logger

LEASE_SECONDS = 10.0
RENEW_SECONDS = 3.0
REPORTER_PREFIX = "own:"


def reporter_id() -> str:
    return f"{REPORTER_PREFIX}{secrets.token_hex(8)}"


@contextlib.asynccontextmanager
async def in_flight(deps: Deps, model: str) -> AsyncIterator[str]:
    """Count one interactive request on ``model`` while the block runs (the reporter id)."""
    reporter = reporter_id()

    async def report() -> None:
        await asyncio.to_thread(
            deps.interactive.report,
            reporter,
            {model: 1},
            now=deps.clock(),
            ttl_seconds=LEASE_SECONDS,
            source=OWN,
        )

    await _quietly(report(), "could not count an interactive request as in flight", model)
    ended = asyncio.Event()
    renewing = asyncio.create_task(_renew(report, model, ended))
    try:
        yield reporter
    finally:
        # A renewal under way ends before the removal: cancelled, its write would go on in
        # its thread and could land after the removal, counting the ended request for a lease.
        ended.set()
        await renewing
        await _quietly(
            asyncio.to_thread(deps.interactive.remove, reporter),
            "could not remove an interactive request's load (it expires on its own)",
            model,
        )


async def _renew(report: Callable[[], Awaitable[None]], model: str, ended: asyncio.Event) -> None:
    """Renew the report every ``RENEW_SECONDS`` until ``ended``."""
    while True:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(ended.wait(), RENEW_SECONDS)
            return
        await _quietly(report(), "could not renew an interactive request's load", model)


async def _quietly(step: Awaitable[object], failure: str, model: str) -> None:
    try:
        await step
    except Exception:
        logger.warning(failure, extra={"model": model}, exc_info=True)
