"""``POST /v1/batches`` with direct requests: the whole batch checked before anything is stored.

``validate_create`` either returns the plan of every request (its body as sent, the
canonical model it runs on) or raises one BadRequest naming the first invalid request,
as ``requests[1] (custom_id 'q-2'): Model 'no-such-model' not found``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from batchgw.config.catalog import ENDPOINTS, Catalog, ModelSpec
from batchgw.config.settings import Settings
from batchgw.domain.errors import BadRequest
from batchgw.domain.modes import MODES, Mode
from batchgw.validation import RequestInvalid, join_param, shown
from batchgw.validation.chat import validate_chat_body
from batchgw.validation.embeddings import validate_embeddings_body
from batchgw.validation.messages import KNOWN_ANTHROPIC_VERSIONS, validate_messages_body
from batchgw.validation.priority import Scheduling, scheduling_of
from batchgw.validation.responses import validate_responses_body
from batchgw.validation.translatable import check_translatable

DEFAULT_URL = "/v1/chat/completions"
MESSAGES_URL = "/v1/messages"
CUSTOM_ID_MAX_CHARS = 512
METADATA_MAX_PAIRS = 16
METADATA_KEY_MAX_CHARS = 64
METADATA_VALUE_MAX_CHARS = 512
# The completion windows a batch may ask for, in hours (inline and file batches alike).
COMPLETION_WINDOWS = {"24h": 24, "48h": 48, "72h": 72, "168h": 168}

# Each batchable endpoint's body validator: checks a body and returns the model it names.
BODY_VALIDATORS: dict[str, Callable[[Any], str]] = {
    "/v1/chat/completions": validate_chat_body,
    "/v1/embeddings": validate_embeddings_body,
    "/v1/responses": validate_responses_body,
}
# Targets whose bodies are checked under the batch's anthropic-version (the create call's
# header): a batch of such a target requires the version, and any other batch refuses one.
VERSIONED_BODY_VALIDATORS: dict[str, Callable[[Any, str], str]] = {
    MESSAGES_URL: validate_messages_body,
}

_REQUEST_FIELDS = frozenset({"custom_id", "method", "url", "body"})
# Options of another gateway's guide (spec 001), given in ``metadata``: its values each takes.
# ``omg_mode``: where the batch runs (``execution_mode``'s alias: ``domain.modes``);
# ``omg_retries``: how many times a request that failed for good runs again.
GATEWAY_OPTIONS: dict[str, tuple[str, ...]] = {
    "omg_mode": ("auto", "gateway"),
    "omg_retries": ("0", "1", "2"),
}

# ``endpoint`` and ``model``: the create shape of Merge Gateway's guide (spec 003), defaults
# for every request's url and body model (``_with_batch_defaults``).
# ``priority`` and ``complete_by``: the batch's scheduling (``validation.priority``).
_CREATE_FIELDS = frozenset(
    {
        "requests",
        "metadata",
        "completion_window",
        "endpoint",
        "model",
        "execution_mode",
        "priority",
        "complete_by",
    }
)


@dataclass(frozen=True, slots=True)
class PlannedRequest:
    """One request as it will be stored: ``body`` exactly as sent (an alias keeps its name),
    ``model`` the canonical model id it runs on, fixed when the batch is created."""

    custom_id: str
    method: str
    url: str
    body: dict[str, Any]
    model: str


@dataclass(frozen=True, slots=True)
class CreatePlan:
    """A valid batch of direct requests, in the order they were sent."""

    endpoint: str
    requests: list[PlannedRequest]
    metadata: dict[str, str] | None
    completion_window: str | None = None  # None: the gateway's own (BATCH_COMPLETION_WINDOW_HOURS)
    mode: Mode = Mode.GATEWAY  # where its creator asked it to run (``execution_mode``)
    scheduling: Scheduling = dataclasses.field(default_factory=Scheduling)  # priority, complete_by


def validate_create(
    body: Any, *, settings: Settings, catalog: Catalog, role: str, anthropic_version: str | None = None
) -> CreatePlan:
    """Check a create-batch body of direct requests, whole, for a caller of ``role``.

    ``anthropic_version`` is the create call's ``anthropic-version`` header (None when it
    was not sent): required for a /v1/messages batch, refused on any other, and every
    Messages request is checked under it (see ``check_anthropic_version``).

    Returns the plan of every request, or raises BadRequest (code 400) for the first
    problem: a request's problem names it (``requests[i] (custom_id '...'): ...``) and
    chains the RequestInvalid that carries its line code.
    """
    if not isinstance(body, dict):
        raise BadRequest("The body must be a JSON object")
    if "anthropic_version" in body:
        raise BadRequest(
            "Unknown field 'anthropic_version'; a Messages batch sends its version in the "
            "anthropic-version header",
            param="anthropic_version",
        )
    _check_create_fields(body)
    metadata = check_metadata(body.get("metadata"))
    scheduling = scheduling_of(body, admin=role == "admin")

    items = body.get("requests")
    if not isinstance(items, list):
        raise BadRequest("requests must be an array of requests", param="requests")
    if not items:
        raise BadRequest("requests must have at least one request", param="requests")
    limit = settings.batch_max_requests
    if len(items) > limit:
        raise BadRequest(
            f"A batch may have at most {limit:,} requests; this one has {len(items):,}. "
            "Split the job into several batches.",
            param="requests",
        )

    batch_endpoint, batch_model = _batch_defaults(body)
    target = batch_endpoint or _target_of(items[0])
    if target in ENDPOINTS:  # otherwise the first request is refused for its url below
        anthropic_version = check_anthropic_version(target, anthropic_version, settings=settings)

    planned: list[PlannedRequest] = []
    seen: dict[str, int] = {}
    endpoint: str | None = None
    for index, item in enumerate(items):
        try:
            item = _with_batch_defaults(item, batch_endpoint, batch_model)
            request = plan_request(
                item, endpoint=endpoint, catalog=catalog, role=role, anthropic_version=anthropic_version
            )
            first = seen.setdefault(request.custom_id, index)
            if first != index:
                raise RequestInvalid(
                    "duplicate_custom_id",
                    f"custom_id '{request.custom_id}' is repeated (requests[{first}] has it); "
                    "each custom_id must be unique in the batch",
                    param="custom_id",
                )
        except RequestInvalid as exc:
            raise BadRequest(
                f"{_label(index, item)}: {exc.message}", param=join_param(f"requests[{index}]", exc.param)
            ) from exc
        endpoint = request.url
        planned.append(request)
    return CreatePlan(
        endpoint=planned[0].url,
        requests=planned,
        metadata=metadata,
        completion_window=body.get("completion_window"),
        mode=requested_mode(body.get("execution_mode"), metadata),
        scheduling=scheduling,
    )


def check_anthropic_version(
    endpoint: str, anthropic_version: str | None, *, settings: Settings
) -> str | None:
    """The anthropic-version a new batch for ``endpoint`` keeps: the header's value for a
    /v1/messages batch, None for any other.

    Raises BadRequest when a Messages batch has no version, or one that is unknown or not
    in ``BATCH_ANTHROPIC_VERSIONS``, and when another batch has one. Both input methods
    call it: a file batch with its ``endpoint`` before its lines are read.
    """
    if endpoint not in VERSIONED_BODY_VALIDATORS:
        if anthropic_version is not None:
            raise BadRequest("the anthropic-version header is only for /v1/messages batches")
        return None
    if anthropic_version is None:
        raise BadRequest(f"anthropic-version header is required for a {endpoint} batch")
    allowed = [v for v in settings.anthropic_versions if v in KNOWN_ANTHROPIC_VERSIONS]
    if anthropic_version not in allowed:
        if anthropic_version in KNOWN_ANTHROPIC_VERSIONS:
            reason = "is not allowed for new batches on this gateway"
        else:
            reason = "is not a known version"
        choices = ", ".join(allowed) if allowed else "none: no version is allowed for new batches"
        raise BadRequest(f"anthropic-version '{anthropic_version}' {reason}; use one of {choices}")
    return anthropic_version


def plan_request(
    item: Any, *, endpoint: str | None, catalog: Catalog, role: str, anthropic_version: str | None = None
) -> PlannedRequest:
    """Check one request ``{"custom_id", "method", "url", "body"}`` and plan it.

    ``endpoint`` is the url every request of the batch must use, or None for the first
    request, which sets it. A /v1/messages request is checked under ``anthropic_version``,
    the batch's (checked already by ``check_anthropic_version``); without one it is refused.
    Raises RequestInvalid with ``param`` relative to the request (``"custom_id"``,
    ``"body.messages[0].role"``); uniqueness of ``custom_id`` is the caller's to check.
    """
    if not isinstance(item, dict):
        raise RequestInvalid("invalid_line", "a request must be a JSON object")
    custom_id = item.get("custom_id")
    if custom_id is None:
        raise RequestInvalid("invalid_custom_id", "custom_id is required", param="custom_id")
    if not _valid_custom_id(custom_id):
        raise RequestInvalid(
            "invalid_custom_id",
            f"custom_id must be a string of 1-{CUSTOM_ID_MAX_CHARS} characters",
            param="custom_id",
        )
    unknown = item.keys() - _REQUEST_FIELDS
    if unknown:
        name = sorted(unknown)[0]
        raise RequestInvalid(
            "invalid_line",
            f"unknown field '{name}'; a request has custom_id, method, url and body",
            param=name,
        )

    method = item.get("method")
    if method is None:
        method = "POST"
    elif method != "POST":
        raise RequestInvalid("invalid_method", "method must be POST", param="method")

    url = item.get("url")
    if url is None:
        url = DEFAULT_URL
    elif not isinstance(url, str):
        raise RequestInvalid("invalid_url", "url must be a string", param="url")
    if endpoint is not None and url != endpoint:
        raise RequestInvalid(
            "invalid_url",
            f"url '{url}' differs from the batch's url '{endpoint}'; every request of a batch "
            "uses the same url",
            param="url",
        )
    if url not in BODY_VALIDATORS and url not in VERSIONED_BODY_VALIDATORS:
        if url in ENDPOINTS:
            raise RequestInvalid("invalid_url", f"url '{url}' cannot be batched yet", param="url")
        raise RequestInvalid(
            "invalid_url",
            f"url '{url}' is not a batch target; use one of {', '.join(ENDPOINTS)}",
            param="url",
        )

    body = item.get("body")
    if body is None:
        raise RequestInvalid("invalid_body", "body is required", param="body")
    spec = plan_body(url, body, catalog=catalog, role=role, anthropic_version=anthropic_version)
    return PlannedRequest(custom_id=custom_id, method=method, url=url, body=body, model=spec.id)


def plan_body(
    url: str,
    body: Any,
    *,
    catalog: Catalog,
    role: str,
    anthropic_version: str | None = None,
    batch: bool = True,
) -> ModelSpec:
    """Check one request's ``body`` for ``url`` (a target with a validator), as its endpoint
    would and as the gateway runs it, and return the model it runs on.

    A /v1/messages body is checked under ``anthropic_version`` (without one it is
    refused). ``batch`` False words the refusals for a request sent on its own (the
    interactive path, ``batchgw.passthrough``). Raises RequestInvalid with ``param``
    rooted at ``"body"``.
    """
    if not isinstance(body, dict):
        raise RequestInvalid("invalid_body", "body must be a JSON object", param="body")
    try:
        if "anthropic_version" in body:
            where = (
                "a Messages batch names its version in the anthropic-version header of the create call"
                if batch
                else "name the version in the anthropic-version header"
            )
            raise RequestInvalid(
                "invalid_body",
                f"anthropic_version is not a body field; {where}",
                param="anthropic_version",
            )
        versioned = VERSIONED_BODY_VALIDATORS.get(url)
        if versioned is None:
            name = BODY_VALIDATORS[url](body)
        elif anthropic_version is None:
            raise RequestInvalid(
                "invalid_url", f"a {url} request needs the batch's anthropic-version; none was given"
            )
        else:
            name = versioned(body, anthropic_version)
    except RequestInvalid as exc:
        raise exc.under("body") from exc

    spec = batch_model(name, url, catalog=catalog, role=role, batch=batch)
    _check_output_tokens(spec, url, body, name)
    if spec.translates(url):
        try:
            check_translatable(body)
        except RequestInvalid as exc:
            raise exc.under("body") from exc
    return spec


def batch_model(name: str, url: str, *, catalog: Catalog, role: str, batch: bool = True) -> ModelSpec:
    """The model a batch request for ``url`` naming ``name`` runs on, for a caller of ``role``.

    Raises RequestInvalid (``param`` ``"body.model"``) when it is an auto model, unknown or
    not the role's, does not serve ``url``, or has no price (``batch`` False: worded for a
    request sent on its own). A request's own limits (its output tokens, translation) are
    ``plan_body``'s to check.
    """
    use = "in a batch" if batch else "here"
    if catalog.is_auto(name):
        raise RequestInvalid(
            "model_unsupported",
            f"Model '{name}' is an auto model; auto models cannot be used {use}; name a specific model",
            param="body.model",
        )
    try:
        spec = catalog.resolve(name, role)
    except BadRequest as exc:  # unknown, or not this role's: the two read the same
        raise RequestInvalid("model_not_found", exc.message, param="body.model") from exc
    if not serves(spec, url):
        raise RequestInvalid("model_unsupported", f"Model '{name}' does not serve {url}", param="body.model")
    if spec.price is None:
        raise RequestInvalid(
            "model_not_priced",
            f"Model '{name}' has no price; a batch can only use priced models"
            if batch
            else f"Model '{name}' has no price; only priced models can be used here",
            param="body.model",
        )
    return spec


# The field that bounds a request's output, by target (the first one present counts).
_OUTPUT_LIMIT_FIELDS = {
    "/v1/chat/completions": ("max_completion_tokens", "max_tokens"),
    "/v1/responses": ("max_output_tokens",),
    MESSAGES_URL: ("max_tokens",),
}


def _check_output_tokens(spec: ModelSpec, url: str, body: dict[str, Any], name: str) -> None:
    """Refuse a request that asks for more output than its model answers (``max_output_tokens``)."""
    limit = spec.max_output_tokens
    if limit is None:
        return
    for field in _OUTPUT_LIMIT_FIELDS.get(url, ()):
        asked = body.get(field)
        if isinstance(asked, int) and asked > limit:
            raise RequestInvalid(
                "max_tokens_too_large",
                f"{field} is {asked}; model '{name}' answers at most {limit} tokens",
                param=f"body.{field}",
            )
        if asked is not None:
            return


def serves(spec: ModelSpec, url: str) -> bool:
    """Whether a batch request for ``url`` can run on ``spec``.

    A model serves the endpoints its catalog entry lists, over its route's protocol: an
    Anthropic route only /v1/messages. A Messages request also runs on an OpenAI route
    that serves chat completions, translated to one (``ModelSpec.translates``).
    """
    if spec.route.protocol == "anthropic":
        return url == MESSAGES_URL and url in spec.endpoints
    if url == MESSAGES_URL:
        return DEFAULT_URL in spec.endpoints
    return url in spec.endpoints


def check_metadata(metadata: Any) -> dict[str, str] | None:
    """The batch's metadata: null, or up to 16 string pairs (keys ≤ 64, values ≤ 512 characters)."""
    if metadata is None:
        return None
    if not isinstance(metadata, dict):
        raise BadRequest("metadata must be an object of string pairs", param="metadata")
    if len(metadata) > METADATA_MAX_PAIRS:
        raise BadRequest(
            f"metadata has {len(metadata)} pairs; a batch may have at most {METADATA_MAX_PAIRS}",
            param="metadata",
        )
    for key, value in metadata.items():
        if not isinstance(key, str):
            raise BadRequest("metadata keys must be strings", param="metadata")
        if len(key) > METADATA_KEY_MAX_CHARS:
            raise BadRequest(
                f"metadata key '{key[:METADATA_KEY_MAX_CHARS]}...' is longer than "
                f"{METADATA_KEY_MAX_CHARS} characters",
                param="metadata",
            )
        if not isinstance(value, str):
            raise BadRequest(f"metadata['{key}'] must be a string", param=f"metadata.{key}")
        if len(value) > METADATA_VALUE_MAX_CHARS:
            raise BadRequest(
                f"metadata['{key}'] is longer than {METADATA_VALUE_MAX_CHARS} characters",
                param=f"metadata.{key}",
            )
        allowed = GATEWAY_OPTIONS.get(key)
        if allowed is not None and value not in allowed:
            raise BadRequest(
                f"metadata['{key}'] must be one of {', '.join(allowed)}; got {shown(value)}",
                param=f"metadata.{key}",
            )
    return metadata


def requested_mode(execution_mode: Any, metadata: dict[str, str] | None) -> Mode:
    """Where the creator asks the batch to run: ``execution_mode`` (gateway, provider or
    auto), or ``metadata.omg_mode`` (another gateway's name for it: auto or gateway), or
    the gateway; the two given apart must agree."""
    alias = (metadata or {}).get("omg_mode")
    if execution_mode is None:
        return Mode(alias) if alias is not None else Mode.GATEWAY
    if execution_mode not in MODES:
        raise BadRequest(
            f"execution_mode must be one of {', '.join(MODES)}; got {shown(execution_mode)}",
            param="execution_mode",
        )
    if alias is not None and alias != execution_mode:
        raise BadRequest(
            f"execution_mode '{execution_mode}' and metadata.omg_mode '{alias}' differ; give one",
            param="execution_mode",
        )
    return Mode(execution_mode)


def reruns_of(metadata: dict[str, str] | None) -> int:
    """How many times a request that failed for good runs again: ``omg_retries`` (0-2)."""
    return int((metadata or {}).get("omg_retries", "0"))


def _check_create_fields(body: dict[str, Any]) -> None:
    if "requests" not in body:
        raise BadRequest("requests is required", param="requests")
    if "input_file_id" in body:
        raise BadRequest(
            "input_file_id and requests cannot be used together; send the requests inline "
            "or in a file, not both",
            param="input_file_id",
        )
    for key in body:
        if key not in _CREATE_FIELDS:
            raise BadRequest(f"Unknown field '{key}'", param=key)
    check_completion_window(body.get("completion_window"), required=False)


def _batch_defaults(body: dict[str, Any]) -> tuple[str | None, str | None]:
    """The create's ``endpoint`` and ``model`` (None each when not given), checked."""
    endpoint, model = body.get("endpoint"), body.get("model")
    if endpoint is not None and endpoint not in ENDPOINTS:
        raise BadRequest(
            f"endpoint must be one of {', '.join(ENDPOINTS)}; got {shown(endpoint)}",
            param="endpoint",
            code="unsupported_batch_endpoint",
        )
    if model is not None and (not isinstance(model, str) or not model):
        raise BadRequest("model must be a model name", param="model")
    return endpoint, model


def _with_batch_defaults(item: Any, endpoint: str | None, model: str | None) -> Any:
    """A request with the create's ``endpoint`` as its url and ``model`` as its body's model
    when it names none; one that names another is refused (``invalid_url``, ``invalid_body``:
    Merge Gateway's ``batch_model_mismatch``)."""
    if not isinstance(item, dict) or (endpoint is None and model is None):
        return item
    item = dict(item)
    if endpoint is not None:
        url = item.setdefault("url", endpoint)
        if url != endpoint:
            raise RequestInvalid(
                "invalid_url",
                f"url {shown(url)} differs from the batch's endpoint '{endpoint}'",
                param="url",
            )
    body = item.get("body")
    if model is not None and isinstance(body, dict):
        body = item["body"] = {"model": model, **body}
        if body["model"] != model:
            raise RequestInvalid(
                "invalid_body",
                f"body.model {shown(body['model'])} differs from the batch's model '{model}'",
                param="body.model",
            )
    return item


def check_completion_window(window: Any, *, required: bool) -> str | None:
    """The batch's ``completion_window``: 24h, 48h, 72h or 168h (None when it may be left out)."""
    if window is None and not required:
        return None
    if not isinstance(window, str) or window not in COMPLETION_WINDOWS:
        raise BadRequest(
            f"completion_window must be one of {', '.join(COMPLETION_WINDOWS)}; got {shown(window)}",
            param="completion_window",
        )
    return window


def _target_of(first: Any) -> str | None:
    """The batch's target as its first request names it (chat by default), if it can tell."""
    if not isinstance(first, dict):
        return None
    url = first.get("url")
    if url is None:
        return DEFAULT_URL
    return url if isinstance(url, str) else None


def _valid_custom_id(custom_id: Any) -> bool:
    return isinstance(custom_id, str) and 1 <= len(custom_id) <= CUSTOM_ID_MAX_CHARS


def _label(index: int, item: Any) -> str:
    custom_id = item.get("custom_id") if isinstance(item, dict) else None
    if _valid_custom_id(custom_id):
        return f"requests[{index}] (custom_id '{custom_id}')"
    return f"requests[{index}]"
