"""Blocking AWS calls, run off the worker's event loop, in two lanes of threads.

- ``io``: the work (claims, ends, reads), in a pool sized for every chain of an invocation
  to have a call and a claim ahead in flight;
- ``renewal``: what keeps a running chain's hold on things alive (the message's visibility,
  the run's mark, a request's lease, the model's slot), in a pool of its own.

Renewals must not wait behind work: a renewal that queues past its lease lets the message
come back (another worker starts the chain again), the slot go, the request be taken over,
and every one of those adds work, so a loaded worker falls further behind. asyncio's
default pool (``min(32, cpus + 4)`` threads, 6 on Lambda's 2 vCPUs) is shared by both and
smaller than an invocation's ten chains need.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any, TypeVar

T = TypeVar("T")

# Threads of each lane, shared by every invocation in the process (one on Lambda; the local
# poller runs several in threads of one process). They wait on the network, not the CPU.
WORK_THREADS = 64
RENEWAL_THREADS = 16

_work = ThreadPoolExecutor(WORK_THREADS, thread_name_prefix="batchgw-io")
_renewals = ThreadPoolExecutor(RENEWAL_THREADS, thread_name_prefix="batchgw-renewal")


async def _in(pool: ThreadPoolExecutor, fn: Callable[..., T], args: Any, kwargs: Any) -> T:
    # As ``asyncio.to_thread`` does, the call sees the caller's context (logger keys...).
    context = contextvars.copy_context()
    return await asyncio.get_running_loop().run_in_executor(pool, partial(context.run, fn, *args, **kwargs))


async def io(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Run a blocking call (boto3) in a work thread, so the loop keeps serving other chains."""
    return await _in(_work, fn, args, kwargs)


async def renewal(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Run a blocking call that keeps a lease, a slot or a message alive: in a lane of its
    own, so it never queues behind the work."""
    return await _in(_renewals, fn, args, kwargs)
