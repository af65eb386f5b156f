"""The worker: runs chains of a batch's requests against their upstream models.

A chain message names a batch, a chain and where it resumes (see ``batchgw.work``). For
each position the worker

1. claims the item: a conditional write that takes its lease (owner, epoch + 1);
2. holds a slot of the item's model (a self-expiring lease, kept across the chain);
3. calls the upstream with httpx;
4. records the outcome and counts it in the batch's shard, in one transaction that
   holds only while this worker still has the lease at that epoch;
5. moves to the chain's next position.

Between 1 and 3 the worker reads the batch (strongly consistent), so no request starts
once the batch is cancelled, deleted or past its window. The success path costs three AWS
calls per request (claim, read, record) plus a few per chain segment. Whatever dies
where, the lease runs out and the message comes back: the item is taken over by the next
worker, and the lost attempt is counted as one of unknown cost.
"""

from __future__ import annotations

import asyncio
import heapq
import logging
import math
import random
import weakref
from collections.abc import Callable
from decimal import Decimal
from functools import partial
from typing import Any, TypeVar

import httpx

from batchgw import codec, translate, upstream
from batchgw.blobs import body_key
from batchgw.catalog import ModelSpec
from batchgw.deps import Deps
from batchgw.outcomes import End, Retry, next_step
from batchgw.records import (
    CANCELLING,
    IN_PROGRESS,
    ITEM_CANCELLED,
    ITEM_EXPIRED,
    ITEM_FAILED,
    ITEM_SUCCEEDED,
    SHARD_PREFIX,
)
from batchgw.settings import Settings
from batchgw.store import Claim, SlotGrant, SlotStore
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

    async def hold(self, model: str) -> SlotGrant:
        deps = self._deps
        lease = deps.settings.batch_lease_seconds
        now = deps.clock()
        paused_until = deps.health.paused_until(model)
        if paused_until > now:
            await self.release()
            return SlotGrant(False, paused_until=paused_until)
        if self.model == model:
            if self._until - now > lease / 2:
                return SlotGrant(True)
            if await io(deps.slots.renew, model, self.token, now=now, lease_seconds=lease):
                self._until = now + lease
                return SlotGrant(True)
            self.model = None  # our lease lapsed and was purged: take a slot anew
        await self.release()
        spec = deps.catalog.models[model]
        cap = deps.catalog.concurrency(spec, deps.settings.batch_model_concurrency)
        grant = await io(deps.slots.acquire, model, self.token, cap=cap, now=now, lease_seconds=lease)
        if grant.granted:
            self.model, self._until = model, now + lease
        elif grant.paused_until is not None:
            deps.health.note_pause(model, grant.paused_until)
        return grant

    async def release(self) -> None:
        if self.model is not None:
            model, self.model = self.model, None
            await io(self._deps.slots.release, model, self.token)


async def run_message(
    deps: Deps, message: ChainMessage, *, owner: str, deadline: float, receipt: str | None = None
) -> None:
    """Run one chain message until the chain ends, its time is up, or it must stop.

    With the message's ``receipt``, its visibility is kept at one lease and renewed while
    the chain runs: if this worker dies, the message (and so the chain) comes back after
    about one lease, not after the queue's long default visibility.
    """
    # First of all, shorten the message's visibility to one lease: from here on, a worker
    # that dies gives its chain back after about one lease.
    heartbeat = asyncio.create_task(_keep_invisible(deps, receipt)) if receipt else None
    slot = SlotHolder(deps)
    try:
        meta = await io(deps.jobs.get_meta, message.batch_id)
        if meta is None or meta["status"] != IN_PROGRESS:
            return  # deleted, cancelled or ended: unstarted requests are the workflow's to settle
        if deps.settings.max_results_bytes_per_batch is not None:
            shards = await io(deps.jobs.shards, message.batch_id)
            deps.stored.raise_to(message.batch_id, sum(int(s.get("stored_bytes", 0)) for s in shards))
        finished = await _run_chain(deps, meta, message, slot, owner=owner, deadline=deadline)
    finally:
        if heartbeat is not None:
            heartbeat.cancel()
        await slot.release()
    if finished:
        # Normally the last record woke the workflow; this covers a worker that died
        # between recording the last item and waking it (its message came back to us).
        await io(settle_shards, deps, message.batch_id)
        await wake_if_done(deps, message.batch_id)


async def _keep_invisible(deps: Deps, receipt: str) -> None:
    lease = deps.settings.batch_lease_seconds
    while True:
        try:
            await io(deps.queue.hold, receipt, math.ceil(lease))
        except Exception:  # a lost receipt only costs the early comeback: keep running
            logger.warning("could not extend the message's visibility", exc_info=True)
            return
        await asyncio.sleep(lease / 3)


def _resume(message: ChainMessage, idx: int) -> ChainMessage:
    return ChainMessage(message.batch_id, message.chain, idx, message.stride, message.single)


async def _run_chain(
    deps: Deps,
    meta: dict[str, Any],
    message: ChainMessage,
    slot: SlotHolder,
    *,
    owner: str,
    deadline: float,
) -> bool:
    """Run the chain; True when it reached its end (nothing left for it to start).

    While one request is with the upstream, the chain already claims its next position;
    when the answer comes, recording it and re-reading the batch happen at once. So
    between two upstream calls of a chain there is one AWS round trip, not three.

    A position that must be tried again stays the chain's: it waits on the chain's heap
    and runs, with the chain's slot, as soon as it is due. A position the chain finds
    waiting (a chain that died left it) joins the heap too. When the chain stops before
    they are due, each waiting position is handed to a message of its own.
    """
    settings = deps.settings
    batch_id = message.batch_id
    total = int(meta["total"])
    expires_at = meta.get("expires_at")
    idx = message.next_idx
    verdict: str | None = None  # what the batch allows next; read fresh for the first request
    prefetch: asyncio.Task[Claim] | None = None
    retries: list[tuple[float, int]] = []
    finished = False
    try:
        while True:
            now = deps.clock()
            from_heap = prefetch is None and bool(retries) and retries[0][0] <= now
            if not from_heap and idx >= total:
                if retries and not message.single and _worth_waiting(deps, retries[0][0], deadline):
                    await asyncio.sleep(max(0.0, retries[0][0] - now))
                    continue
                finished = not message.single and not retries
                return finished
            if expires_at is not None and now >= float(expires_at):
                return False  # the window has closed: no new request starts
            if deadline - now < settings.batch_upstream_timeout_seconds + SEGMENT_MARGIN_SECONDS:
                if idx < total:
                    await io(deps.queue.send, _resume(message, idx))
                return False
            if slot.model is not None and deps.health.paused_until(slot.model) > now:
                if idx < total:
                    await _requeue(deps, _resume(message, idx), deps.health.paused_until(slot.model) - now)
                return False
            # Only now, past every reason to stop, does the target leave the heap: a stop
            # above hands every waiting position on.
            target = heapq.heappop(retries)[1] if from_heap else idx
            if prefetch is not None and not from_heap:
                claim, prefetch = await prefetch, None
            else:
                claim = await io(deps.items.claim, batch_id, target, owner, now, settings.batch_lease_seconds)
            if claim.kind == "held":
                # Another worker holds this item: a live duplicate of this chain, or a dead
                # worker whose lease has not yet run out. Come back when the lease ends: then
                # the item has ended (skip on) or can be taken over.
                assert claim.item is not None
                if from_heap:
                    continue  # a retry another worker runs: it is that worker's now
                await _requeue(deps, _resume(message, idx), float(claim.item["lease_until"]) - now + 1)
                return False
            if claim.kind == "missing":
                logger.warning("no such item", extra={"batch_id": batch_id, "idx": target})
                return False
            if claim.kind == "waiting":
                assert claim.item is not None
                if message.single:
                    # A retry message that came before its time (waits beyond SQS's 15 minutes).
                    await _requeue(deps, message, float(claim.item["next_at"]) - now)
                    return False
                heapq.heappush(retries, (float(claim.item["next_at"]), target))
            if claim.kind in ("ended", "waiting"):
                if message.single:
                    return False
                if not from_heap:
                    idx += message.stride
                continue
            item = claim.item
            assert item is not None
            epoch = int(item["epoch"])
            grant = await slot.hold(str(item["model"]))
            if not grant.granted:
                # The model is full or paused: hand the item back and ask again later.
                await _release(deps, meta, item, owner=owner, epoch=epoch)
                wait = settings.batch_slot_wait_seconds * (1 + random.random())
                if grant.paused_until is not None:
                    wait = max(wait, grant.paused_until - now)
                if from_heap:
                    heapq.heappush(retries, (now + wait, target))
                if idx < total:
                    await _requeue(deps, _resume(message, idx), wait)
                return False
            if verdict is None:
                verdict = await _verdict(deps, batch_id)
            if verdict != "ok":
                # Cancelled, deleted, past the window, or out of result storage: the claimed
                # request ends without running (and with results full, so do the others).
                await _end_unrun(deps, meta, item, owner=owner, epoch=epoch, verdict=verdict)
                if verdict != "results_full" or message.single:
                    return False
                if not from_heap:
                    idx += message.stride
                continue
            if not from_heap:
                idx += message.stride
            if not message.single and idx < total and not (retries and retries[0][0] <= now):
                lease = settings.batch_lease_seconds + settings.batch_upstream_timeout_seconds
                prefetch = asyncio.create_task(
                    io(deps.items.claim, batch_id, idx, owner, deps.clock(), lease)
                )
            outcome = await _call(deps, meta, item)
            step, verdict = await asyncio.gather(
                _finish(
                    deps,
                    meta,
                    item,
                    outcome,
                    owner=owner,
                    epoch=epoch,
                    retries=None if message.single else retries,
                ),
                _verdict(deps, batch_id),
            )
            if step == "stop" or message.single:
                return False
            if step == "pause":
                await slot.release()
                pause = deps.health.paused_until(str(item["model"])) - deps.clock()
                if idx < total:
                    await _requeue(deps, _resume(message, idx), pause)
                return False
    finally:
        if prefetch is not None:
            await _give_back(deps, meta, prefetch, owner)
        if retries and not finished:
            await _hand_off(deps, batch_id, retries)


# How long a chain that has walked all its positions waits, slot in hand, for its next
# retry to come due before it hands its retries to messages of their own instead.
CHAIN_RETRY_WAIT_SECONDS = 30.0


def _worth_waiting(deps: Deps, due: float, deadline: float) -> bool:
    now = deps.clock()
    limit = deadline - deps.settings.batch_upstream_timeout_seconds - SEGMENT_MARGIN_SECONDS
    return due - now <= CHAIN_RETRY_WAIT_SECONDS and due < limit


async def _hand_off(deps: Deps, batch_id: str, retries: list[tuple[float, int]]) -> None:
    """Give each waiting position a message of its own, delayed until it is due."""
    now = deps.clock()
    for due, position in retries:
        await _requeue(deps, ChainMessage(batch_id, -1, position, 0, single=True), due - now)
    retries.clear()


async def _release(deps: Deps, meta: dict[str, Any], item: dict[str, Any], *, owner: str, epoch: int) -> None:
    """Put a claimed request back in the queue; if the batch no longer runs, end it now
    (cancelled or expired), since the step that settles unstarted requests may be past."""
    batch_id = str(meta["pk"])
    if await io(deps.items.release, batch_id, int(item["idx"]), owner, epoch) == "stopped":
        await _end_unrun(deps, meta, item, owner=owner, epoch=epoch, verdict=await _verdict(deps, batch_id))


async def _give_back(deps: Deps, meta: dict[str, Any], prefetch: asyncio.Task[Claim], owner: str) -> None:
    """Release a position claimed ahead that the chain will not run now."""
    try:
        claim = await prefetch
    except Exception:  # the lease runs out on its own
        logger.warning("claim ahead failed", exc_info=True)
        return
    if claim.kind == "claimed" and claim.item is not None:
        await _release(deps, meta, claim.item, owner=owner, epoch=int(claim.item["epoch"]))


async def _requeue(deps: Deps, message: ChainMessage, delay: float) -> None:
    await io(deps.queue.send, message, max(0, math.ceil(delay)))


async def _verdict(deps: Deps, batch_id: str) -> str:
    """What the batch allows its next request, read now (strongly consistent): ``ok``,
    ``gone`` (deleted), ``cancelled``, ``expired`` or ``results_full``."""
    current = await io(deps.jobs.get_meta, batch_id)
    if current is None:
        return "gone"
    if current["status"] == CANCELLING:
        return "cancelled"
    expires_at = current.get("expires_at")
    if (
        current["status"] != IN_PROGRESS
        or current.get("expiring")
        or (expires_at is not None and deps.clock() >= float(expires_at))
    ):
        return "expired"
    return "results_full" if current.get("results_full") else "ok"


async def _record(
    deps: Deps,
    meta: dict[str, Any],
    item: dict[str, Any],
    fields: dict[str, Any],
    counters: dict[str, Any],
    *,
    owner: str,
    epoch: int,
) -> str:
    """Record an item's end and count it; ``next``, or ``stop`` when the lease was lost."""
    batch_id = str(meta["pk"])
    idx = int(item["idx"])
    shard = idx % int(meta.get("shards", 1))
    recorded = await io(
        deps.items.record_end,
        batch_id,
        idx,
        owner=owner,
        epoch=epoch,
        shard=shard,
        fields={"ended_at": _dec(deps.clock()), **fields},
        counters={"cost_unknown": int(item.get("lost", 0)), **counters},
    )
    if recorded.kind == "lease_lost":
        logger.warning("lease lost before recording", extra={"batch_id": batch_id, "idx": idx})
        return "stop"
    if recorded.kind == "shard_finished":
        await finish_shard(deps, batch_id, shard)
    return "next"


async def _end_unrun(
    deps: Deps, meta: dict[str, Any], item: dict[str, Any], *, owner: str, epoch: int, verdict: str
) -> None:
    if verdict == "gone":
        return  # the batch was deleted: its items are being purged
    if verdict == "cancelled":
        fields, counters = (
            {"status": ITEM_CANCELLED, "error": _batch_error("batch_cancelled")},
            {"cancelled": 1},
        )
    elif verdict == "results_full":
        fields, counters = {"status": ITEM_FAILED, "error": _results_full_error(deps.settings)}, {"failed": 1}
    else:  # past the window (or stopped for a reason read too late to tell: end it all the same)
        fields, counters = {"status": ITEM_EXPIRED, "error": _batch_error("batch_expired")}, {"failed": 1}
    await _record(deps, meta, item, fields, counters, owner=owner, epoch=epoch)


async def _call(deps: Deps, meta: dict[str, Any], item: dict[str, Any]) -> upstream.Outcome:
    spec = deps.catalog.models[str(item["model"])]
    body = (
        codec.unpack(item["req"])
        if "req" in item
        else codec.unpack(await io(deps.blobs.get, str(item["req_ref"])))
    )
    return await call_upstream(deps, spec, str(meta["endpoint"]), body, meta.get("anthropic_version"))


async def _finish(
    deps: Deps,
    meta: dict[str, Any],
    item: dict[str, Any],
    outcome: upstream.Outcome,
    *,
    owner: str,
    epoch: int,
    retries: list[tuple[float, int]] | None = None,
) -> str:
    """Record what became of a request that ran. A retry goes on ``retries`` (the chain's
    heap of positions waiting for their next try) or, without one, into a message.

    Returns ``next`` (go on), ``stop`` (the chain must stop) or ``pause`` (the model is
    paused: the chain resumes after the pause).
    """
    settings = deps.settings
    batch_id = str(meta["pk"])
    idx = int(item["idx"])
    model = str(item["model"])
    spec = deps.catalog.models[model]
    expires_at = meta.get("expires_at")

    async def end(fields: dict[str, Any], counters: dict[str, Any]) -> str:
        return await _record(deps, meta, item, fields, counters, owner=owner, epoch=epoch)

    now = deps.clock()
    attempts = int(item.get("attempts", 1))
    cost = 0  # billionths of a dollar
    if spec.price is not None and outcome.usage_known:
        cost = spec.price.cost_nano(outcome.input_tokens, outcome.output_tokens)

    # A model's health is judged by requests trying for the first time: a request that
    # failed before and fails again says more about itself than about the model.
    if outcome.kind == "retry" and attempts <= 1:
        if deps.health.failure(model, f"{batch_id}/{idx}"):
            until = now + deps.health.pause_seconds
            deps.health.note_pause(model, until)
            await io(deps.slots.pause, model, until)
    elif outcome.kind == "success":
        deps.health.success(model)

    step = next_step(
        outcome,
        attempts=attempts,
        now=now,
        expires_at=None if expires_at is None else float(expires_at),
        settings=settings,
    )
    if isinstance(step, Retry):
        fields: dict[str, Any] = {
            "next_at": _dec(step.next_at),
            "error": step.error,
            "attempt_cost_nano": cost,
        }
        if not step.uses_attempt:
            fields["attempts"] = attempts - 1
        if not await io(deps.items.schedule_retry, batch_id, idx, owner=owner, epoch=epoch, fields=fields):
            return "stop"
        if retries is None:  # a lone retry message: the next try gets a message of its own
            await _requeue(deps, ChainMessage(batch_id, -1, idx, 0, single=True), step.next_at - now)
        else:  # the chain keeps it, and runs it with its own slot when it is due
            heapq.heappush(retries, (step.next_at, idx))
        if step.pause_model_until is not None:
            deps.health.note_pause(model, step.pause_model_until)
            await io(deps.slots.pause, model, step.pause_model_until)
            return "pause"
        return "next"
    if isinstance(step, End):
        return await end(
            {"status": ITEM_FAILED, "error": step.error, "cost_nano": cost},
            {
                **step.counters,
                "in_tok": outcome.input_tokens,
                "out_tok": outcome.output_tokens,
                "cost_nano": cost,
            },
        )

    counters: dict[str, Any] = {
        "in_tok": outcome.input_tokens,
        "out_tok": outcome.output_tokens,
        "cost_nano": cost,
    }
    if outcome.kind == "success" and outcome.body_bytes > settings.max_result_bytes:
        return await end(
            {
                "status": ITEM_FAILED,
                "cost_nano": cost,
                "error": {
                    "code": "result_too_large",
                    "status": None,
                    "message": f"the response ({outcome.body_bytes} bytes) is larger than one request may "
                    f"store ({settings.max_result_bytes} bytes)",
                },
            },
            {**counters, "failed": 1},
        )
    if outcome.kind == "success":
        fields = {
            "status": ITEM_SUCCEEDED,
            "status_code": outcome.status_code,
            "request_id": outcome.request_id,
            "usage": {"input_tokens": outcome.input_tokens, "output_tokens": outcome.output_tokens},
            "cost_nano": cost,
        }
        packed = codec.pack(outcome.body)
        limit = settings.max_results_bytes_per_batch
        if limit is not None and deps.stored.known(batch_id) + len(packed) > limit:
            # The batch's responses have reached their storage limit: this one and every
            # request still to run fail without being stored (or run).
            await io(deps.jobs.update, batch_id, {"results_full": True})
            return await end(
                {"status": ITEM_FAILED, "cost_nano": cost, "error": _results_full_error(settings)},
                {**counters, "failed": 1},
            )
        deps.stored.add(batch_id, len(packed))
        counters["stored_bytes"] = len(packed)
        if len(packed) > INLINE_BODY_LIMIT:
            key = body_key(batch_id, idx, "res")
            await io(deps.blobs.put, key, packed)
            fields["res_ref"] = key
        else:
            fields["res"] = packed
        return await end(fields, {**counters, "completed": 1})
    # A permanent failure: the model rejected it, or it timed out (cost then unknown).
    unknown = 0 if outcome.usage_known else 1
    return await end(
        {"status": ITEM_FAILED, "error": outcome.error, "cost_nano": cost},
        {**counters, "failed": 1, "cost_unknown": int(item.get("lost", 0)) + unknown},
    )


async def call_upstream(
    deps: Deps, spec: ModelSpec, endpoint: str, body: dict[str, Any], anthropic_version: str | None
) -> upstream.Outcome:
    """Run one request as its endpoint would; a Messages request on a route that speaks
    only chat runs as a chat completion, and its answer comes back as a Messages message."""
    timeout = deps.settings.batch_upstream_timeout_seconds
    if not translate.translates(spec, endpoint):
        return await upstream.call(
            http_client(), spec, endpoint, body, timeout=timeout, anthropic_version=anthropic_version
        )
    outcome = await upstream.call(
        http_client(), spec, "/v1/chat/completions", translate.messages_to_chat(body), timeout=timeout
    )
    if outcome.kind != "success":
        return outcome
    try:
        outcome.body = translate.chat_to_message(
            outcome.body, model=str(body["model"]), stop_sequences=body.get("stop_sequences")
        )
    except translate.TranslationError as exc:
        return upstream.Outcome(
            "failed",
            status_code=502,
            input_tokens=outcome.input_tokens,
            output_tokens=outcome.output_tokens,
            error={
                "code": "upstream_error",
                "status": 502,
                "message": f"the answer cannot be given as a Messages message: {exc}",
            },
        )
    outcome.body_bytes = len(codec.dumps(outcome.body))
    return outcome


def _results_full_error(settings: Settings) -> dict[str, Any]:
    return {
        "code": "result_too_large",
        "status": None,
        "message": f"the batch's stored responses reached their limit "
        f"({settings.batch_max_results_mb_per_batch:g} MiB)",
    }


def _batch_error(code: str) -> dict[str, Any]:
    messages = {
        "batch_cancelled": "Not run: the batch was cancelled.",
        "batch_expired": "Not run before the completion window closed.",
        "batch_failed": "Not run: the batch failed.",
    }
    return {"code": code, "message": messages[code], "status": None}


def _dec(value: float) -> Decimal:
    return Decimal(str(round(value, 3)))


async def finish_shard(deps: Deps, batch_id: str, shard: int) -> None:
    """Count a finished shard once; whoever counts the last one wakes the workflow."""
    if await io(deps.jobs.finish_shard, batch_id, shard):
        await wake_if_done(deps, batch_id)


async def wake_if_done(deps: Deps, batch_id: str) -> None:
    meta = await io(deps.jobs.get_meta, batch_id)
    if meta is None or not meta.get("task_token"):
        return
    if int(meta.get("shards_done", 0)) >= int(meta.get("shards", 1)):
        token = str(meta["task_token"])
        await io(deps.workflow.wake, token, {"next": "finalize", "wait_seconds": 0})
        await io(deps.jobs.clear_token, batch_id, token)


def settle_shards(deps: Deps, batch_id: str) -> None:
    """Count every emptied shard (idempotent: each is counted once, whoever gets there)."""
    for shard in deps.jobs.shards(batch_id):
        if int(shard.get("left", 0)) == 0 and not shard.get("done"):
            deps.jobs.finish_shard(batch_id, int(str(shard["sk"]).removeprefix(SHARD_PREFIX)))
