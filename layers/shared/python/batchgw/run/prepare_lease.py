"""The lease a prepare invocation holds while it writes a batch's requests.

A request's own writes are conditional on its lease (``storage.requests``), but prepare
stores requests with BatchWriteItem, which takes no condition. Two prepares of one batch can
run at once: the workflow calls the step again when it lost track of an invocation (a
Lambda service error) that may still be running. Had both written, the one behind could
store a request as queued again after a chain had claimed or even ended it: run twice,
counted twice.

So only the holder of the batch's prepare lease writes. An invocation takes the lease when
no other holds it, or once the other's has run out, and renews it each time half of it has
passed. Every try of every AWS call it makes while it writes is checked first
(``storage.aws.fenced``): none is sent with less than half of the lease left. So every
write of one holder lands long before the next can take the lease: a try spends far less
than half a lease on the wire, and clocks differ by far less. A prepare that finds the lease
held raises ``PrepareBusy`` and the workflow calls it again later (its Retry). One that
fails gives the lease up; one that dies leaves it to run out.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager

from batchgw.deps import Deps
from batchgw.domain.batch import BatchRecord
from batchgw.domain.errors import StorageError
from batchgw.observability import logger
from batchgw.storage.aws import fenced


class PrepareBusy(Exception):
    """Another prepare invocation holds the batch's lease: the workflow calls the step again."""


class PrepareLost(Exception):
    """The lease went to another invocation (this one's ran out): this one writes no more."""


class PrepareLease:
    """One invocation's hold on a batch's request writes."""

    def __init__(self, deps: Deps, batch: BatchRecord, owner: str, until: float) -> None:
        self._deps = deps
        self.batch = batch  # the record as the lease was taken
        self.owner = owner
        self.until = until

    @classmethod
    def take(cls, deps: Deps, batch_id: str) -> PrepareLease | None:
        """The lease, taken for a new holder; None if the batch is gone. Raises
        ``PrepareBusy`` while another invocation holds it."""
        owner = uuid.uuid4().hex
        now = deps.clock()
        until = now + deps.settings.batch_prepare_lease_seconds
        record = deps.batches.take_prepare(batch_id, owner, now=now, until=until)
        if record is not None:
            return cls(deps, record, owner, until)
        current = deps.batches.get_record(batch_id)
        if current is None:
            return None
        raise PrepareBusy(f"another prepare of {batch_id} writes its requests until {current.prep_until}")

    @contextmanager
    def writing(self) -> Iterator[None]:
        """Fence every AWS call of the block by the lease; give the lease up after it, or
        when it fails (an invocation that dies leaves it to run out)."""
        try:
            with fenced(self.check):
                yield
        except Exception:
            self.release()
            raise
        self.release()

    def check(self) -> None:
        """Before each try of a call: renew the lease once half of it has passed; raise
        ``PrepareLost`` if that was refused."""
        seconds = self._deps.settings.batch_prepare_lease_seconds
        now = self._deps.clock()
        if now < self.until - seconds / 2:
            return
        until = now + seconds
        with fenced(None):
            renewed = self._deps.batches.renew_prepare(self.batch.id, self.owner, until=until)
        if not renewed:
            raise PrepareLost(f"prepare of {self.batch.id} lost its lease: another took it, or it failed")
        self.until = until

    def release(self) -> None:
        """Give the lease up; if that fails, it runs out on its own (a retry waits that long)."""
        try:
            with fenced(None):
                self._deps.batches.release_prepare(self.batch.id, self.owner)
        except StorageError:
            logger.warning("prepare lease not given up", extra={"batch_id": self.batch.id}, exc_info=True)
