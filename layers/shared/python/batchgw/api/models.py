"""The models a caller may use (``GET /v1/models``, ``GET /v1/models/{id}``), in OpenAI's list
shape, each saying whether and how it takes batches, as spec 003 asks of a batch-capable
model: ``batch`` in ``service_tiers``, a ``pricing.batch`` price and its ``batch_endpoints``.

A model is listed when the caller's role may use it (``ModelSpec.roles``; an admin may use
every model), as a batch or an interactive request naming it would be checked. It takes
batches when batch work may run it: batches are on (``BATCH_ENABLED``), the caller's role may
create them (``BATCH_MIN_ROLE``), it has a price, and a route batch work may use here
(``LiveConfig.batch_routes``) or a provider's batch service an administrator did not forbid.
The ``batch`` tier names /v1/batches only; it is not a ``service_tier`` of a single request.
"""

from __future__ import annotations

from typing import Any

from batchgw.config.catalog import ENDPOINTS, ModelSpec, Price
from batchgw.deps import Deps
from batchgw.domain.errors import BadRequest, NotFound
from batchgw.domain.principal import Principal
from batchgw.validation.create import serves

OWNED_BY = "batchgw"
# The models config has no dates: ``created`` is the epoch rather than an invented time.
CREATED = 0


def list_models(deps: Deps, principal: Principal) -> dict[str, Any]:
    """Every model the caller may use, by id."""
    usable = [spec for _, spec in sorted(deps.catalog.models.items()) if _may_use(spec, principal)]
    return {"object": "list", "data": [model_object(deps, principal, spec) for spec in usable]}


def get_model(deps: Deps, principal: Principal, model_id: str) -> dict[str, Any]:
    """One model (an alias reads as its model); 404 when unknown or not the caller's, alike."""
    try:
        spec = deps.catalog.resolve(model_id, principal.role)
    except BadRequest as exc:
        raise NotFound(exc.message, param="model", code="model_not_found") from exc
    return model_object(deps, principal, spec)


def model_object(deps: Deps, principal: Principal, spec: ModelSpec) -> dict[str, Any]:
    """A model in OpenAI's shape, with its batch tier, prices and batch endpoints. ``pricing``
    is per million tokens (null: the model has no price); ``pricing.batch`` is null when the
    model takes no batches, and ``pricing.provider_batch`` is given when a provider's batch
    service may run it (``execution_mode: "provider"``)."""
    endpoints = _batch_endpoints(deps, principal, spec)
    batch_price = _batch_price(deps, spec) if endpoints else None
    batched = batch_price is not None
    pricing: dict[str, Any] | None = None
    if spec.price is not None:
        pricing = {**_per_mtok(spec.price), "batch": None if batch_price is None else _per_mtok(batch_price)}
        provider = _provider_batch_price(deps, spec)
        if batched and provider is not None:
            pricing["provider_batch"] = _per_mtok(provider)
    return {
        "id": spec.id,
        "object": "model",
        "created": CREATED,
        "owned_by": OWNED_BY,
        "endpoints": list(spec.endpoints),
        "service_tiers": ["default", "batch"] if batched else ["default"],
        "pricing": pricing,
        "batch_endpoints": endpoints if batched else [],
    }


def _may_use(spec: ModelSpec, principal: Principal) -> bool:
    return spec.roles is None or principal.is_admin or principal.role in spec.roles


def _batch_endpoints(deps: Deps, principal: Principal, spec: ModelSpec) -> list[str]:
    """The /v1/... endpoints a batch of ``spec`` may target for this caller (none: it takes no
    batches): every one it serves when batch work may use a route of it here, else those a
    provider's batch service runs for it."""
    settings = deps.settings
    if not settings.batch_enabled or not principal.at_least(settings.batch_min_role) or spec.price is None:
        return []
    served = [endpoint for endpoint in ENDPOINTS if serves(spec, endpoint)]
    if deps.live.batch_routes(spec.id):
        return served
    forbidden = deps.live.forbidden_routes(spec.id)
    return [endpoint for endpoint in served if spec.provider_batch_route(endpoint, forbidden) is not None]


def _batch_price(deps: Deps, spec: ModelSpec) -> Price | None:
    """What a batch request of ``spec`` costs by default: run here, the model's own price (spec
    000: no batch discount); run only on a provider's batch service, that service's price."""
    if deps.live.batch_routes(spec.id):
        return spec.price
    return _provider_batch_price(deps, spec)


def _provider_batch_price(deps: Deps, spec: ModelSpec) -> Price | None:
    """The batch price of the provider batch route ``execution_mode: "provider"`` would use."""
    forbidden = deps.live.forbidden_routes(spec.id)
    for endpoint in spec.endpoints:
        route = spec.provider_batch_route(endpoint, forbidden)
        if route is not None:
            return spec.batch_price_on(route)
    return None


def _per_mtok(price: Price) -> dict[str, Any]:
    return {
        "currency": "USD",
        "input_per_mtok": float(price.input_per_mtok),
        "output_per_mtok": float(price.output_per_mtok),
    }
