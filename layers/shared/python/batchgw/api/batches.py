"""The batch API's rules: create, read, cancel, delete and list batches (a change of their
scheduling is ``api.reschedule``'s).

Every read checks the caller: another user's batch reads as not found (an admin may read
any). Create stores the request and starts the workflow; it never calls a model.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from batchgw.api import idempotency
from batchgw.api.auth import require_role
from batchgw.api.capacity import promised_at
from batchgw.api.files import batch_input_file, larger_inputs, storage_limit, storage_refusal
from batchgw.api.ids import cursor_key, new_id
from batchgw.api.params import Params, fitted_page, int_param, last, time_range
from batchgw.api.shapes import batch_object
from batchgw.config.catalog import ENDPOINTS, execution_of, not_on_provider, price_of
from batchgw.deps import Deps
from batchgw.domain import codec
from batchgw.domain.batch import BatchRecord, CountedBatch, backstop_ttl, created_key
from batchgw.domain.errors import (
    AccountUnavailable,
    BadRequest,
    Conflict,
    Forbidden,
    NotFound,
    PayloadTooLarge,
    ServiceUnavailable,
    StorageError,
    TooManyRequests,
)
from batchgw.domain.files import FileRecord, file_key
from batchgw.domain.modes import PROVIDER_WINDOW, Mode, ModeChoice
from batchgw.domain.principal import Principal
from batchgw.domain.spend import TokenCost, most_cost, over_budget_message, refusal
from batchgw.domain.states import BatchStatus
from batchgw.domain.usage import OverLimit, UsageLimits
from batchgw.observability import logger
from batchgw.storage.batches import OwnerInactive
from batchgw.storage.blobs import own_input_key
from batchgw.storage.idempotency import KEY_KEPT_SECONDS
from batchgw.storage.spend import Payer, reserve_provider, used_up_now
from batchgw.storage.workflow import Next
from batchgw.validation import media, priority
from batchgw.validation.create import (
    COMPLETION_WINDOWS,
    check_anthropic_version,
    check_completion_window,
    check_metadata,
    requested_mode,
    reruns_of,
    validate_create,
)
from batchgw.validation.jsonbody import parse_json
from batchgw.validation.priority import Scheduling, check_complete_by_time, scheduling_of

FILE_CREATE_KEYS = {
    "input_file_id",
    "endpoint",
    "completion_window",
    "metadata",
    "execution_mode",
    *priority.FIELDS,
}
_STATUS_NAMES = frozenset(s.value for s in BatchStatus)
BATCH_PREFIX = "batch_"
# A status-filtered list reads at most about this many of each owner's batches per page.
LIST_READ_MOST = 1000


# --- create ------------------------------------------------------------------------------


def create_batch(
    deps: Deps,
    principal: Principal,
    raw: bytes,
    *,
    anthropic_version: str | None = None,
    idempotency_key: str | None = None,
) -> dict[str, Any]:
    """POST /v1/batches: direct requests (``requests``) or a JSONL file (``input_file_id``).

    With an ``Idempotency-Key``, the batch an earlier create with the key made, if any
    (``api.idempotency``): checked before the caller's role and quotas, which a replay
    does not need.
    """
    return create_once(
        deps,
        principal,
        idempotency.fingerprint(raw, anthropic_version),
        idempotency_key,
        lambda creating: _create(deps, principal, raw, anthropic_version, creating),
    )


def create_once(
    deps: Deps,
    principal: Principal,
    fingerprint: str,
    idempotency_key: str | None,
    create: Callable[[Creating], dict[str, Any]],
    *,
    route: str = "batches",
    new_id: Callable[[], str] | None = None,
) -> dict[str, Any]:
    """``create`` a batch, once per ``idempotency_key`` of the account on ``route`` (each
    route's keys apart): a replay answers the batch the first create made. ``new_id`` makes
    its id (a batch's, by default)."""
    make_id = new_id or (lambda: _new_batch_id(deps))
    if idempotency_key is None:
        return create(Creating(make_id()))
    key = idempotency.stored_key(route, idempotency.check_key(idempotency_key))
    return idempotency.once(
        deps,
        principal,
        key,
        fingerprint,
        new_batch_id=make_id,
        create=lambda batch_id: create(Creating(batch_id, key)),
        replay=lambda batch_id: _own_batch(deps, principal, batch_id),
        show=batch_object,
    )


@dataclass(frozen=True, slots=True)
class Creating:
    """The batch a create makes: its id, and the Idempotency-Key (as stored) it was made with."""

    batch_id: str
    idempotency_key: str | None = None


def _new_batch_id(deps: Deps) -> str:
    return new_id(BATCH_PREFIX, deps.clock())


def _own_batch(deps: Deps, principal: Principal, batch_id: str) -> CountedBatch | None:
    batch = deps.batches.get(batch_id)
    return batch if batch is not None and batch.record.owner == principal.user_id else None


def _create(
    deps: Deps, principal: Principal, raw: bytes, anthropic_version: str | None, creating: Creating
) -> dict[str, Any]:
    settings = deps.settings
    require_role(deps, principal, "create batches")
    if len(raw) > settings.max_body_bytes:
        raise PayloadTooLarge(
            f"The request body ({len(raw)} bytes) is larger than the limit of "
            f"{settings.batch_max_body_mb:g} MiB ({settings.max_body_bytes} bytes, BATCH_MAX_BODY_MB). "
            f"{larger_inputs(settings)}"
        )
    body = parse_json(raw)
    if isinstance(body, dict) and "input_file_id" in body:
        return open_batch(deps, principal, creating, _file_opening(deps, principal, body, anthropic_version))
    plan = validate_create(
        body,
        settings=settings,
        catalog=deps.catalog,
        role=principal.role,
        anthropic_version=anthropic_version,
    )
    requests = InlineInput(tuple((r.custom_id, r.model, r.body) for r in plan.requests))
    opening = Opening(
        endpoint=plan.endpoint,
        window=plan.completion_window,
        metadata=plan.metadata,
        anthropic_version=anthropic_version,
        input=requests,
        mode=plan.mode,
        scheduling=plan.scheduling,
    )
    return open_batch(deps, principal, creating, opening)


def _file_opening(
    deps: Deps, principal: Principal, body: dict[str, Any], anthropic_version: str | None
) -> Opening:
    """A batch from an uploaded JSONL file: checked here only as far as the call goes; the
    file itself is validated by the workflow, in the background."""
    if "output_expires_after" in body:
        raise BadRequest(
            "'output_expires_after' is not supported.",
            code="unsupported_capability",
            param="output_expires_after",
        )
    unknown = sorted(set(body) - FILE_CREATE_KEYS)
    if unknown:
        raise BadRequest(f"Unknown field '{unknown[0]}'.", param=unknown[0])
    endpoint = body.get("endpoint")
    if endpoint not in ENDPOINTS:
        raise BadRequest(f"'endpoint' must be one of {', '.join(ENDPOINTS)}.", param="endpoint")
    window = check_completion_window(body.get("completion_window"), required=True)
    anthropic_version = check_anthropic_version(endpoint, anthropic_version, settings=deps.settings)
    metadata = check_metadata(body.get("metadata"))
    mode = requested_mode(body.get("execution_mode"), metadata)
    scheduling = scheduling_of(body, admin=principal.is_admin)
    if mode is Mode.PROVIDER and window != PROVIDER_WINDOW:
        raise batch_not_supported(deps, endpoint, (), window or "")
    file = batch_input_file(deps, principal, body.get("input_file_id"))
    # The batch keeps its own copy: deleting the input file later does not affect it.
    return Opening(
        endpoint=endpoint,
        window=window,
        metadata=metadata,
        anthropic_version=anthropic_version,
        input=copied_file(deps, file),
        mode=mode,
        scheduling=scheduling,
    )


def copied_file(deps: Deps, file: FileRecord) -> FileInput:
    """The input of a batch made from ``file``: a server-side copy of its bytes."""

    def write(key: str) -> int:
        deps.blobs.copy(file_key(file.id), key)
        return file.bytes

    return FileInput(file.id, write=write)


@dataclass(frozen=True, slots=True)
class InlineInput:
    """Requests given in the call, checked: (custom_id, canonical model, body) each."""

    requests: tuple[tuple[str, str, Any], ...]

    @property
    def models(self) -> tuple[str, ...]:
        return tuple(sorted({model for _, model, _ in self.requests}))


@dataclass(frozen=True, slots=True)
class FileInput:
    """A JSONL file of the caller (``file_id``): ``write`` writes the batch's own copy of it
    to the key it is given, and says how many bytes that copy takes; the workflow validates
    that copy in the background."""

    file_id: str
    write: Callable[[str], int]


@dataclass(frozen=True, slots=True)
class Opening:
    """What a batch is opened with, whichever way it came: a create with requests, a create
    with a file, the console's submission, or the retry of another batch's unfinished
    requests (``parent_batch_id``)."""

    endpoint: str
    window: str | None
    metadata: dict[str, str] | None
    input: InlineInput | FileInput
    anthropic_version: str | None = None
    parent_batch_id: str | None = None
    mode: Mode = Mode.GATEWAY  # where its creator asked it to run (``domain.modes``)
    scheduling: Scheduling = field(default_factory=Scheduling)  # priority and complete_by
    promised_at: int | None = None  # when it would end, estimated at create (``api.capacity``)
    # A window of its own, in seconds, instead of ``window``'s (a background response's).
    window_seconds: float | None = None


def open_batch(deps: Deps, principal: Principal, creating: Creating, opening: Opening) -> dict[str, Any]:
    """Store the batch ``opening`` describes as ``creating`` says, with its own copy of its
    input, and start its workflow: the batch object."""
    given = opening.input
    label, seconds = _window(deps, opening.window)
    if opening.window_seconds is not None:
        label, seconds = f"{opening.window_seconds:g}s", opening.window_seconds
    now = deps.clock()
    window_end = None if seconds is None else int(now + seconds)  # _open's is no earlier
    check_complete_by_time(opening.scheduling.complete_by, now=now, expires_at=window_end)
    choice, prices = None, None
    if isinstance(given, InlineInput):
        # The window asked for: one left to the gateway's own runs on a provider as well (its
        # end cancels the provider batch, as any window's end does).
        asked = opening.window or PROVIDER_WINDOW
        choice, prices = execution_of(
            deps.catalog,
            opening.mode,
            endpoint=opening.endpoint,
            models=given.models,
            window=asked,
            forbidden=deps.live.forbidden_routes,
        )
        if choice is None:
            raise batch_not_supported(deps, opening.endpoint, given.models, asked)
        if choice.mode is Mode.GATEWAY:
            _check_routes(deps, given.models)
            counts = Counter(model for _, model, _ in given.requests)  # 422 when complete_by is too soon
            promised = promised_at(deps, principal, creating.batch_id, counts, opening.scheduling)
            opening = replace(opening, promised_at=promised)
        else:
            _check_provider_media(given)
    else:
        check_file_batches(deps)
    _check_spend(deps, principal)
    held = False
    if prices is not None and isinstance(given, InlineInput):
        held = _reserve_most_cost(deps, principal, creating.batch_id, opening.endpoint, given, prices)
    try:
        return _open(deps, principal, creating, opening, label, seconds, choice, prices)
    except BaseException:
        if held:  # nothing stored: its hold goes too (a create that died leaves it to expire)
            deps.user_slots.release_provider(principal.user_id, creating.batch_id)
        raise


def _open(
    deps: Deps,
    principal: Principal,
    creating: Creating,
    opening: Opening,
    label: str,
    seconds: float | None,
    choice: ModeChoice | None,
    prices: dict[str, list[str]] | None,
) -> dict[str, Any]:
    given = opening.input
    batch_id = creating.batch_id
    clock_now = deps.clock()
    now = int(clock_now)
    expires_at = None if seconds is None else int(now + seconds)
    settings = deps.settings
    record = BatchRecord(
        id=batch_id,
        owner=principal.user_id,
        owner_role=principal.role,
        key_id=principal.key_id,
        status=BatchStatus.VALIDATING,
        endpoint=opening.endpoint,
        completion_window=label,
        created_at=now,
        created_key=cursor_key(BATCH_PREFIX, batch_id) or created_key(int(clock_now * 1000), batch_id),
        expires_at=expires_at,
        metadata=opening.metadata,
        anthropic_version=opening.anthropic_version,
        retention_seconds=int(settings.retention_seconds),
        input_method="inline" if isinstance(given, InlineInput) else "file",
        input_file_id=given.file_id if isinstance(given, FileInput) else None,
        total=len(given.requests) if isinstance(given, InlineInput) else 0,
        models=given.models if isinstance(given, InlineInput) else (),
        idempotency_key=creating.idempotency_key,
        parent_batch_id=opening.parent_batch_id,
        reruns=reruns_of(opening.metadata),
        cache_recorded=True,
        mode_requested=opening.mode.value,
        execution_mode=None if choice is None else choice.mode.value,
        mode_reason=None if choice is None else choice.reason.value,
        batch_prices=prices,
        priority=opening.scheduling.priority,
        complete_by=opening.scheduling.complete_by,
        promised_at=opening.promised_at,
        ttl=backstop_ttl(
            now=clock_now,
            expires_at=expires_at,
            retention=settings.retention_seconds,
            reconcile=settings.batch_reconcile_seconds,
        ),
    )
    if isinstance(given, InlineInput):
        lines = [
            codec.dumps({"custom_id": custom_id, "model": model, "body": body}).encode()
            for custom_id, model, body in given.requests
        ]
        size = deps.blobs.put_lines_gz(own_input_key(record), lines)
    else:
        size = given.write(own_input_key(record))
    # The copy counts as the owner's input-file bytes until the record is deleted: held as
    # its own while it is unfinished, from its end at the latest until its backstop
    # (``domain.usage``).
    return _store_and_start(deps, replace(record, input_bytes=size))


def check_file_batches(deps: Deps) -> None:
    """400 ``batch_files_disabled`` while the operator allows no batch of an input file."""
    if not deps.settings.batch_files_enabled:
        raise BadRequest(
            "Batches from input files are turned off here (BATCH_FILES_ENABLED); send the requests "
            "in the create call instead.",
            param="input_file_id",
            code="batch_files_disabled",
        )


def _window(deps: Deps, asked: str | None) -> tuple[str, float | None]:
    """The batch's completion window, as its label and seconds: the one it asked for, else
    the gateway's (BATCH_COMPLETION_WINDOW_HOURS); none at all when the operator lifted it (0)."""
    settings = deps.settings
    if settings.completion_window_seconds is None:
        return (asked or "none"), None
    if asked is not None:
        return asked, COMPLETION_WINDOWS[asked] * 3600
    return f"{settings.batch_completion_window_hours:g}h", settings.completion_window_seconds


def _store_and_start(deps: Deps, record: BatchRecord) -> dict[str, Any]:
    """Store the batch, counted against its owner's limits in the same write (429 over
    one, its input removed) and only while its owner is still active (401 once suspended or
    deleted, its input removed), and start its workflow; if the workflow cannot start, nothing
    is left behind (no batch counting against the user's limits) and the caller may retry."""
    settings = deps.settings
    limits = UsageLimits(
        settings.batch_max_active_per_user,
        settings.batch_max_queued_requests_per_user,
        storage_limit(deps),
    )
    try:
        refused = deps.batches.create(
            record, limits, now=deps.clock(), owner_active=deps.accounts.active_check(record.owner)
        )
    except OwnerInactive:
        deps.blobs.delete(own_input_key(record))
        raise AccountUnavailable() from None
    if refused is not None:
        deps.blobs.delete(own_input_key(record))
        raise _over_limit(deps, refused)
    try:
        deps.workflow.start(record.id)
    except StorageError as exc:
        deps.batches.delete_record(record.id, now=deps.clock())
        deps.blobs.delete_batch(record.id)
        raise ServiceUnavailable("The batch could not be started; nothing was stored. Try again.") from exc
    return batch_object(CountedBatch(record), deps.clock())


def batch_not_supported(deps: Deps, endpoint: str, models: Sequence[str], window: str) -> Forbidden:
    """The 403 of a batch asked to run on its provider's batch service that may not, saying
    why (``config.catalog.not_on_provider``)."""
    why = not_on_provider(
        deps.catalog, endpoint=endpoint, models=models, window=window, forbidden=deps.live.forbidden_routes
    )
    return Forbidden(
        f"The batch cannot run in execution_mode 'provider': {why}.",
        param="execution_mode",
        code="batch_not_supported",
    )


def _check_routes(deps: Deps, models: Sequence[str]) -> None:
    """400 when a model has no route batch work may use (see ``upstream.routing``)."""
    for model in models:
        if not deps.live.batch_routes(model):
            raise BadRequest(
                f"Model '{model}' has no route that batch work may use; an administrator can allow one.",
                param="model",
                code="batch_route_unavailable",
            )


def _check_provider_media(given: InlineInput) -> None:
    """400 ``unsupported_batch_media`` when a request of a batch bound for a provider's batch
    service carries media that service cannot fetch (``validation.media``)."""
    for index, (custom_id, _, body) in enumerate(given.requests):
        refused = media.unsupported_media(body)
        if refused is not None:
            param = f"requests[{index}].body.{refused[0]}"
            raise BadRequest(
                f"requests[{index}] (custom_id '{custom_id}'): {media.message(*refused)}",
                param=param,
                code=media.CODE,
            )


def _over_limit(deps: Deps, refused: OverLimit) -> TooManyRequests:
    """The 429 for a batch its owner's unfinished batches or requests leave no room for."""
    settings = deps.settings
    if refused.limit == "file_bytes":
        return storage_refusal(deps, refused)
    if refused.limit == "batches":
        return TooManyRequests(
            f"You have {refused.count} unfinished batches, the most allowed "
            f"({settings.batch_max_active_per_user}).",
            code="too_many_open_batches",  # spec 003's name (001's job_limit_exceeded is not used)
        )
    return TooManyRequests(
        f"This batch would take your unfinished requests to {refused.count}, over the limit "
        f"of {settings.batch_max_queued_requests_per_user}.",
        code="queued_request_limit",
    )


def _check_spend(deps: Deps, principal: Principal) -> None:
    """429 when the caller's daily or monthly quota is used up, or their key's budget."""
    reason = used_up_now(deps.accounts, deps.spend, Payer(principal.user_id, principal.key_id), deps.clock())
    if reason is not None:
        raise TooManyRequests(refusal(reason), code=f"{reason.value}_exceeded")


def _reserve_most_cost(
    deps: Deps,
    principal: Principal,
    batch_id: str,
    endpoint: str,
    given: InlineInput,
    prices: dict[str, list[str]],
) -> bool:
    """429 ``budget_exceeded`` when a batch run on its provider's batch service could cost
    more, at its batch price, than the caller's quotas and budget leave, counting the provider
    batches already accepted and not yet charged: nothing here stops its requests one by one
    once the provider has them (OMG's create-time check, spec 001). Else that most is held
    for the batch until it is charged or ends (``storage.spend.reserve_provider``); whether a
    hold was written (none when nothing limits the caller)."""
    lines = (
        (_cost_of(prices, model), body, deps.catalog.models[model].max_output_tokens)
        for _, model, body in given.requests
    )
    most = most_cost(lines, endpoint)
    payer = Payer(principal.user_id, principal.key_id)
    held, room = reserve_provider(
        deps.accounts, deps.spend, deps.user_slots, deps.batches, payer, batch_id, most, deps.clock()
    )
    if room is not None:
        raise TooManyRequests(over_budget_message(most, room), code="budget_exceeded")
    return held


def _cost_of(prices: dict[str, list[str]], model: str) -> TokenCost:
    price = price_of(prices, model)
    assert price is not None
    return price.cost_nano


# --- read, cancel, delete ----------------------------------------------------------------


def visible_batch(deps: Deps, principal: Principal, batch_id: str) -> CountedBatch:
    """The caller's batch (any batch, for an admin); 404 otherwise."""
    batch = deps.batches.get(batch_id) if batch_id.startswith(BATCH_PREFIX) else None
    if batch is None or (batch.record.owner != principal.user_id and not principal.is_admin):
        raise NotFound(f"No batch found with id '{batch_id}'.", code="batch_not_found")
    return batch


def get_batch(deps: Deps, principal: Principal, batch_id: str) -> dict[str, Any]:
    return batch_object(visible_batch(deps, principal, batch_id), deps.clock())


def cancel_batch(deps: Deps, principal: Principal, batch_id: str) -> dict[str, Any]:
    """Cancel: unstarted requests will not run; an ended batch comes back unchanged.

    A parked workflow is woken to settle the unstarted requests now (one not parked yet
    finds the batch cancelling when it parks). If the wake-up fails, the batch stays
    ``cancelling``: the reconciler settles it within a period, and cancelling again
    tries the wake-up again.
    """
    cancel(deps, visible_batch(deps, principal, batch_id).record)
    return batch_object(visible_batch(deps, principal, batch_id), deps.clock())


def cancel(deps: Deps, record: BatchRecord) -> None:
    """Cancel the batch of ``record`` (``cancel_batch``'s, whoever's it is)."""
    cancellable = (BatchStatus.VALIDATING, BatchStatus.IN_PROGRESS)
    if record.status in cancellable:
        now = int(deps.clock())
        record = deps.batches.cancel(record.id, at=now) or record
    if record.status is BatchStatus.CANCELLING and not record.cancel_swept and record.task_token is not None:
        _wake_to_cancel(deps, record)


def _wake_to_cancel(deps: Deps, record: BatchRecord) -> None:
    """Wake the parked workflow to its Cancel step; one waiting for a provider batch's next
    poll, to its provider step (which cancels the provider batch now)."""
    assert record.task_token is not None
    next_state = Next.PROVIDER if record.on_provider else Next.CANCEL
    try:
        if deps.workflow.wake(record.task_token, next_state):
            deps.batches.clear_token(record.id, record.task_token)
    except StorageError:
        logger.warning("could not wake a cancelled batch's workflow", extra={"batch_id": record.id})


def delete_batch(deps: Deps, principal: Principal, batch_id: str) -> dict[str, Any]:
    """Delete the batch with its requests and results, whatever its status, unless a
    request is running under a live lease (409); the data is purged in the background."""
    record = visible_batch(deps, principal, batch_id).record
    if deps.batches.runs_live(record.id, deps.clock()):
        raise Conflict(
            f"Batch '{batch_id}' has requests running; cancel it and wait for them to finish.",
            code="batch_not_deletable",
        )
    remove(deps, record)
    return {"id": record.id, "object": "batch.deleted", "deleted": True}


def remove(deps: Deps, record: BatchRecord) -> None:
    """Delete a batch's record (it reads as not found at once), stop its workflow and purge
    the rest in the background. Its Idempotency-Key answers 410 for a day."""
    if deps.batches.delete_record(record.id, now=deps.clock()):
        if record.idempotency_key is not None:
            deps.idempotency.batch_deleted(
                record.owner,
                record.idempotency_key,
                record.id,
                ttl=int(deps.clock() + KEY_KEPT_SECONDS),
            )
        deps.workflow.stop(record.id)
        deps.workflow.start_purge(record.id)


def batches_of(deps: Deps, owner: str, statuses: Sequence[str] = ()) -> list[BatchRecord]:
    """Every batch of ``owner`` (of those statuses, if any are given), its background
    responses (``batchgw.deferred``) among them."""
    found: list[BatchRecord] = []
    for responses in (False, True):
        before_key = None
        while True:
            records, more = deps.batches.list_for_owner(
                owner, limit=100, before_key=before_key, statuses=statuses, responses=responses
            )
            found += records
            if not more or not records:
                break
            before_key = records[-1].created_key
    return found


# --- list --------------------------------------------------------------------------------


def list_batches(deps: Deps, principal: Principal, params: Params) -> dict[str, Any]:
    """The caller's batches, newest first, filtered by status and creation time."""
    found, has_more, read_to = _listed(deps, principal, params, [principal.user_id])
    page = fitted_page([batch_object(batch, deps.clock()) for batch in found], has_more=has_more)
    return _with_read_to(page, read_to)


def list_every_batch(
    deps: Deps, principal: Principal, params: Params, owners: Sequence[str]
) -> dict[str, Any]:
    """The batches of ``owners`` (an administrator's list), newest first, with the same
    filters; each batch says whose it is (``user_id``)."""
    found, has_more, read_to = _listed(deps, principal, params, owners)
    data = [_admin_batch_object(batch, deps.clock()) for batch in found]
    return _with_read_to(fitted_page(data, has_more=has_more), read_to)


def _admin_batch_object(batch: CountedBatch, now: float) -> dict[str, Any]:
    """The batch object with whose it is, and its cached input tokens as the admin Batches
    tab shows them: null for a batch stored before they were recorded."""
    shown = batch_object(batch, now)
    cached = batch.counts.cached_tokens if batch.record.cache_recorded else None
    return {
        **shown,
        "user_id": batch.record.owner,
        "usage": {**shown["usage"], "cached_input_tokens": cached},
    }


def _with_read_to(page: dict[str, Any], read_to: str | None) -> dict[str, Any]:
    """A status-filtered page that stopped at its read bound (``LIST_READ_MOST``) says where
    the next one goes on (``next_after``: pass it as ``after``), even when it holds none."""
    if read_to is not None and page["has_more"]:
        page["next_after"] = page["last_id"] or read_to
    return page


def after_cursor(deps: Deps, principal: Principal, after: str | None) -> str | None:
    """Where a list goes on from: the owner-index key of the batch ``after`` names (None:
    from the newest). A time-ordered id says where it stands, deleted or not; an older id is
    looked up, and must be the caller's (or any, for an administrator)."""
    if not after:
        return None
    key = cursor_key(BATCH_PREFIX, after)
    if key is not None:
        return key
    anchor = deps.batches.get_record(after) if after.startswith(BATCH_PREFIX) else None
    if anchor is None or (anchor.owner != principal.user_id and not principal.is_admin):
        raise BadRequest(f"'after' names no batch of yours: '{after}'.", param="after")
    return anchor.created_key


def _listed(
    deps: Deps, principal: Principal, params: Params, owners: Sequence[str]
) -> tuple[list[CountedBatch], bool, str | None]:
    """The page of batches, whether more follow, and (a status filter having stopped at its
    read bound) the id of the batch its read stopped at."""
    limit = int_param(params, "limit", default=20, low=1, high=100)
    statuses = [s for value in params.get("status", []) for s in value.split(",") if s]
    unknown = [s for s in statuses if s not in _STATUS_NAMES]
    if unknown:
        raise BadRequest(f"Unknown status '{unknown[0]}'.", param="status")
    before_key = after_cursor(deps, principal, last(params, "after"))
    created_after, created_before = time_range(params, "created_after", "created_before")
    records: list[BatchRecord] = []
    has_more = False
    stops: list[str] = []
    for owner in owners:  # each owner's newest ``limit``, merged (an owner index per user)
        page = deps.batches.owner_page(
            owner,
            limit=limit,
            before_key=before_key,
            created_after=created_after,
            created_before=created_before,
            statuses=statuses,
            most_read=LIST_READ_MOST,
        )
        records += page.records
        has_more = has_more or page.more
        if page.read_to is not None:
            stops.append(page.read_to)
    read_to = None
    if stops:
        # An owner whose read stopped may have matches older than where it stopped: only what
        # is at or newer than the newest such stop (the last batch it read) is sure to be in
        # order; the next page goes on after it.
        cut = max(stops)
        records = [record for record in records if record.created_key >= cut]
        read_to = cut.partition("#")[2]
    records.sort(key=lambda r: r.created_key, reverse=True)
    has_more = has_more or len(records) > limit
    counted = (deps.batches.get(record.id) for record in records[:limit])
    return [batch for batch in counted if batch is not None], has_more, read_to
