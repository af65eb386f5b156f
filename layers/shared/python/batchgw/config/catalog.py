"""The models a gateway serves: names, aliases, routes and prices, from one config document.

The document is a JSON file (``BATCHGW_MODELS_CONFIG``): the repository's
``config/models.local.json`` for the local stack, and the operator's file, deployed with
the stack, on AWS. Adding an upstream is an edit of that file, never of code.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Collection, Sequence
from decimal import Decimal
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, model_validator

from batchgw.domain import money
from batchgw.domain.errors import BadRequest
from batchgw.domain.modes import PROVIDER_WINDOW, Mode, ModeChoice, choose_mode

Endpoint = Literal["/v1/chat/completions", "/v1/embeddings", "/v1/responses", "/v1/messages"]
ENDPOINTS: tuple[str, ...] = ("/v1/chat/completions", "/v1/embeddings", "/v1/responses", "/v1/messages")

# What each protocol's batch service runs (OpenAI's /v1/batches; Anthropic's message batches).
PROVIDER_BATCH_ENDPOINTS: dict[str, tuple[str, ...]] = {
    "openai": ("/v1/chat/completions", "/v1/embeddings", "/v1/responses"),
    "anthropic": ("/v1/messages",),
}

_ENV_REF = re.compile(r"\$\{(?P<name>[A-Z0-9_]+)(?::-(?P<default>[^}]*))?\}")


def expand_env(text: str, environ: dict[str, str] | None = None) -> str:
    """Expand ``${NAME}`` and ``${NAME:-default}`` references."""
    env = os.environ if environ is None else environ

    def sub(match: re.Match[str]) -> str:
        value = env.get(match.group("name"))
        return value if value else (match.group("default") or "")

    return _ENV_REF.sub(sub, text)


# Hosts that are the gateway's own machine: an ``auto`` route to one of them is local.
LOCAL_HOSTS = frozenset({"localhost", "127.0.0.1", "0.0.0.0", "host.docker.internal"})


class Price(BaseModel):
    model_config = ConfigDict(extra="forbid")

    input_per_mtok: Decimal = Field(ge=0)
    output_per_mtok: Decimal = Field(ge=0)

    def cost_nano(self, input_tokens: int, output_tokens: int) -> int:
        """The cost in billionths of a dollar: integer counters add up exactly."""
        return money.cost_nano(self.input_per_mtok, self.output_per_mtok, input_tokens, output_tokens)


class Route(BaseModel):
    """One way to reach a model. Batch work runs only on batch-allowed routes: by default the
    local ones (the gateway's own servers, never a cloud provider's quota or money), unless an
    administrator chose otherwise (``PATCH /admin/routing/provider-route-batch/...``)."""

    model_config = ConfigDict(extra="forbid")

    id: str = "primary"  # unique within the model
    protocol: Literal["openai", "anthropic"]
    base_url: str
    deployment_type: Literal["self_hosted", "provider_api", "auto"] = "auto"
    weight: int = Field(1, ge=0)  # share of the traffic; 0 takes none
    enabled: bool = True
    upstream_model: str | None = None  # the name the upstream knows; defaults to the model id
    api_key_env: str | None = None  # environment variable holding the key (local stack)
    api_key_secret: str | None = None  # Secrets Manager secret id holding the key (AWS)
    # The provider's own batch service may run batches of this route's model (OpenAI's
    # files + batches, Anthropic's message batches, as ``protocol`` says), at its batch
    # price: ``batch_price``, or the model's price times ``batch_discount``. Never on a
    # route the gateway runs itself.
    batch_api: bool = False
    batch_price: Price | None = None
    batch_discount: Decimal | None = Field(None, gt=0, le=1)

    @model_validator(mode="after")
    def _batch_api_off_its_own_servers(self) -> Route:
        if self.batch_api and self.deployment_type == "self_hosted":
            raise ValueError(f"route {self.id!r}: batch_api is for a provider's API, not a self-hosted route")
        if self.batch_price is not None and self.batch_discount is not None:
            raise ValueError(f"route {self.id!r}: give batch_price or batch_discount, not both")
        return self

    @property
    def local(self) -> bool:
        """Whether the gateway runs this route itself: ``self_hosted``, or ``auto`` on a host
        of this machine."""
        if self.deployment_type != "auto":
            return self.deployment_type == "self_hosted"
        return (urlsplit(self.base_url).hostname or "").lower() in LOCAL_HOSTS

    @property
    def serves_traffic(self) -> bool:
        return self.enabled and self.weight > 0


class ModelSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str = ""
    endpoints: list[Endpoint]
    routes: list[Route] = Field(min_length=1)
    price: Price | None = None
    max_concurrency: int | None = Field(None, ge=0)  # None: BATCH_MODEL_CONCURRENCY
    max_output_tokens: int | None = Field(None, ge=1)  # the most output a request may ask for
    roles: list[str] | None = None  # None: every role may use it

    @model_validator(mode="before")
    @classmethod
    def _one_route_or_several(cls, raw: Any) -> Any:
        """A model names its ``route``, or several ``routes``."""
        if isinstance(raw, dict) and "route" in raw:
            if "routes" in raw:
                raise ValueError("give a model 'route' or 'routes', not both")
            raw = {**raw, "routes": [raw["route"]]}
            del raw["route"]
        return raw

    @model_validator(mode="after")
    def _routes_agree(self) -> ModelSpec:
        ids = [route.id for route in self.routes]
        if len(set(ids)) != len(ids):
            raise ValueError(f"route ids repeat: {ids}")
        if len({route.protocol for route in self.routes}) > 1:
            raise ValueError("every route of a model speaks one protocol")
        return self

    @property
    def route(self) -> Route:
        """The first route: what the model's protocol is (every route speaks it)."""
        return self.routes[0]

    @property
    def protocol(self) -> str:
        return self.routes[0].protocol

    def upstream_model_on(self, route: Route) -> str:
        return route.upstream_model or self.id

    @property
    def upstream_model(self) -> str:
        return self.upstream_model_on(self.routes[0])

    @property
    def embeddings_only(self) -> bool:
        """An embedding model's backends follow their locality; they have no per-route choice."""
        return self.endpoints == ["/v1/embeddings"]

    def provider_batch_routes(self, endpoint: str) -> list[Route]:
        """The routes whose provider's batch service may run this model's ``endpoint`` at a
        batch price: enabled, with a batch service and price, not on the gateway's own
        servers, in the model's order."""
        native = PROVIDER_BATCH_ENDPOINTS.get(self.protocol, ())
        if endpoint not in native or endpoint not in self.endpoints:
            return []
        return [
            route
            for route in self.routes
            if route.enabled and route.batch_api and not route.local and self.batch_price_on(route)
        ]

    def provider_batch_route(self, endpoint: str, forbidden: Collection[str] = ()) -> Route | None:
        """The first of ``provider_batch_routes`` that is not one of the ``forbidden`` route
        ids (an administrator forbade batch work on those); None: none may run the model's
        batches (``batch_not_supported``)."""
        return next((r for r in self.provider_batch_routes(endpoint) if r.id not in forbidden), None)

    def batch_price_on(self, route: Route) -> Price | None:
        """What a request costs on ``route``'s batch service (None: it has no batch price)."""
        if route.batch_price is not None:
            return route.batch_price
        if route.batch_discount is None or self.price is None:
            return None
        return Price(
            input_per_mtok=self.price.input_per_mtok * route.batch_discount,
            output_per_mtok=self.price.output_per_mtok * route.batch_discount,
        )

    def translates(self, endpoint: str) -> bool:
        """Whether a request for ``endpoint`` runs here as a translated chat completion:
        a Messages request on a route that speaks the OpenAI protocol."""
        return endpoint == "/v1/messages" and self.protocol == "openai"


class Catalog(BaseModel):
    """The parsed config document, with lookups that apply the caller's access."""

    model_config = ConfigDict(extra="forbid")

    models: dict[str, ModelSpec]
    aliases: dict[str, str] = {}
    auto_models: list[str] = ["auto"]

    @model_validator(mode="after")
    def _link(self) -> Catalog:
        for model_id, spec in self.models.items():
            spec.id = model_id
        for alias, target in self.aliases.items():
            if target not in self.models:
                raise ValueError(f"alias {alias!r} names unknown model {target!r}")
        return self

    def is_auto(self, name: str) -> bool:
        return name in self.auto_models or any(name.startswith(f"{a}-") for a in self.auto_models)

    def resolve(self, name: str, role: str) -> ModelSpec:
        """The canonical model ``name`` (or its alias) pins, as ``role`` may use it.

        Raises BadRequest naming the model when it is unknown or the role may not use it:
        the two read the same, so a caller cannot probe for models they may not use.
        """
        canonical = self.aliases.get(name, name)
        spec = self.models.get(canonical)
        if spec is None or (spec.roles is not None and role not in spec.roles and role != "admin"):
            raise BadRequest(f"Model '{name}' not found", code="model_not_found")
        return spec

    def concurrency(self, spec: ModelSpec, default: int) -> int:
        return default if spec.max_concurrency is None else spec.max_concurrency


def load_catalog(path: str | Path, environ: dict[str, str] | None = None) -> Catalog:
    raw = json.loads(Path(path).read_text())
    for spec in raw.get("models", {}).values():
        for route in [spec.get("route", {}), *spec.get("routes", [])]:
            if isinstance(route, dict) and isinstance(route.get("base_url"), str):
                route["base_url"] = expand_env(route["base_url"], environ)
    return Catalog.model_validate(raw)


@lru_cache(maxsize=4)
def get_catalog(path: str) -> Catalog:
    return load_catalog(path)


# The route ids of a model an administrator forbade batch work on (``LiveConfig.forbidden_routes``).
Forbidden = Callable[[str], Collection[str]]


def _none_forbidden(model: str) -> Collection[str]:
    return ()


def execution_of(
    catalog: Catalog,
    requested: Mode,
    *,
    endpoint: str,
    models: Sequence[str],
    window: str,
    forbidden: Forbidden = _none_forbidden,
) -> tuple[ModeChoice | None, dict[str, list[str]] | None]:
    """Where a batch of ``models`` on ``endpoint`` runs (``domain.modes.choose_mode``), and,
    run on the provider, each model's batch price, fixed now ({model: [input, output]}
    dollars per million tokens). A route an administrator forbade (``forbidden``) is never
    one to run on. (None, None): it asked for the provider and may not (``not_on_provider``
    says why)."""
    prices: dict[str, list[str]] = {}
    cheaper = True
    for model in models:
        spec = catalog.models.get(model)
        route = None if spec is None else spec.provider_batch_route(endpoint, forbidden(model))
        price = None if spec is None or route is None else spec.batch_price_on(route)
        if spec is None or price is None:
            prices = {}
            break
        standard = spec.price
        cheaper = cheaper and standard is not None and _cheaper(price, standard)
        prices[model] = [str(price.input_per_mtok), str(price.output_per_mtok)]
    eligible = bool(models) and len(prices) == len(models)
    choice = choose_mode(requested, eligible=eligible, window=window, cheaper=cheaper)
    if choice is None:
        return None, None
    return choice, prices if choice.mode is Mode.PROVIDER else None


def not_on_provider(
    catalog: Catalog,
    *,
    endpoint: str,
    models: Sequence[str],
    window: str,
    forbidden: Forbidden = _none_forbidden,
) -> str:
    """Why a batch of ``models`` on ``endpoint`` with ``window`` may not run on a provider's
    batch service (``execution_of`` answered None): the words of ``batch_not_supported``."""
    if window != PROVIDER_WINDOW:
        return f"only a {PROVIDER_WINDOW} completion window runs on a provider's batch service"
    for model in models:
        spec = catalog.models.get(model)
        barred = forbidden(model)
        if spec is None or not barred or spec.provider_batch_route(endpoint, barred) is not None:
            continue
        ids = [r.id for r in spec.provider_batch_routes(endpoint) if r.id in barred]
        if ids:
            routes = "route " + ", ".join(f"'{i}'" for i in ids)
            which = "its only route" if len(ids) == 1 else "each of its routes"
            return (
                f"an administrator forbade batch work on {routes} of '{model}', {which} with a batch "
                f"service for {endpoint}"
            )
    named = ", ".join(repr(m) for m in models) or "its models"
    return f"no route of {named} has a batch price for {endpoint}"


def _cheaper(batch: Price, standard: Price) -> bool:
    """Whether ``batch`` costs less than ``standard``: no rate above it, one below."""
    rates = (batch.input_per_mtok, batch.output_per_mtok)
    standard_rates = (standard.input_per_mtok, standard.output_per_mtok)
    return all(b <= s for b, s in zip(rates, standard_rates, strict=True)) and rates != standard_rates


def price_of(prices: dict[str, list[str]] | None, model: str) -> Price | None:
    """A model's batch price as a provider-run batch fixed it (None: none fixed)."""
    fixed = (prices or {}).get(model)
    if fixed is None:
        return None
    return Price(input_per_mtok=Decimal(fixed[0]), output_per_mtok=Decimal(fixed[1]))
