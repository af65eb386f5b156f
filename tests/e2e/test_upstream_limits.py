"""No upstream can exhaust a worker, and nothing leaks from upstream answers, over real HTTP.

One stack of its own: its answer cap (BATCH_MAX_RESULT_KB) is small, so answers far
larger than it show the worker's memory staying flat; its upstream deadline
(BATCH_UPSTREAM_TIMEOUT_SECONDS) leaves the simulator time to build 50 MB answers on a
loaded machine.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from local import env as local_env
from local.environments import IDLE_SECONDS_ENV
from local.run import LocalStack
from tests.e2e.conftest import STACK_ENV, Api, chat, stack_for
from tests.support import spec_counts, wait_for

pytestmark = pytest.mark.e2e

CAP_KB = 2048
DEADLINE = 10.0
UPSTREAM_KEY = "sk-sim-local-upstream-key"  # what the local routes send the simulator


@pytest.fixture(scope="module")
def limits_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    env = {
        **STACK_ENV,
        "BATCH_MAX_RESULT_KB": str(CAP_KB),
        "BATCH_UPSTREAM_TIMEOUT_SECONDS": str(DEADLINE),
        # One worker execution environment, started with the stack and never reaped: the memory
        # test measures the one process every request runs in.
        local_env.WORKER_ENVIRONMENTS_ENV: "1",
        IDLE_SECONDS_ENV: "3600",
    }
    with stack_for(tmp_path_factory, "limits", env, workers=1) as running:
        yield running


@pytest.fixture(scope="module")
def api(limits_stack: LocalStack) -> Api:
    return Api(limits_stack, "sk-local-alice")


@pytest.fixture
def sim(limits_stack: LocalStack) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=limits_stack.sim_url, timeout=10) as client:
        client.post("/_sim/reset").raise_for_status()
        yield client


def _tag(sim: httpx.Client, tag: str) -> dict[str, int]:
    return dict(sim.get("/_sim/stats").json()["tags"].get(tag, {"in_flight": 0, "requests": 0}))


def test_an_answer_trickled_past_the_deadline_fails_with_timeout_at_the_deadline(
    api: Api, sim: httpx.Client
) -> None:
    # 16 bytes every 200 ms: no read ever waits long, but the whole answer would take 50 s.
    # The call's length is bounded from both sides as the test sees it: no shorter than from
    # the create to its end (the call started after the create), no longer than from when it
    # was first seen running (it started before) — on a loaded machine those differ.
    created = time.monotonic()
    batch = api.create([chat("t", "slow [[sim trickle_ms=200 bytes=4000 tag=trickle]]")]).json()
    wait_for(lambda: _tag(sim, "trickle")["in_flight"] == 1, timeout=30, what="the call to start")
    seen = time.monotonic()
    wait_for(lambda: _tag(sim, "trickle")["in_flight"] == 0, timeout=30, what="the call to end")
    ended = time.monotonic()
    at_least, at_most = ended - seen, ended - created
    done = api.wait_final(batch["id"], timeout=30)
    [result] = api.results(batch["id"])
    assert result["error"]["code"] == "timeout"
    assert done["cost_unknown_attempts"] == 1  # it may have run: counted, of unknown cost
    assert at_most >= DEADLINE - 0.5 and at_least <= DEADLINE + 3
    print(
        f"\ntrickled answer: ended {at_least:.2f}-{at_most:.2f} s after its start (deadline {DEADLINE:g} s)"
    )


def _rss_kb(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1])
    raise AssertionError(f"no {field} for {pid}")


def test_answers_far_past_the_byte_cap_fail_result_too_large_and_the_workers_memory_stays_flat(
    limits_stack: LocalStack, api: Api, sim: httpx.Client
) -> None:
    # A small batch first: the environment's first invocation makes its clients (botocore's
    # models and endpoints, pools), which are not what this measures.
    api.wait_final(api.create([chat("warm", "hi")]).json()["id"], timeout=60)
    pids = limits_stack.environment_pids("worker-")  # where the worker's invocations run
    assert len(pids) == 1
    for pid in pids:
        Path(f"/proc/{pid}/clear_refs").write_text("5")  # the peak starts again from now
    before = {pid: _rss_kb(pid, "VmRSS") for pid in pids}
    size = 50_000_000
    requests = [
        {
            "custom_id": f"e-{i}",
            "url": "/v1/embeddings",
            "body": {"model": "sim-embed", "input": f"huge {i} [[sim bytes={size} {framing} tag=huge]]"},
        }
        # Half declare their length (refused unread), half are chunked (read up to the cap).
        for i, framing in enumerate(["", "chunked"] * 5)
    ]
    batch = api.create(requests).json()
    done = api.wait_final(batch["id"], timeout=120)
    assert spec_counts(done) == {"total": 10, "completed": 0, "failed": 10}
    assert done["cost_unknown_attempts"] == 10
    results = api.results(batch["id"])
    assert {r["error"]["code"] for r in results} == {"result_too_large"}
    assert _tag(sim, "huge")["requests"] == 10  # each answered once, none retried
    growth_mb = {pid: (_rss_kb(pid, "VmHWM") - before[pid]) / 1024 for pid in pids}
    print(f"\nten {size / 1e6:g} MB answers, cap {CAP_KB} KiB: worker peak RSS growth (MiB) {growth_mb}")
    assert max(growth_mb.values()) < 48  # one answer read whole would be 50 MB and more


def test_a_401_quoting_the_gateways_key_never_shows_it_to_the_tenant(
    limits_stack: LocalStack, api: Api, sim: httpx.Client
) -> None:
    batch = api.create([chat("k", "[[sim status=401]]")]).json()
    done = api.wait_final(batch["id"])
    assert spec_counts(done) == {"total": 1, "completed": 0, "failed": 1}
    [result] = api.results(batch["id"])
    assert result["error"]["status"] == 401
    assert result["error"]["message"] == "the upstream provider refused the gateway's credentials"
    # The simulator said "Incorrect API key provided: sk-sim-l*************-key. ...".
    shown = (
        api.http.get(f"/batches/{batch['id']}/results").text
        + api.http.get(f"/batches/{batch['id']}").text
        + json.dumps(api.results(batch["id"], status="failed"))
    )
    for leaked in (UPSTREAM_KEY, "sk-sim-l", "*****-key", "Incorrect API key"):
        assert leaked not in shown
    # Operators get the provider's words, scrubbed of the key, in the worker's log.
    assert limits_stack.log_dir is not None
    logs = "".join(path.read_text(errors="replace") for path in limits_stack.log_dir.glob("*"))
    assert "upstream refused the gateway's credentials" in logs
    assert UPSTREAM_KEY not in logs and "sk-sim-l*" not in logs
