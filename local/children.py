"""The local stack's child processes, one at a time: how one is started, where its output
goes, how it is stopped, and what is shown of it when it died (``local.run``'s
``LocalStack`` decides which run and supervises them).

A child runs as ``python -m local.run --child <parent pid> <module> [args]`` (``child_main``
is that side: it runs the module and ends when the parent is gone), in its own session, with
the stack's environment. With a log dir its output goes to ``<log dir>/<name>.log``: written
by the child itself, or, when this process watches the lines (``make run``), through a pipe
that a thread copies (``local.output``).
"""

from __future__ import annotations

import logging
import os
import runpy
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from local import output
from local.env import REPO_ROOT, process_env, watch_parent

log = logging.getLogger("local.run")  # the stack's own lines, as they were before this module


@dataclass
class Child:
    name: str
    argv: list[str]
    process: subprocess.Popen[bytes]
    log_file: IO[bytes] | None = None
    expected_exit: bool = False
    pump: threading.Thread | None = None  # copies its output to its log (``local.output``)

    @property
    def replaceable(self) -> bool:
        """A handler process (api, worker, poller): one that crashes is replaced, as Lambda
        replaces an execution environment. moto and the simulator hold state: they are not."""
        return not self.name.startswith(("moto", "simulator"))


def spawn(
    name: str,
    module: str,
    args: Sequence[str],
    *,
    env: Mapping[str, str],
    log_dir: Path | None,
    log_max_bytes: int | None = None,
    on_line: Callable[[str, bytes], None] | None = None,
    echo: bool = False,
) -> Child:
    """Start ``module`` with ``args`` as the child ``name``, in the stack's environment ``env``.

    Its output comes through this process (``make run``'s way) when there is a log dir and
    any of ``log_max_bytes``, ``on_line`` or ``echo``; otherwise the child writes its log itself
    (or, without a log dir, to this process's stdout/stderr)."""
    piped = log_dir is not None and (log_max_bytes is not None or on_line is not None or echo)
    out: IO[bytes] | int | None = None
    if log_dir is not None:
        log_dir.mkdir(parents=True, exist_ok=True)
        # piped: a thread of this process writes the file (``output.pump``); otherwise the
        # child writes it, and terminate closes this process's copy of it
        out = subprocess.PIPE if piped else open(log_dir / f"{name}.log", "ab")  # noqa: SIM115
    argv = [sys.executable, "-m", "local.run", "--child", str(os.getpid()), module, *args]
    process = subprocess.Popen(
        argv,
        env=process_env(env),
        cwd=REPO_ROOT,
        stdin=subprocess.DEVNULL,
        stdout=out,
        stderr=subprocess.STDOUT if out else None,
        start_new_session=True,  # Ctrl-C reaches local.run only, which stops children in order
    )
    child = Child(name, argv, process, out if not isinstance(out, int) else None)
    if process.stdout is not None and log_dir is not None:
        child.pump = threading.Thread(
            target=output.pump,
            args=(process.stdout, output.BoundedLog(log_dir / f"{name}.log", log_max_bytes)),
            kwargs={
                "name": name,
                "on_line": on_line,
                "echo": sys.stdout.buffer if echo else None,
            },
            name=f"pump-{name}",
            daemon=True,
        )
        child.pump.start()
    return child


def terminate(children: list[Child], timeout: float) -> None:
    """SIGTERM each child, then SIGKILL the ones still running after ``timeout``; closes their
    logs once their last lines are in."""
    for child in children:
        child.expected_exit = True
        if child.process.poll() is None:
            child.process.terminate()
    deadline = time.monotonic() + timeout
    for child in children:
        try:
            child.process.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            log.warning("child ignored SIGTERM; killing", extra={"child": child.name})
            child.process.kill()
            child.process.wait()
        if child.log_file:
            child.log_file.close()
        if child.pump is not None:
            child.pump.join(timeout=5)  # its last lines reach the log


def kill(child: Child) -> None:
    """SIGKILL the child and what it started (its process group: a poller's execution
    environments), at once, as a machine or a sandbox going away would; reaps it."""
    try:
        os.killpg(child.process.pid, signal.SIGKILL)  # it leads its own session (``spawn``)
    except (ProcessLookupError, PermissionError):
        child.process.kill()
    child.process.wait()


def child_pids(parent: int) -> dict[int, str]:
    """The live processes whose parent is ``parent`` (a poller's execution environments), each
    with its process name (``/proc/<pid>/comm``, which an environment sets to say it is busy)."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            fields = stat[stat.rindex(")") + 2 :].split()  # from the 3rd field (state) on
            if int(fields[1]) == parent and fields[0] != "Z":
                found[int(entry.name)] = (entry / "comm").read_text().strip()
        except (OSError, ValueError, IndexError):  # it ended meanwhile
            continue
    return found


def log_tails(log_dir: Path | None, children: Mapping[str, Child], names: list[str]) -> str:
    """The last lines of the named children's logs, to show with their exit codes."""
    if log_dir is None:
        return ""
    tails = []
    for name in names:
        pump = children[name].pump if name in children else None
        if pump is not None:
            pump.join(timeout=2)  # the dead child's last lines reach its log first
        path = log_dir / f"{name}.log"
        if path.exists():
            tails.append(
                f"\n--- {path} (tail) ---\n" + "\n".join(path.read_text(errors="replace").splitlines()[-20:])
            )
    return "".join(tails)


def child_main(argv: list[str]) -> None:
    """``local.run --child <parent pid> <module> [args]``: run ``module`` as ``__main__``, and
    end it when the parent is gone."""
    parent, module, *rest = argv
    watch_parent(int(parent))
    sys.argv = [module, *rest]
    runpy.run_module(module, run_name="__main__", alter_sys=True)
