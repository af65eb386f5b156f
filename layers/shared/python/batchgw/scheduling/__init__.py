"""Scheduling: may this chain start a request on model M now, and if not, why and for how long?

- ``tuning``: ``Tuning``, every timing and policy constant, each with one line of why;
- ``admission``: the answer, ``Start`` or ``Wait(reason, seconds)``: the model full, yield to
  interactive traffic, give way to another batch, paused, and the in-place wait's rounds;
- ``share``: each model's batch share (``BatchShares``): its cap beside the interactive
  reports and the adaptive limits;
- ``room``: this process's one ledger of each model's slots (``SlotLedger``): the room no
  chain holds and the split it allows, and which batches hold and wait for the slots;
- ``backpressure``: what batch answers say of a model's upstream, its adaptive limit moved;
- ``pacing``: the call starts of one process, spaced apart (``CallPacer``);
- ``forecast``: when a batch would end, from a model's slots, pace and queue as the store
  has them (the promise at create and the capacity answer).

The rules themselves are pure and stay in ``domain`` (``interactive``, ``adaptive``,
``fairness``, ``chains``); this package holds the per-process state and timing around them.

May import: ``storage``, ``config``, ``domain``. No HTTP client, no Powertools (it logs to
the process's ``batchgw`` logger through the standard library), nothing from ``upstream``.
"""

from __future__ import annotations

import logging

# The process's logger (``batchgw.observability`` configures it), reached without Powertools.
logger = logging.getLogger("batchgw")
