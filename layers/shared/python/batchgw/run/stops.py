"""Why a chain's run stops (``Why``), and the stop a step decides (``Stopped``), acted on by the
run's one exit (``run.chain.ChainRun``)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from batchgw.domain.decisions import Verdict
from batchgw.scheduling.admission import StopReason, Wait


class Why(StrEnum):
    """Why a run of a chain (or of a lone request) stopped."""

    FINISHED = "chain finished"  # walked all its indexes, no retry left: nothing left to start
    RETRIES_LATER = "retries not due soon"  # walked all its indexes; its retries get messages
    WINDOW_CLOSED = "window closed"  # the workflow ends the unstarted requests
    TAKEN_OVER = "taken over"  # another run received this message: it has the chain
    BATCH_DISABLED = "batch disabled"  # BATCH_ENABLED off: the chain asks again later
    SEGMENT_DEADLINE = "segment deadline"  # this invocation's time is nearly up
    MODEL_PAUSED = "model paused"  # the chain resumes after the model's pause
    MODEL_FULL = "model full"  # no slot: the chain asks again later
    YIELDED = "yielded"  # interactive traffic, or the upstream's backpressure, takes its free slots
    GAVE_WAY = "gave way"  # another batch waits for a slot of the model (``domain.fairness``)
    HELD_ELSEWHERE = "held by another worker"  # come back when its lease ends
    LEASE_LOST = "lease lost"  # another worker took the request over while it ran
    SUPERSEDED = "superseded"  # a newer generation of chains runs the batch
    # The batch, as read, no longer allows a request to start (``Verdict``):
    CANCELLED = "cancelled"
    EXPIRED = "expired or ended"  # its window closed, or it is no longer in progress
    FAILING = "failing"  # its key or owner may no longer run it
    DELETED = "deleted"
    RESULTS_FULL = "results full"  # a lone request ended unrun (a chain ends the rest so)
    OWNER_UNAUTHORIZED = "owner unauthorized"  # this run found it: the batch now fails
    OWNER_PAUSED = "owner paused"  # a quota, budget or the role holds the batch back
    OWNER_WAIT = "owner wait"  # the owner's reservations stand in the way for a moment
    LONE_DONE = "lone request done"  # the lone request ended (or had ended already)
    LONE_RETRY = "lone request to retry"  # its next try is its own message, when due
    LONE_EARLY = "lone request early"  # a retry's message came before its time
    ERROR = "error"  # an exception ended the run: its message comes back


# The reason a chain stops when the batch allows its next request no longer.
WHY_OF_VERDICT = {
    Verdict.GONE: Why.DELETED,
    Verdict.CANCELLED: Why.CANCELLED,
    Verdict.EXPIRED: Why.EXPIRED,
    Verdict.RESULTS_FULL: Why.RESULTS_FULL,
    Verdict.OWNER_FAILED: Why.FAILING,
    Verdict.SUPERSEDED: Why.SUPERSEDED,
}


@dataclass(frozen=True, slots=True)
class Stopped:
    """A run's stop, as its step decided it: ``why``, and ``resume_after`` seconds until the
    chain's continuation is due (None: nothing to hand on). The continuation resumes the
    chain at its next index (for a lone request: the request's own message again). The
    run's one exit (``ChainRun._stop``) sends it and hands on the requests waiting on the
    chain's heap: a step only decides."""

    why: Why
    resume_after: float | None = None

    @property
    def finished(self) -> bool:
        """Whether the chain reached its end: nothing left for it to start."""
        return self.why is Why.FINISHED

    @classmethod
    def waiting(cls, wait: Wait) -> Stopped:
        """The stop of a chain that may not start a request on its model now (``scheduling``)."""
        return cls(WHY_OF_REASON[wait.reason], wait.seconds)


# The reason a chain stops when it may not start a request on its model now.
WHY_OF_REASON = {
    StopReason.MODEL_PAUSED: Why.MODEL_PAUSED,
    StopReason.MODEL_FULL: Why.MODEL_FULL,
    StopReason.YIELD: Why.YIELDED,
    StopReason.GIVE_WAY: Why.GAVE_WAY,
    StopReason.OWNER_PAUSED: Why.OWNER_PAUSED,
}
