"""The models a gateway serves: names, aliases, routes and prices, from one config document.

The document is a JSON file (``BATCHGW_MODELS_CONFIG``): the repository's
``config/models.local.json`` for the local stack, and the operator's file, deployed with
the stack, on AWS. Adding an upstream is an edit of that file, never of code.
"""

from __future__ import annotations

import json
import os
import re
from decimal import Decimal
from functools import lru_cache
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from batchgw.domain import money
from batchgw.domain.errors import BadRequest

Endpoint = Literal["/v1/chat/completions", "/v1/embeddings", "/v1/responses", "/v1/messages"]
ENDPOINTS: tuple[str, ...] = ("/v1/chat/completions", "/v1/embeddings", "/v1/responses", "/v1/messages")

_ENV_REF = re.compile(r"\$\{(?P<name>[A-Z0-9_]+)(?::-(?P<default>[^}]*))?\}")


def expand_env(text: str, environ: dict[str, str] | None = None) -> str:
    """Expand ``${NAME}`` and ``${NAME:-default}`` references."""
    env = os.environ if environ is None else environ

    def sub(match: re.Match[str]) -> str:
        value = env.get(match.group("name"))
        return value if value else (match.group("default") or "")

    return _ENV_REF.sub(sub, text)


class Route(BaseModel):
    model_config = ConfigDict(extra="forbid")

    protocol: Literal["openai", "anthropic"]
    base_url: str
    deployment_type: Literal["self_hosted", "provider_api", "auto"] = "auto"
    upstream_model: str | None = None  # the name the upstream knows; defaults to the model id
    api_key_env: str | None = None  # environment variable holding the key (local stack)
    api_key_secret: str | None = None  # Secrets Manager secret id holding the key (AWS)


class Price(BaseModel):
    model_config = ConfigDict(extra="forbid")

    input_per_mtok: Decimal = Field(ge=0)
    output_per_mtok: Decimal = Field(ge=0)

    def cost_nano(self, input_tokens: int, output_tokens: int) -> int:
        """The cost in billionths of a dollar: integer counters add up exactly."""
        return money.cost_nano(self.input_per_mtok, self.output_per_mtok, input_tokens, output_tokens)


class ModelSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str = ""
    endpoints: list[Endpoint]
    route: Route
    price: Price | None = None
    max_concurrency: int | None = Field(None, ge=0)  # None: BATCH_MODEL_CONCURRENCY
    max_output_tokens: int | None = Field(None, ge=1)  # the most output a request may ask for
    roles: list[str] | None = None  # None: every role may use it

    @property
    def upstream_model(self) -> str:
        return self.route.upstream_model or self.id

    def translates(self, endpoint: str) -> bool:
        """Whether a request for ``endpoint`` runs here as a translated chat completion:
        a Messages request on a route that speaks the OpenAI protocol."""
        return endpoint == "/v1/messages" and self.route.protocol == "openai"


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
        route = spec.get("route", {})
        if isinstance(route.get("base_url"), str):
            route["base_url"] = expand_env(route["base_url"], environ)
    return Catalog.model_validate(raw)


@lru_cache(maxsize=4)
def get_catalog(path: str) -> Catalog:
    return load_catalog(path)
