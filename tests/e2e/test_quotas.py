"""Users, keys, quotas, budgets, roles and Idempotency-Key on the local stack, over HTTP.

Durations are shrunk through settings (a paused batch is checked again every 2 s) and one
stack's clock starts just before a UTC month ends (``BATCHGW_FAKE_NOW``), so the day and
month boundaries happen during the test.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any

import httpx
import openai
import pytest
from openai import OpenAI

from local.run import LocalStack
from tests.e2e.conftest import STACK_ENV, Account, Api, chat, root, stack_for
from tests.support import wait_for

QUOTA_ENV = {
    **STACK_ENV,
    "BATCH_QUOTA_RECHECK_SECONDS": "2",
    "BATCH_RESERVATION_WAIT_SECONDS": "1",
    "BATCH_OWNER_CACHE_SECONDS": "0.5",
    "BATCH_ROLE_CONCURRENCY_INTERNAL": "2",
    "BATCH_SLOT_WAIT_SECONDS": "0.2",
    "BATCH_MODEL_CONCURRENCY": "16",
    # Per-key request rates have their own stack (test_rate_limits): twenty concurrent
    # creates here must meet the idempotency check, not a rate limit a fast stack reaches.
    "BATCH_API_RATE_PER_KEY": "0",
}
# What one "hello <n>" request costs on sim-chat: 2 input words at $0.50/M, 3 output at $1.50/M.
ONE_REQUEST_USD = 0.0000055


@pytest.fixture(scope="module")
def quotas(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    with stack_for(tmp_path_factory, "quotas", QUOTA_ENV) as running:
        yield running


def requests(n: int, extra: str = "") -> list[dict[str, Any]]:
    return [chat(f"r-{i}", f"hello {i} {extra}".strip()) for i in range(n)]


def paused(api: Api, batch_id: str) -> dict[str, Any]:
    return wait_for(
        lambda: api.batch(batch_id)["paused"], timeout=30, interval=0.1, what=f"{batch_id} to pause"
    )


# --- quotas and budgets -------------------------------------------------------------------------


def test_a_tiny_daily_quota_pauses_a_running_batch_and_raising_it_resumes_it(quotas: LocalStack) -> None:
    user = Account(quotas, daily_quota_usd=2 * ONE_REQUEST_USD)
    batch = user.api.create(requests(6)).json()
    why = paused(user.api, batch["id"])
    midnight = (int(time.time()) // 86400 + 1) * 86400
    assert why == {"reason": "daily_quota", "until": midnight}
    assert user.api.batch(batch["id"])["status"] == "in_progress"
    done_so_far = [r for r in user.api.results(batch["id"]) if r["status"] == "completed"]
    assert len(done_so_far) == 2  # what ran stays readable while paused

    user.update(daily_quota_usd=1)  # nobody touches the batch
    done = user.api.wait_final(batch["id"], timeout=30)
    assert done["status"] == "completed" and done["paused"] is None
    assert done["request_counts"]["completed"] == 6


def test_a_used_up_quota_refuses_new_batches_with_429(quotas: LocalStack) -> None:
    user = Account(quotas, daily_quota_usd=ONE_REQUEST_USD)
    user.api.wait_final(user.api.create(requests(1)).json()["id"])
    refused = user.api.create(requests(1))
    assert refused.status_code == 429
    assert refused.json()["error"]["code"] == "daily_quota_exceeded"
    assert "daily" in refused.json()["error"]["message"]
    assert user.api.http.get("/batches").status_code == 200  # reading still works


def test_a_burst_of_twenty_interactive_requests_at_a_quota_of_three_requests_cost_spends_at_most_four(
    quotas: LocalStack,
) -> None:
    user = Account(quotas)
    key = user.api.http.headers["authorization"].removeprefix("Bearer ")
    client = OpenAI(base_url=quotas.api_url, api_key=key, max_retries=0)
    ask: dict[str, Any] = {
        "model": "sim-chat",
        "messages": [{"role": "user", "content": "[[sim latency_ms=500]] hello"}],
        "max_tokens": 3,
    }
    client.chat.completions.create(**ask)
    one = user.api.http.get("/me").json()["spend_today_usd"]  # what one such request costs
    assert one > 0
    user.update(daily_quota_usd=4 * one)  # room for three more

    def send(_: int) -> str:
        try:
            client.chat.completions.create(**ask)
        except openai.RateLimitError as exc:
            return str(exc.code)
        return "ok"

    with ThreadPoolExecutor(20) as pool:
        outcomes = list(pool.map(send, range(20)))
    assert "ok" in outcomes and set(outcomes) <= {"ok", "quota_reserved", "daily_quota_exceeded"}
    spent = user.api.http.get("/me").json()["spend_today_usd"]
    assert spent - one <= 4 * one * (1 + 1e-6)  # without reservations all twenty ran
    assert spent == pytest.approx(one * (1 + outcomes.count("ok")))


def test_a_key_budget_pauses_only_that_keys_batches(quotas: LocalStack) -> None:
    user = Account(quotas)
    _, tight = user.new_key(daily_budget_usd=ONE_REQUEST_USD)
    held_back = tight.create(requests(3)).json()
    free = user.api.create(requests(3)).json()
    assert paused(tight, held_back["id"])["reason"] == "key_budget"
    assert user.api.wait_final(free["id"])["status"] == "completed"
    assert tight.batch(held_back["id"])["status"] == "in_progress"
    me = tight.http.get("/me").json()
    assert me["key"]["spend_today_usd"] == ONE_REQUEST_USD
    assert me["spend_today_usd"] == pytest.approx(4 * ONE_REQUEST_USD)


def test_revoking_a_key_mid_batch_fails_it_keeping_what_finished(quotas: LocalStack) -> None:
    user = Account(quotas)
    batch = user.api.create(requests(40, "[[sim latency_ms=200]]")).json()
    wait_for(
        lambda: user.api.batch(batch["id"])["request_counts"]["completed"] >= 2,
        timeout=30,
        what="some requests to finish",
    )
    user.admin.post(f"/admin/keys/{user.key_id}/revoke").raise_for_status()
    admin = Api(quotas, "sk-local-admin")
    done = admin.wait_final(batch["id"], timeout=30)
    assert done["status"] == "failed"
    assert done["error"]["code"] == "owner_unauthorized"
    results = admin.results(batch["id"])
    finished = [r for r in results if r["status"] == "completed"]
    unstarted = [r for r in results if r["status"] == "failed"]
    assert len(finished) >= 2 and len(finished) + len(unstarted) == 40
    assert {r["error"]["code"] for r in unstarted} == {"batch_failed"}
    assert user.api.create(requests(1)).status_code == 401


def test_reservations_make_a_request_wait_without_pausing_the_batch(
    quotas: LocalStack, sim_of: httpx.Client
) -> None:
    # One request may cost up to its 16,384 output tokens ($0.0246): more than the quota.
    user = Account(quotas, daily_quota_usd=0.01)
    first = user.api.create(
        [chat("slow", f"hello [[sim latency_ms=2000 tag={user.id}]]")]
    ).json()  # within the 3 s deadline
    wait_for(
        lambda: sim_of.get("/_sim/stats").json()["tags"].get(user.id, {}).get("in_flight") == 1,
        timeout=20,
        what="the first request to be with the model",
    )
    second = user.api.create(requests(1)).json()
    time.sleep(1.5)
    waiting = user.api.batch(second["id"])
    assert waiting["paused"] is None and waiting["request_counts"]["completed"] == 0
    assert user.api.wait_final(second["id"], timeout=30)["status"] == "completed"
    ended = user.api.wait_final(first["id"])
    assert ended["status"] == "completed" and ended["request_counts"]["completed"] == 1  # of known cost


def test_a_lowered_role_pauses_the_batch_until_it_is_raised(quotas: LocalStack) -> None:
    user = Account(quotas)
    batch = user.api.create(requests(20, "[[sim latency_ms=100]]")).json()
    user.update(role="pro")
    assert paused(user.api, batch["id"]) == {"reason": "role", "until": None}
    assert user.api.http.get(f"/batches/{batch['id']}").status_code == 200
    assert user.api.create(requests(1)).status_code == 403
    user.update(role="internal")
    assert user.api.wait_final(batch["id"], timeout=30)["request_counts"]["completed"] == 20


# --- concurrency --------------------------------------------------------------------------------


@pytest.fixture
def sim_of(quotas: LocalStack) -> httpx.Client:
    return httpx.Client(base_url=quotas.sim_url, timeout=10)


def test_a_users_role_concurrency_holds_across_two_worker_processes(
    quotas: LocalStack, sim_of: httpx.Client
) -> None:
    assert quotas.workers == 2
    user = Account(quotas)
    text = f"[[sim latency_ms=300 tag={user.id}]]"
    batches = [user.api.create(requests(8, text)).json() for _ in range(2)]
    samples = []
    while not all(user.api.batch(b["id"])["status"] == "completed" for b in batches):
        samples.append(sim_of.get("/_sim/stats").json()["tags"].get(user.id, {}).get("in_flight", 0))
        time.sleep(0.05)
    counts = sim_of.get("/_sim/stats").json()["tags"][user.id]
    assert counts["requests"] == 16
    assert counts["max_in_flight"] == 2  # BATCH_ROLE_CONCURRENCY_INTERNAL, never more
    assert max(samples) <= 2


# --- the account's own view, and its removal ----------------------------------------------------


def test_deleting_a_user_removes_everything_they_had(quotas: LocalStack) -> None:
    user = Account(quotas)
    batch = user.api.create(requests(2)).json()
    upload = user.api.http.post(
        "/files", files={"file": ("in.jsonl", b'{"custom_id": "a"}\n')}, data={"purpose": "batch"}
    )
    assert upload.status_code == 200
    user.api.wait_final(batch["id"])
    assert user.admin.delete(f"/admin/users/{user.id}").status_code == 200

    assert user.api.http.get("/batches").status_code == 401
    assert user.admin.get(f"/admin/users/{user.id}").status_code == 404
    admin = Api(quotas, "sk-local-admin")
    assert admin.http.get(f"/batches/{batch['id']}").status_code == 404
    assert admin.http.get(f"/files/{upload.json()['id']}").status_code == 404


def test_a_user_sees_their_own_profile_and_keys_never_anothers(quotas: LocalStack) -> None:
    user, other = Account(quotas, monthly_quota_usd=5), Account(quotas)
    me = user.api.http.get("/me").json()
    assert (me["id"], me["monthly_quota_usd"], me["key"]["id"]) == (user.id, 5.0, user.key_id)
    assert [k["id"] for k in me["keys"]] == [user.key_id] and "key" not in me["keys"][0]
    assert other.api.http.get("/me").json()["id"] == other.id
    own_key = user.api.http.headers["Authorization"].removeprefix("Bearer ")
    assert root(quotas, own_key).get(f"/admin/users/{other.id}/keys").status_code == 403


def test_a_batchs_copy_of_its_input_counts_toward_storage_until_the_batch_is_deleted(
    quotas: LocalStack,
) -> None:
    """Creating and cancelling batches from one file cannot store copies without bound: each
    copy counts against BATCH_FILES_MAX_TOTAL_MB_PER_USER until its batch is deleted."""
    admin = root(quotas, "sk-local-admin")
    limit = 1024 * 1024
    admin.patch("/admin/config/BATCH_FILES_MAX_TOTAL_MB_PER_USER", json={"value": 1}).raise_for_status()
    try:
        user = Account(quotas)
        wait_for(
            lambda: user.api.http.get("/me").json()["stored_input_limit_bytes"] == limit,
            timeout=10,
            what="the lowered storage limit",
        )
        text = "x" * 99_000
        lines = [
            json.dumps(
                {
                    "custom_id": f"c-{i}",
                    "method": "POST",
                    "url": "/v1/chat/completions",
                    "body": {"model": "sim-chat", "messages": [{"role": "user", "content": text}]},
                }
            )
            for i in range(3)
        ]
        data = ("\n".join(lines) + "\n").encode()  # about 300 KB
        file_id = (
            user.api.http.post("/files", files={"file": ("in.jsonl", data)}, data={"purpose": "batch"})
            .raise_for_status()
            .json()["id"]
        )

        def create() -> httpx.Response:
            return user.api.http.post(
                "/batches",
                json={
                    "input_file_id": file_id,
                    "endpoint": "/v1/chat/completions",
                    "completion_window": "24h",
                },
            )

        first = create().raise_for_status().json()
        user.api.http.post(f"/batches/{first['id']}/cancel").raise_for_status()
        assert user.api.http.get("/me").json()["stored_input_bytes"] == 2 * len(data)
        second = create().raise_for_status().json()  # the file and two copies: 900 KB
        user.api.http.post(f"/batches/{second['id']}/cancel").raise_for_status()

        refused = create()  # a third copy would pass 1 MiB
        assert refused.status_code == 429, refused.text
        assert refused.json()["error"]["code"] == "file_storage_limit"
        assert user.api.http.get("/me").json()["stored_input_bytes"] == 3 * len(data)
        assert len(user.api.http.get("/batches").json()["data"]) == 2  # nothing stored

        user.api.wait_final(first["id"])
        assert user.api.http.delete(f"/batches/{first['id']}").status_code == 200  # frees its copy
        assert user.api.http.get("/me").json()["stored_input_bytes"] == 2 * len(data)
        assert create().status_code == 200
    finally:
        admin.delete("/admin/config/BATCH_FILES_MAX_TOTAL_MB_PER_USER").raise_for_status()


# --- Idempotency-Key ------------------------------------------------------------------------------


def test_twenty_concurrent_creates_with_one_idempotency_key_make_one_batch(quotas: LocalStack) -> None:
    user = Account(quotas)
    body = {"requests": requests(3)}

    def create(_: int) -> httpx.Response:
        with httpx.Client(base_url=quotas.api_url, timeout=30) as client:
            return client.post(
                "/batches",
                json=body,
                headers={"Authorization": user.api.http.headers["Authorization"], "Idempotency-Key": "once"},
            )

    with ThreadPoolExecutor(20) as pool:
        answers = list(pool.map(create, range(20)))
    made = user.api.http.get("/batches").json()["data"]
    assert len(made) == 1
    for answer in answers:
        assert answer.status_code in (200, 409), answer.text
        if answer.status_code == 200:
            assert answer.json()["id"] == made[0]["id"]
        else:
            assert answer.json()["error"]["code"] == "idempotency_key_in_use"
    assert sum(a.status_code == 200 for a in answers) >= 1


def test_idempotency_key_replays_refusals_and_deletion(quotas: LocalStack) -> None:
    user = Account(quotas)
    _, second = user.new_key()
    body = {"requests": requests(2)}
    first = user.api.http.post("/batches", json=body, headers={"Idempotency-Key": "k"}).json()
    again = second.http.post("/batches", json=body, headers={"Idempotency-Key": "k"})
    assert again.status_code == 200 and again.json()["id"] == first["id"]
    other = second.http.post("/batches", json={"requests": requests(3)}, headers={"Idempotency-Key": "k"})
    assert other.status_code == 409 and other.json()["error"]["code"] == "idempotency_key_reused"
    user.api.wait_final(first["id"])
    assert user.api.http.delete(f"/batches/{first['id']}").status_code == 200
    gone = user.api.http.post("/batches", json=body, headers={"Idempotency-Key": "k"})
    assert gone.status_code == 410


def test_x_on_behalf_of_is_refused(quotas: LocalStack) -> None:
    user = Account(quotas)
    refused = user.api.http.post("/batches", json={"requests": requests(1)}, headers={"X-On-Behalf-Of": "x"})
    assert refused.status_code == 400


# --- the UTC day and month boundaries ---------------------------------------------------------

NEW_YEAR = int(datetime(2027, 1, 1, tzinfo=UTC).timestamp())


MIDNIGHT_TEST = "test_a_daily_quota_renews_at_midnight_utc_and_a_monthly_one_on_the_first"
# The two users, their batches as created, and as seen paused before midnight.
Seen = tuple[Account, Account, dict[str, Any], dict[str, Any], list[dict[str, Any]]]


class BeforeMidnight:
    """The midnight stack, and what its test does before the fake midnight, in a thread started
    with the module: its lead to midnight goes by while the module's other tests run, not after
    them. The stack's clock starts at its start: the batches must be created, and their first
    requests run, before the fake midnight, however slowly a loaded machine starts the stack
    (45 s were not enough beside another test process in CI)."""

    def __init__(self, stack: LocalStack) -> None:
        self.stack = stack
        self._seen: Seen | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._before, name="before-midnight", daemon=True)
        self._thread.start()

    def _before(self) -> None:
        try:
            self.stack.start()
            daily = Account(self.stack, daily_quota_usd=ONE_REQUEST_USD)
            monthly = Account(self.stack, monthly_quota_usd=ONE_REQUEST_USD)
            # One request runs in the old year; the quota holds the other back until the new one.
            day_batch = daily.api.create(requests(2)).json()
            month_batch = monthly.api.create(requests(2)).json()
            held = [paused(daily.api, day_batch["id"]), paused(monthly.api, month_batch["id"])]
            self._seen = (daily, monthly, day_batch, month_batch, held)
        except BaseException as exc:  # the test raises it
            self._error = exc

    def seen(self) -> Seen:
        """What the thread saw before midnight (it raises what the thread raised)."""
        self._thread.join()
        if self._error is not None:
            raise self._error
        assert self._seen is not None
        return self._seen

    def stop(self) -> None:
        self._thread.join()
        self.stack.stop()


@pytest.fixture(scope="module", autouse=True)
def midnight(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[BeforeMidnight | None]:
    """Started with the module's first test (autouse), before its other stack, when the midnight
    test is to run."""
    if not any(
        item.name == MIDNIGHT_TEST and item.module is request.module for item in request.session.items
    ):
        yield None
        return
    env = {**QUOTA_ENV, "BATCHGW_FAKE_NOW": "2026-12-31T23:58:30Z", "BATCH_QUOTA_RECHECK_SECONDS": "3600"}
    before = BeforeMidnight(stack_for(tmp_path_factory, "midnight", env))
    try:
        yield before
    finally:
        before.stop()


def test_a_daily_quota_renews_at_midnight_utc_and_a_monthly_one_on_the_first(
    midnight: BeforeMidnight | None,
) -> None:
    assert midnight is not None
    daily, monthly, day_batch, month_batch, held = midnight.seen()
    assert day_batch["created_at"] < NEW_YEAR
    assert held == [
        {"reason": "daily_quota", "until": NEW_YEAR},
        {"reason": "monthly_quota", "until": NEW_YEAR},
    ]
    # The re-check is an hour away; the new day (and month) resumes them on their own.
    for user, batch in ((daily, day_batch), (monthly, month_batch)):
        done = user.api.wait_final(batch["id"], timeout=200)
        assert done["status"] == "completed" and done["paused"] is None
        assert done["completed_at"] >= NEW_YEAR
    me = daily.api.http.get("/me").json()
    assert me["spend_today_usd"] == me["spend_month_usd"] == ONE_REQUEST_USD  # the new year's only
