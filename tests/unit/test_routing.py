"""Which routes a batch request runs on: batch-allowed ones only, by weight, failing over
when a route refuses connections (against the simulator's two listeners)."""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest
from batchgw.config.catalog import Catalog, Route, load_catalog
from batchgw.config.settings import Settings
from batchgw.deps import Deps
from batchgw.domain.health import RouteHealth
from batchgw.domain.outcome import Outcome
from batchgw.domain.runtime import Overrides
from batchgw.live_config import LiveConfig
from batchgw.upstream import client as upstream
from batchgw.upstream import routing

from local.simulator import Simulator

CONFIG = Path(__file__).resolve().parents[2] / "config" / "models.local.json"


def route(route_id: str, base_url: str, **fields: Any) -> dict[str, Any]:
    return {"id": route_id, "protocol": "openai", "base_url": base_url, **fields}


def catalog_of(routes: list[dict[str, Any]]) -> Catalog:
    return Catalog.model_validate(
        {"models": {"m": {"endpoints": ["/v1/chat/completions"], "routes": routes}}}
    )


def deps_of(catalog: Catalog, choices: dict[tuple[str, str], bool] | None = None) -> Deps:
    live = LiveConfig(Settings.model_validate({}), cast(Any, None), catalog)
    live.overrides = Overrides(routes=dict(choices or {}))
    return cast(
        Deps, SimpleNamespace(live=live, route_health=RouteHealth(), catalog=catalog, settings=live.settings)
    )


@pytest.mark.parametrize(
    ("deployment_type", "base_url", "local"),
    [
        ("self_hosted", "http://10.0.0.5:8000/v1", True),
        ("provider_api", "http://127.0.0.1:8000/v1", False),
        ("auto", "http://localhost:8000/v1", True),
        ("auto", "http://127.0.0.1:8000/v1", True),
        ("auto", "http://0.0.0.0:8000/v1", True),
        ("auto", "http://host.docker.internal:8000/v1", True),
        ("auto", "http://10.0.0.5:8000/v1", False),
        ("auto", "https://api.openai.com/v1", False),
    ],
)
def test_a_route_is_local_by_its_deployment_type_or_its_host(
    deployment_type: str, base_url: str, local: bool
) -> None:
    assert Route(protocol="openai", base_url=base_url, deployment_type=deployment_type).local is local  # type: ignore[arg-type]


def test_batch_work_runs_only_on_local_routes_unless_an_administrator_chose() -> None:
    catalog = catalog_of(
        [route("own", "http://127.0.0.1:1/v1"), route("cloud", "https://api.example.com/v1")]
    )
    assert [r.id for r in deps_of(catalog).live.batch_routes("m")] == ["own"]
    chosen = deps_of(catalog, {("m", "cloud"): True, ("m", "own"): False})
    assert [r.id for r in chosen.live.batch_routes("m")] == ["cloud"]


def test_a_model_without_an_allowed_route_fails_its_requests_batch_route_unavailable() -> None:
    deps = deps_of(catalog_of([route("cloud", "https://api.example.com/v1")]))
    plan = routing.plan(deps, deps.catalog.models["m"], now=0)
    assert not plan.allowed and plan.routes == []
    outcome = routing.unavailable(deps.catalog.models["m"])
    assert outcome.kind == "failed" and outcome.error == {
        "code": "batch_route_unavailable",
        "status": 400,
        "message": "Model 'm' has no route that batch work may use.",
    }


def test_disabled_and_zero_weight_routes_make_requests_wait_not_fail() -> None:
    deps = deps_of(
        catalog_of(
            [
                route("off", "http://127.0.0.1:1/v1", enabled=False),
                route("zero", "http://127.0.0.1:2/v1", weight=0),
            ]
        )
    )
    plan = routing.plan(deps, deps.catalog.models["m"], now=0)
    assert plan.allowed and plan.routes == []
    assert routing.waiting(deps.catalog.models["m"], plan.retry_at, now=0).kind == "queued"


def test_traffic_spreads_by_weight() -> None:
    deps = deps_of(
        catalog_of([route("a", "http://127.0.0.1:1/v1", weight=3), route("b", "http://127.0.0.1:2/v1")])
    )
    rng = random.Random(7)
    first = Counter(
        routing.plan(deps, deps.catalog.models["m"], 0, rng.random).routes[0].id for _ in range(4000)
    )
    assert 0.72 < first["a"] / 4000 < 0.78  # 3 : 1


def test_a_route_that_refused_is_left_alone_until_its_circuit_closes() -> None:
    deps = deps_of(catalog_of([route("a", "http://127.0.0.1:1/v1"), route("b", "http://127.0.0.1:2/v1")]))
    spec = deps.catalog.models["m"]
    routing.note(deps, spec, Outcome("success", route="b", refused_routes=("a",)), now=100)
    assert [r.id for r in routing.plan(deps, spec, now=101).routes] == ["b"]
    routing.note(deps, spec, Outcome("retry", route="b", refused_routes=("b",), unreachable=True), now=102)
    plan = routing.plan(deps, spec, now=103)
    circuit = deps.settings.batch_route_circuit_seconds
    assert plan.routes == [] and plan.retry_at == 100 + circuit  # both open: wait
    assert {r.id for r in routing.plan(deps, spec, now=100 + circuit).routes} == {"a"}


def test_a_request_fails_over_to_the_next_route_when_one_refuses_connections() -> None:
    with Simulator(port=0, backup_port=0) as sim:
        catalog = load_catalog(
            CONFIG, {"BATCHGW_SIM_PORT": str(sim.port), "BATCHGW_SIM_BACKUP_PORT": str(sim.backup_port)}
        )
        spec = catalog.models["sim-chat"]
        primary, backup = spec.routes[0], spec.routes[1]
        body = {"model": "sim-chat", "messages": [{"role": "user", "content": "hi"}]}

        def run(routes: list[Route]) -> Outcome:
            return asyncio.run(
                upstream.run_request(
                    spec, routes, "/v1/chat/completions", body, timeout=5, anthropic_version=None
                )
            )

        assert run([backup, primary]).route == "backup"
        sim.set_backup(False)
        outcome = run([backup, primary])
        assert (
            outcome.kind == "success" and outcome.route == "primary" and outcome.refused_routes == ("backup",)
        )
        refused = run([backup])
        assert refused.kind == "retry" and refused.unreachable and refused.usage_known
        sim.set_backup(True)
        assert run([backup]).kind == "success"
        assert sim.stats()["routes"] == {"primary": 1, "backup": 2}


def test_every_model_of_the_local_config_has_a_batch_route() -> None:
    catalog = load_catalog(CONFIG)
    deps = deps_of(catalog)
    assert all(deps.live.batch_routes(model) for model in catalog.models)
    assert [r.id for r in deps.live.batch_routes("sim-chat")] == ["primary", "backup"]  # not "cloud"
