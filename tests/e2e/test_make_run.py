"""What ``make run`` shows: ``python -m local.run`` as a user starts it, on free ports.

Its terminal gets a short banner (every URL, the seeded keys, where the logs are) and then a
line per notable event, never one per request; every process's whole output is in its own
file under the log folder.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
from batchgw.storage.aws import CALLS_DIR_ENV

from local.env import REPO_ROOT, free_port
from local.keys import LOCAL_KEYS
from local.run import LocalStack, StackError
from tests.e2e.conftest import FINAL, aws_calls_dir, chat
from tests.support import wait_for

BANNER_END = "Events from here on"


@dataclass
class Terminal:
    """The lines ``local.run`` wrote to its terminal (stdout and stderr), as they come."""

    process: subprocess.Popen[str]
    lines: list[str] = field(default_factory=list)

    def read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.append(line.rstrip("\n"))

    def text(self) -> str:
        return "\n".join(self.lines)

    def after_banner(self) -> list[str]:
        lines = list(self.lines)
        end = next(i for i, line in enumerate(lines) if BANNER_END in line)
        return [line for line in lines[end + 1 :] if line.strip()]


@dataclass
class Run:
    terminal: Terminal
    api_port: int
    sim_port: int
    moto_port: int
    log_dir: Path


@pytest.fixture
def make_run(tmp_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    ports = [free_port(), free_port(), free_port()]
    while len(set(ports)) < 3:
        ports = [free_port(), free_port(), free_port()]
    log_dir = tmp_path / "logs"
    env = {
        **os.environ,
        "BATCHGW_PORT": str(ports[0]),
        "BATCHGW_SIM_PORT": str(ports[1]),
        "BATCHGW_MOTO_PORT": str(ports[2]),
        "BATCHGW_STATE_DIR": str(tmp_path / "state"),
        "BATCHGW_LOG_DIR": str(log_dir),
        CALLS_DIR_ENV: str(aws_calls_dir(tmp_path_factory) / tmp_path.name),
    }
    env.pop("BATCHGW_VERBOSE", None)
    process = subprocess.Popen(
        [sys.executable, "-m", "local.run"],
        cwd=REPO_ROOT,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    terminal = Terminal(process)
    threading.Thread(target=terminal.read, daemon=True).start()
    try:
        wait_for(
            lambda: BANNER_END in terminal.text() or process.poll() is not None,
            timeout=120,
            interval=0.1,
            what="the banner",
        )
        assert process.poll() is None, terminal.text()
        yield Run(terminal, ports[0], ports[1], ports[2], log_dir)
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=60) == 0, terminal.text()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def test_make_run_prints_a_short_banner_logs_to_files_and_a_batch_adds_a_few_lines(make_run: Run) -> None:
    terminal = make_run.terminal
    banner = terminal.text()
    api = f"http://127.0.0.1:{make_run.api_port}"
    assert f"{api}/v1" in banner
    assert f"{api}/console/" in banner
    assert f"http://127.0.0.1:{make_run.sim_port}" in banner
    for key, (_, role) in LOCAL_KEYS.items():
        assert any(key in line and f"({role})" in line for line in terminal.lines), key
    assert str(make_run.log_dir) in banner
    assert "BATCHGW_VERBOSE=1" in banner
    assert len(terminal.lines) <= 25, banner  # short

    # Every process's output is in its own file (a process may open its port a moment before
    # it says so).
    for name, said in [
        ("moto.log", "moto listening"),
        ("api-0.log", "api adapter listening"),
        ("simulator.log", "simulator listening"),
        ("worker-0.0.log", "polling"),
        ("worker-1.0.log", "polling"),
    ]:
        path = make_run.log_dir / name
        wait_for(
            lambda path=path, said=said: path.exists() and said in path.read_text(errors="replace"),
            timeout=60,
            interval=0.1,
            what=f"{said!r} in {name}",
        )

    before = len(terminal.after_banner())
    client = httpx.Client(
        base_url=f"{api}/v1", headers={"Authorization": "Bearer sk-local-alice"}, timeout=30
    )
    made = client.post("/batches", json={"requests": [chat(f"r-{i}", f"hello {i}") for i in range(6)]})
    assert made.status_code == 200, made.text
    batch_id = made.json()["id"]
    ended = wait_for(
        lambda: (b := client.get(f"/batches/{batch_id}").json())["status"] in FINAL and b,
        timeout=120,
        interval=0.2,
        what="the batch to end",
    )
    assert ended["status"] == "completed"
    # Its end is one line, with its counts.
    wait_for(
        lambda: any(
            batch_id in line and "completed: 6 completed" in line for line in terminal.after_banner()
        ),
        timeout=30,
        interval=0.1,
        what="the batch's end on the terminal",
    )
    added = terminal.after_banner()[before:]
    assert len(added) <= 3, added  # started, ended: never a line per request
    assert all(batch_id in line for line in added), added
    # ...while its six requests are in the worker logs.
    workers = "".join(p.read_text(errors="replace") for p in make_run.log_dir.glob("worker-*.log"))
    assert workers.count("/v1/chat/completions") >= 6


def test_a_dead_process_of_a_stack_logging_through_pipes_is_named_with_its_exit_code_and_log_tail(
    tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    logs = tmp_path / "logs"
    env = {CALLS_DIR_ENV: str(aws_calls_dir(tmp_path_factory) / tmp_path.name)}
    notes: list[str] = []
    stack = LocalStack(
        api_port=0,
        sim_port=0,
        moto_port=0,
        env_overrides=env,
        workers=1,
        simulator=False,
        api=False,
        log_dir=logs,
        log_max_bytes=2**20,
        on_line=lambda name, line: None,
        note=notes.append,
    )
    with stack:
        killed = stack.crash(
            "worker-0"
        )  # a handler process (an execution environment): replaced, and said so
        wait_for(lambda: notes, timeout=30, what="the replacement's note")
        assert f"execution environment {killed} of worker-0.0 killed; replaced by " in notes[0]
        (moto,) = stack.pids("moto")
        os.kill(moto, signal.SIGKILL)
        wait_for(stack.dead_children, timeout=30, what="moto to be seen dead")
        with pytest.raises(StackError) as stopped:
            stack.check()
    message = str(stopped.value)
    assert "moto (exit code -9)" in message
    assert "moto listening" in message  # the tail of its log, written through the pipe
