"""The flex tier: ``service_tier: "flex"`` on ``/v1/chat/completions``, ``/v1/responses``
and ``/v1/embeddings`` runs the request as batch work, and answers it like the interactive
route, with ``service_tier: "flex"`` in its body.

The request is stored as a batch of one (``background.one_request``, an id ``flex_…``),
so it takes its model's batch share (behind interactive traffic), ahead of every batch's
requests (``domain.contention.yields``: batches' chains let their slots go to a flex request
that waits), and is charged at the batch price once, by the batch ledger. The call waits
for its end, reading its request: while it has not started after ``BATCH_FLEX_WAIT_SECONDS``,
the request is ended unstarted (a conditional write: it wins only if no worker claimed it)
and the call answers 429 ``resource_unavailable`` with a ``Retry-After``, no model having
been called. A request a worker did claim is answered when it ends, or, if that takes past
the HTTP API's limit, 504 (its end is still recorded and charged once).
"""

from __future__ import annotations

import time
from typing import Any

from batchgw.api import batches
from batchgw.api.auth import require_role
from batchgw.api.ids import new_id
from batchgw.deferred.background import one_request
from batchgw.deps import Deps
from batchgw.domain.batch import FLEX_PREFIX, Tally
from batchgw.domain.decisions import not_run_error
from batchgw.domain.errors import BadRequest
from batchgw.domain.principal import Principal
from batchgw.domain.request import RequestEnd, RequestRecord
from batchgw.domain.states import UNSTARTED_REQUEST_STATUSES, RequestStatus
from batchgw.passthrough.answers import Reply, error_reply

ENDPOINTS = ("/v1/chat/completions", "/v1/responses", "/v1/embeddings")
TIER = "flex"
CUSTOM_ID = "flex"
# API Gateway gives the call 30 s: a request claimed but not ended by then is answered 504.
ANSWER_SECONDS = 27.0
# How often the call reads its request while it waits: soon at first, then at most this
# (a caller waits half of it on average past the end; about 20 reads over a 2-s wait).
FIRST_READ_SECONDS, READ_SECONDS = 0.05, 0.1
# What a 429 asks the caller to wait before trying again, in seconds.
RETRY_AFTER_SECONDS = 10
UNAVAILABLE = (
    "No batch capacity freed up for this flex request within {seconds:g} s "
    "(BATCH_FLEX_WAIT_SECONDS); no model was called. Try again later, or send it without "
    "service_tier flex."
)


def wants_flex(endpoint: str, body: dict[str, Any]) -> bool:
    """Whether a request to ``endpoint`` asks for the flex tier."""
    return endpoint in ENDPOINTS and body.get("service_tier") == TIER


def serve(deps: Deps, principal: Principal, endpoint: str, body: dict[str, Any]) -> Reply:
    """Run one flex request (``body``) and answer it (``ApiError`` when it is refused before
    it is stored)."""
    require_role(deps, principal, "run flex requests")
    if body.get("stream") is True:
        raise BadRequest(
            "stream: true is not supported: this gateway answers a request whole.",
            param="stream",
            code="stream_unsupported",
        )
    asked = {k: v for k, v in body.items() if k != "service_tier"}
    opening = one_request(deps, principal, endpoint, CUSTOM_ID, asked)
    started = time.monotonic()
    made = batches.open_batch(deps, principal, batches.Creating(new_id(FLEX_PREFIX, deps.clock())), opening)
    flex_id = str(made["id"])
    give_up_at = started + deps.settings.batch_flex_wait_seconds
    gave_up = False
    pause = FIRST_READ_SECONDS
    while True:
        request = deps.requests.get(flex_id, 0)
        if request is not None and request.status.is_terminal:
            return _answer(deps, endpoint, request)
        now = time.monotonic()
        if (
            not gave_up
            and now >= give_up_at
            and (request is None or request.status in UNSTARTED_REQUEST_STATUSES)
        ):
            gave_up = True
            _give_up(deps, flex_id, request)
            continue
        if now >= started + ANSWER_SECONDS:
            return error_reply(
                endpoint,
                504,
                "The flex request is still running past this API's time limit; it will not be answered.",
                code="flex_timeout",
            )
        time.sleep(pause)
        pause = min(pause * 1.5, READ_SECONDS)


def _give_up(deps: Deps, flex_id: str, request: RequestRecord | None) -> None:
    """End the request unstarted if no worker claimed it (a conditional write), and cancel
    its batch, which wakes its workflow to end it (and ends a request not yet stored)."""
    if request is not None:
        # one that ran and waits for its next try keeps the last error it got
        error = not_run_error("batch_cancelled") if request.attempts == 0 else None
        end = RequestEnd(RequestStatus.CANCELLED, ended_at=deps.clock(), error=error)
        deps.requests.end_unstarted(request, shard=0, end=end, tally=Tally(cancelled=1))
    record = deps.batches.get_record(flex_id)
    if record is not None:
        batches.cancel(deps, record)


def _answer(deps: Deps, endpoint: str, request: RequestRecord) -> Reply:
    """What the caller gets for the request's end."""
    if request.status is RequestStatus.SUCCEEDED:
        body = deps.blobs.load_body(request.response_packed, request.response_ref)
        if isinstance(body, dict):
            body = {**body, "service_tier": TIER}
        headers = {"x-request-id": request.upstream_request_id} if request.upstream_request_id else {}
        return Reply(request.status_code or 200, body, headers)
    error = request.error or {}
    if request.status is not RequestStatus.FAILED and request.attempts == 0:
        seconds = deps.settings.batch_flex_wait_seconds
        return error_reply(
            endpoint,
            429,
            UNAVAILABLE.format(seconds=seconds),
            code="resource_unavailable",
            headers={"Retry-After": str(RETRY_AFTER_SECONDS)},
        )
    status = int(error.get("status") or 502)
    return error_reply(
        endpoint, status, str(error.get("message") or "The flex request failed."), code=error.get("code")
    )
