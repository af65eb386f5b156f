"""The metrics buffer writes CloudWatch EMF lines: counts summed, values split so that no
line holds more than EMF allows, one line per set of dimensions."""

from __future__ import annotations

import json

from batchgw.observability import MAX_VALUES, MetricsBuffer


def test_counts_are_summed_per_dimension_set_and_many_values_split_across_lines() -> None:
    lines: list[str] = []
    buffer = MetricsBuffer(emit=lines.append)
    buffer.ended("succeeded", model="a")
    buffer.ended("expired", 3, model="a")
    buffer.count("BatchesEnded", status="completed")
    for latency in range(250):
        buffer.value("UpstreamLatency", latency, model="a")
    documents = buffer.flush()

    assert [json.loads(line) for line in lines] == documents
    of_a = [d for d in documents if d.get("model") == "a"]
    assert sum(len(d["UpstreamLatency"]) for d in of_a) == 250
    assert all(len(d["UpstreamLatency"]) <= MAX_VALUES for d in of_a)
    assert [d["RequestsFailed"] for d in of_a if "RequestsFailed" in d] == [[3.0]]  # expired counts as failed
    assert [d["RequestsExpired"] for d in of_a if "RequestsExpired" in d] == [[3.0]]
    assert [d["RequestsSucceeded"] for d in of_a if "RequestsSucceeded" in d] == [[1.0]]
    (ended,) = [d for d in documents if d.get("status") == "completed"]
    assert ended["BatchesEnded"] == [1.0]
    assert ended["_aws"]["CloudWatchMetrics"][0]["Dimensions"] == [["status", "service"]]
    assert buffer.flush() == []  # flushed: nothing is written twice
