"""Background Responses: ``POST /v1/responses`` with ``"background": true``, then
``GET /v1/responses/{id}``, ``POST /v1/responses/{id}/cancel`` and ``DELETE
/v1/responses/{id}``, as the OpenAI SDK sends them.

A background response is a batch of one request (``domain.batch.RESPONSE_PREFIX``): the
create stores it as ``api.batches`` stores an inline batch, so it runs on the batch
scheduler (its model's batch share, yielding to interactive traffic), retries by the batch
rules, is charged at the batch price once, counts against its owner's limits, quotas and
budgets, and ends within its own window (``BATCH_BACKGROUND_WINDOW_SECONDS``). It is not a
batch to the batch routes (they answer 404 for its id) nor in a list of batches. What it
shows is ``domain.background``'s.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from batchgw.api import batches, idempotency
from batchgw.api.auth import require_role
from batchgw.api.ids import cursor_key, new_id
from batchgw.api.params import Params, int_param, last, list_page
from batchgw.config.settings import Settings
from batchgw.deps import Deps
from batchgw.domain import background
from batchgw.domain.batch import RESPONSE_PREFIX, BatchRecord, is_response
from batchgw.domain.errors import BadRequest, Conflict, NotFound, PayloadTooLarge
from batchgw.domain.modes import Mode
from batchgw.domain.principal import Principal
from batchgw.domain.request import RequestRecord
from batchgw.validation import RequestInvalid
from batchgw.validation.create import plan_request
from batchgw.validation.jsonbody import parse_json
from batchgw.validation.priority import FIELDS as SCHEDULING_FIELDS
from batchgw.validation.priority import scheduling_of

ENDPOINT = "/v1/responses"
CUSTOM_ID = "response"  # the custom_id of the one request
ROUTE = "responses"  # the Idempotency-Key space of background creates


def json_object(raw: bytes) -> dict[str, Any] | None:
    """The body as a JSON object, once for whichever deferred route reads it; None when it is
    not one (the interactive path answers it)."""
    try:
        body = parse_json(raw)
    except BadRequest:
        return None
    return body if isinstance(body, dict) else None


def wants_background(body: dict[str, Any]) -> bool:
    """Whether a ``POST /v1/responses`` body asks to run in the background."""
    return body.get("background") is True


def create(
    deps: Deps, principal: Principal, raw: bytes, body: dict[str, Any], *, idempotency_key: str | None = None
) -> dict[str, Any]:
    """Store a background response (``body``, the JSON object ``raw`` is) and start it: the
    response object, ``queued``."""
    require_role(deps, principal, "create background responses")
    settings: Settings = deps.settings
    if len(raw) > settings.max_body_bytes:
        raise PayloadTooLarge(
            f"The request body ({len(raw)} bytes) is larger than the limit of "
            f"{settings.max_body_bytes} bytes (BATCH_MAX_BODY_MB)."
        )
    if body.get("stream") is True:
        raise BadRequest(
            "stream must not be true with background: this API's HTTP transport does not stream; "
            "create the response in the background and retrieve it.",
            param="stream",
            code="unsupported_parameter",
        )
    if body.get("store") is False:
        raise BadRequest(
            "A background response is stored: store must be true or left out.",
            param="store",
            code="unsupported_parameter",
        )
    scheduling = scheduling_of(body, admin=principal.is_admin)
    asked = {k: v for k, v in body.items() if k not in ("background", "store", "stream", *SCHEDULING_FIELDS)}
    opening = replace(one_request(deps, principal, ENDPOINT, CUSTOM_ID, asked), scheduling=scheduling)
    created = batches.create_once(
        deps,
        principal,
        idempotency.fingerprint(raw, None),
        idempotency_key,
        lambda creating: batches.open_batch(deps, principal, creating, opening),
        route=ROUTE,
        new_id=lambda: new_id(RESPONSE_PREFIX, deps.clock()),
    )
    record = _own(deps, principal, str(created["id"]))
    return _shown(deps, record, deps.requests.get(record.id, 0), asked)


def one_request(
    deps: Deps, principal: Principal, endpoint: str, custom_id: str, body: dict[str, Any]
) -> batches.Opening:
    """The batch of one request a deferred request is stored as: ``body`` checked as a
    batch's request to ``endpoint`` is (a 400 naming the field, relative to the body), run
    by the gateway within ``BATCH_BACKGROUND_WINDOW_SECONDS``."""
    try:
        planned = plan_request(
            {"custom_id": custom_id, "url": endpoint, "body": body},
            endpoint=endpoint,
            catalog=deps.catalog,
            role=principal.role,
        )
    except RequestInvalid as exc:
        param = exc.param.removeprefix("body.") if exc.param and exc.param != "body" else None
        raise BadRequest(exc.message, param=param, code=exc.code) from exc
    return batches.Opening(
        endpoint=endpoint,
        window=None,
        window_seconds=deps.settings.batch_background_window_seconds,
        metadata=None,
        input=batches.InlineInput(((custom_id, planned.model, planned.body),)),
        mode=Mode.GATEWAY,
    )


def list_responses(deps: Deps, principal: Principal, params: Params) -> dict[str, Any]:
    """GET /v1/responses (this gateway's own: the Responses API lists none): the caller's
    background responses, newest first, ``limit`` 1-100 (20) a page, ``after`` the last id
    of the page before. Each is shown as its retrieve shows it, but for its ``output``
    (retrieve it for that)."""
    limit = int_param(params, "limit", default=20, low=1, high=100)
    after = last(params, "after")
    before_key = None if not after else cursor_key(RESPONSE_PREFIX, after)
    if after and before_key is None:
        raise BadRequest("'after' must be a response id from this list.", param="after")
    page = deps.batches.owner_page(principal.user_id, limit=limit, before_key=before_key, responses=True)
    data = []
    for record in page.records:
        shown = _shown(deps, record, deps.requests.get(record.id, 0))
        data.append({k: v for k, v in shown.items() if k != "output"})
    return list_page(data, has_more=page.more)


def retrieve(deps: Deps, principal: Principal, response_id: str) -> dict[str, Any]:
    """GET /v1/responses/{id}: the response as it stands."""
    record = _own(deps, principal, response_id)
    request = deps.requests.get(record.id, 0)
    return _shown(deps, record, request)


def cancel(deps: Deps, principal: Principal, response_id: str) -> dict[str, Any]:
    """POST /v1/responses/{id}/cancel: a response not yet ended is cancelled (a call still
    running finishes; its answer is not shown, and it is charged once); one that ended is
    answered as it is, as a second cancel is."""
    record = _own(deps, principal, response_id)
    request = deps.requests.get(record.id, 0)
    if not background.is_settled(background.status_of(record, request)):
        batches.cancel(deps, record)
        record = _own(deps, principal, response_id)
    return _shown(deps, record, request)


def delete(deps: Deps, principal: Principal, response_id: str) -> dict[str, Any]:
    """DELETE /v1/responses/{id}: an ended response goes with its request and answer (409
    while it is queued or running: cancel it first)."""
    record = _own(deps, principal, response_id)
    status = background.status_of(record, deps.requests.get(record.id, 0))
    if not background.is_settled(status):
        raise Conflict(
            f"Response '{response_id}' is {status.replace('_', ' ')}; cancel it and wait for it to end.",
            code="response_not_finished",
        )
    if deps.batches.runs_live(record.id, deps.clock()):
        raise Finishing(
            f"Response '{response_id}' is {status}, and its worker is still letting go of it; "
            "try again in a moment.",
            code="response_not_finished",
        )
    batches.remove(deps, record)
    return {"id": record.id, "object": "response.deleted", "deleted": True}


class Finishing(Conflict):
    """A 409 the SDK tries again after a second (it retries a 409): the worker that ended the
    response's request has not yet let go of it."""

    def headers(self) -> dict[str, str]:
        return {"Retry-After": "1"}


def _own(deps: Deps, principal: Principal, response_id: str) -> BatchRecord:
    """The caller's background response; 404 for any other id (another user's too)."""
    record = deps.batches.get_record(response_id) if is_response(response_id) else None
    if record is None or record.owner != principal.user_id:
        raise NotFound(f"Response with id '{response_id}' not found.", code="response_not_found")
    return record


def _shown(
    deps: Deps, record: BatchRecord, request: RequestRecord | None, asked: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The response object of ``record``: what its request ``asked`` (as its stored request
    says, once the workflow stored it), and its answer once it completed."""
    asked = asked or {"model": record.models[0] if record.models else None}
    answer = None
    if request is not None:
        stored = deps.blobs.load_body(request.request_packed, request.request_ref)
        if isinstance(stored, dict):
            asked = stored
        if background.status_of(record, request) == "completed":
            answer = deps.blobs.load_body(request.response_packed, request.response_ref)
    return background.response_object(record, request, asked, answer)
