"""Users and API keys through the admin API (the api handler, on moto)."""

from __future__ import annotations

import base64
import json
from typing import Any

import httpx
import openai
import pytest
from batchgw.api import auth, files, idempotency
from batchgw.deps import Deps
from batchgw.domain.principal import Principal
from batchgw.storage import aws
from batchgw.storage.spend import Payer
from openai import OpenAI

from functions.admin import handler as admin
from functions.api import handler as api
from local.simulator import Simulator
from tests.integration.conftest import chat_request, make_deps
from tests.support import FakeClock, LambdaContext, http_event

pytestmark = pytest.mark.usefixtures("aws_env")
ADMIN, ALICE = "sk-local-admin", "sk-local-alice"


@pytest.fixture
def world(sim: Simulator, monkeypatch: pytest.MonkeyPatch) -> tuple[Deps, FakeClock]:
    clock = FakeClock()
    deps = make_deps(sim, clock)
    monkeypatch.setattr(api, "get_deps", lambda: deps)
    monkeypatch.setattr(admin, "get_deps", lambda: deps)
    auth.forget_keys()
    return deps, clock


def call(
    method: str, path: str, key: str | None, body: Any = None, headers: dict[str, str] | None = None
) -> tuple[int, Any]:
    event = http_event(method, path, key=key, body=body, headers=headers)
    function = admin if path.startswith("/admin/") else api  # as the HTTP API routes
    response = function.handler(event, LambdaContext())  # type: ignore[arg-type]
    return int(response["statusCode"]), json.loads(response.get("body") or "null")


def new_user(role: str = "internal", **quotas: Any) -> str:
    status, user = call(
        "POST", "/admin/users", ADMIN, {"name": "Carol", "email": "carol@example.com", "role": role, **quotas}
    )
    assert status == 200, user
    return str(user["id"])


def new_key(user_id: str, **fields: Any) -> dict[str, Any]:
    status, key = call("POST", f"/admin/users/{user_id}/keys", ADMIN, fields)
    assert status == 200, key
    return dict(key)


# A valid body for the admin routes that take one: a non-admin is refused all the same.
ADMIN_BODIES: dict[tuple[str, str], Any] = {
    ("POST", "/admin/users"): {"name": "x", "email": "x@y", "role": "free"},
    ("PATCH", "/admin/users/<user_id>"): {"role": "admin"},
    ("POST", "/admin/users/<user_id>/keys"): {},
    ("PATCH", "/admin/keys/<key_id>"): {"daily_budget_usd": 1},
    ("PATCH", "/admin/config/<name>"): {"value": "free"},
    ("PATCH", "/admin/batch/models/<model_id>"): {"max_concurrency": 0},
    ("PATCH", "/admin/routing/provider-route-batch/<model_id>/<route_id>"): {"batch_allowed": True},
    ("PUT", "/admin/interactive-load/<reporter_id>"): {"models": {"sim-chat": 8}},
}
PATH_VALUES = {
    "user_id": "user-bob",
    "key_id": "key_local_bob",
    "name": "BATCH_MIN_ROLE",
    "model_id": "sim-chat",
    "route_id": "primary",
    "reporter_id": "gateway-1",
    "batch_id": "batch_00000000000000000000000000",
}
# Every admin route the api serves, read from its router: a new one is in this table at once.
ADMIN_ROUTES = sorted(
    (route.method, route.path)
    for route in [*admin.app._static_routes, *admin.app._dynamic_routes]
    if route.path.startswith("/admin/")
)


def _filled(path: str) -> str:
    for name, value in PATH_VALUES.items():
        path = path.replace(f"<{name}>", value)
    assert "<" not in path, f"give {path} a value"
    return path


@pytest.mark.parametrize(("method", "path"), ADMIN_ROUTES)
def test_every_admin_route_is_refused_to_a_non_admin(world: Any, method: str, path: str) -> None:
    deps, _clock = world
    before = (call("GET", "/admin/users/user-bob", ADMIN)[1], deps.live.overrides)
    status, error = call(method, _filled(path), ALICE, ADMIN_BODIES.get((method, path)))
    assert status == 403 and error["error"]["code"] == "admin_only"
    deps.live.refresh(force=True)
    assert (call("GET", "/admin/users/user-bob", ADMIN)[1], deps.live.overrides) == before  # nothing changed


def test_the_admin_route_table_covers_the_operators_plane() -> None:
    assert {path for _, path in ADMIN_ROUTES} >= {"/admin/users", "/admin/config", "/admin/batch/models"}


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/admin/users/user_nobody"),
        ("GET", "/admin/users/user_nobody/keys"),
        ("POST", "/admin/keys/key_x/revoke"),
    ],
)
def test_unknown_users_and_keys_are_404(world: Any, method: str, path: str) -> None:
    assert call(method, path, ADMIN)[0] == 404


def test_a_new_users_key_works_until_it_is_revoked(world: Any) -> None:
    _deps, clock = world
    user_id = new_user()
    key = new_key(user_id, name="ci", daily_budget_usd=2.5)
    assert (
        key["key"].startswith("sk-") and key["prefix"] == key["key"][:12] and key["daily_budget_usd"] == 2.5
    )
    assert call("GET", "/v1/batches", key["key"])[0] == 200
    listed = call("GET", f"/admin/users/{user_id}/keys", ADMIN)[1]["data"]
    assert [k["id"] for k in listed] == [key["id"]] and "key" not in listed[0]  # the secret is shown once
    assert call("POST", f"/admin/keys/{key['id']}/revoke", ADMIN)[1]["revoked_at"] is not None
    clock.advance(31)  # past the api's key cache
    status, error = call("GET", "/v1/batches", key["key"])
    assert status == 401 and error["error"]["code"] == "invalid_api_key"


def test_an_expired_key_is_refused(world: Any) -> None:
    _deps, clock = world
    key = new_key(new_user(), expires_at=int(clock()) + 60)
    assert call("GET", "/v1/batches", key["key"])[0] == 200
    clock.advance(61)
    assert call("GET", "/v1/batches", key["key"])[0] == 401


def test_a_suspended_account_is_refused_and_reinstated(world: Any) -> None:
    _deps, clock = world
    user_id = new_user()
    key = new_key(user_id)
    assert (
        call("PATCH", f"/admin/users/{user_id}", ADMIN, {"status": "suspended"})[1]["status"] == "suspended"
    )
    clock.advance(31)
    status, error = call("GET", "/v1/batches", key["key"])
    assert status == 403 and error["error"]["code"] == "account_suspended"
    call("PATCH", f"/admin/users/{user_id}", ADMIN, {"status": "active"})
    clock.advance(31)
    assert call("GET", "/v1/batches", key["key"])[0] == 200


def test_a_suspended_account_gets_401_on_create_in_the_error_shape(world: Any) -> None:
    """The create call's errors: 401 once the account is unavailable (its other routes say
    403 ``account_suspended``)."""
    _deps, clock = world
    user_id = new_user()
    key = new_key(user_id)
    call("PATCH", f"/admin/users/{user_id}", ADMIN, {"status": "suspended"})
    clock.advance(31)
    status, error = call("POST", "/v1/batches", key["key"], {"requests": [chat_request("s", "hi")]})
    assert status == 401
    assert error == {
        "error": {
            "message": error["error"]["message"],
            "type": "authentication_error",
            "param": None,
            "code": "account_unavailable",
        }
    }


@pytest.mark.parametrize("change", ["suspended", "deleted"])
def test_an_account_made_unavailable_after_authentication_gets_401_and_nothing_is_stored(
    world: Any, monkeypatch: pytest.MonkeyPatch, change: str
) -> None:
    """Suspended or deleted between the create's authentication and its store: the store's
    own transaction sees it, so no batch, no stored requests, no Idempotency-Key claim and
    no usage are left."""
    deps, _clock = world
    user_id = new_user()
    key = new_key(user_id)
    store = deps.batches.create
    seen: list[str] = []

    def unavailable_then_store(record: Any, *args: Any, **kwargs: Any) -> Any:
        seen.append(record.id)
        if change == "suspended":
            assert call("PATCH", f"/admin/users/{user_id}", ADMIN, {"status": "suspended"})[0] == 200
        else:
            assert call("DELETE", f"/admin/users/{user_id}", ADMIN)[0] == 200
        return store(record, *args, **kwargs)

    monkeypatch.setattr(deps.batches, "create", unavailable_then_store)
    body = {"requests": [chat_request("a", "hi"), chat_request("b", "there")]}
    status, error = call("POST", "/v1/batches", key["key"], body, headers={"Idempotency-Key": "race"})
    assert status == 401 and error["error"]["code"] == "account_unavailable", error
    assert set(error["error"]) == {"message", "type", "param", "code"}
    [batch_id] = seen
    assert deps.batches.get(batch_id) is None
    assert deps.batches.list_for_owner(user_id, limit=10)[0] == []
    assert list(deps.requests.all(batch_id)) == []
    stored = aws.get_clients().s3.list_objects_v2(Bucket=deps.settings.data_bucket).get("Contents", [])
    assert [o["Key"] for o in stored if batch_id in o["Key"]] == []  # its input copy went too
    assert deps.idempotency.get(user_id, idempotency.stored_key("batches", "race")) is None
    usage = deps.usage.read(user_id)
    assert (usage.batches, usage.requests, usage.held, usage.file_bytes) == (0, 0, {}, 0)


def openai_over_the_handler(key: str) -> OpenAI:
    """The OpenAI SDK, unmodified, its HTTP calls served by the api handler in this process."""

    def serve(request: httpx.Request) -> httpx.Response:
        event = http_event(request.method, request.url.path, key=None, headers=dict(request.headers))
        event["body"], event["isBase64Encoded"] = base64.b64encode(request.content).decode(), True
        answer = api.handler(event, LambdaContext())  # type: ignore[arg-type]
        body = answer.get("body") or ""
        content = base64.b64decode(body) if answer.get("isBase64Encoded") else body.encode()
        return httpx.Response(int(answer["statusCode"]), headers=answer.get("headers") or {}, content=content)

    transport = httpx.Client(transport=httpx.MockTransport(serve))
    return OpenAI(base_url="http://gateway.test/v1", api_key=key, max_retries=0, http_client=transport)


def test_the_openai_sdk_sees_an_authentication_error_when_the_account_is_suspended_before_the_store(
    world: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    deps, _clock = world
    user_id = new_user()
    key = new_key(user_id)
    line = {
        "custom_id": "f",
        "method": "POST",
        "url": "/v1/chat/completions",
        "body": chat_request("f", "hi")["body"],
    }
    owner = Principal(user_id=user_id, role="internal", key_id=key["id"])
    file_id = files.new_input_file(deps, owner, "in.jsonl", (json.dumps(line) + "\n").encode()).id
    store = deps.batches.create

    def suspended_then_store(*args: Any, **kwargs: Any) -> Any:
        deps.accounts.change_user(user_id, {"status": "suspended"})
        return store(*args, **kwargs)

    monkeypatch.setattr(deps.batches, "create", suspended_then_store)
    client = openai_over_the_handler(key["key"])
    with pytest.raises(openai.AuthenticationError) as refused:
        client.batches.create(input_file_id=file_id, endpoint="/v1/chat/completions", completion_window="24h")
    assert refused.value.status_code == 401 and refused.value.code == "account_unavailable"
    assert deps.batches.list_for_owner(user_id, limit=10)[0] == []
    assert deps.usage.read(user_id).batches == 0


def test_regenerating_a_key_revokes_the_old_secret_and_keeps_its_budgets(world: Any) -> None:
    _deps, clock = world
    user_id = new_user()
    old = new_key(user_id, name="svc", monthly_budget_usd=10)
    fresh = call("POST", f"/admin/keys/{old['id']}/regenerate", ADMIN)[1]
    assert fresh["id"] != old["id"] and fresh["name"] == "svc" and fresh["monthly_budget_usd"] == 10
    clock.advance(31)
    assert call("GET", "/v1/batches", old["key"])[0] == 401
    assert call("GET", "/v1/batches", fresh["key"])[0] == 200


@pytest.mark.parametrize(
    "body",
    [
        {"name": "x", "email": "not-an-email", "role": "free"},
        {"name": "x", "email": "a@b", "role": "root"},
        {"name": "", "email": "a@b", "role": "free"},
        {"name": "x", "email": "a@b", "role": "free", "daily_quota_usd": -1},
        {"name": "x", "email": "a@b", "role": "free", "monthly_quota_usd": "10"},
        {"name": "x", "email": "a@b", "role": "free", "extra": 1},
        ["not", "an", "object"],
    ],
)
def test_a_bad_user_is_refused_with_400(world: Any, body: Any) -> None:
    assert call("POST", "/admin/users", ADMIN, body)[0] == 400


def test_updating_a_user_sets_role_and_quotas_and_null_means_unlimited(world: Any) -> None:
    user_id = new_user(daily_quota_usd=1.5)
    updated = call(
        "PATCH",
        f"/admin/users/{user_id}",
        ADMIN,
        {"role": "pro", "daily_quota_usd": None, "monthly_quota_usd": 30},
    )[1]
    assert (updated["role"], updated["daily_quota_usd"], updated["monthly_quota_usd"]) == ("pro", None, 30)
    assert user_id in [u["id"] for u in call("GET", "/admin/users", ADMIN)[1]["data"]]


def test_deleting_a_user_removes_their_batches_files_and_keys(world: Any) -> None:
    deps, clock = world
    user_id = new_user()
    key = new_key(user_id)
    status, batch = call("POST", "/v1/batches", key["key"], {"requests": [chat_request("d", "bye")]})
    assert status == 200
    assert call("DELETE", f"/admin/users/{user_id}", ADMIN)[1]["deleted"] is True
    assert call("GET", f"/admin/users/{user_id}", ADMIN)[0] == 404
    assert call("GET", f"/v1/batches/{batch['id']}", ADMIN)[0] == 404
    assert deps.workflow.purges == [batch["id"]]  # type: ignore[attr-defined]
    clock.advance(31)
    assert call("GET", "/v1/batches", key["key"])[0] == 401


def test_deleting_a_user_with_running_work_cancels_it_and_removes_it_once_it_ends(world: Any) -> None:
    """A batch with a request running under a live lease is not removed under it (its cost
    would go unrecorded): it is cancelled and kept; the same DELETE, repeated once the
    request ended, removes it."""
    deps, clock = world
    user_id = new_user()
    key = new_key(user_id)
    _, running = call("POST", "/v1/batches", key["key"], {"requests": [chat_request("r", "hi")]})
    _, idle = call("POST", "/v1/batches", key["key"], {"requests": [chat_request("i", "hi")]})
    deps.batches.mark_run(running["id"], "worker-1", until=clock() + 60)  # a chain runs it

    status, deleted = call("DELETE", f"/admin/users/{user_id}", ADMIN)
    assert status == 200 and deleted["batches_pending"] == [running["id"]]
    assert call("GET", f"/admin/users/{user_id}", ADMIN)[0] == 404  # the account is gone at once
    assert call("GET", f"/v1/batches/{idle['id']}", ADMIN)[0] == 404
    status, kept = call("GET", f"/v1/batches/{running['id']}", ADMIN)
    assert status == 200 and kept["status"] in ("cancelling", "cancelled")

    deps.batches.unmark_run(running["id"], "worker-1")  # its request ended
    status, again = call("DELETE", f"/admin/users/{user_id}", ADMIN)
    assert status == 200 and again["batches_pending"] == []
    assert call("GET", f"/v1/batches/{running['id']}", ADMIN)[0] == 404
    assert call("DELETE", "/admin/users/user-nobody", ADMIN)[0] == 404


# --- a user's own view --------------------------------------------------------------------------


def test_me_shows_the_callers_profile_quotas_spend_and_key_never_anothers(world: Any) -> None:
    deps, clock = world
    call("PATCH", "/admin/users/user-alice", ADMIN, {"daily_quota_usd": 2.5})
    call("PATCH", "/admin/keys/key_local_alice", ADMIN, {"monthly_budget_usd": 10})
    deps.requests._table.transact(  # as a recorded attempt would charge it
        deps.spend.charge_actions(Payer("user-alice", "key_local_alice"), 1_234_567, now=clock(), shard=3),
        failure="charge",
    )
    status, me = call("GET", "/v1/me", ALICE)
    assert status == 200
    assert {k: me[k] for k in ("id", "role", "status", "daily_quota_usd", "monthly_quota_usd")} == {
        "id": "user-alice",
        "role": "internal",
        "status": "active",
        "daily_quota_usd": 2.5,
        "monthly_quota_usd": None,
    }
    assert me["spend_today_usd"] == me["spend_month_usd"] == 0.001234567
    assert me["key"] == {
        "id": "key_local_alice",
        "prefix": me["key"]["prefix"],
        "name": me["key"]["name"],
        "expires_at": None,
        "daily_budget_usd": None,
        "monthly_budget_usd": 10.0,
        "spend_today_usd": 0.001234567,
        "spend_month_usd": 0.001234567,
        "unknown_cost_today_usd": 0.0,
        "unknown_cost_month_usd": 0.0,
    }
    assert "sk-local-alice".startswith(me["key"]["prefix"]) and "key" not in me["keys"][0]
    assert [k["id"] for k in me["keys"]] == ["key_local_alice"]

    _, bob = call("GET", "/v1/me", "sk-local-bob")
    assert bob["id"] == "user-bob" and bob["spend_today_usd"] == 0.0
    assert [k["id"] for k in bob["keys"]] == ["key_local_bob"]


def test_a_create_on_behalf_of_someone_else_is_refused_400(world: Any) -> None:
    body = {"requests": [chat_request("a", "hi")]}
    status, error = call("POST", "/v1/batches", ALICE, body, headers={"X-On-Behalf-Of": "user-bob"})
    assert status == 400 and error["error"]["param"] == "X-On-Behalf-Of"


def test_the_idempotency_key_header_replays_a_create(world: Any) -> None:
    body = {"requests": [chat_request("a", "hi")]}
    _, first = call("POST", "/v1/batches", ALICE, body, headers={"Idempotency-Key": "abc"})
    status, again = call("POST", "/v1/batches", ALICE, body, headers={"Idempotency-Key": "abc"})
    assert status == 200 and again["id"] == first["id"]


def test_a_revoke_made_in_another_process_reaches_this_ones_cached_key_within_a_refresh(
    world: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On AWS the admin routes run in their own function: its cache is not the api's. The api
    trusts a key it read for BATCH_OWNER_CACHE_SECONDS (an hour here), yet a revoke reaches it
    at its next read of the runtime overrides (BATCHGW_RUNTIME_REFRESH_SECONDS, 0 here)."""
    from batchgw.api import accounts as accounts_api
    from batchgw.deps import build_deps
    from batchgw.live_config import LiveConfig
    from batchgw.storage.aws import get_clients
    from batchgw.storage.runtime import RuntimeStore

    deps, _ = world
    settings = deps.settings.model_copy(
        update={"batch_owner_cache_seconds": 3600, "runtime_refresh_seconds": 0}
    )
    api_live = LiveConfig(
        settings, RuntimeStore(get_clients().dynamodb, settings.control_table), deps.catalog
    )
    api_deps = build_deps(settings, deps.catalog, deps.clock)  # another process's wiring
    api_deps.live = api_live
    monkeypatch.setattr(api, "get_deps", lambda: (api_deps.live.refresh(), api_deps)[1])
    status, user = call("POST", "/admin/users", ADMIN, {"name": "Dan", "email": "d@x.io", "role": "internal"})
    _, key = call("POST", f"/admin/users/{user['id']}/keys", ADMIN, {"name": "k"})
    assert status == 200 and call("GET", "/v1/batches", key["key"])[0] == 200  # cached for an hour
    monkeypatch.setattr(accounts_api, "forget_keys", lambda: None)  # the admin's process is not ours
    assert call("POST", f"/admin/keys/{key['id']}/revoke", ADMIN)[0] == 200
    assert call("GET", "/v1/batches", key["key"])[0] == 401


# --- a user's weight (issue 56) ------------------------------------------------------------------


def test_a_users_weight_is_1_unless_an_administrator_sets_another(world: Any) -> None:
    user_id = new_user()
    assert call("GET", f"/admin/users/{user_id}", ADMIN)[1]["weight"] == 1
    status, made = call(
        "POST",
        "/admin/users",
        ADMIN,
        {"name": "W", "email": "w@example.com", "role": "internal", "weight": 2.5},
    )
    assert status == 200 and made["weight"] == 2.5
    assert call("PATCH", f"/admin/users/{user_id}", ADMIN, {"weight": 100})[1]["weight"] == 100
    assert call("PATCH", f"/admin/users/{user_id}", ADMIN, {"weight": 0.25})[1]["weight"] == 0.25
    assert call("GET", f"/admin/users/{user_id}", ADMIN)[1]["weight"] == 0.25
    assert call("GET", "/v1/me", ALICE)[1]["weight"] == 1  # the user sees theirs


@pytest.mark.parametrize("weight", [0, -1, 100.5, 1e-300, True, "2", None, [1]])
def test_a_weight_not_above_0_and_at_most_100_is_refused(world: Any, weight: Any) -> None:
    user_id = new_user()
    status, error = call("PATCH", f"/admin/users/{user_id}", ADMIN, {"weight": weight})
    assert status == 400 and error["error"]["param"] == "weight", error
    assert "above 0" in error["error"]["message"] and "at most 100" in error["error"]["message"]
    assert call("GET", f"/admin/users/{user_id}", ADMIN)[1]["weight"] == 1
