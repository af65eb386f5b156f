"""The simulator's provider batch APIs, driven over HTTP by the official SDKs, unmodified: what
a provider executor meets is what OpenAI's and Anthropic's batch services answer."""

from __future__ import annotations

import json

import anthropic
import httpx
from openai import OpenAI

from local.simulator import Simulator


def test_the_openai_sdk_runs_a_batch_on_the_simulator_and_reads_its_results(sim: Simulator) -> None:
    client = OpenAI(base_url=sim.base_url, api_key="sk-sim", max_retries=0)
    lines = [
        {
            "custom_id": f"r{i}",
            "method": "POST",
            "url": "/v1/chat/completions",
            "body": {"model": "sim-chat", "messages": [{"role": "user", "content": f"hello {i}"}]},
        }
        for i in range(3)
    ]
    uploaded = client.files.create(
        file=("batch.jsonl", "".join(json.dumps(line) + "\n" for line in lines).encode()), purpose="batch"
    )
    batch = client.batches.create(
        input_file_id=uploaded.id,
        endpoint="/v1/chat/completions",
        completion_window="24h",
        metadata={"batchgw_batch": "b1"},
    )
    done = client.batches.retrieve(batch.id)
    assert done.status == "completed" and done.request_counts is not None
    assert (done.request_counts.total, done.request_counts.completed) == (3, 3)
    assert done.output_file_id is not None
    results = [json.loads(line) for line in client.files.content(done.output_file_id).text.splitlines()]
    assert sorted(r["custom_id"] for r in results) == ["r0", "r1", "r2"]
    assert all(r["response"]["body"]["object"] == "chat.completion" for r in results)
    assert [b.id for b in client.batches.list()] == [batch.id]


def test_the_anthropic_sdk_runs_a_message_batch_on_the_simulator(sim: Simulator) -> None:
    httpx.post(f"{sim.url}/_sim/provider-batches", json={"auto_seconds": None}).raise_for_status()
    client = anthropic.Anthropic(base_url=sim.url, api_key="sk-sim", max_retries=0)
    created = client.messages.batches.create(
        requests=[
            {
                "custom_id": f"m{i}",
                "params": {
                    "model": "sim-claude",
                    "max_tokens": 16,
                    "messages": [{"role": "user", "content": "hi"}],
                },
            }
            for i in range(2)
        ]
    )
    assert client.messages.batches.retrieve(created.id).processing_status == "in_progress"
    httpx.post(
        f"{sim.url}/_sim/provider-batches/{created.id}", json={"action": "complete"}
    ).raise_for_status()
    ended = client.messages.batches.retrieve(created.id)
    assert ended.processing_status == "ended" and ended.request_counts.succeeded == 2
    results = list(client.messages.batches.results(created.id))
    assert sorted(r.custom_id for r in results) == ["m0", "m1"]
    assert all(r.result.type == "succeeded" for r in results)
