"""A cancel ends its batch fast, whatever races it, over real HTTP on a local stack.

After ``POST /v1/batches/{id}/cancel`` answers, the batch is ``cancelled`` within the time
its running requests take to finish plus a few seconds, whatever those requests then
answer (success, failure, retryable errors, ``model_queued``), and within a lease plus a few
seconds when their worker dies. A batch whose requests wait (for a retry's backoff, a quota
pause, a model slot) or are still being validated and written has nothing with the
upstream: it ends at once.

The stack reconciles every 600 s, so nothing here may wait for a reconcile tick. The bounds
are generous (the machine is shared); each test prints what it measured (``pytest -s``),
and the chaos report (``tests/e2e/chaos.py``) measures the same latency across many batches.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from local.run import LocalStack
from tests.e2e.conftest import STACK_ENV, Account, Api, chat, root, stack_for
from tests.support import wait_for

# Races timed against the stack's steps: ``make test`` runs them after the rest, alone (in the
# two-process run a validating batch's prepare outran its cancel).
pytestmark = [pytest.mark.e2e, pytest.mark.serial]

LEASE_SECONDS = 6
CANCEL_ENV = {
    **STACK_ENV,
    # Far apart: a cancel that waits for the reconciler fails its bound by minutes.
    "BATCH_RECONCILE_SECONDS": "600",
    "BATCH_LEASE_SECONDS": str(LEASE_SECONDS),
    "BATCH_UPSTREAM_TIMEOUT_SECONDS": "5",
    "BATCH_WORKER_TIMEOUT_SECONDS": "20",
    "BATCH_QUOTA_RECHECK_SECONDS": "600",
    "BATCH_RESERVATION_WAIT_SECONDS": "1",
    "BATCH_OWNER_CACHE_SECONDS": "0.5",
    "BATCHGW_RUNTIME_REFRESH_SECONDS": "0.5",
}
LATENCY_MS = 2000  # how long each request is with the upstream
# What a cancel may take beyond the requests it leaves running (a loaded machine's slack).
SLACK_SECONDS = 15.0
# What one "hello <n>" request costs on sim-chat: 2 input words at $0.50/M, 3 output at $1.50/M.
ONE_REQUEST_USD = 0.0000055


@pytest.fixture(scope="module")
def races(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    with stack_for(tmp_path_factory, "cancel", CANCEL_ENV) as running:
        yield running


@pytest.fixture
def api(races: LocalStack) -> Api:
    return Account(races).api


@pytest.fixture
def sim(races: LocalStack) -> httpx.Client:
    client = httpx.Client(base_url=races.sim_url, timeout=10)
    client.post("/_sim/reset").raise_for_status()
    return client


def in_flight(sim: httpx.Client, tag: str) -> int:
    return int(sim.get("/_sim/stats").json().get("tags", {}).get(tag, {}).get("in_flight", 0))


def with_upstream(sim: httpx.Client, tag: str, at_least: int = 1) -> None:
    wait_for(lambda: in_flight(sim, tag) >= at_least, timeout=30, what=f"{tag} requests with the upstream")


def cancel_within(api: Api, batch_id: str, race: str, bound: float) -> dict[str, Any]:
    """Cancel the batch and wait until it reads ``cancelled``, within ``bound`` seconds of
    the cancel's answer; prints the latency measured. Returns the batch as it ended."""
    answered = api.http.post(f"/batches/{batch_id}/cancel")
    answered.raise_for_status()
    cancelled_at = time.monotonic()
    deadline = cancelled_at + bound
    while (batch := api.batch(batch_id))["status"] not in ("cancelled", "completed", "failed", "expired"):
        assert time.monotonic() < deadline, f"{race}: still {batch['status']} {bound:.0f} s after the cancel"
        time.sleep(0.05)
    latency = time.monotonic() - cancelled_at
    print(f"\ncancel race {race}: cancelled {latency:.2f} s after the cancel answered (bound {bound:.0f} s)")
    assert batch["status"] == "cancelled", batch["status"]
    return batch


def assert_counted_once(api: Api, batch: dict[str, Any], total: int) -> Counter[str]:
    """Every request ended once, and ``request_counts`` say what the results say."""
    results = api.results(batch["id"])
    assert len(results) == total and len({r["custom_id"] for r in results}) == total
    statuses = Counter(r["status"] for r in results)
    assert set(statuses) <= {"completed", "failed", "cancelled", "expired"}, statuses
    counts = batch["request_counts"]
    assert counts == {
        "total": total,
        "completed": statuses["completed"],
        "failed": statuses["failed"] + statuses["expired"],
        "expired": statuses["expired"],
        "cancelled": statuses["cancelled"],
    }
    assert statuses["cancelled"] == total - counts["completed"] - counts["failed"]
    return statuses


def requests(n: int, text: str, model: str = "sim-chat") -> list[dict[str, Any]]:
    return [chat(f"r-{i}", f"{text} {i}", model=model) for i in range(n)]


# --- requests with the upstream when the cancel comes ------------------------------------------


@pytest.mark.parametrize(
    ("race", "directive"),
    [
        ("succeed", ""),
        ("fail", "status=400"),
        ("retryable-429", "status=429"),
        ("retryable-500-fail-2", "status=500 fail=2"),
    ],
)
def test_a_cancel_ends_the_batch_once_its_running_requests_answer(
    api: Api, sim: httpx.Client, race: str, directive: str
) -> None:
    tag = f"run-{race}"
    batch = api.create(requests(20, f"[[sim {directive} latency_ms={LATENCY_MS} tag={tag}]]")).json()
    with_upstream(sim, tag)
    done = cancel_within(api, batch["id"], race, LATENCY_MS / 1000 + SLACK_SECONDS)
    statuses = assert_counted_once(api, done, 20)
    assert statuses["cancelled"] > 0


def test_a_cancel_ends_the_batch_when_its_running_requests_answer_model_queued(
    api: Api, sim: httpx.Client
) -> None:
    # Without retry_after, a model_queued answer waits BATCH_MODEL_QUEUED_DEFAULT_SECONDS
    # (120 s) before its next try, pausing its model as long: a model of its own here.
    tag = "model-queued"
    text = f"[[sim queued latency_ms={LATENCY_MS} tag={tag}]]"
    batch = api.create(requests(12, text, model="sim-chat-only")).json()
    with_upstream(sim, tag)
    done = cancel_within(api, batch["id"], "model-queued", LATENCY_MS / 1000 + SLACK_SECONDS)
    statuses = assert_counted_once(api, done, 12)
    assert statuses["cancelled"] == 12


# --- requests that wait when the cancel comes ------------------------------------------------------


def test_a_cancel_ends_at_once_a_batch_whose_requests_wait_for_a_long_backoff(
    races: LocalStack, api: Api, sim: httpx.Client
) -> None:
    admin = root(races, "sk-local-admin")
    settings = {"BATCH_RETRY_BASE_SECONDS": 120, "BATCH_RETRY_MAX_SECONDS": 600}
    for name, value in reversed(settings.items()):
        assert admin.patch(f"/admin/config/{name}", json={"value": value}).status_code == 200, name
    try:
        time.sleep(1.5)  # every process reads the overrides again within 0.5 s
        tag = "backoff"
        batch = api.create(requests(12, f"[[sim status=500 fail=1 latency_ms=50 tag={tag}]]")).json()
        wait_for(
            lambda: sim.get("/_sim/stats").json().get("tags", {}).get(tag, {}).get("requests", 0) >= 8,
            timeout=30,
            what="requests waiting for their retry",
        )
        done = cancel_within(api, batch["id"], "retry-backoff", SLACK_SECONDS)
    finally:
        for name in settings:
            admin.delete(f"/admin/config/{name}")
    statuses = assert_counted_once(api, done, 12)
    assert statuses["cancelled"] + statuses["failed"] == 12


def test_a_cancel_ends_at_once_a_batch_paused_for_its_owners_quota(races: LocalStack) -> None:
    user = Account(races, daily_quota_usd=2 * ONE_REQUEST_USD)
    # Requests admitted at once (the owner's spend is cached for 0.5 s) may take it past
    # the quota before it pauses: enough of them that some are left to cancel.
    batch = user.api.create([chat(f"q-{i}", f"hello {i}") for i in range(30)]).json()
    wait_for(lambda: user.api.batch(batch["id"])["paused"], timeout=30, what="the batch to pause")
    done = cancel_within(user.api, batch["id"], "quota-paused", SLACK_SECONDS)
    statuses = assert_counted_once(user.api, done, 30)
    assert statuses["completed"] >= 2 and statuses["cancelled"] > 0


def test_a_cancel_ends_at_once_a_batch_waiting_for_a_model_slot(
    races: LocalStack, api: Api, sim: httpx.Client
) -> None:
    blocker = Account(races).api
    # The model's cap (4) taken by another batch's long requests.
    full = blocker.create(requests(8, "[[sim latency_ms=4500 tag=blocker]]")).json()
    with_upstream(sim, "blocker", at_least=4)
    waiting = api.create(requests(10, "[[sim tag=waiter]]")).json()
    wait_for(
        lambda: api.batch(waiting["id"])["status"] == "in_progress", timeout=30, what="the batch to start"
    )
    time.sleep(0.5)  # its chains find the model full
    done = cancel_within(api, waiting["id"], "model-slot-full", SLACK_SECONDS)
    statuses = assert_counted_once(api, done, 10)
    assert statuses["cancelled"] == 10
    cancel_within(blocker, full["id"], "model-slot-holder", 4.5 + SLACK_SECONDS)


# --- a batch not started yet -----------------------------------------------------------------------


# Writing a batch's requests, ending them and writing its result files take time per
# request (about 5 ms each on a quiet machine, on moto): the bound grows with the batch.
PREPARED = 1000
PREPARED_BOUND = SLACK_SECONDS + PREPARED * 0.02


def test_a_cancel_ends_at_once_a_file_batch_still_validating(api: Api, tmp_path: Path) -> None:
    total = PREPARED
    path = tmp_path / "requests.jsonl"
    with path.open("w") as out:
        for i in range(total):
            body = {"model": "sim-chat", "messages": [{"role": "user", "content": f"line {i}"}]}
            out.write(
                json.dumps(
                    {"custom_id": f"l-{i}", "method": "POST", "url": "/v1/chat/completions", "body": body}
                )
            )
            out.write("\n")
    upload = api.http.post(
        "/files", data={"purpose": "batch"}, files={"file": ("r.jsonl", path.read_bytes())}
    )
    upload.raise_for_status()
    batch = api.http.post(
        "/batches",
        json={
            "input_file_id": upload.json()["id"],
            "endpoint": "/v1/chat/completions",
            "completion_window": "24h",
        },
    ).json()
    assert batch["status"] == "validating"
    done = cancel_within(api, batch["id"], "validating", PREPARED_BOUND)
    statuses = assert_counted_once(api, done, total)
    assert statuses["cancelled"] == total


def test_a_cancel_ends_at_once_a_large_batch_being_prepared(api: Api) -> None:
    total = PREPARED
    batch = api.create(requests(total, "[[sim latency_ms=500]]")).json()
    done = cancel_within(api, batch["id"], "preparing", PREPARED_BOUND)
    statuses = assert_counted_once(api, done, total)
    assert statuses["cancelled"] >= total - 8


# --- a worker that dies (last: the messages a killed poller had received come back only
# after the queue's visibility timeout, as on AWS) ------------------------------------------


def test_a_cancel_ends_the_batch_a_lease_after_the_worker_running_its_requests_died(
    races: LocalStack, api: Api, sim: httpx.Client
) -> None:
    tag = "worker-dies"
    batch = api.create(requests(12, f"[[sim latency_ms=4000 tag={tag}]]")).json()
    with_upstream(sim, tag)
    try:
        answered = api.http.post(f"/batches/{batch['id']}/cancel")
        answered.raise_for_status()
        for index in range(races.workers):
            races.kill_worker(index)  # mid-request: nobody records their ends
        cancelled_at = time.monotonic()
        done = wait_for(
            lambda: (b := api.batch(batch["id"]))["status"] == "cancelled" and b,
            timeout=LEASE_SECONDS + SLACK_SECONDS,
            what="the cancelled batch to end after its workers died",
        )
        latency = time.monotonic() - cancelled_at
        print(
            f"\ncancel race worker-dies: cancelled {latency:.2f} s after the cancel (lease {LEASE_SECONDS} s)"
        )
    finally:
        for index in range(races.workers):
            races.start_worker(index)
    statuses = assert_counted_once(api, done, 12)
    assert statuses["cancelled"] > 0
