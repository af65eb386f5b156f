"""``GET /v1/models`` read by the unmodified OpenAI SDK: the models a key may use, each with
its batch tier, prices and batch endpoints (spec 003), through the api handler on moto.

The SDK's own HTTP client (httpx2, in the SDK this project pins) gets a transport that hands
each request to the api handler as an API Gateway HTTP API event, so the SDK's parsing and
error mapping are the real ones.
"""

from __future__ import annotations

import json
from collections.abc import Callable

import httpx2
import openai
import pytest
from batchgw.deps import Deps

from functions.api import handler as api
from local.simulator import Simulator
from tests.integration.conftest import make_deps
from tests.support import FakeClock, LambdaContext, http_event

pytestmark = pytest.mark.usefixtures("aws_env")

CHAT, EMBED, RESPONSES, MESSAGES = "/v1/chat/completions", "/v1/embeddings", "/v1/responses", "/v1/messages"


@pytest.fixture
def deps(sim: Simulator, monkeypatch: pytest.MonkeyPatch) -> Deps:
    built = make_deps(sim, FakeClock())
    monkeypatch.setattr(api, "get_deps", lambda: built)
    return built


def through_api(request: httpx2.Request) -> httpx2.Response:
    event = http_event(
        request.method,
        request.url.path,
        key=None,
        query=request.url.query.decode(),
        headers=dict(request.headers),
        body=request.content.decode() or None,
    )
    answer = api.handler(event, LambdaContext())  # type: ignore[arg-type]
    return httpx2.Response(
        int(answer["statusCode"]), headers=answer.get("headers") or {}, content=answer.get("body") or ""
    )


@pytest.fixture
def client(deps: Deps) -> Callable[[str], openai.OpenAI]:
    def make(key: str) -> openai.OpenAI:
        return openai.OpenAI(
            base_url="http://gateway.test/v1",
            api_key=key,
            max_retries=0,
            http_client=httpx2.Client(transport=httpx2.MockTransport(through_api)),
        )

    return make


def test_the_sdk_lists_every_model_with_its_batch_tier_prices_and_batch_endpoints(
    client: Callable[[str], openai.OpenAI],
) -> None:
    listed = {model.id: model for model in client("sk-local-alice").models.list()}
    assert sorted(listed) == ["sim-chat", "sim-chat-only", "sim-claude", "sim-embed"]
    chat = listed["sim-chat"]
    assert chat.object == "model" and chat.owned_by == "batchgw" and isinstance(chat.created, int)
    extra = {name: chat.model_extra[name] for name in ("service_tiers", "pricing", "batch_endpoints")}  # type: ignore[index]
    assert extra["service_tiers"] == ["default", "batch"]
    # A batch run here costs what the model costs interactively (spec 000: no batch discount);
    # its provider's batch service, asked for with execution_mode "provider", costs half.
    usd = {"currency": "USD"}
    assert extra["pricing"] == {
        **usd,
        "input_per_mtok": 0.5,
        "output_per_mtok": 1.5,
        "batch": {**usd, "input_per_mtok": 0.5, "output_per_mtok": 1.5},
        "provider_batch": {**usd, "input_per_mtok": 0.25, "output_per_mtok": 0.75},
    }
    assert extra["batch_endpoints"] == [CHAT, RESPONSES, MESSAGES]  # Messages translated to chat
    assert listed["sim-embed"].model_extra["batch_endpoints"] == [EMBED]  # type: ignore[index]
    assert listed["sim-claude"].model_extra["batch_endpoints"] == [MESSAGES]  # type: ignore[index]
    assert listed["sim-embed"].model_extra["pricing"]["batch"]["input_per_mtok"] == 0.02  # type: ignore[index]


def test_the_sdk_reads_one_model_and_an_alias_reads_as_its_model(
    client: Callable[[str], openai.OpenAI],
) -> None:
    alice = client("sk-local-alice")
    assert alice.models.retrieve("sim-claude").model_extra["service_tiers"] == ["default", "batch"]  # type: ignore[index]
    assert alice.models.retrieve("sim-chat-latest").id == "sim-chat"
    with pytest.raises(openai.NotFoundError) as missing:
        alice.models.retrieve("no-such-model")
    assert missing.value.code == "model_not_found"


def test_an_unauthenticated_models_call_is_401_in_the_spec_error_shape(
    client: Callable[[str], openai.OpenAI],
) -> None:
    no_key = {"Authorization": openai.omit}  # the SDK sends no Authorization header at all
    for key, headers in (("sk-local-alice", no_key), ("sk-nobody", {})):
        with pytest.raises(openai.AuthenticationError) as refused:
            client(key).models.list(extra_headers=headers)
        assert refused.value.status_code == 401
        error = refused.value.response.json()["error"]
        assert set(error) == {"message", "type", "param", "code"}


def test_a_model_its_role_may_not_use_is_not_listed(
    deps: Deps, client: Callable[[str], openai.OpenAI]
) -> None:
    deps.catalog.models["sim-claude"].roles = ["admin"]
    assert "sim-claude" not in [model.id for model in client("sk-local-alice").models.list()]
    with pytest.raises(openai.NotFoundError):
        client("sk-local-alice").models.retrieve("sim-claude")
    assert "sim-claude" in [model.id for model in client("sk-local-admin").models.list()]


def test_no_batch_tier_where_batches_may_not_run(deps: Deps, client: Callable[[str], openai.OpenAI]) -> None:
    # A caller whose role may not create batches (below BATCH_MIN_ROLE) sees no batch tier.
    for model in client("sk-local-free").models.list():
        assert model.model_extra["service_tiers"] == ["default"]  # type: ignore[index]
        assert model.model_extra["batch_endpoints"] == [] and model.model_extra["pricing"]["batch"] is None  # type: ignore[index]
    # A model whose only route an administrator forbade batch work on takes no batches.
    deps.live.set_route_choice("sim-chat-only", "primary", False, by="user-admin", now=deps.clock())
    only = client("sk-local-alice").models.retrieve("sim-chat-only")
    assert only.model_extra["service_tiers"] == ["default"]  # type: ignore[index]
    assert only.model_extra["batch_endpoints"] == []  # type: ignore[index]


def test_with_batches_off_the_models_are_listed_without_the_batch_tier(
    sim: Simulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    off = make_deps(sim, FakeClock(), BATCH_ENABLED="false")
    monkeypatch.setattr(api, "get_deps", lambda: off)
    answer = api.handler(http_event("GET", "/v1/models"), LambdaContext())  # type: ignore[arg-type]
    assert answer["statusCode"] == 200
    assert all(m["service_tiers"] == ["default"] for m in json.loads(answer["body"])["data"])
