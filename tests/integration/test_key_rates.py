"""Each API key's request rate, and what a process remembers of keys (the api handler and
the stores on moto, the injected clock)."""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable
from typing import Any

import pytest
from batchgw.api import auth
from batchgw.deps import Deps
from batchgw.domain.rates import RateRule
from batchgw.storage import aws
from batchgw.storage.ratelimit import RateLimiter

from functions.api import handler as api
from local.simulator import Simulator
from tests.integration.conftest import make_deps
from tests.support import FakeClock, LambdaContext, http_event

pytestmark = pytest.mark.usefixtures("aws_env")
ALICE, BOB = "sk-local-alice", "sk-local-bob"


@pytest.fixture
def serve(
    monkeypatch: pytest.MonkeyPatch,
) -> Callable[[Deps], Callable[..., tuple[int, dict[str, str], Any]]]:
    """The api handler over ``deps``: a call answers (status, headers, body)."""

    def bind(deps: Deps) -> Callable[..., tuple[int, dict[str, str], Any]]:
        monkeypatch.setattr(api, "get_deps", lambda: deps)

        def call(key: str, path: str = "/v1/batches") -> tuple[int, dict[str, str], Any]:
            response = api.handler(http_event("GET", path, key=key), LambdaContext())  # type: ignore[arg-type]
            return int(response["statusCode"]), response.get("headers") or {}, json.loads(response["body"])

        return call

    return bind


def bucket_items(deps: Deps) -> list[str]:
    """The keys that have a request bucket in the control table."""
    items = aws.get_clients().dynamodb.scan(TableName=deps.settings.control_table)["Items"]
    return [item["pk"]["S"] for item in items if item["pk"]["S"].startswith("rate#")]


# --- the rate --------------------------------------------------------------------------------


def test_a_key_over_its_rate_gets_429_with_retry_after_while_another_key_is_unaffected(
    sim: Simulator, serve: Any
) -> None:
    clock = FakeClock()
    call = serve(make_deps(sim, clock, BATCH_API_RATE_PER_KEY="2"))  # bursts of 4
    assert [call(ALICE)[0] for _ in range(4)] == [200] * 4
    status, headers, body = call(ALICE)
    assert status == 429 and body["error"]["code"] == "rate_limited"
    assert body["error"]["type"] == "rate_limit_error"
    assert headers["Retry-After"] == "1"
    assert [call(BOB)[0] for _ in range(4)] == [200] * 4  # bob's key has its own bucket
    clock.advance(0.5)  # one token back
    assert [call(ALICE)[0] for _ in range(2)] == [200, 429]


def test_retry_after_says_when_the_next_request_is_taken(sim: Simulator, serve: Any) -> None:
    clock = FakeClock()
    call = serve(make_deps(sim, clock, BATCH_API_RATE_PER_KEY="0.2"))  # one per 5 s, no burst
    assert call(ALICE)[0] == 200
    status, headers, _ = call(ALICE)
    assert status == 429 and headers["Retry-After"] == "5"
    clock.advance(4.5)
    assert call(ALICE)[1]["Retry-After"] == "1"  # whole seconds, rounded up
    clock.advance(0.5)
    assert call(ALICE)[0] == 200


def test_an_idle_key_gets_its_burst_back_and_no_more(sim: Simulator, serve: Any) -> None:
    clock = FakeClock()
    call = serve(make_deps(sim, clock, BATCH_API_RATE_PER_KEY="3"))  # bursts of 6
    assert [call(ALICE)[0] for _ in range(7)] == [200] * 6 + [429]
    clock.advance(3600)
    assert [call(ALICE)[0] for _ in range(7)] == [200] * 6 + [429]


def test_several_processes_share_one_bucket_per_key(sim: Simulator) -> None:
    clock = FakeClock()
    deps = make_deps(sim, clock)
    processes = [RateLimiter(aws.get_clients().dynamodb, deps.settings.control_table) for _ in range(3)]
    rule = RateRule(5)  # bursts of 10
    taken = [processes[i % 3].take("key_x", rule, clock) is None for i in range(15)]
    assert taken == [True] * 10 + [False] * 5
    clock.advance(1)  # five tokens back, whichever process asks
    taken = [processes[(i + 1) % 3].take("key_x", rule, clock) is None for i in range(6)]
    assert taken == [True] * 5 + [False]


def test_a_request_whose_write_waited_behind_others_is_judged_by_the_clock_after_it(
    sim: Simulator,
) -> None:
    clock = FakeClock()
    deps = make_deps(sim, clock)
    rule = RateRule(2)  # bursts of 4: three taken now leave one
    first, second = (RateLimiter(aws.get_clients().dynamodb, deps.settings.control_table) for _ in range(2))
    assert [first.take("key_x", rule, clock) for _ in range(3)] == [None] * 3
    # The second process read the clock two seconds before its write was judged (it queued
    # behind the others): by that clock the bucket is full, by the clock after it one is left.
    readings = iter([clock.now - 2])
    assert second.take("key_x", rule, lambda: next(readings, clock())) is None
    assert second.take("key_x", rule, clock) == 1  # and then it is full


def test_zero_means_no_rate_and_no_bucket(sim: Simulator, serve: Any) -> None:
    deps = make_deps(sim, FakeClock(), BATCH_API_RATE_PER_KEY="0")
    call = serve(deps)
    assert {call(ALICE)[0] for _ in range(60)} == {200}
    assert bucket_items(deps) == []


def test_unknown_keys_never_touch_a_bucket(sim: Simulator, serve: Any) -> None:
    deps = make_deps(sim, FakeClock(), BATCH_API_RATE_PER_KEY="1")  # bursts of 2
    call = serve(deps)
    assert {call(f"sk-made-up-{i}")[0] for i in range(20)} == {401}
    assert bucket_items(deps) == []
    assert [call(ALICE)[0] for _ in range(3)] == [200, 200, 429]
    assert bucket_items(deps) == ["rate#key_local_alice"]


# --- what a process remembers of keys ----------------------------------------------------------


def count_lookups(deps: Deps, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The key hashes the process looks up in DynamoDB, as it does so."""
    looked_up: list[str] = []
    by_hash = deps.accounts.by_hash

    def counted(digest: str) -> Any:
        looked_up.append(digest)
        return by_hash(digest)

    monkeypatch.setattr(deps.accounts, "by_hash", counted)
    return looked_up


def test_an_unknown_key_is_looked_up_once_per_negative_ttl(
    sim: Simulator, serve: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = FakeClock()
    deps = make_deps(sim, clock, BATCH_AUTH_UNKNOWN_KEY_SECONDS="300", BATCH_OWNER_CACHE_SECONDS="5")
    call = serve(deps)
    looked_up = count_lookups(deps, monkeypatch)
    for _ in range(50):
        assert call("sk-made-up")[0] == 401
        clock.advance(5)  # 250 s in all: well past what a known key is trusted for
    assert len(looked_up) == 1
    clock.advance(51)
    assert call("sk-made-up")[0] == 401
    assert len(looked_up) == 2


def test_a_flood_of_made_up_keys_stays_bounded_and_keeps_the_callers_own_keys(
    sim: Simulator, serve: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    deps = make_deps(sim, FakeClock(), BATCH_AUTH_CACHE_KEYS="50", BATCH_API_RATE_PER_KEY="0")
    call = serve(deps)
    looked_up = count_lookups(deps, monkeypatch)
    assert call(ALICE)[0] == 200
    for _ in range(300):
        assert call(f"sk-{secrets.token_hex(8)}")[0] == 401
        assert auth.cached_keys()[1] <= 50
    assert auth.cached_keys() == (1, 50)
    assert call(ALICE)[0] == 200
    assert len(looked_up) == 301  # alice's key once, each made-up key once
