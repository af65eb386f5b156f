"""Which route a provider-run batch may use: a route with a batch service and price, unless
an administrator forbade batch work on it (``LiveConfig.forbidden_routes``); provider mode
on a model whose every such route is forbidden is refused, saying so, and ``auto`` runs on
the gateway."""

from __future__ import annotations

from typing import Any, cast

from batchgw.config.catalog import Catalog, execution_of, not_on_provider
from batchgw.config.settings import Settings
from batchgw.domain.modes import Mode, ModeReason
from batchgw.domain.runtime import Overrides
from batchgw.live_config import LiveConfig

CHAT = "/v1/chat/completions"


def catalog() -> Catalog:
    def cloud(route_id: str) -> dict[str, Any]:
        return {
            "id": route_id,
            "protocol": "openai",
            "base_url": f"https://{route_id}.example/v1",
            "deployment_type": "provider_api",
            "batch_api": True,
            "batch_discount": "0.5",
        }

    here = {"id": "here", "protocol": "openai", "base_url": "http://127.0.0.1:1/v1"}
    price = {"input_per_mtok": 1, "output_per_mtok": 2}
    return Catalog.model_validate(
        {
            "models": {
                "one": {"endpoints": [CHAT], "routes": [here, cloud("cloud")], "price": price},
                "two": {"endpoints": [CHAT], "routes": [here, cloud("a"), cloud("b")], "price": price},
            }
        }
    )


def live(choices: dict[tuple[str, str], bool]) -> LiveConfig:
    config = LiveConfig(Settings.model_validate({}), cast(Any, None), catalog())
    config.overrides = Overrides(routes=choices)
    return config


def test_only_routes_an_administrator_forbade_are_kept_from_provider_batches() -> None:
    config = live({("one", "cloud"): False, ("one", "here"): True, ("two", "a"): True})
    assert config.forbidden_routes("one") == {"cloud"}
    assert config.forbidden_routes("two") == set()  # default and true alike allow it
    assert config.forbidden_routes("unknown") == set()


def test_provider_mode_takes_the_next_allowed_route_and_is_refused_naming_the_forbidden_ones() -> None:
    config = live({("two", "a"): False})
    spec = catalog().models["two"]
    assert spec.provider_batch_route(CHAT, config.forbidden_routes("two")) == spec.routes[2]  # b
    choice, prices = execution_of(
        catalog(),
        Mode.PROVIDER,
        endpoint=CHAT,
        models=["two"],
        window="24h",
        forbidden=config.forbidden_routes,
    )
    assert choice is not None and choice.mode is Mode.PROVIDER and prices is not None

    config = live({("one", "cloud"): False, ("two", "a"): False, ("two", "b"): False})
    for model, named in (
        ("one", "route 'cloud' of 'one', its only route"),
        ("two", "route 'a', 'b' of 'two', each of its routes"),
    ):
        kept = execution_of(
            catalog(),
            Mode.PROVIDER,
            endpoint=CHAT,
            models=[model],
            window="24h",
            forbidden=config.forbidden_routes,
        )
        assert kept == (None, None)
        why = not_on_provider(
            catalog(), endpoint=CHAT, models=[model], window="24h", forbidden=config.forbidden_routes
        )
        assert why == f"an administrator forbade batch work on {named} with a batch service for {CHAT}"
        auto, _ = execution_of(
            catalog(),
            Mode.AUTO,
            endpoint=CHAT,
            models=[model],
            window="24h",
            forbidden=config.forbidden_routes,
        )
        assert auto is not None and (auto.mode, auto.reason) == (Mode.GATEWAY, ModeReason.NO_BATCH_ROUTE)
    assert not_on_provider(catalog(), endpoint=CHAT, models=["one"], window="48h").startswith("only a 24h")
