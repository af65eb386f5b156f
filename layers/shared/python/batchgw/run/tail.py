"""The requests a chain takes from its batch's other chains once its own walk has ended.

A batch's chains walk strided indexes and end unevenly: one that yielded, split late, or
ran slower requests or more retries lags behind the others. Without help, the batch's end
runs on the laggards alone while the slots the others held stand idle, until a split
hands the room on (a read of the room, a message, a new chain's claim). Instead, a chain
whose walk has ended reads its batch's requests from the highest index down, a page at
a time, and claims the ones still to run, in its own slot, at once. The laggards walk up
from below; the two meet, and the batch ends on every slot it had.

Nothing is coordinated but through the claim, which stays the judge: a request another
worker took meanwhile is simply passed. The claims of a tail carry the mark ``TAIL_MARK``
in their owner, so a laggard that meets one passes it rather than waiting out its lease
(``run.chain``): if the taker dies, its chain's message comes back, its walk ends again,
and its tail finds the request (its lease run out) again; should that tail end before it
does, the reconciler gives the request a message of its own once the batch stalls
(``run.reconcile``). A request taken from the tail
that cannot run now (a full model, a yield) is handed on as a message of its own, never
merely given back: a laggard may have passed it already.
"""

from __future__ import annotations

import random
from typing import Any

from batchgw.deps import Deps
from batchgw.run.aio import io

TAIL_MARK = "+tail"  # ends the owner of a claim taken from another chain's walk


def taken_from_the_tail(owner: str | None) -> bool:
    """Whether a request's lease holder took it from the tail (see the module's text)."""
    return owner is not None and owner.endswith(TAIL_MARK)


class Tail:
    """The indexes a chain at its walk's end may take, read a page at a time (``next``).

    Each chain tries a page in an order of its own (shuffled, seeded by ``spread``, its
    walk's residue): the chains that end together read the same page, and each trying it
    top first would find each index taken by the one before.

    Each chain's requests still to run lie above its walk's place, so a tail is worth
    taking only near the batch's end, with some chains behind by a little. A first page
    nearly all still to run (more than ``tail_most_share`` of it) says the batch is far
    from its end: the chain that ended was a split's short part, and the others walk far
    below; it takes nothing and gives its slot to a split, as a chain that ends does. A
    sparse page (fewer to take than ``tail_least_share`` of it) ends the tail too: a
    laggard behind by a lot (a chain that found its model full for long) is spread over
    the whole batch, and reading the batch for it would cost every chain more than that
    chain's own split, which its next request makes once room is free (``run.chain``)."""

    def __init__(self, deps: Deps, batch_id: str, below: int, spread: int = 0) -> None:
        self._deps = deps
        self._spread = spread
        self._batch_id = batch_id
        self._below = below  # the indexes below this are read: the batch's written ones
        self._start: dict[str, Any] | None = None  # where the next page starts
        self._found: list[int] = []
        self._ended = below <= 0
        self.pages = 0  # pages read

    async def next(self) -> int | None:
        """The next index to try, reading a page when the last is used up (None: no more)."""
        while not self._found:
            if self._ended:
                return None
            deps = self._deps
            tuning = deps.tuning
            found, self._start = await io(
                deps.requests.claimable_step,
                self._batch_id,
                below=self._below,
                now=deps.clock(),
                limit=tuning.tail_read_items,
                start=self._start,
            )
            self.pages += 1
            if self.pages == 1 and len(found) > tuning.tail_most_share * tuning.tail_read_items:
                found = []  # far from the batch's end: see the class's text
            sparse = len(found) < tuning.tail_least_share * tuning.tail_read_items
            self._ended = sparse or self._start is None
            random.Random(self._spread).shuffle(found)
            self._found = found
        return self._found.pop()
