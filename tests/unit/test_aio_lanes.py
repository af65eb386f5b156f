"""The worker's blocking calls run in two lanes: renewals never wait behind work."""

from __future__ import annotations

import asyncio
import threading

from batchgw.run import aio


def test_a_renewal_runs_while_every_work_thread_is_busy() -> None:
    async def scenario() -> str:
        release = threading.Event()
        # Every work thread blocked (as on a slow store), and more work queued behind them.
        work = [asyncio.ensure_future(aio.io(release.wait, 30)) for _ in range(aio.WORK_THREADS + 8)]
        try:
            return await asyncio.wait_for(aio.renewal(lambda: "renewed"), timeout=10)
        finally:
            release.set()
            await asyncio.gather(*work)

    assert asyncio.run(scenario()) == "renewed"


def test_both_lanes_carry_the_callers_context() -> None:
    import contextvars

    who: contextvars.ContextVar[str] = contextvars.ContextVar("who", default="nobody")

    async def scenario() -> tuple[str, str]:
        who.set("chain-7")
        return await aio.io(who.get), await aio.renewal(who.get)

    assert asyncio.run(scenario()) == ("chain-7", "chain-7")
