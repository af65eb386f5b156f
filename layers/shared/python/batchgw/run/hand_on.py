"""A chain's work handed on (``run.chain``): what a chain run sends, or starts, for the
indexes it does not run itself.

- its continuation: the message that resumes the chain where it stopped (a lone request's
  own message again), visible when it is due;
- its retries: each request still waiting on the chain's heap when it stops, a message of
  its own, delayed until it is due;
- its splits: when its model has batch room that no chain holds (``SlotLedger.split``, in
  ``scheduling.room``), the chain splits, and each new chain is started beside it in this
  process, or sent at once with a slot taken for it.

Why chains split, and the runs behind the bounds: docs/design/scheduling.md.
"""

from __future__ import annotations

import asyncio
import math
import uuid
from collections.abc import Callable, Coroutine
from typing import Any, Protocol

from batchgw.deps import Deps
from batchgw.domain.batch import BatchRecord
from batchgw.domain.chains import ChainMessage, RequestMessage, WorkMessage
from batchgw.observability import logger
from batchgw.run.aio import io


class RunMessage(Protocol):
    """How a new chain runs beside this one: ``run.chain.run_message`` (which imports this)."""

    def __call__(
        self, deps: Deps, message: WorkMessage, *, owner: str, deadline: float
    ) -> Coroutine[Any, Any, None]: ...


class HandOn:
    """One chain run's way to hand its work on (see the module's docstring)."""

    def __init__(
        self,
        deps: Deps,
        batch: BatchRecord,
        owner: str,
        deadline: float,
        taken_over: asyncio.Event,
        *,
        run: RunMessage,
        running: Callable[[], int],
    ) -> None:
        self.deps = deps
        self.batch = batch
        self.owner = owner
        self.deadline = deadline
        self.taken_over = taken_over  # another run has the chain: it splits no more
        self.run = run
        self.running = running  # the messages this process runs now
        self.beside: list[asyncio.Task[None]] = []  # the split's new chains started here

    async def send(self, message: WorkMessage, *, after: float) -> None:
        """Send ``message`` (the chain's continuation, a retry's or a new chain's), visible
        ``after`` seconds from now."""
        await io(self.deps.queue.send, message, max(0, math.ceil(after)))

    async def send_retries(self, retries: list[tuple[float, int]]) -> None:
        """Give each waiting request (``(due, index)``) a message of its own, delayed until it
        is due; ``retries`` is emptied."""
        now = self.deps.clock()
        for due, index in retries:
            await self.send(RequestMessage(self.batch.id, index), after=due - now)
        retries.clear()

    def ways(self, here: WorkMessage) -> int:
        """The most parts the chain may split into where it stands, ``here`` (1: it does not
        split)."""
        if not isinstance(here, ChainMessage):
            return 1
        return self.deps.ledger.ways(here, self.batch.total, self.batch.chains or 1)

    async def split(self, here: WorkMessage, model: str) -> ChainMessage | None:
        """Split the chain standing at ``here`` when its model has batch room that no chain
        holds (``SlotLedger.split``), each new chain sent at once with a slot taken for it:
        the part the chain goes on as (None: it does not split). A chain that yielded, or ran
        slower requests, lags behind its batch's others; as those end, it splits, so the
        batch's end runs on as many chains as its model has room for."""
        if not isinstance(here, ChainMessage) or self.taken_over.is_set():
            return None
        most = self.ways(here)
        if most < 2:
            return None
        ledger, total, chains = self.deps.ledger, self.batch.total, self.batch.chains or 1
        if not ledger.may_take(model, self.batch.id):
            return None  # no room to hand out, and no read due: nothing to ask off the event loop
        split = (model, self.batch.id, here, total, chains, most)
        # Each new chain gets a slot of its batch's one model, taken for it in the slot map.
        parts = await io(ledger.split, *split, with_slots=len(self.batch.models) == 1)
        if parts is None:
            return None
        kept, *new = parts
        for each in new:
            if not self._run_beside(each):
                await self.send(each, after=0)
        logger.info(
            "chain split",
            extra={
                "batch_id": self.batch.id,
                "next_index": here.next_index,
                "stride": kept.stride,
                "parts": len(parts),
            },
        )
        return kept

    def _run_beside(self, message: ChainMessage) -> bool:
        """Start a split's new chain here, beside this one, while this process runs fewer
        chains than ``Tuning.chains_beside_most`` (False: send it). It needs no message: if this
        process dies, this chain's own message comes back and walks the split's indexes too,
        as a duplicate of a sent one would; this run ends only once the new one has."""
        if self.running() >= self.deps.tuning.chains_beside_most:
            return False
        invocation = self.owner.rsplit(":", 1)[0]
        owner = f"{invocation}:{uuid.uuid4().hex[:8]}"
        self.beside.append(
            asyncio.create_task(self.run(self.deps, message, owner=owner, deadline=self.deadline))
        )
        return True

    async def beside_ended(self) -> None:
        """Wait for the chains started beside this one (``_run_beside``); an exception in one
        is this run's own, so its message comes back and walks their indexes again."""
        beside, self.beside = self.beside, []
        failed = [
            e for e in await asyncio.gather(*beside, return_exceptions=True) if isinstance(e, BaseException)
        ]
        if failed:
            raise failed[0]
