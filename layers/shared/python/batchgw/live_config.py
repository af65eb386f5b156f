"""The live configuration of a process: the settings it was started with, the overrides
administrators stored since, and the rules for changing them.

Every process reads the overrides (one Query of the control table) when they are older than
``BATCHGW_RUNTIME_REFRESH_SECONDS``: the api on its next call, the worker before its next
request. A change made through this process applies at once; other processes see it within
the refresh interval. When the table cannot be read, a process keeps what it read last.

Both the admin API (``api.admin``) and the command line (``python -m batchgw.config``) change
settings through ``LiveConfig``, so the two validate alike. What a process makes of the
settings to schedule batch work (shares, room, backpressure) is ``scheduling``'s.

May import: ``storage``, ``config``, ``domain``.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Mapping
from typing import Any

from batchgw.config.catalog import Catalog, ModelSpec, Route
from batchgw.config.overrides import (
    RETIRED_SETTINGS,
    RUNTIME_SETTINGS,
    InvalidSetting,
    check_override,
    with_overrides,
)
from batchgw.config.settings import Settings
from batchgw.domain.errors import BadRequest, NotFound, StorageError
from batchgw.domain.provider import runs_provider_batches
from batchgw.domain.runtime import Overrides
from batchgw.observability import logger
from batchgw.storage.runtime import RuntimeStore

# Where a model's cap comes from (``GET /admin/batch/models``).
CAP_FROM_ADMIN = "admin"
CAP_FROM_MODELS_CONFIG = "models_config"
CAP_FROM_DEFAULT = "BATCH_MODEL_CONCURRENCY"


class LiveConfig:
    def __init__(
        self,
        base: Settings,
        store: RuntimeStore,
        catalog: Catalog | None = None,
        *,
        environ: Mapping[str, str] | None = None,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.base = base  # what the environment says: each setting's default
        self.settings = base  # what this process runs with
        self.overrides = Overrides()
        self._refused: dict[str, str] = {}  # stored overrides this process ignores, and why
        self._store = store
        self._catalog = catalog
        self._environ = os.environ if environ is None else environ
        self._monotonic = monotonic
        self._read_at = -math.inf
        self._warned: set[tuple[str, str]] = set()

    # --- reading ------------------------------------------------------------------------------

    def due(self) -> bool:
        return self._monotonic() - self._read_at >= self.base.runtime_refresh_seconds

    @property
    def accounts_version(self) -> int:
        """How many changes administrators made to accounts, as last read."""
        return self.overrides.accounts_version

    def note_accounts_changed(self) -> None:
        """An administrator changed an account here: count it for every other process, and
        read it back (this process forgets its cached keys at its next look)."""
        self._store.note_accounts_changed()
        self.refresh(force=True)

    def refresh(self, *, force: bool = False) -> None:
        """Read the stored overrides again if what this process has is too old (or ``force``)."""
        if not force and not self.due():
            return
        try:
            overrides = self._store.read()
        except StorageError:
            logger.warning("runtime overrides unreadable; keeping the last read", exc_info=True)
            self._read_at = self._monotonic()
            return
        self._apply(overrides)

    def _apply(self, overrides: Overrides) -> None:
        settings, refused = with_overrides(self.base, overrides.settings)
        was_enabled = self.settings.batch_enabled
        self.settings, self.overrides, self._refused = settings, overrides, refused
        self._read_at = self._monotonic()
        for name, why in refused.items():
            self._warn_once(name, overrides.settings[name], why)
        for name in RETIRED_SETTINGS:
            if name in self._environ:
                self._warn_once(name, self._environ[name], "set in the environment")
        if was_enabled != settings.batch_enabled:
            logger.warning("batch inference %s", "enabled" if settings.batch_enabled else "disabled")

    def _warn_once(self, name: str, value: str, why: str) -> None:
        if (name, value) in self._warned:
            return
        self._warned.add((name, value))
        if name in RETIRED_SETTINGS:
            logger.warning(
                "retired setting %s is ignored (%s): %s; delete it once no older release runs",
                name,
                RETIRED_SETTINGS[name],
                why,
                extra={"setting": name, "value": value},
            )
        else:
            extra = {"setting": name, "value": value}
            logger.warning("stored override %s ignored: %s", name, why, extra=extra)

    # --- settings -----------------------------------------------------------------------------

    def describe(self) -> list[dict[str, Any]]:
        """Every runtime setting: its value now, its default (the environment's value, else
        the built-in one), where the value comes from, and what it means."""
        out = []
        for name, field_name in RUNTIME_SETTINGS.items():
            field = Settings.model_fields[field_name]
            if name in self.overrides.settings and name not in self._refused:
                source = "runtime"
            elif field_name in self.base.model_fields_set:
                source = "environment"
            else:
                source = "default"
            out.append(
                {
                    "name": name,
                    "value": getattr(self.settings, field_name),
                    "default": getattr(self.base, field_name),
                    "source": source,
                    "description": field.description,
                }
            )
        return out

    def describe_one(self, name: str) -> dict[str, Any]:
        self._known(name)
        return next(entry for entry in self.describe() if entry["name"] == name)

    def set_setting(self, name: str, value: Any, *, by: str, now: float) -> dict[str, Any]:
        """Override a runtime setting; 404 for an unknown name, 400 for a value it refuses
        (nothing is stored then)."""
        if name in RETIRED_SETTINGS:
            raise BadRequest(
                f"{name} is retired ({RETIRED_SETTINGS[name]}) and cannot be set; "
                f"DELETE /admin/config/{name} removes a stored value.",
                param="name",
                code="setting_retired",
            )
        self._known(name)
        try:
            text = check_override(self.base, name, value)
        except InvalidSetting as exc:
            message = f"Invalid value for {name}: {exc}."
            raise BadRequest(message, param="value", code="invalid_setting") from exc
        self._store.set_setting(name, text, by=by, now=now)
        self.refresh(force=True)
        logger.info("setting overridden", extra={"setting": name, "value": text, "by": by})
        return self.describe_one(name)

    def reset_setting(self, name: str, *, by: str) -> dict[str, Any]:
        """Drop a setting's override: it takes its default again."""
        if name in RETIRED_SETTINGS:
            removed = self._store.reset_setting(name)
            self.refresh(force=True)
            return {"name": name, "deleted": removed, "retired": True}
        self._known(name)
        self._store.reset_setting(name)
        self.refresh(force=True)
        logger.info("setting reset", extra={"setting": name, "by": by})
        return self.describe_one(name)

    @staticmethod
    def _known(name: str) -> None:
        if name not in RUNTIME_SETTINGS:
            raise NotFound(f"No runtime setting named {name}.", code="setting_not_found")

    # --- model caps ---------------------------------------------------------------------------

    def model_cap(self, model: str) -> tuple[int, str]:
        """The batch requests ``model`` may run at once across the deployment, and where
        that figure comes from: an administrator's cap, the models config, or the default."""
        if model in self.overrides.caps:
            return self.overrides.caps[model], CAP_FROM_ADMIN
        spec = self._catalog.models.get(model) if self._catalog is not None else None
        if spec is not None and spec.max_concurrency is not None:
            return spec.max_concurrency, CAP_FROM_MODELS_CONFIG
        return self.settings.batch_model_concurrency, CAP_FROM_DEFAULT

    def unpaused_cap(self, model: str) -> int:
        """The cap ``model`` has when an administrator has not set it to 0 (how many chains
        a new batch gets, so that lifting a pause brings its full pace back)."""
        cap = self.model_cap(model)[0]
        if cap:
            return cap
        spec = self._catalog.models.get(model) if self._catalog is not None else None
        configured = spec.max_concurrency if spec is not None else None
        return configured or self.base.batch_model_concurrency or 1

    # --- batch-allowed routes -------------------------------------------------------------

    def route_choice(self, spec: ModelSpec, route: Route) -> bool | None:
        """An administrator's choice for batch work on ``route`` (None: none; an embedding
        model's routes have none, they follow their locality)."""
        if spec.embeddings_only:
            return None
        return self.overrides.routes.get((spec.id, route.id))

    def batch_allowed(self, spec: ModelSpec, route: Route) -> bool:
        """Whether batch work may use ``route``: the administrator's choice, else whether the
        gateway runs the route itself."""
        choice = self.route_choice(spec, route)
        return route.local if choice is None else choice

    def batch_routes(self, model: str) -> list[Route]:
        """The routes of ``model`` batch work may use (none for an unknown model)."""
        spec = self._catalog.models.get(model) if self._catalog is not None else None
        return [] if spec is None else [route for route in spec.routes if self.batch_allowed(spec, route)]

    def forbidden_routes(self, model: str) -> frozenset[str]:
        """The ids of ``model``'s routes that provider-run batches may not use: those an
        administrator forbade batch work on (``domain.provider.runs_provider_batches``)."""
        spec = self._catalog.models.get(model) if self._catalog is not None else None
        if spec is None:
            return frozenset()
        return frozenset(
            route.id for route in spec.routes if not runs_provider_batches(self.route_choice(spec, route))
        )

    def set_route_choice(self, model: str, route: str, allowed: bool | None, *, by: str, now: float) -> None:
        self._store.set_route(model, route, allowed, by=by, now=now)
        self.refresh(force=True)
        logger.info(
            "route batch choice set", extra={"model": model, "route": route, "allowed": allowed, "by": by}
        )

    def set_model_cap(self, model: str, cap: int | None, *, by: str, now: float) -> None:
        self._store.set_cap(model, cap, by=by, now=now)
        self.refresh(force=True)
        logger.info("model cap set", extra={"model": model, "cap": cap, "by": by})
