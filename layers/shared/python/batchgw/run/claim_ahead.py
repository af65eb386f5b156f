"""A chain's claim of its next index, sent while its call runs (``run.chain``)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

from batchgw.deps import Deps
from batchgw.domain.batch import BatchRecord
from batchgw.domain.request import RequestRecord
from batchgw.observability import logger
from batchgw.run import attempt
from batchgw.run.aio import io
from batchgw.storage.requests import Claim, ClaimKind


class ClaimAhead:
    """A chain's claim of its next index (``ChainRun._claim_ahead``), sent once ``wait``
    seconds have passed or the chain wants it sooner; until sent, it can be dropped with
    nothing claimed (a claim sent cannot: its answer says what to give back)."""

    def __init__(self, send: Callable[[], Coroutine[Any, Any, Claim]], wait: float) -> None:
        self._send = send
        self._sent: asyncio.Future[Claim] | None = None
        self._timer = asyncio.get_running_loop().call_later(wait, self.want)

    @classmethod
    def of(cls, deps: Deps, batch_id: str, index: int, owner: str, wait: float) -> ClaimAhead:
        """The claim of request ``index`` of ``batch_id`` for ``owner``, for one lease."""
        lease = deps.settings.batch_lease_seconds

        def send() -> Coroutine[Any, Any, Claim]:
            return io(deps.requests.claim, batch_id, index, owner, deps.clock(), lease)

        return cls(send, wait)

    def want(self) -> None:
        """Send the claim now, if it was not sent yet."""
        if self._sent is None:
            self._timer.cancel()
            self._sent = asyncio.ensure_future(self._send())

    async def claim(self) -> Claim:
        """The claim's answer, sent now if it was still waiting."""
        self.want()
        assert self._sent is not None
        return await self._sent

    def claimed(self) -> RequestRecord | None:
        """The request claimed, once the claim has answered that this worker has it."""
        sent = self._sent
        if sent is None or not sent.done() or sent.cancelled() or sent.exception():
            return None
        claim = sent.result()
        return claim.request if claim.kind is ClaimKind.CLAIMED else None

    def drop(self) -> asyncio.Future[Claim] | None:
        """Send nothing more: the claim sent, to give back what it claimed (None: none was)."""
        self._timer.cancel()
        return self._sent

    async def give_back(self, deps: Deps, batch: BatchRecord) -> None:
        """The chain will not run the request now: send nothing more, and release what the
        claim sent claimed."""
        sent = self.drop()
        if sent is None:  # still waiting for its time: nothing was claimed
            return
        try:
            claim = await sent
        except Exception:  # the lease runs out on its own
            logger.warning("claim ahead failed", exc_info=True)
            return
        if claim.kind is ClaimKind.CLAIMED and claim.request is not None:
            await attempt.release(deps, batch, claim.request)
