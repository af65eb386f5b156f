"""The worker: runs chains of a batch's requests against their upstream models.

A chain message names a batch, a chain and where it resumes (see ``batchgw.work``). For
each position the worker

1. claims the item: a conditional write that takes its lease (owner, epoch + 1);
2. holds a slot of the item's model (a self-expiring lease, kept across the chain);
3. calls the upstream with httpx;
4. records the outcome and counts it in the batch's shard, in one transaction that
   holds only while this worker still has the lease at that epoch;
5. moves to the chain's next position.

The success path costs two AWS calls per request (claim, record) plus a few per chain
segment. Whatever dies where, the lease runs out and the message comes back: the item is
taken over by the next worker, and the lost attempt is counted as one of unknown cost.
"""

from __future__ import annotations

import asyncio
import logging
import random
import weakref
from collections.abc import Callable
from decimal import Decimal
from functools import partial
from typing import Any, TypeVar

import httpx

from batchgw import codec, upstream
from batchgw.blobs import body_key
from batchgw.deps import Deps
from batchgw.records import (
    IN_PROGRESS,
    ITEM_FAILED,
    ITEM_SUCCEEDED,
)
from batchgw.store import SlotStore
from batchgw.work import ChainMessage

logger = logging.getLogger("batchgw.worker")

T = TypeVar("T")

# Bodies above this many packed bytes go to S3 instead of the DynamoDB item (400 KB cap).
INLINE_BODY_LIMIT = 300 * 1024
# Time kept in hand at the end of an invocation to send the chain's continuation.
SEGMENT_MARGIN_SECONDS = 5.0


async def io(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Run a blocking AWS call off the event loop."""
    return await asyncio.to_thread(partial(fn, *args, **kwargs))


_http_clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, httpx.AsyncClient] = (
    weakref.WeakKeyDictionary()
)


def http_client() -> httpx.AsyncClient:
    """One pooled client per event loop (Lambda reuses its loop across invocations)."""
    loop = asyncio.get_running_loop()
    client = _http_clients.get(loop)
    if client is None:
        client = httpx.AsyncClient(limits=httpx.Limits(max_connections=512, max_keepalive_connections=256))
        _http_clients[loop] = client
    return client


class SlotHolder:
    """The model slot a chain holds while it runs, renewed before it can lapse."""

    def __init__(self, deps: Deps) -> None:
        self._deps = deps
        self.model: str | None = None
        self.token = SlotStore.new_token()
        self._until = 0.0

    async def hold(self, model: str) -> bool:
        deps = self._deps
        lease = deps.settings.batch_lease_seconds
        now = deps.clock()
        if self.model == model:
            if self._until - now > lease / 2:
                return True
            if await io(deps.slots.renew, model, self.token, now=now, lease_seconds=lease):
                self._until = now + lease
                return True
            self.model = None  # our lease lapsed and was purged: take a slot anew
        await self.release()
        spec = deps.catalog.models[model]
        cap = deps.catalog.concurrency(spec, deps.settings.batch_model_concurrency)
        if await io(deps.slots.acquire, model, self.token, cap=cap, now=now, lease_seconds=lease):
            self.model, self._until = model, now + lease
            return True
        return False

    async def release(self) -> None:
        if self.model is not None:
            model, self.model = self.model, None
            await io(self._deps.slots.release, model, self.token)


async def run_message(deps: Deps, message: ChainMessage, *, owner: str, deadline: float) -> None:
    """Run one chain message until the chain ends, its time is up, or it must stop."""
    meta = await io(deps.jobs.get_meta, message.batch_id)
    if meta is None or meta["status"] != IN_PROGRESS:
        return  # deleted, cancelled or ended: unstarted requests are the workflow's to settle
    slot = SlotHolder(deps)
    try:
        await _run_chain(deps, meta, message, slot, owner=owner, deadline=deadline)
    finally:
        await slot.release()


async def _run_chain(
    deps: Deps,
    meta: dict[str, Any],
    message: ChainMessage,
    slot: SlotHolder,
    *,
    owner: str,
    deadline: float,
) -> None:
    settings = deps.settings
    batch_id = message.batch_id
    total = int(meta["total"])
    expires_at = meta.get("expires_at")
    idx = message.next_idx
    while idx < total:
        now = deps.clock()
        if expires_at is not None and now >= float(expires_at):
            return  # the window has closed: no new request starts
        if deadline - now < settings.batch_upstream_timeout_seconds + SEGMENT_MARGIN_SECONDS:
            await io(
                deps.queue.send, ChainMessage(batch_id, message.chain, idx, message.stride, message.single)
            )
            return
        claim = await io(deps.items.claim, batch_id, idx, owner, now, settings.batch_lease_seconds)
        if claim.kind == "held":
            logger.info("chain already running elsewhere", extra={"batch_id": batch_id, "idx": idx})
            return
        if claim.kind == "missing":
            logger.warning("no such item", extra={"batch_id": batch_id, "idx": idx})
            return
        if claim.kind in ("ended", "waiting"):
            if message.single:
                return
            idx += message.stride
            continue
        item = claim.item
        assert item is not None
        epoch = int(item["epoch"])
        if not await slot.hold(str(item["model"])):
            # The model is full: hand the item back and ask again a little later.
            await io(deps.items.release, batch_id, idx, owner, epoch)
            delay = settings.batch_slot_wait_seconds * (1 + random.random())
            await io(
                deps.queue.send,
                ChainMessage(batch_id, message.chain, idx, message.stride, message.single),
                round(delay),
            )
            return
        keep_going = await _run_item(deps, meta, item, owner=owner, epoch=epoch)
        if not keep_going or message.single:
            return
        idx += message.stride


async def _run_item(
    deps: Deps, meta: dict[str, Any], item: dict[str, Any], *, owner: str, epoch: int
) -> bool:
    """Run one claimed item and record its outcome. False when the chain must stop."""
    settings = deps.settings
    batch_id = str(meta["pk"])
    idx = int(item["idx"])
    spec = deps.catalog.models[str(item["model"])]
    body = (
        codec.unpack(item["req"])
        if "req" in item
        else codec.unpack(await io(deps.blobs.get, str(item["req_ref"])))
    )
    endpoint = str(meta["endpoint"])
    outcome = await upstream.call(
        http_client(),
        spec,
        endpoint,
        body,
        timeout=settings.batch_upstream_timeout_seconds,
        anthropic_version=meta.get("anthropic_version"),
    )
    now = deps.clock()
    lost = int(item.get("lost", 0))
    counters: dict[str, Any] = {"cost_unknown": lost}
    fields: dict[str, Any] = {"ended_at": Decimal(str(round(now, 3))), "attempt_status": outcome.status_code}
    cost = Decimal(0)
    if outcome.kind == "success" and spec.price is not None:
        cost = spec.price.cost(outcome.input_tokens, outcome.output_tokens)
    if outcome.kind == "success" and outcome.body_bytes > settings.max_result_bytes:
        outcome = upstream.Outcome(
            "failed",
            status_code=outcome.status_code,
            input_tokens=outcome.input_tokens,
            output_tokens=outcome.output_tokens,
            error={
                "code": "result_too_large",
                "status": None,
                "message": f"the response ({outcome.body_bytes} bytes) is larger than one request may "
                f"store ({settings.max_result_bytes} bytes)",
            },
        )
    if outcome.kind in ("retry", "queued"):
        # Retries and model_queued waits are scheduled in issue 3's rules; until then a
        # request that may pass is failed with the error it got, so nothing waits forever.
        outcome = upstream.Outcome(
            "failed", status_code=outcome.status_code, error=outcome.error, usage_known=True
        )
    if outcome.kind == "success":
        packed = codec.pack(outcome.body)
        if len(packed) > INLINE_BODY_LIMIT:
            key = body_key(batch_id, idx, "res")
            await io(deps.blobs.put, key, packed)
            fields["res_ref"] = key
        else:
            fields["res"] = packed
        fields.update(
            status=ITEM_SUCCEEDED,
            status_code=outcome.status_code,
            request_id=outcome.request_id,
            usage={"input_tokens": outcome.input_tokens, "output_tokens": outcome.output_tokens},
            cost=cost,
        )
        counters.update(completed=1)
    else:
        fields.update(status=ITEM_FAILED, error=outcome.error, cost=cost)
        counters.update(failed=1)
        if not outcome.usage_known:
            counters["cost_unknown"] = lost + 1
    counters.update(in_tok=outcome.input_tokens, out_tok=outcome.output_tokens, cost=cost)
    shards = int(meta.get("shards", 1))
    recorded = await io(
        deps.items.record_end,
        batch_id,
        idx,
        owner=owner,
        epoch=epoch,
        shard=idx % shards,
        fields=fields,
        counters=counters,
    )
    if recorded.kind == "lease_lost":
        logger.warning("lease lost before recording", extra={"batch_id": batch_id, "idx": idx})
        return False
    if recorded.kind == "shard_finished":
        await shard_finished(deps, batch_id)
    return True


async def shard_finished(deps: Deps, batch_id: str) -> None:
    """Count a finished shard; the one that finishes the last shard wakes the workflow."""
    meta = await io(deps.jobs.mark_shard_done, batch_id)
    if int(meta.get("shards_done", 0)) >= int(meta.get("shards", 1)) and meta.get("task_token"):
        await io(deps.workflow.wake, str(meta["task_token"]), {"next": "finalize", "wait_seconds": 0})
