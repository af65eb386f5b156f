"""``upstream.client.http_client``: one client per event loop, let go once its loop has closed.

A client that has talked to a server holds a pooled connection, whose transport references
the loop it was opened on: the cache's entry would keep its own weak key alive. These tests
open such a connection (a loopback server in the same loop) so that the reference is real.
"""

from __future__ import annotations

import asyncio
import gc
import time
import weakref
from typing import Any

import httpx
from batchgw.upstream import client as upstream_client
from batchgw.upstream.client import http_client

GC_DEADLINE_SECONDS = 10.0  # how long a collection may take to free what a closed loop held


async def _answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """A keep-alive HTTP/1.1 server: ``ok`` to every request, until the client hangs up."""
    try:
        while await reader.readuntil(b"\r\n\r\n"):
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
        writer.close()  # the client hung up, or its loop is ending: nothing to report


async def _talk_once() -> tuple[weakref.ref[httpx.AsyncClient], weakref.ref[asyncio.AbstractEventLoop]]:
    """Use this loop's client once (its connection stays pooled); weak references to both."""
    server = await asyncio.start_server(_answer, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    client = http_client()
    answer = await client.get(f"http://127.0.0.1:{port}/")
    assert answer.text == "ok"
    assert http_client() is client  # the same loop: the same client
    server.close()
    return weakref.ref(client), weakref.ref(asyncio.get_running_loop())


def _freed_within(deadline_seconds: float, *refs: weakref.ref[Any]) -> bool:
    """Collect until every referent is gone, or the deadline passes."""
    deadline = time.monotonic() + deadline_seconds
    while time.monotonic() < deadline:
        gc.collect()
        if all(ref() is None for ref in refs):
            return True
        time.sleep(0.01)  # another thread may still hold a frame; try again
    return False


def test_a_closed_loops_client_is_freed_once_another_loop_asks() -> None:
    client_ref, loop_ref = asyncio.run(_talk_once())
    assert loop_ref() is not None and loop_ref().is_closed()  # type: ignore[union-attr]

    async def other_loops_client() -> httpx.AsyncClient:
        return http_client()

    other = asyncio.run(other_loops_client())
    assert other is not client_ref()  # never shared across loops
    assert _freed_within(GC_DEADLINE_SECONDS, client_ref, loop_ref)


def test_loops_made_one_per_call_leave_one_client_behind_at_most() -> None:
    refs = [asyncio.run(_talk_once()) for _ in range(5)]
    earlier = [ref for pair in refs[:-1] for ref in pair]
    assert _freed_within(GC_DEADLINE_SECONDS, *earlier)  # each went as the next loop asked for its client
    # Of this test's loops only the last may still be there (other tests' threads may hold
    # live loops of their own in this process: theirs are not counted).
    last = refs[-1][1]()
    closed = [loop for loop in list(upstream_client._http_clients) if loop.is_closed() and loop is not last]
    assert closed == []


def test_a_reused_loop_keeps_its_client_across_invocations() -> None:
    """Lambda's path: one loop, run once per invocation, never closed between them."""
    loop = asyncio.new_event_loop()
    try:

        async def current() -> httpx.AsyncClient:
            return http_client()

        first = loop.run_until_complete(current())
        assert loop.run_until_complete(current()) is first
        asyncio.run(current())  # another loop's arrival lets go of closed loops only
        assert loop.run_until_complete(current()) is first
    finally:
        loop.run_until_complete(first.aclose())
        loop.close()
