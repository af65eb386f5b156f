"""The worker's loop: run one message, a chain of a batch's requests or a lone request.

For each index of its chain the worker claims the request (its lease), holds a slot of its
model, knows the batch still runs, calls the upstream, and stores what the outcome means
(the end, counted in the batch's shard, or the next try), while claiming its next index
ahead. A request to try again waits on the chain's heap and runs with its slot once due.
What the chain hands on (its continuation, its retries' own messages, a split's new
chains) goes through ``run.hand_on``.

Each step returns None to go on or a ``Stopped`` (why, and when the continuation is due);
the run's one exit (``ChainRun._stop``) acts on it and logs one "chain stopped" line.
Whatever dies where, the lease runs out and the message comes back.

The loop step by step: docs/design/scheduling.md, "From the code: run/chain.py".
"""

from __future__ import annotations

import asyncio
import heapq
import uuid
from typing import Any

from batchgw.deps import Deps
from batchgw.domain.batch import BatchRecord, is_flex
from batchgw.domain.chains import ChainMessage, RequestMessage, WorkMessage
from batchgw.domain.contention import Tag, batch_tag
from batchgw.domain.decisions import Verdict, verdict
from batchgw.domain.request import RequestRecord
from batchgw.domain.spend import Judgement
from batchgw.domain.states import BatchStatus
from batchgw.observability import logger, metrics
from batchgw.run import attempt, charges, completion, renewing
from batchgw.run.aio import io
from batchgw.run.attempt import After
from batchgw.run.claim_ahead import ClaimAhead
from batchgw.run.hand_on import HandOn
from batchgw.run.invisible import Invisible
from batchgw.run.model_gate import ModelGate
from batchgw.run.owner import OwnerGate, fail_for_owner, pause_batch, resume_batch
from batchgw.run.slot import read_ahead
from batchgw.run.stops import WHY_OF_VERDICT, Stopped, Why
from batchgw.storage.requests import Claim, ClaimKind, RunGuard

_running = [0]  # the messages this process runs now (an invocation's, on AWS)


async def run_message(
    deps: Deps,
    message: WorkMessage,
    *,
    owner: str,
    deadline: float,
    receipt: str | None = None,
    source: str | None = None,
) -> None:
    """Run one message until its chain ends, its time is up, or it must stop.

    With the message's ``receipt``, its visibility is kept at one lease and renewed while
    the chain runs (through ``source``, the queue it came from): if this worker dies, the
    message (and so the chain) comes back after about one lease, not after the queue's long
    default visibility.
    """
    taken_over = Invisible.of_this_loop(deps).add(receipt, source) if receipt else asyncio.Event()
    _running[0] += 1
    try:
        batch = await io(deps.batches.get_record, message.batch_id)
        if batch is None or batch.status is not BatchStatus.IN_PROGRESS:
            return  # deleted, cancelled or ended: unstarted requests are the workflow's to settle
        if _superseded(message, batch):
            return  # the reconciler started a new generation of this batch's chains
        if batch.on_provider:
            return  # its provider's batch service runs it: a stray message runs nothing here
        run = ChainRun(deps, batch, message, owner=owner, deadline=deadline, taken_over=taken_over)
        stopped = await run.run()
    finally:
        if receipt:
            Invisible.of_this_loop(deps).discard(receipt)
        _running[0] -= 1
        if not _running[0]:  # the invocation's last message: its environment may idle now
            await flush_counts(deps)
    if stopped.finished:
        # Normally the last record woke the workflow; this covers a worker that died
        # between recording the last request and waking it (its message came back to us).
        await io(completion.settle, deps, batch.id)
        await io(completion.wake_if_done, deps, batch.id)


async def flush_counts(deps: Deps, *, all_of_them: bool = True) -> None:
    """Write what this process noted of its attempts (``attempt.flush_noted``), off the loop."""
    if deps.reqlog.waiting or charges.waiting():
        await io(attempt.flush_noted, deps, all_of_them=all_of_them)


def _superseded(message: WorkMessage, batch: BatchRecord) -> bool:
    return isinstance(message, ChainMessage) and message.generation < batch.generation


class ChainRun:
    """One run of a chain (or of a lone request) in this worker."""

    def __init__(
        self,
        deps: Deps,
        batch: BatchRecord,
        message: WorkMessage,
        *,
        owner: str,
        deadline: float,
        taken_over: asyncio.Event | None = None,
    ) -> None:
        self.deps = deps
        self.batch = batch
        self.message = message
        self.owner = owner
        self.deadline = deadline
        # Set when another run took this run's message over: this run stops at its next
        # request, handing nothing on but its retries (the other run has the chain).
        self.taken_over = taken_over or asyncio.Event()
        self.lone = isinstance(message, RequestMessage)
        self.next_index = message.index if isinstance(message, RequestMessage) else message.next_index
        self.stride = 0 if isinstance(message, RequestMessage) else message.stride
        self.retries: list[tuple[float, int]] = []  # (due, index): requests waiting for a retry
        self.prefetch: ClaimAhead | None = None  # the next index, claimed ahead
        # What the batch allows (``batch`` was just read); None: read it afresh.
        self.verdict: Verdict | None = verdict(batch, deps.clock())
        self.latest = batch  # the batch as last read
        self.written = batch.written_count  # no request from here on is written yet (as last read)
        self.tuning = deps.tuning
        self.write_wait = self.tuning.write_wait_seconds  # how long the chain waits at that frontier next
        full = message.full if isinstance(message, ChainMessage) else 0
        self.model_gate = ModelGate(
            deps, batch.id, full=full, deadline=deadline, taken_over=self.taken_over, tag=self._tag
        )
        self.slot = self.model_gate.slot  # the model's slot the chain holds
        if isinstance(message, ChainMessage) and message.slot and len(batch.models) == 1:
            self.slot.adopt(batch.models[0], message.slot)  # a split took it for this chain
        self.owner_gate = OwnerGate(deps, batch)
        self.pacer = deps.pacer
        self.body: Any = None  # the next request's body, when the owner's gate read it
        # When the chain's last call answered, while it goes straight on to its next (None
        # once it waits: for room, a retry, its requests' writes). The time in between, its
        # slot idle, is the AnswerToNextCall metric: writing the end, the claim, the pacer.
        self.answered_at: float | None = None
        self.hand_on = HandOn(  # its continuation, its retries' messages, its splits' new chains
            deps, batch, owner, deadline, self.taken_over, run=run_message, running=lambda: _running[0]
        )

    def _tag(self) -> Tag:
        """How the batch ranks on its model's slot map (``domain.contention``), as last read."""
        return batch_tag(self.latest, self.owner_gate.weight)

    async def run(self) -> Stopped:
        """Run until a step stops the chain; the stop, once acted on (``_stop``).

        While it runs, the batch carries this run's mark (``BatchStore.mark_run``), renewed
        every third of a lease: a batch is not deleted while it has live marks, and a dead
        worker's mark runs out with its leases. The mark goes last, once the chain was
        handed on and everything it held let go.
        """
        early = self._held_back() or await self._model_full()
        if early is not None:
            await self._stop(early)
            return early
        token = uuid.uuid4().hex
        await asyncio.gather(self._read_stored(), renewing.mark(self.deps, self.batch.id, token))
        marking = asyncio.create_task(renewing.keep_marked(self.deps, self.batch.id, token))
        stopped = Stopped(Why.ERROR)  # what an exception out of the loop leaves
        self.pacer.joined()
        try:
            stopped = await self._loop()
            return stopped
        finally:
            self.pacer.left()
            await self._stop(stopped)
            marking.cancel()
            try:
                await io(self.deps.batches.unmark_run, self.batch.id, token)
            except Exception:  # it runs out on its own
                logger.warning("could not remove a run's mark", exc_info=True)
            await self.hand_on.beside_ended()

    async def _read_stored(self) -> None:
        """What the batch's results hold so far, when a cap on them applies (its shards read)."""
        if self.deps.settings.max_results_bytes_per_batch is not None:
            shards = await io(self.deps.batches.shards, self.batch.id)
            self.deps.stored.raise_to(self.batch.id, sum(shard.tally.stored_bytes for shard in shards))

    async def _stop(self, stopped: Stopped) -> None:
        """The run's one exit: log the stop (one line), send the continuation it asks for,
        then (even if that send failed) give back the index claimed ahead, hand each request
        waiting for a retry a message of its own (none waits when the chain finished), and
        let go of the slots."""
        logger.info(
            "chain stopped",
            extra={
                "batch_id": self.batch.id,
                "why": stopped.why.value,
                "next_index": self.next_index,
                "resume_after": None if stopped.resume_after is None else round(stopped.resume_after, 3),
                "lone": self.lone,
                "retries": len(self.retries),
            },
        )
        try:
            if stopped.resume_after is not None and self._has_next():  # else nothing is left to resume
                await self.hand_on.send(self._here(), after=stopped.resume_after)
        finally:
            await self._give_back_prefetched()
            if self.retries and not stopped.finished:
                await self.hand_on.send_retries(self.retries)
            if stopped.finished and self.slot.model is not None:
                # another of its batch's chains splits into it
                self.deps.ledger.give(self.slot.model, self.batch.id)
            await self.slot.release()
            await self.owner_gate.release()

    def _held_back(self) -> Stopped | None:
        """A stop when the batch's owner's quota, budget or role holds it back (as the batch
        says): the chain comes back when that is checked again."""
        wait = self.model_gate.held_back(self.batch) if self._has_next() else None
        return None if wait is None else Stopped.waiting(wait)

    async def _model_full(self) -> Stopped | None:
        """A stop when the chain finds its batch's one model full (or paused) before it takes
        anything, to come back later: a read and a message, where asking for a slot would
        take a mark, a claim, a slot write and their undoing. The slot write stays the
        judge: a model seen with room is asked for as usual."""
        now = self.deps.clock()
        if self.lone or len(self.batch.models) != 1 or self.batch.window_closed(now) or self.slot.reserved:
            return None
        if not self.deps.settings.batch_enabled or self.taken_over.is_set():
            return None
        model = self.batch.models[0]
        wait = await self.model_gate.before_start(model, now)
        if wait is None or (wait.in_place and await self._room_again(model, wait.seconds)):
            return None  # the slot write stays the judge
        return Stopped.waiting(wait)

    async def _room_again(self, model: str, wait: float | None) -> bool:
        """Whether ``model``'s batch share has room again while this chain, having yielded,
        waits in place (``ModelGate.wait_in_place``); the batch is then read again before
        the chain's next request."""
        if wait is None or self.lone:
            return False
        self.answered_at = None
        if await self.model_gate.wait_in_place(model, wait, self._still_runs):
            self.verdict = None  # the batch may have stopped meanwhile: read it again
            return True
        return False

    async def _still_runs(self) -> bool:
        """Whether the batch, read again, still allows the chain's next request."""
        await self._read_batch()
        return self.verdict is Verdict.RUN

    async def _loop(self) -> Stopped:
        """Run the chain's requests one after another until a step stops it: that stop.
        No step sends the continuation; the run's exit does (``_stop``)."""
        while True:
            now = self.deps.clock()
            from_heap = self.prefetch is None and self._retry_due(now)
            if not from_heap and not self._has_next():
                if await self._waited_for_retry():
                    continue
                if self.lone:
                    return Stopped(Why.LONE_DONE)
                return Stopped(Why.RETRIES_LATER if self.retries else Why.FINISHED)
            if stopped := await self._must_stop(now):
                return stopped
            if not from_heap and self.next_index >= self.written:
                if await self._waited_for_writes():
                    continue
                return self._stopped_by_verdict()
            # Only now, past every reason to stop, does the target leave the heap: a stop
            # above hands every waiting request on.
            target = heapq.heappop(self.retries)[1] if from_heap else self.next_index
            claim = await self._claim(target, from_heap, now)
            if claim.kind is not ClaimKind.CLAIMED or claim.request is None:
                if stopped := self._passed(claim, target, from_heap, now):
                    return stopped
                continue
            held = claim.request
            if await attempt.ended_poison(self.deps, self.batch, held):
                if self.lone:
                    return Stopped(Why.LONE_DONE)
                self._advance(from_heap)
                continue
            if stopped := await self._take_slot(held, target, from_heap, now):
                # A flex request is owed the next slot a batch lets go: it waits for it here too.
                in_place = stopped.why is Why.YIELDED or (
                    stopped.why is Why.MODEL_FULL and is_flex(self.batch.id)
                )
                if in_place and await self._room_again(held.model, stopped.resume_after):
                    continue
                return stopped
            if self.verdict is None:
                await self._read_batch()
            if self.verdict is Verdict.SUPERSEDED:
                # A newer generation of chains runs the batch: give the request back to it
                # (a retry goes back on the heap, which the exit hands on at once).
                await attempt.release(self.deps, self.batch, held)
                if from_heap:
                    heapq.heappush(self.retries, (now, target))
                return Stopped(Why.SUPERSEDED)
            if self.verdict is not Verdict.RUN:
                if await self._ended_unrun(held, from_heap):
                    continue
                return self._stopped_by_verdict()
            if stopped := await self._admitted(held, target, from_heap):
                return stopped
            self._advance(from_heap)
            self._claim_ahead(now)
            if stopped := await self._run(held, target):
                return stopped
            if (kept := await self.hand_on.split(self._here(), held.model)) is not None:
                self.message, self.stride = kept, kept.stride  # it split: on at the wider stride

    # --- the steps ----------------------------------------------------------------------------

    def _has_next(self) -> bool:
        return self.next_index < self.batch.total

    def _here(self) -> WorkMessage:
        """The message that resumes the chain where it stands (a lone request's own)."""
        if isinstance(self.message, ChainMessage):
            return self.message.resume_at(self.next_index, full=self.model_gate.full)
        return self.message

    def _retry_due(self, now: float) -> bool:
        return bool(self.retries) and self.retries[0][0] <= now

    def _advance(self, from_heap: bool) -> None:
        if not from_heap:
            self.next_index += self.stride

    async def _waited_for_retry(self) -> bool:
        """At the end of its walk, a chain waits for a retry due soon: with its slot in hand
        for a moment, else letting it go meanwhile (another chain's requests run in it; the
        retry takes a slot again when it is due, or is handed on if the model is full)."""
        self.answered_at = None
        if not self.retries or self.lone or not self._worth_waiting(self.retries[0][0]):
            return False
        wait = max(0.0, self.retries[0][0] - self.deps.clock())
        if wait > self.tuning.retry_wait_keep_slot_seconds:
            await self.slot.release()
        await asyncio.sleep(wait)
        self.verdict = None  # the batch may have stopped meanwhile: read it again
        return True

    def _stopped_by_verdict(self) -> Stopped:
        """The stop of a chain whose batch no longer allows its next request (as last read):
        nothing to hand on, the workflow settles what is left."""
        assert self.verdict is not None and self.verdict is not Verdict.RUN
        return Stopped(WHY_OF_VERDICT[self.verdict])

    async def _waited_for_writes(self) -> bool:
        """The chain's next request is not written yet: prepare writes a batch's requests
        while its first ones run. Wait a moment (longer each time, up to a second) and read
        the batch again; True to go on, False to stop because the batch no longer runs (the
        workflow settles its unstarted requests once they are all written)."""
        self.answered_at = None
        await asyncio.sleep(self.write_wait)
        self.write_wait = min(2 * self.write_wait, self.tuning.write_wait_max_seconds)
        await self._read_batch()
        return self.verdict in (Verdict.RUN, Verdict.RESULTS_FULL)

    async def _must_stop(self, now: float) -> Stopped | None:
        """A stop when the window has closed, another run took the message over, batch
        inference was turned off, the invocation's time is nearly up, or the chain's model
        is paused (the last three hand the chain on). The runtime overrides are read again
        here when they are due, so a change reaches a running chain before its next request."""
        if self.deps.live.due():
            await io(self.deps.live.refresh)
        if metrics.due():
            metrics.flush()
        if self.deps.reqlog.due(now) or charges.due(now):
            await flush_counts(self.deps, all_of_them=False)
        settings = self.deps.settings
        if self.batch.window_closed(now):
            return Stopped(Why.WINDOW_CLOSED)  # no new request starts
        if self.taken_over.is_set():
            return Stopped(Why.TAKEN_OVER)  # the run that has the message goes on with the chain
        if not settings.batch_enabled:
            # BATCH_ENABLED off: no queued request starts; the chain asks again later.
            return Stopped(
                Why.BATCH_DISABLED, max(settings.runtime_refresh_seconds, settings.batch_slot_wait_seconds)
            )
        if self.deadline - now < settings.batch_upstream_timeout_seconds + self.tuning.segment_margin_seconds:
            return Stopped(Why.SEGMENT_DEADLINE, 0)
        model = self.slot.model
        if model is not None and self.deps.health.paused_until(model) > now:
            return Stopped(Why.MODEL_PAUSED, self.deps.health.paused_until(model) - now)
        return None

    async def _claim(self, target: int, from_heap: bool, now: float) -> Claim:
        if self.prefetch is not None and not from_heap:
            claim, self.prefetch = await self.prefetch.claim(), None
            return claim
        settings = self.deps.settings
        return await io(
            self.deps.requests.claim, self.batch.id, target, self.owner, now, settings.batch_lease_seconds
        )

    def _passed(self, claim: Claim, target: int, from_heap: bool, now: float) -> Stopped | None:
        """A target this worker did not get: None to go on with the chain, or the stop."""
        if claim.kind is ClaimKind.HELD:
            # Another worker holds it: a live duplicate of this chain, or a dead worker
            # whose lease has not yet run out. Come back when the lease ends: then the
            # request has ended (skip on) or can be taken over.
            if from_heap:
                return None  # a retry another worker runs: it is that worker's now
            assert claim.request is not None
            logger.info(  # which run holds it: its invocation's id leads the owner
                "request held by another run",
                extra={"batch_id": self.batch.id, "index": target, "holder": claim.request.lease_owner},
            )
            return Stopped(Why.HELD_ELSEWHERE, (claim.request.lease_until or now) - now + 1)
        if claim.kind is ClaimKind.MISSING:
            logger.warning("no such request", extra={"batch_id": self.batch.id, "index": target})
        if claim.kind is ClaimKind.WAITING:
            assert claim.request is not None and claim.request.next_at is not None
            if self.lone:
                # A retry message that came before its time (waits beyond SQS's 15 minutes):
                # its own message again, when it is due.
                return Stopped(Why.LONE_EARLY, claim.request.next_at - now)
            heapq.heappush(self.retries, (claim.request.next_at, target))
        if self.lone:
            return Stopped(Why.LONE_DONE)  # ended already
        self._advance(from_heap)
        return None

    async def _take_slot(
        self, held: RequestRecord, target: int, from_heap: bool, now: float
    ) -> Stopped | None:
        """Hold a slot of the request's model (None); if full or paused, hand the request
        back and stop, the chain to ask again later."""
        grant = await self.model_gate.hold(held.model)
        if grant.granted:
            return None
        await attempt.release(self.deps, self.batch, held)
        wait = await self.model_gate.refused(held.model, grant, now)
        if from_heap:
            heapq.heappush(self.retries, (now + wait.seconds, target))
        return Stopped.waiting(wait)

    async def _admitted(self, held: RequestRecord, target: int, from_heap: bool) -> Stopped | None:
        """Check the batch's key and owner again (``run.owner``): None to run ``held``. Else
        the batch fails for its owner, or the request goes back and the chain comes back
        when it is due to be checked again (the batch paused, when a quota, a budget or the
        owner's role holds it back)."""
        admission = await self.owner_gate.admit(held)
        standing = admission.standing
        if standing.runs:
            self.body = admission.body
            if self.latest.paused is not None:
                self.latest = await resume_batch(self.deps, self.batch.id) or self.latest.replace(paused=None)
            return None
        if standing.judgement is Judgement.UNAUTHORIZED:
            why = standing.message or "The batch's key or owner may no longer run it."
            if await fail_for_owner(self.deps, self.batch.id, why):
                await attempt.end_unrun(self.deps, self.batch, held, Verdict.OWNER_FAILED)
                return Stopped(Why.OWNER_UNAUTHORIZED)
            # The batch stopped otherwise first (a cancel, its window's end, a delete): the
            # request ends as that stop ends the others.
            await self._read_batch()
            if self.verdict in (None, Verdict.RUN):  # not in progress again: cannot be
                self.verdict = Verdict.OWNER_FAILED
            assert self.verdict is not None
            await attempt.end_unrun(self.deps, self.batch, held, self.verdict)
            return self._stopped_by_verdict()
        now = self.deps.clock()
        await attempt.release(self.deps, self.batch, held)
        after = max(0.0, (standing.check_at or now) - now)
        if standing.judgement is Judgement.PAUSE:
            self.latest = await pause_batch(self.deps, self.batch.id, standing) or self.latest
        if from_heap:
            heapq.heappush(self.retries, (now + after, target))
        return Stopped(Why.OWNER_PAUSED if standing.judgement is Judgement.PAUSE else Why.OWNER_WAIT, after)

    async def _read_batch(self) -> None:
        """Read the batch afresh (strongly consistent): what it allows the next request."""
        batch = await io(self.deps.batches.get_record, self.batch.id)
        if batch is not None:
            self.latest = batch
            self.written = batch.written_count
        self.verdict = verdict(batch, self.deps.clock())
        if batch is not None and self.verdict is Verdict.RUN and _superseded(self.message, batch):
            self.verdict = Verdict.SUPERSEDED

    async def _ended_unrun(self, held: RequestRecord, from_heap: bool) -> bool:
        """Cancelled, deleted, past the window, or out of result storage: the claimed
        request ends without running. True to go on (with results full, the chain ends its
        other requests the same way)."""
        assert self.verdict is not None
        await attempt.end_unrun(self.deps, self.batch, held, self.verdict)
        if self.verdict is not Verdict.RESULTS_FULL or self.lone:
            return False
        self._advance(from_heap)
        return True

    async def _run(self, held: RequestRecord, target: int) -> Stopped | None:
        """Call the upstream, then store what it means, learning in the same write whether
        the batch still runs. None to go on with the chain, or the stop."""
        deps = self.deps
        turn = await self.pacer.turn()  # a few ms after this process's last call started, at most
        started = deps.clock()
        if self.answered_at is not None:
            idle_ms = max(0.0, (started - self.answered_at) * 1000)
            metrics.value("AnswerToNextCall", idle_ms, model=held.model)
        slot_lost = asyncio.Event()
        renewal = asyncio.create_task(
            renewing.keep_leased(self.deps, self.batch.id, held, self.slot, self._claimed_ahead, slot_lost)
        )
        body, self.body = self.body, None
        try:
            outcome = await attempt.call(deps, self.batch, held, body, stop=slot_lost)
        finally:
            renewal.cancel()
        self.pacer.answered(turn)
        self.answered_at = deps.clock()
        if not self.lone:
            read_ahead(deps, held.model, room=self.hand_on.ways(self._here()) >= 2)
        generation = self.message.generation if isinstance(self.message, ChainMessage) else None
        settled = await attempt.settle(
            deps,
            self.batch,
            held,
            outcome,
            started=started,
            guard=RunGuard(generation),
            reserved=self.owner_gate.reserved,
            defer=not self.owner_gate.limited,
        )
        # The batch still runs, as its shard said in the write; else read it before the next.
        self.verdict = Verdict.RUN if settled.runs else None
        if self.lone:
            # A lone request's next try is its own message again, when due.
            if settled.retry_at is None:
                return Stopped(Why.LONE_DONE)
            return Stopped(Why.LONE_RETRY, settled.retry_at - deps.clock())
        if settled.retry_at is not None:
            heapq.heappush(self.retries, (settled.retry_at, target))  # the chain keeps its retries
        if settled.after is After.PAUSE:
            return Stopped(Why.MODEL_PAUSED, deps.health.paused_until(held.model) - deps.clock())
        if settled.after is After.STOP:
            # Another worker holds the request now (a duplicate of this chain, or one that
            # took it over): hand the rest of the chain on rather than leave it to chance.
            return Stopped(Why.LEASE_LOST, 0)
        return None

    def _claim_ahead(self, now: float) -> None:
        """Claim the chain's next index while this request runs, for one lease, renewed with
        the running request's (``renewing.keep_leased``): if this worker dies, it runs out as soon
        as the running request's, and a stopped batch's reconciler ends both then."""
        if self.lone or not self._has_next() or self.next_index >= self.written or self._retry_due(now):
            return
        tuning = self.tuning
        wait = min(self.pacer.recent_length() * tuning.claim_ahead_share, tuning.claim_ahead_wait_max_seconds)
        self.prefetch = ClaimAhead.of(self.deps, self.batch.id, self.next_index, self.owner, wait)

    def _claimed_ahead(self) -> RequestRecord | None:
        """The request claimed ahead, once its claim has answered that this worker has it."""
        return None if self.prefetch is None else self.prefetch.claimed()

    def _worth_waiting(self, due: float) -> bool:
        now = self.deps.clock()
        limit = (
            self.deadline
            - self.deps.settings.batch_upstream_timeout_seconds
            - self.tuning.segment_margin_seconds
        )
        return due - now <= self.tuning.chain_retry_wait_seconds and due < limit

    async def _give_back_prefetched(self) -> None:
        """Release an index claimed ahead that the chain will not run now."""
        if self.prefetch is not None:
            prefetch, self.prefetch = self.prefetch, None
            await prefetch.give_back(self.deps, self.batch)
