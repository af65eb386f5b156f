"""A chain's claim of its next index, sent while its call runs (``run.chain``)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

from batchgw.domain.request import RequestRecord
from batchgw.storage.requests import Claim, ClaimKind


class ClaimAhead:
    """A chain's claim of its next index (``ChainRun._claim_ahead``), sent once ``wait``
    seconds have passed or the chain wants it sooner; until sent, it can be dropped with
    nothing claimed (a claim sent cannot: its answer says what to give back)."""

    def __init__(self, send: Callable[[], Coroutine[Any, Any, Claim]], wait: float) -> None:
        self._send = send
        self._sent: asyncio.Future[Claim] | None = None
        self._timer = asyncio.get_running_loop().call_later(wait, self.want)

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
