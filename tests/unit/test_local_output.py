"""What ``make run`` keeps of its processes' output (``local.output``): bounded files, and one
terminal line per notable event."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

from local.output import BoundedLog, EventFeed, banner, pump


def test_a_log_file_turns_into_its_dot_one_at_its_bound_so_a_process_keeps_at_most_twice_that(
    tmp_path: Path,
) -> None:
    log = BoundedLog(tmp_path / "moto.log", max_bytes=100)
    for n in range(30):
        log.write(f"line {n:02d} {'x' * 20}\n".encode())  # 29 bytes each
    log.close()
    current, previous = (tmp_path / "moto.log").read_bytes(), (tmp_path / "moto.log.1").read_bytes()
    assert len(current) <= 100 and len(previous) <= 100
    assert current.decode().splitlines()[-1].startswith("line 29")
    assert previous.decode().splitlines()[-1].startswith("line 26")  # the one before is dropped
    assert sorted(p.name for p in tmp_path.iterdir()) == ["moto.log", "moto.log.1"]


def test_pump_copies_every_line_to_the_log_and_hands_each_to_the_feed(tmp_path: Path) -> None:
    seen: list[tuple[str, bytes]] = []
    source = io.BytesIO(b"one\ntwo\nthree")
    pump(
        source,
        BoundedLog(tmp_path / "api-0.log", None),
        name="api-0",
        on_line=lambda n, b: seen.append((n, b)),
    )
    assert (tmp_path / "api-0.log").read_bytes() == b"one\ntwo\nthree"
    assert [line for _, line in seen] == [b"one\n", b"two\n", b"three"] and {n for n, _ in seen} == {"api-0"}


def _line(message: str, **fields: Any) -> bytes:
    return json.dumps({"level": "INFO", "message": message, "service": "batchgw", **fields}).encode() + b"\n"


def test_the_feed_shows_one_line_per_batch_state_change_and_none_per_request() -> None:
    out = io.StringIO()
    feed = EventFeed(out)
    feed.start({})  # no stack: an ended batch shows without its counts
    for raw in [
        _line("batch started", batch_id="b1", total=3, chains=1),
        _line("chain stopped", batch_id="b1"),  # per request: never shown
        b"2026-12-06 04:07:21 worker-0.0 INFO httpx: HTTP Request: POST http://x/v1/chat/completions\n",
        _line("batch paused", batch_id="b1", reason="daily_quota"),
        _line("batch paused", batch_id="b1", reason="daily_quota"),  # another chain of it: once
        _line("batch resumed", batch_id="b1"),
        _line("batch ended", batch_id="b1", status="completed"),
        _line("setting overridden", setting="BATCH_MIN_ROLE", value="free", by="user-admin"),
        b"not json {\n",
    ]:
        feed.line("moto", raw)
    feed.note("process worker-1.0 exited (code -9); replaced by worker-1.1")
    feed.resuming(["b2"])  # after a restart: its prepare says it started again, no change
    feed.line("moto", _line("batch started", batch_id="b2", total=1, chains=1))
    feed.line("moto", _line("batch ended", batch_id="b2", status="failed"))
    feed.stop()
    lines = [line.split(" ", 1)[1] for line in out.getvalue().splitlines()]
    assert lines == [
        "batch b1 started: 3 requests",
        "batch b1 paused: daily_quota",
        "batch b1 resumed",
        "batch b1 completed",
        "setting BATCH_MIN_ROLE = free (by user-admin)",
        "process worker-1.0 exited (code -9); replaced by worker-1.1",
        "batch b2 failed",
    ]


def test_the_banner_names_every_url_and_key_and_where_the_logs_are() -> None:
    text = banner(
        api_url="http://127.0.0.1:8080/v1",
        sim_url="http://127.0.0.1:8081",
        moto_url="http://127.0.0.1:8082",
        state="kept in .local/state/8080",
        logs=".local/logs/8080/<process>.log",
        ready_seconds=4.2,
    )
    for expected in (
        "http://127.0.0.1:8080/v1",
        "http://127.0.0.1:8080/console/",
        "http://127.0.0.1:8081",
        ".local/logs/8080/<process>.log",
        "sk-local-admin   user-admin (admin)",
        "sk-local-alice   user-alice (internal)",
        "sk-local-bob     user-bob (internal)",
        "sk-local-free    user-free (free)",
    ):
        assert expected in text
