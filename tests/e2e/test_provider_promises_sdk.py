"""Provider-run batches keep a batch's promises on the local stack, through the HTTP API, the
unmodified OpenAI SDK and the simulator's provider batch APIs, each proven by the provider's
own count of the lines it was sent (``GET /_sim/provider-batches``'s ``lines``): a revoked
key, a suspended or deleted owner stop the batch and cancel what the provider has; a lowered
role pauses it; BATCH_ENABLED off sends the provider nothing; a forbidden route never gets a
batch; a provider batch the provider lost ends the batch; a delete leaves nothing there."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from openai import OpenAI

from local.run import LocalStack
from tests.e2e.conftest import Account, Api, root
from tests.e2e.test_files import wait_batch, write
from tests.support import wait_for

pytestmark = pytest.mark.e2e

# How long a change an administrator made takes to reach every process, and then a step that
# might still act on the old one (BATCHGW_RUNTIME_REFRESH_SECONDS and BATCH_OWNER_CACHE_SECONDS
# are 5 s; a provider batch just submitted is polled 1, 2 and 4 s on).
SETTLE_SECONDS = 8


@pytest.fixture
def sim(stack: LocalStack) -> Iterator[httpx.Client]:
    client = httpx.Client(base_url=stack.sim_url, timeout=10)
    client.post("/_sim/reset").raise_for_status()
    yield client
    client.post("/_sim/reset").raise_for_status()  # batches made at once again, for the next tests


@pytest.fixture
def operator(stack: LocalStack) -> httpx.Client:
    return root(stack, "sk-local-admin")


def provider(sim: httpx.Client) -> dict[str, Any]:
    return dict(sim.get("/_sim/provider-batches").json())


def sdk(stack: LocalStack, api: Api) -> OpenAI:
    key = str(api.http.headers["Authorization"]).split()[1]
    return OpenAI(base_url=stack.api_url, api_key=key, max_retries=0)


def file_batch(
    client: OpenAI, tmp_path: Path, n: int, mode: str = "provider", model: str = "sim-chat"
) -> str:
    body = {"model": model, "messages": [{"role": "user", "content": "hi"}]}
    lines = [
        json.dumps({"custom_id": f"p-{i}", "method": "POST", "url": "/v1/chat/completions", "body": body})
        for i in range(n)
    ]
    upload = client.files.create(
        file=write(tmp_path, lines, f"{time.monotonic_ns()}.jsonl").open("rb"), purpose="batch"
    )
    batch = client.batches.create(
        input_file_id=upload.id,
        endpoint="/v1/chat/completions",
        completion_window="24h",
        extra_body={"execution_mode": mode},
    )
    return batch.id


def submitted(sim: httpx.Client, lines: int) -> dict[str, Any]:
    """The provider batch the gateway submitted, once the provider has taken ``lines`` lines."""
    return wait_for(
        lambda: provider(sim)["lines"] >= lines and provider(sim)["batches"][-1],
        timeout=30,
        interval=0.2,
        what="the provider batch",
    )


def refused_once(sim: httpx.Client) -> None:
    """Wait until the provider refused a submit (the file it was sent deleted again)."""
    wait_for(lambda: provider(sim)["deleted_files"], timeout=30, interval=0.2, what="a refused submit")


# --- the key and the owner ----------------------------------------------------------------------


@pytest.mark.parametrize("change", ["revoke", "suspend", "delete"])
def test_a_revoked_key_or_a_suspended_or_deleted_owner_cancels_the_provider_batch_sending_nothing_more(
    stack: LocalStack, sim: httpx.Client, operator: httpx.Client, admin: Api, tmp_path: Path, change: str
) -> None:
    sim.post("/_sim/provider-batches", json={"auto_seconds": None}).raise_for_status()  # held there
    account = Account(stack)
    batch_id = file_batch(sdk(stack, account.api), tmp_path, 4)
    held = submitted(sim, 4)
    sim.post(f"/_sim/provider-batches/{held['id']}", json={"action": "partial", "lines": 1})
    if change == "revoke":
        operator.post(f"/admin/keys/{account.key_id}/revoke").raise_for_status()
    elif change == "suspend":
        account.update(status="suspended")
    else:
        deleted = operator.delete(f"/admin/users/{account.id}").raise_for_status().json()
        assert deleted["batches_pending"] == [batch_id]  # cancelled, kept until its provider batch ends
    ended = admin.wait_final(batch_id, timeout=60)
    if change == "delete":
        assert ended["status"] == "cancelled"
    else:
        assert (ended["status"], ended["error"]["code"]) == ("failed", "owner_unauthorized")
    assert ended["request_counts"]["completed"] == 1  # what the provider finished is kept
    assert provider(sim)["batches"][0]["status"] == "cancelled"
    assert provider(sim)["lines"] == 4  # nothing more reached the provider
    if change == "delete":
        again = operator.delete(f"/admin/users/{account.id}").raise_for_status().json()
        assert again["batches_pending"] == []
        wait_for(lambda: not provider(sim)["files"], timeout=30, interval=0.2, what="its files deleted there")


def test_a_role_below_batch_min_role_pauses_a_provider_batch_before_it_is_submitted(
    stack: LocalStack, sim: httpx.Client, admin: Api, tmp_path: Path
) -> None:
    sim.post("/_sim/provider-batches", json={"submit_failure": "rate_limited", "retry_after": 1})
    account = Account(stack)
    client = sdk(stack, account.api)
    batch_id = file_batch(client, tmp_path, 3)
    refused_once(sim)  # planned, tried again each second
    account.update(role="pro")  # BATCH_MIN_ROLE is internal
    # Each try checks the owner before it submits (``provider.promises.check_owner``): once the
    # batch is paused, no try the provider would take next can have read the old role.
    paused = wait_for(
        lambda: (b := account.api.batch(batch_id))["paused"] and b, timeout=40, interval=0.2, what="the pause"
    )
    assert paused["paused"] == {"reason": "role", "until": None} and paused["status"] == "in_progress"
    sim.post("/_sim/provider-batches", json={"submit_failure": None}).raise_for_status()
    time.sleep(3)  # tries each second: one not held would have been taken by now
    assert provider(sim)["lines"] == 0 and provider(sim)["batches"] == []
    admin.http.post(f"/batches/{batch_id}/cancel").raise_for_status()
    assert admin.wait_final(batch_id)["status"] == "cancelled"
    assert provider(sim)["lines"] == 0


# --- BATCH_ENABLED ----------------------------------------------------------------------------


def test_batch_enabled_off_sends_the_provider_nothing_until_it_is_on_again(
    stack: LocalStack, sim: httpx.Client, operator: httpx.Client, admin: Api, tmp_path: Path
) -> None:
    client = OpenAI(base_url=stack.api_url, api_key="sk-local-alice", max_retries=0)
    sim.post("/_sim/provider-batches", json={"auto_seconds": None}).raise_for_status()
    running = file_batch(client, tmp_path, 2)  # a provider batch to poll
    held = submitted(sim, 2)
    sim.post("/_sim/provider-batches", json={"submit_failure": "rate_limited", "retry_after": 1})
    waiting = file_batch(client, tmp_path, 3)  # a part to submit
    refused_once(sim)
    try:
        operator.patch("/admin/config/BATCH_ENABLED", json={"value": False}).raise_for_status()
        time.sleep(SETTLE_SECONDS)  # every process sees it off
        sim.post(
            "/_sim/provider-batches", json={"submit_failure": None, "auto_seconds": 0}
        ).raise_for_status()
        sim.post(f"/_sim/provider-batches/{held['id']}", json={"action": "complete"}).raise_for_status()
        polls = provider(sim)["batches"][0]["polls"]
        time.sleep(SETTLE_SECONDS)
        after = provider(sim)
        assert after["lines"] == 2 and after["batches"][0]["polls"] == polls  # nothing sent, nothing read
        for batch_id in (running, waiting):
            assert admin.http.get(f"/batches/{batch_id}").status_code == 404  # batch routes are off
    finally:
        operator.patch("/admin/config/BATCH_ENABLED", json={"value": True}).raise_for_status()
    assert wait_batch(client, running).status == "completed"
    assert wait_batch(client, waiting).status == "completed"
    assert provider(sim)["lines"] == 5


# --- routes an administrator forbade ---------------------------------------------------------


def test_a_forbidden_route_never_receives_a_provider_batch(
    stack: LocalStack, sim: httpx.Client, operator: httpx.Client, alice: Api, tmp_path: Path
) -> None:
    route = "/admin/routing/provider-route-batch/sim-chat/cloud"
    operator.patch(route, json={"batch_allowed": False}).raise_for_status()
    try:
        time.sleep(SETTLE_SECONDS)  # every process knows it (the workflow reads a file batch's)
        body = {"model": "sim-chat", "messages": [{"role": "user", "content": "hi"}]}
        refused = alice.create([{"custom_id": "f", "body": body}], execution_mode="provider")
        assert refused.status_code == 403
        error = refused.json()["error"]
        assert error["code"] == "batch_not_supported"
        assert "administrator forbade batch work on route 'cloud' of 'sim-chat'" in error["message"]
        client = OpenAI(base_url=stack.api_url, api_key="sk-local-alice", max_retries=0)
        failed = wait_batch(client, file_batch(client, tmp_path, 2)).model_dump()
        assert (failed["status"], failed["error"]["code"]) == ("failed", "batch_not_supported"), failed
        assert "route 'cloud' of 'sim-chat'" in failed["error"]["message"]
        auto = wait_batch(client, file_batch(client, tmp_path, 2, mode="auto")).model_dump()
        assert (auto["status"], auto["execution_mode"]) == ("completed", "gateway")
        assert provider(sim)["lines"] == 0 and provider(sim)["batches"] == []
    finally:
        operator.patch(route, json={"batch_allowed": None}).raise_for_status()
        time.sleep(SETTLE_SECONDS)  # every process allows it again before the next test


# --- a provider batch the provider lost -------------------------------------------------------


def test_a_provider_batch_the_provider_lost_ends_the_batch_and_a_cancel_reaches_cancelled(
    stack: LocalStack, sim: httpx.Client, alice: Api, tmp_path: Path
) -> None:
    client = OpenAI(base_url=stack.api_url, api_key="sk-local-alice", max_retries=0)
    sim.post("/_sim/provider-batches", json={"auto_seconds": None}).raise_for_status()
    lost = file_batch(client, tmp_path, 3)
    held = submitted(sim, 3)
    sim.post(f"/_sim/provider-batches/{held['id']}", json={"action": "lose"}).raise_for_status()
    done = wait_batch(client, lost)
    assert done.status == "completed" and done.request_counts is not None and done.request_counts.failed == 3
    assert {r["error"]["code"] for r in alice.results(lost)} == {"provider_batch_lost"}

    cancelled = file_batch(client, tmp_path, 2)
    # Polled 1, 2, 4 and 8 s apart: after the fourth poll the next is 8 s away.
    wait_for(
        lambda: provider(sim)["lines"] == 5 and provider(sim)["batches"][-1]["polls"] >= 4,
        timeout=60,
        interval=0.2,
        what="the fourth poll",
    )
    sim.post("/_sim/reset").raise_for_status()  # as the stack's restart: the provider knows nothing
    client.batches.cancel(cancelled)  # its step finds the provider batch gone
    assert wait_batch(client, cancelled, timeout=30).status == "cancelled"


# --- delete -------------------------------------------------------------------------------------


def test_a_provider_batch_is_deleted_only_once_it_is_cancelled_there_and_its_files_go_too(
    stack: LocalStack, sim: httpx.Client, alice: Api, tmp_path: Path
) -> None:
    client = OpenAI(base_url=stack.api_url, api_key="sk-local-alice", max_retries=0)
    sim.post("/_sim/provider-batches", json={"auto_seconds": None}).raise_for_status()
    batch_id = file_batch(client, tmp_path, 2)
    submitted(sim, 2)
    refused = alice.http.delete(f"/batches/{batch_id}")
    assert refused.status_code == 409 and refused.json()["error"]["code"] == "batch_not_deletable"
    assert provider(sim)["batches"][0]["status"] not in ("cancelled", "completed")
    client.batches.cancel(batch_id)
    assert wait_batch(client, batch_id).status == "cancelled"
    assert provider(sim)["batches"][0]["status"] == "cancelled"
    assert provider(sim)["files"] == []  # deleted there once its lines were recorded
    assert alice.http.delete(f"/batches/{batch_id}").status_code == 200
    assert alice.http.get(f"/batches/{batch_id}").status_code == 404
