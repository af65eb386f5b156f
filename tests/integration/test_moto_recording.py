"""The local moto server records one request at a time (``make cost`` replays the record):
requests answered at once on many threads each keep a whole line of their own."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest
from moto.moto_api._internal.recorder.models import Recorder

from local import moto_server


class _Request:
    method = "POST"
    raw_path = "/"
    raw_url = "http://127.0.0.1/"

    def __init__(self, n: int) -> None:
        self.headers = {"X-Amz-Target": "DynamoDB_20120810.BatchWriteItem", "X-Request": str(n)}


def test_requests_recorded_on_many_threads_each_keep_a_whole_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(Recorder, "_record_request", Recorder._record_request)  # undone after
    moto_server.install_recording_lock()
    recording = tmp_path / "recording.jsonl"
    recorder = Recorder()
    recorder._location, recorder._user_enabled = str(recording), True
    body = "x" * 300_000  # many buffered writes per line, as a batch write of large items
    barrier = threading.Barrier(16)

    def record(n: int) -> None:
        barrier.wait()
        for _ in range(4):
            recorder._record_request(_Request(n), body)  # type: ignore[arg-type]

    threads = [threading.Thread(target=record, args=(n,)) for n in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    lines: list[dict[str, Any]] = [json.loads(line) for line in recording.read_text().splitlines()]
    assert len(lines) == 64
    assert sorted(int(line["headers"]["X-Request"]) for line in lines) == sorted(list(range(16)) * 4)
