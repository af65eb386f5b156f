"""Which routes a request may run on, and in what order.

A batch request runs only on its model's batch-allowed routes (``LiveConfig.batch_allowed``):
selection, retries and failover all stay among them; an interactive request (the
reference interactive path, ``batchgw.passthrough``) on any of its model's routes, whatever
batch work may use. The order is a weighted random one, so traffic spreads by the
routes' weights; a route that is disabled or has weight 0 takes none, and one that refused
a connection is left alone for BATCH_ROUTE_CIRCUIT_SECONDS (its circuit is open). With no
batch-allowed route at all, the request fails ``batch_route_unavailable``; with allowed
routes but none usable now, it waits, as for a model waiting for capacity.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

from batchgw.config.catalog import ModelSpec, Route
from batchgw.deps import Deps
from batchgw.domain.outcome import Outcome

ROUTE_UNAVAILABLE = "batch_route_unavailable"


@dataclass(frozen=True)
class RoutePlan:
    routes: list[Route]  # the order to try them in (empty: none may take the request now)
    allowed: bool  # whether the model has a batch-allowed route at all
    retry_at: float | None = None  # when an open circuit closes, if that is what holds it back


def plan(
    deps: Deps,
    spec: ModelSpec,
    now: float,
    rand: Callable[[], float] = random.random,
    *,
    interactive: bool = False,
) -> RoutePlan:
    """The routes a batch request of ``spec`` tries now, in order (``interactive``: an
    interactive request's, among every route of the model)."""
    allowed = list(spec.routes) if interactive else deps.live.batch_routes(spec.id)
    if not allowed:
        return RoutePlan([], allowed=False)
    serving = [route for route in allowed if route.serves_traffic]
    closed = [r for r in serving if deps.route_health.down_until(spec.id, r.id) <= now]
    if closed:
        # A weighted random order: each route's key is U ** (1 / weight), largest first.
        return RoutePlan(sorted(closed, key=lambda r: rand() ** (1 / r.weight), reverse=True), allowed=True)
    reopen = [deps.route_health.down_until(spec.id, r.id) for r in serving]
    return RoutePlan([], allowed=True, retry_at=min(reopen) if reopen else None)


def unavailable(spec: ModelSpec) -> Outcome:
    """The outcome of a request whose model has no batch-allowed route: it fails, nothing sent."""
    return Outcome(
        "failed",
        status_code=400,
        error={
            "code": ROUTE_UNAVAILABLE,
            "status": 400,
            "message": f"Model '{spec.id}' has no route that batch work may use.",
        },
    )


def waiting(spec: ModelSpec, retry_at: float | None, now: float) -> Outcome:
    """The outcome of a request none of whose allowed routes may take it now: it waits, using
    no attempt (as a model waiting for capacity does)."""
    return Outcome(
        "queued",
        status_code=503,
        retry_after=None if retry_at is None else max(1.0, retry_at - now),
        error={
            "code": "service_unavailable",
            "status": 503,
            "message": f"Every batch route of '{spec.id}' is disabled, weighted 0 or refusing connections.",
        },
    )


def note(deps: Deps, spec: ModelSpec, outcome: Outcome, now: float) -> None:
    """Open the circuit of each route that refused the connection; close the answering one's."""
    for route in outcome.refused_routes:
        deps.route_health.refused(spec.id, route, now + deps.settings.batch_route_circuit_seconds)
    if outcome.route is not None and not outcome.unreachable:
        deps.route_health.answered(spec.id, outcome.route)
