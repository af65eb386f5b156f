"""Cached input tokens come from the upstream's answer, in each API's own words, and add up
per batch and in the admin summary (``[[sim cached=N]]`` makes the simulator report them)."""

from __future__ import annotations

from typing import Any

import pytest
from batchgw.deps import Deps
from batchgw.domain.chains import RequestMessage
from batchgw.run import lifecycle
from batchgw.storage import aws

from local.simulator import Simulator
from tests.integration.conftest import make_deps, receive_all
from tests.integration.test_console_batches import call
from tests.integration.test_owner_gate import run
from tests.support import FakeClock

pytestmark = pytest.mark.usefixtures("aws_env")


@pytest.fixture
def deps(sim: Simulator) -> Deps:
    return make_deps(sim, FakeClock())


def ran(
    deps: Deps, monkeypatch: pytest.MonkeyPatch, requests: list[dict[str, Any]], **headers: str
) -> dict[str, Any]:
    """A batch of ``requests``, each run once: the batch object after."""
    status, batch = call(
        deps, monkeypatch, "POST", "/v1/batches", body={"requests": requests}, headers=headers
    )
    assert status == 200, batch
    lifecycle.prepare(deps, batch["id"])
    receive_all(deps)
    for index in range(len(requests)):
        run(deps, RequestMessage(batch["id"], index))
    return call(deps, monkeypatch, "GET", f"/v1/batches/{batch['id']}")[1]


def chat(custom_id: str, text: str) -> dict[str, Any]:
    return {
        "custom_id": custom_id,
        "body": {"model": "sim-chat", "messages": [{"role": "user", "content": text}]},
    }


def test_a_chat_batch_counts_the_cached_tokens_its_upstream_reports(
    deps: Deps, monkeypatch: pytest.MonkeyPatch
) -> None:
    batch = ran(deps, monkeypatch, [chat("a", "one two three [[sim cached=2]]"), chat("b", "four five six")])
    assert batch["usage"]["input_tokens_details"]["cached_tokens"] == 2
    _, results = call(deps, monkeypatch, "GET", f"/v1/batches/{batch['id']}/results")
    usage = results["data"][0]["response"]["body"]["usage"]
    assert usage["prompt_tokens_details"] == {"cached_tokens": 2}


def test_a_messages_batch_counts_cache_reads_as_input_and_as_cached(
    deps: Deps, monkeypatch: pytest.MonkeyPatch
) -> None:
    body = {
        "model": "sim-claude",
        "max_tokens": 16,
        "messages": [{"role": "user", "content": "a b c d [[sim cached=3]]"}],
    }
    plain = {**body, "messages": [{"role": "user", "content": "a b c d [[sim cached=0]]"}]}
    batch = ran(
        deps,
        monkeypatch,
        [
            {"custom_id": "x", "url": "/v1/messages", "body": body},
            {"custom_id": "y", "url": "/v1/messages", "body": plain},
        ],
        **{"anthropic-version": "2023-06-01"},
    )
    _, results = call(deps, monkeypatch, "GET", f"/v1/batches/{batch['id']}/results")
    cached_usage, plain_usage = (r["response"]["body"]["usage"] for r in results["data"])
    assert cached_usage["cache_read_input_tokens"] == 3
    # The input counted is the same with or without the cache: its reads are input too.
    assert batch["usage"]["input_tokens"] == 2 * plain_usage["input_tokens"]
    assert batch["usage"]["input_tokens_details"]["cached_tokens"] == 3


def test_the_admin_summary_counts_cached_tokens_and_the_batches_stored_before_they_were_recorded(
    deps: Deps, monkeypatch: pytest.MonkeyPatch
) -> None:
    recorded = ran(deps, monkeypatch, [chat("a", "one two three [[sim cached=2]]")])
    older = ran(deps, monkeypatch, [chat("a", "one two three [[sim cached=1]]")])
    # As a batch stored before cached tokens were recorded reads: without the mark.
    aws.get_clients().dynamodb.update_item(
        TableName=deps.settings.batches_table,
        Key={"pk": {"S": older["id"]}, "sk": {"S": "meta"}},
        UpdateExpression="REMOVE cache_recorded",
    )
    _, summary = call(deps, monkeypatch, "GET", "/admin/batch/summary", key="sk-local-admin")
    assert (summary["total"]["cached_tokens"], summary["total"]["cache_unrecorded_batches"]) == (2, 1)
    _, jobs = call(deps, monkeypatch, "GET", "/admin/batch/jobs", key="sk-local-admin")
    cached = {job["id"]: job["usage"]["cached_input_tokens"] for job in jobs["data"]}
    assert cached == {recorded["id"]: 2, older["id"]: None}
