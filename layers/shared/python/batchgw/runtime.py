"""The live configuration of a process: the settings it was started with, the overrides
administrators stored since, and the rules for changing them.

Every process reads the overrides (one Query of the control table) when they are older than
``BATCHGW_RUNTIME_REFRESH_SECONDS``: the api on its next call, the worker before its next
request. A change made through this process applies at once; other processes see it within
the refresh interval. When the table cannot be read, a process keeps what it read last.

Both the admin API (``api.admin``) and the command line (``python -m batchgw.config``) change
settings through ``LiveConfig``, so the two validate alike.

May import: ``storage``, ``config``, ``domain``.
"""

from __future__ import annotations

import math
import os
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from batchgw.config.catalog import Catalog, ModelSpec, Route
from batchgw.config.settings import (
    RETIRED_SETTINGS,
    RUNTIME_SETTINGS,
    InvalidSetting,
    Settings,
    check_override,
    with_overrides,
)
from batchgw.domain.adaptive import Adaptive, Latency, Signal, cooling, decreased, growth
from batchgw.domain.errors import BadRequest, NotFound, StorageError
from batchgw.domain.interactive import (
    PEAK_HOLD_SECONDS,
    BatchShare,
    InteractiveLoad,
    batch_share,
    limited,
    peak,
)
from batchgw.domain.provider import runs_provider_batches
from batchgw.domain.runtime import Overrides
from batchgw.observability import logger
from batchgw.storage.adaptive import AdaptiveStore
from batchgw.storage.interactive import InteractiveLoadStore
from batchgw.storage.runtime import RuntimeStore
from batchgw.storage.slots import SlotState, SlotStore

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


# How old the interactive load a worker goes by may be: one Query four times a second at
# most, per process. Read once a second, a burst of interactive requests would queue at the
# model for up to a second before batch work gave way, and the peak held over the last
# PEAK_HOLD_SECONDS would be the most of three looks only, missing the spikes between them.
SHARES_MAX_AGE_SECONDS = 0.25
# The adaptive limits change at most once per cooldown: one Query a second at most.
LIMITS_MAX_AGE_SECONDS = 1.0
# How long a process goes by the last interactive load it read when a read fails (a
# transient error), before the load counts as unknown.
UNREADABLE_GRACE_SECONDS = 3.0


class BatchShares:
    """Each model's batch share now (``domain.interactive.batch_share``): its cap, less the
    interactive requests in flight that the reports say, less the reserve, held to the
    model's adaptive limit (``domain.adaptive``): the reports read at most every
    ``SHARES_MAX_AGE_SECONDS``, the limits every ``LIMITS_MAX_AGE_SECONDS``. While the reports
    cannot be read the load is unknown (no new batch request starts while the shared load
    counts); while the limits cannot be read, none holds (they only ever lower it)."""

    def __init__(
        self,
        live: LiveConfig,
        store: InteractiveLoadStore,
        limits: AdaptiveStore,
        clock: Callable[[], float],
        *,
        max_age: float = SHARES_MAX_AGE_SECONDS,
    ) -> None:
        self._live = live
        self._store = store
        self._limits = limits
        self._clock = clock
        self._max_age = max_age
        self._load: InteractiveLoad | None = None
        self._recent: list[tuple[float, InteractiveLoad]] = []  # the loads read lately, for ``peak``
        self._adaptive: dict[str, Adaptive] = {}
        self._read_at = -math.inf
        self._limits_read_at = -math.inf
        self._read_ok_at = -math.inf
        self._warned_unreadable = False
        self._reading = threading.Lock()

    def share(self, model: str, *, read: bool = True) -> BatchShare:
        """``model``'s batch share, the reports and limits read again first if that is due
        (never with ``read`` False: as last read)."""
        settings = self._live.settings
        cap = self._live.model_cap(model)[0]
        load = self.held(read=read) if settings.batch_yield_to_interactive else None
        share = batch_share(
            model,
            cap,
            load,
            yield_on=settings.batch_yield_to_interactive,
            shared_on=settings.batch_shared_interactive_load,
            reserve=settings.batch_interactive_reserve,
        )
        if not settings.batch_adaptive_concurrency:
            return share
        return limited(share, self.adaptive(model, read=read).current(self._clock(), cap))

    def adaptive(self, model: str, *, read: bool = True) -> Adaptive:
        """``model``'s adaptive limit (unconstrained: no limit), read again if it is due
        (never with ``read`` False: as last read)."""
        if read:
            self.refresh()
        return self._adaptive.get(model, Adaptive())

    def fresh(self) -> bool:
        """Whether ``share`` answers now without reading the table."""
        return self._clock() - self._read_at < self._max_age

    def recent(self) -> bool:
        """Whether the last read is recent enough to go by while the next one is made
        (within twice ``max_age``: ``run.slot.share_of``)."""
        return self._clock() - self._read_at < 2 * self._max_age

    def load(self) -> InteractiveLoad | None:
        """The summed live reports, at most ``max_age`` old; None while unreadable."""
        self.refresh()
        return self._load

    def held(self, *, read: bool = True) -> InteractiveLoad | None:
        """The load batch work gives way to: each model's most in flight in the loads read
        over the last ``PEAK_HOLD_SECONDS`` (``domain.interactive.peak``); None while unreadable."""
        if read:
            self.refresh()
        return None if self._load is None else peak(self._recent, self._clock())

    def refresh(self) -> None:
        """Read the reports (and the limits) again if that is due."""
        if self._clock() - self._read_at < self._max_age:
            return
        # One read at a time: a chain that finds a read under way waits for it, instead of
        # going by a load not read yet (None: unknown, and no batch request would start).
        with self._reading:
            now = self._clock()
            if now - self._read_at < self._max_age:
                return
            self._read(now)

    def _read(self, now: float) -> None:
        try:
            reports = self._store.reports()
        except StorageError:
            # One failed read keeps what was read last, for a moment; unreadable for longer
            # (or never read), the load is unknown.
            if now - self._read_ok_at > UNREADABLE_GRACE_SECONDS:
                if self._load is not None or not self._warned_unreadable:
                    logger.warning("interactive load unreadable: no new batch request starts", exc_info=True)
                    self._warned_unreadable = True
                self._load = None
        else:
            self._load = InteractiveLoad.of(reports, now)
            self._recent = [(at, load) for at, load in self._recent if now - at <= PEAK_HOLD_SECONDS]
            self._recent.append((now, self._load))
            self._read_ok_at = now
            self._warned_unreadable = False
        if self._live.settings.batch_adaptive_concurrency and now - self._limits_read_at >= max(
            self._max_age, LIMITS_MAX_AGE_SECONDS
        ):
            try:
                self._adaptive = self._limits.read()
            except StorageError:
                logger.warning("adaptive limits unreadable: none holds", exc_info=True)
                self._adaptive = {}
            self._limits_read_at = now
        self._read_at = now  # fresh once read: a chain looking meanwhile waits for it above

    def forget(self) -> None:
        """Read everything again at the next look (this process just changed something)."""
        self._read_at = self._limits_read_at = -math.inf


# How often a process reads how many of a model's slots batch chains hold (``SlotRoom``): a
# Query per model twice a second at most. Chains that end while interactive traffic holds
# the rest of the share leave no room then; when the traffic ends, the room it leaves is
# filled by splits only once two reads have seen it. Read every 2 s, a yield run's batch
# held 8 or 9 of its 15 slots for the first 5 s of its last quiet phase, its splits
# 4.3-5.5 s in, and used 0.58 of that phase; read every 0.5 s, 15 within 2 s, its splits
# 1.7-1.9 s in, and 0.76 and 0.75 in two runs. (A full yield run had measured the two the
# same, 0.860 and 0.865, when other losses hid it.)
ROOM_READ_SECONDS = 0.5


class SlotRoom:
    """Room in a model's batch share that no chain holds: its batch slots less the slots
    held, the smaller of the last two reads (at most one every ``ROOM_READ_SECONDS``), so a
    chain between its stop and its return is not taken for room. Each read's room is handed
    out once in this process, to the splits that take it (``run.chain``); other processes may hand it
    out too, and a chain split off without a slot waits for one like any other."""

    def __init__(
        self, shares: BatchShares, running: Callable[[str], int], clock: Callable[[], float]
    ) -> None:
        self._shares = shares
        self._running = running
        self._clock = clock
        self._lock = threading.Lock()
        self._read: dict[str, tuple[float, int]] = {}  # model: (read at, room then)
        self._left: dict[str, int] = {}  # model: room of the last two reads not handed out yet
        # (model, batch): when chains of the batch that ended gave their slots
        self._given: dict[tuple[str, str], list[float]] = {}

    def due(self, model: str) -> bool:
        """Whether ``take`` reads the table now (else it answers at once)."""
        read = self._read.get(model)
        return read is None or self._clock() - read[0] >= ROOM_READ_SECONDS

    def take(self, model: str, batch_id: str | None = None, most: int = 1) -> int:
        """Up to ``most`` units of ``model``'s room that are left (one a chain of ``batch_id``
        gave first, then the reads'), each handed out once: how many (0: none)."""
        with self._lock:
            key = (model, batch_id or "")
            given = [at for at in self._given.pop(key, []) if self._clock() - at < ROOM_READ_SECONDS]
            taken = 0
            if given:
                self._given[key] = given[1:]
                taken = 1
            if taken < most:
                if self.due(model):
                    self._look(model)
                more = max(0, min(most - taken, self._left.get(model, 0)))
                self._left[model] = self._left.get(model, 0) - more
                taken += more
            return taken

    def give(self, model: str, batch_id: str) -> None:
        """One unit of ``model``'s room, from a chain of batch ``batch_id`` in this process
        that ended for good with its slot in hand: free at once for a split of another of
        that batch's chains (the batch's end runs on as many chains as it had), not only
        from the reads that confirm it two reads later. Taken once, before any read's room;
        not taken within ``ROOM_READ_SECONDS``, it is left to the reads (another chain may
        hold it by then)."""
        with self._lock:
            self._given.setdefault((model, batch_id), []).append(self._clock())

    def _look(self, model: str) -> None:
        now = self._clock()
        try:
            room = max(0, self._shares.share(model).slots - self._running(model))
        except StorageError:
            room = 0
        last = self._read.get(model)
        recent = last is not None and now - last[0] <= 2 * ROOM_READ_SECONDS
        self._left[model] = min(room, last[1]) if recent and last is not None else 0
        self._read[model] = (now, room)


# How old a process's view of a model's slot map may be when a chain asks whether its batch
# gives way to one waiting (``SlotBoard``): a Get per model every 2 s at most, per process.
BOARD_SECONDS = 2.0
# How long a chain that waited in place and went for a slot it saw free counts against that
# room for the other chains of its process (``SlotBoard.going``), unless it holds the slot
# sooner (``SlotBoard.arrived``): about as long as its way to the slot write takes, after
# which the board holds its slot, or another process's.
GOING_SECONDS = 0.5


class SlotBoard:
    """This process's view of each model's slot map, read at most every ``BOARD_SECONDS``
    and kept up to date with this process's own takes and releases between reads: which
    batches hold slots and which wait (``domain.fairness``)."""

    def __init__(self, slots: SlotStore, clock: Callable[[], float]) -> None:
        self._slots = slots
        self._clock = clock
        self._lock = threading.Lock()
        self._seen: dict[str, tuple[float, SlotState]] = {}  # model: (read at, as read or updated)
        self._going: dict[str, list[float]] = {}  # model: when chains waiting in place went for a slot

    def due(self, model: str) -> bool:
        """Whether ``look`` reads the table now (else it answers at once)."""
        seen = self._seen.get(model)
        return seen is None or self._clock() - seen[0] >= BOARD_SECONDS

    def look(self, model: str) -> SlotState:
        """The model's slot map, as read at most ``BOARD_SECONDS`` ago. Unreadable: as last
        seen (nobody waits, if never)."""
        if self.due(model):
            try:
                self.saw(model, self._slots.read(model))
            except StorageError:
                logger.warning("slot map unreadable", extra={"model": model}, exc_info=True)
                with self._lock:
                    self._seen.setdefault(model, (self._clock(), SlotState({}, 0.0)))
        return self._seen[model][1]

    def last(self, model: str) -> SlotState:
        """The model's slot map as last seen, read or not (never reads: nobody waits, if
        never seen)."""
        seen = self._seen.get(model)
        return SlotState({}, 0.0) if seen is None else seen[1]

    def going(self, model: str, slots: int) -> bool:
        """Whether one more chain of this process that waits in place for a slot of
        ``model`` goes for one now: the model's batch ``slots`` less those held (as last
        seen) less the chains of this process that went for one in the last
        ``GOING_SECONDS`` and do not hold it yet (``arrived``). True once per unit of
        room so seen; the other chains wait on, instead of each making its way to the slot
        write for the one slot (a mark, a claim, the write refused, the claim given back)."""
        with self._lock:
            now = self._clock()
            gone = self._still_going(model, now)
            seen = self._seen.get(model)
            held = 0 if seen is None else seen[1].running(now)
            go = held + len(gone) < slots
            self._going[model] = [*gone, now] if go else gone
            return go

    def arrived(self, model: str) -> None:
        """A chain that went for a slot of ``model`` (``going``) holds it now: the board
        counts it among the holders. Counted as going as well, it held the room of another
        chain back until ``GOING_SECONDS`` had passed: in a yield run, the last four slots a
        burst left filled half a second late."""
        with self._lock:
            self._going[model] = self._still_going(model, self._clock())[1:]  # the oldest that counts

    def _still_going(self, model: str, now: float) -> list[float]:
        """When the chains of this process that went for a slot of ``model`` and still count
        as going went, oldest first (the lock held)."""
        return [at for at in self._going.get(model, []) if now - at < GOING_SECONDS]

    def saw(self, model: str, state: SlotState) -> None:
        """The slot map as a read or a write of this process just returned it."""
        with self._lock:
            self._seen[model] = (self._clock(), state)

    def took(self, model: str, token: str, until: float) -> None:
        self._change(model, lambda holders: holders.__setitem__(token, until))

    def let_go(self, model: str, token: str) -> None:
        self._change(model, lambda holders: holders.pop(token, None))

    def _change(self, model: str, change: Callable[[dict[str, float]], object]) -> None:
        with self._lock:
            seen = self._seen.get(model)
            if seen is None:
                return
            at, state = seen
            holders = dict(state.holders)
            change(holders)
            self._seen[model] = (at, replace(state, holders=holders))


# How often a process adds the healthy answers it saw to a constrained model's limit.
GROWTH_SECONDS = 1.0


class Backpressure:
    """What this process's batch answers say of each model's upstream (``domain.adaptive``):
    a saturation answer, or latency rising, lowers the model's adaptive limit for the whole
    deployment (at most once per cooldown); healthy answers raise it, added up here and
    written at most once a second per model."""

    def __init__(
        self,
        live: LiveConfig,
        shares: BatchShares,
        limits: AdaptiveStore,
        running: Callable[[str], int],
        clock: Callable[[], float],
    ) -> None:
        self._live = live
        self._shares = shares
        self._limits = limits
        self._running = running  # batch requests a model runs now, across the deployment
        self._clock = clock
        self._lock = threading.Lock()
        self._latency: dict[str, Latency] = {}
        self._healthy: dict[str, int] = {}
        self._grown_at: dict[str, float] = {}

    def note(self, model: str, signal: Signal, latency_ms: float) -> Signal | None:
        """One batch answer of ``model``, its signal and latency; what to ``act`` on (without
        a read or a write here: the chain's loop calls this for every answer)."""
        if not self._live.settings.batch_adaptive_concurrency or signal is Signal.NONE:
            return None
        now = self._clock()
        state = self._shares.adaptive(model, read=False)
        with self._lock:
            if signal is Signal.HEALTHY:
                factor = self._live.settings.batch_adaptive_latency_factor
                latency, rising = self._latency.get(model, Latency()).observe(latency_ms, factor)
                self._latency[model] = latency
                if rising:
                    signal = Signal.LATENCY
                else:
                    self._healthy[model] = self._healthy.get(model, 0) + 1
                    grow_due = now - self._grown_at.get(model, -math.inf) >= GROWTH_SECONDS
                    return Signal.HEALTHY if state.limit is not None and grow_due else None
        return None if cooling(state, now) else signal

    def act(self, model: str, signal: Signal) -> None:
        """Lower (a saturation signal) or raise (healthy) ``model``'s limit, as ``note`` said.
        Advice, never in the way: a failure here is logged, and the answer that caused it is
        recorded all the same."""
        try:
            if signal is Signal.HEALTHY:
                self._grow(model)
            else:
                self._shrink(model, signal)
        except Exception:
            logger.warning("adaptive limit not changed", extra={"model": model}, exc_info=True)

    def _shrink(self, model: str, signal: Signal) -> None:
        now = self._clock()
        state = self._shares.adaptive(model)
        if cooling(state, now):
            return  # lowered lately (as this process last read it)
        ceiling = self._live.model_cap(model)[0]
        lower = decreased(state, running=self._running(model), ceiling=ceiling, why=signal, now=now)
        if lower is None:
            return
        with self._lock:
            self._healthy[model] = 0
        if self._limits.decrease(model, lower, now=now):
            logger.info(
                "adaptive limit lowered",
                extra={"model": model, "limit": round(lower.limit or 0, 2), "why": signal.value},
            )
        self._shares.forget()

    def _grow(self, model: str) -> None:
        now = self._clock()
        state = self._shares.adaptive(model)
        ceiling = self._live.model_cap(model)[0]
        with self._lock:
            if now - self._grown_at.get(model, -math.inf) < GROWTH_SECONDS or cooling(state, now):
                return
            healthy, self._healthy[model] = self._healthy.get(model, 0), 0
            self._grown_at[model] = now
        if state.limit is None:
            return
        if state.current(now, ceiling) is None:  # grown back to the cap: the model is free again
            self._limits.lift(model, decreased_at=state.decreased_at)
        else:
            by = growth(state, healthy=healthy, ceiling=ceiling, now=now)
            if by <= 0:
                return
            self._limits.increase(model, by, now=now)
        self._shares.forget()
