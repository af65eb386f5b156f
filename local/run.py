"""Run the whole gateway on this machine: ``python -m local.run`` (what ``make run`` calls).

Starts, each as its own process with the same environment (``local.env.stack_env``):
moto (``local.moto_server``), then creates the resources (``local.bootstrap``), then
the simulator (``local.simulator``), the api adapter(s) (``local.adapter``,
``BATCHGW_API_PROCESSES``, default 1, which share out the interactive function's
``BATCHGW_INTERACTIVE_CONCURRENCY`` execution environments, default 64, each a process of its
adapter's, ``local.environments``), the worker pollers (``local.poller``, ``BATCHGW_WORKERS``,
default 2: the work queue's event source mapping, which share out
``BATCHGW_WORKER_ENVIRONMENTS`` execution environments, default 8, each a process of its
poller's) and a poller for any other queue whose handler exists (``local.pollers``: what each
poller runs). Ctrl-C or SIGTERM
stops every child (SIGTERM, then SIGKILL) and exits 0; a child that dies on its own stops
the rest and exits 1. How one child is started, logged and stopped is ``local.children``;
which run, in what order, and replacing the ones that crash is ``LocalStack`` here.

Programmatic use (tests, benchmarks)::

    with LocalStack(api_port=0, sim_port=0, moto_port=0,
                    env_overrides={"BATCH_LEASE_SECONDS": "5"}, workers=2) as stack:
        httpx.get(f"{stack.api_url}/batches", headers=...)
        stack.kill_worker(0); stack.start_worker(0)

``state_dir=`` keeps the stack's DynamoDB, S3 and KMS state there across restarts
(``local.state``; ``make run`` passes ``BATCHGW_STATE_DIR``, default ``.local/state/<port>``): a
stack started on a saved state restores it before anything else starts, then starts every
batch's workflow again (``local.resume``). Without it (the default in code) nothing is kept.

Port ``0`` picks a free port; ``None`` takes ``BATCHGW_PORT`` / ``BATCHGW_SIM_PORT`` /
``BATCHGW_MOTO_PORT`` or the defaults 8080 / 8081 / 8082. The simulator's second listener
(``sim-chat``'s backup route) takes ``BATCHGW_SIM_BACKUP_PORT``, else a free port.
"""

from __future__ import annotations

import argparse
import atexit
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType
from typing import IO, Any

import boto3
from batchgw.config import resources

from local import children, lifecycle, output, pollers
from local.bootstrap import bootstrap
from local.children import Child
from local.env import (
    API_HANDLER_ENV,
    API_PROCESSES_ENV,
    CHECKPOINT_SECONDS_ENV,
    DEFAULT_API_HANDLER,
    DEFAULT_CHECKPOINT_SECONDS,
    HOST,
    REGION,
    WORKERS_ENV,
    Ports,
    StateDirInUse,
    environment_share,
    interactive_environments,
    lock_state_dir,
    port_open,
    setup_logging,
    snapshot_path,
    stack_env,
    state_dir_from_env,
    worker_environments,
)
from local.environments import BUSY_NAME, IDLE_NAME
from local.resume import PurgeSchedule, resume_workflows

log = logging.getLogger("local.run")

DEFAULT_WORKERS = 2
DEFAULT_API_PROCESSES = 1
STOP_TIMEOUT_SECONDS = 10.0


class StackError(RuntimeError):
    """The stack did not start, or one of its processes died."""


SUPERVISE_SECONDS = 0.2
LIFECYCLE_SECONDS = 5.0  # how often the bucket's lifecycle rules are applied


class LocalStack:
    """The whole local stack as child processes; a context manager.

    ``env`` is the stack's environment (the variables every child gets, including the
    queue URL and state machine ARN moto handed out); set it up for your own boto3
    clients with ``os.environ.update(stack.env)``. ``log_dir`` sends each child's output
    to ``<log_dir>/<name>.log`` (otherwise it goes to this process's stdout/stderr).

    What ``make run`` adds (``local.output``): ``log_max_bytes`` bounds each log file (it
    turns into ``<name>.log.1`` at that size), ``on_line`` sees each line of every child's
    output, ``echo`` copies it to this process's stdout as well, ``note`` hears of the
    stack's own events (a child replaced) and ``resuming`` of the batches whose workflows a
    restored start starts again. With any of them, the children's output comes
    through a pipe that a thread of this process copies (otherwise the children write their
    log files themselves, costing this process nothing).
    """

    def __init__(
        self,
        api_port: int | None = None,
        sim_port: int | None = None,
        moto_port: int | None = None,
        *,
        env_overrides: Mapping[str, str] | None = None,
        workers: int | None = None,
        api_processes: int | None = None,
        simulator: bool = True,
        api: bool = True,
        log_dir: str | Path | None = None,
        startup_timeout: float = 60.0,
        state_dir: str | Path | None = None,
        checkpoint_seconds: float | None = None,
        log_max_bytes: int | None = None,
        on_line: Callable[[str, bytes], None] | None = None,
        echo: bool = False,
        note: Callable[[str], None] | None = None,
        resuming: Callable[[list[str]], None] | None = None,
    ) -> None:
        defaults = Ports.from_env()
        self._requested = Ports(
            api=defaults.api if api_port is None else api_port,
            sim=defaults.sim if sim_port is None else sim_port,
            moto=defaults.moto if moto_port is None else moto_port,
            # The simulator's second route: BATCHGW_SIM_BACKUP_PORT, else a free port.
            sim_backup=0 if sim_port == 0 else defaults.sim_backup,
        )
        self.env_overrides = dict(env_overrides or {})
        settings = {**os.environ, **self.env_overrides}
        # Worker pollers (each long-polls the work queue, as the event source mapping's pollers
        # do), sharing out the worker's execution environments (``local.environments``).
        self.workers = int(settings.get(WORKERS_ENV, DEFAULT_WORKERS)) if workers is None else workers
        self.worker_environments = worker_environments(settings)
        self.api_processes = (
            int(settings.get(API_PROCESSES_ENV, DEFAULT_API_PROCESSES))
            if api_processes is None
            else api_processes
        )
        self.simulator = simulator
        self.api = api
        self.log_dir = Path(log_dir) if log_dir is not None else None
        self.log_max_bytes = log_max_bytes
        self._on_line = on_line
        self._echo = echo
        self._note = note
        self._resuming = resuming
        self.startup_timeout = startup_timeout
        # Absolute: moto runs in the repository root, whatever the caller's directory.
        self.state_dir = Path(state_dir).resolve() if state_dir is not None else None
        self.checkpoint_seconds = (
            float(settings.get(CHECKPOINT_SECONDS_ENV, DEFAULT_CHECKPOINT_SECONDS))
            if checkpoint_seconds is None
            else checkpoint_seconds
        )
        self.restored = False  # whether the last start found a saved state
        self._state_lock: IO[str] | None = None  # held on state_dir while the stack runs
        self.ports = self._requested
        self.env: dict[str, str] = {}
        self._children: dict[str, Child] = {}
        self._worker_names: list[str | None] = []
        self._started = False
        self._lock = threading.RLock()
        self._supervisor: threading.Thread | None = None
        self.replaced: list[str] = []  # children that crashed and were replaced, by name
        # Execution environments ``crash`` killed, until their poller has replaced them:
        # (poller's name, killed pid, the poller's environments before the kill).
        self._killed_environments: list[tuple[str, int, set[int]]] = []
        # Seconds each phase of the last start took (moto ready: its saved state restored;
        # bootstrap; resume: the workflows started again; serving: the rest, ports open).
        self.timings: dict[str, float] = {}
        # After a restored start: the workflows started again (``local.resume``), and the purges
        # of the finished batches that got none, each due at its retention's end.
        self.resumed: dict[str, int] = {}
        self._purges: PurgeSchedule | None = None
        self._resumer: threading.Thread | None = None
        self._s3: tuple[str, Any] | None = None  # the lifecycle sweeps' client, for this moto endpoint

    # --- addresses ----------------------------------------------------------------------------

    @property
    def api_url(self) -> str:
        """The API base URL, ``http://127.0.0.1:<api port>/v1``."""
        return f"http://{HOST}:{self.ports.api}/v1"

    @property
    def sim_url(self) -> str:
        return f"http://{HOST}:{self.ports.sim}"

    @property
    def moto_url(self) -> str:
        return f"http://{HOST}:{self.ports.moto}"

    # --- lifecycle ------------------------------------------------------------------------------

    def __enter__(self) -> LocalStack:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def start(self) -> LocalStack:
        """Start every process and return once the API (and simulator) accept connections."""
        if self._started:
            return self
        self.ports = self._requested.resolved()
        busy = [p for p in self.ports.all() if port_open(p)]
        if busy:
            raise StackError(f"ports already in use: {busy}")
        self.env = stack_env(self.ports, overrides=self.env_overrides)
        self._started = True
        atexit.register(self.stop)
        try:
            persist: list[str] = []
            if self.state_dir is not None:
                self._state_lock = lock_state_dir(self.state_dir)
                self.restored = snapshot_path(self.state_dir).exists()
                persist = [
                    "--state-dir",
                    str(self.state_dir),
                    "--checkpoint-seconds",
                    str(self.checkpoint_seconds),
                ]
            began = time.monotonic()
            self._spawn("moto", "local.moto_server", "--port", str(self.ports.moto), *persist)
            if self.simulator:  # it needs nothing of moto's: it starts meanwhile
                self._spawn(
                    "simulator",
                    "local.simulator",
                    "--port",
                    str(self.ports.sim),
                    "--backup-port",
                    str(self.ports.sim_backup),
                )
            self._wait_ports([self.ports.moto])  # it opens once the saved state is restored
            self.timings = {"moto_ready": time.monotonic() - began}
            began = time.monotonic()
            self.env.update(bootstrap(self.env))
            self.timings["bootstrap"] = time.monotonic() - began
            began = time.monotonic()
            if self.restored:
                # While the other processes start and serve: the API answers from the restored
                # tables at once, and each batch goes on once its workflow is back.
                self._resumer = threading.Thread(target=self._resume, name="local-stack-resume", daemon=True)
                self._resumer.start()
            if self.api:
                handler = self.env.get(API_HANDLER_ENV, DEFAULT_API_HANDLER)
                reuse = ["--reuse-port"] if self.api_processes > 1 else []
                interactive = interactive_environments(self.env)
                for index in range(self.api_processes):
                    # the interactive function's environments, shared out among the adapters
                    share = environment_share(interactive, self.api_processes, index)
                    self._spawn(
                        f"api-{index}",
                        "local.adapter",
                        "--port",
                        str(self.ports.api),
                        "--handler",
                        handler,
                        "--interactive-concurrency",
                        str(share),
                        *reuse,
                    )
            for index in range(self.workers):
                self.start_worker(index)
            for name, args in pollers.event_pollers(self.env).items():
                self._spawn(name, "local.poller", *args)
            waited = [self.ports.api] if self.api else []
            waited += [self.ports.sim, self.ports.sim_backup] if self.simulator else []
            self._wait_ports(waited)
            self.timings["serving"] = time.monotonic() - began
        except BaseException:
            self.stop()
            raise
        self._supervisor = threading.Thread(
            target=self._supervise, name="local-stack-supervisor", daemon=True
        )
        self._supervisor.start()
        return self

    def _resume(self) -> None:
        began = time.monotonic()
        try:
            self.resumed, self._purges = resume_workflows(
                self.env, keep_going=lambda: self._started, starting=self._resuming
            )
        except Exception:
            if self._started:  # else: stopped meanwhile, moto gone
                log.exception("workflows not started again")
            return
        self.timings["resume"] = time.monotonic() - began
        if self._note is not None:
            self._note(
                f"{self.resumed['batches']} unfinished batches resumed; "
                f"{self.resumed['kept']} finished ones kept until their retention ends"
            )

    def wait_resumed(self, timeout: float = 120.0) -> dict[str, int]:
        """After a restored start, wait until every batch's workflow is started again (it goes on
        in the background while the stack serves); what was started."""
        if self._resumer is not None:
            self._resumer.join(timeout)
            if self._resumer.is_alive():
                raise StackError(f"the workflows were not started again within {timeout:.0f} s")
        return self.resumed

    def stop(self, timeout: float = STOP_TIMEOUT_SECONDS) -> None:
        """Stop every child: consumers first, moto last; SIGTERM, then SIGKILL after ``timeout``."""
        with self._lock:
            if not self._started:
                return
            self._started = False
        atexit.unregister(self.stop)
        if self._supervisor is not None:
            self._supervisor.join()
            self._supervisor = None
        if self._resumer is not None:
            self._resumer.join()  # it stops at its next batch
            self._resumer = None
        with self._lock:
            moto = self._children.pop("moto", None)
            children.terminate(list(self._children.values()), timeout)
            if moto is not None:
                children.terminate([moto], timeout)
            self._children.clear()
            self._worker_names.clear()
            self._release_state_dir()
            self._s3 = None  # its connections were to the moto just stopped

    def kill(self) -> None:
        """SIGKILL every child at once, moto included (a machine that lost power): nothing is
        saved beyond the last checkpoint. The stack is stopped after it."""
        with self._lock:
            if not self._started:
                return
            self._started = False
            for child in self._children.values():
                child.expected_exit = True
                if child.process.poll() is None:
                    children.kill(child)
        atexit.unregister(self.stop)
        if self._supervisor is not None:
            self._supervisor.join()
            self._supervisor = None
        if self._resumer is not None:
            self._resumer.join()  # its next call fails, moto dead: it ends
            self._resumer = None
        with self._lock:
            children.terminate(list(self._children.values()), STOP_TIMEOUT_SECONDS)  # reaps the dead
            self._children.clear()
            self._worker_names.clear()
            self._release_state_dir()
            self._s3 = None  # its connections were to the moto just stopped

    def _release_state_dir(self) -> None:
        """Let another stack have the state dir (moto, which saves it, has exited)."""
        if self._state_lock is not None:
            self._state_lock.close()
            self._state_lock = None

    def dead_children(self) -> list[str]:
        """Children that exited without being asked to and are not replaced (moto, the
        simulator): the stack cannot go on without them."""
        with self._lock:
            return [
                c.name
                for c in self._children.values()
                if not c.expected_exit and not c.replaceable and c.process.poll() is not None
            ]

    def _supervise(self) -> None:
        """Replace every handler process that crashed, as Lambda replaces an execution
        environment; the stack keeps serving. Apply the buckets' lifecycle rules, as S3 would."""
        next_sweep = time.monotonic()
        while self._started:
            with self._lock:
                if not self._started:
                    return
                crashed = [
                    c
                    for c in self._children.values()
                    if c.replaceable and not c.expected_exit and c.process.poll() is not None
                ]
                for child in crashed:
                    self._replace(child)
                self._note_replaced_environments()
            if time.monotonic() >= next_sweep:
                self._apply_lifecycle_rules()
                self._run_due_purges()
                next_sweep = time.monotonic() + LIFECYCLE_SECONDS
            time.sleep(SUPERVISE_SECONDS)

    def _lifecycle_s3(self) -> Any:
        """The sweeps' S3 client, made at the first sweep of a start and kept: making one (a
        session, S3's service data) cost about 0.2 s of CPU, every 5 s, for as long as the stack
        ran: most of what an idle stack cost this process."""
        if self._s3 is None or self._s3[0] != self.env["AWS_ENDPOINT_URL"]:
            client = boto3.session.Session(
                aws_access_key_id="testing", aws_secret_access_key="testing", region_name=REGION
            ).client("s3", endpoint_url=self.env["AWS_ENDPOINT_URL"])  # type: ignore[call-overload]
            self._s3 = (self.env["AWS_ENDPOINT_URL"], client)
        return self._s3[1]

    def _apply_lifecycle_rules(self) -> None:
        try:
            s3 = self._lifecycle_s3()
            for spec in resources.BUCKETS:
                expired = lifecycle.apply_rules(
                    s3,
                    self.env[spec.env_var],
                    spec,
                    now=datetime.now(UTC),
                    day=lifecycle.day_seconds(self.env),
                )
                if expired:
                    log.info("lifecycle rules applied", extra={"deleted": len(expired)})
                    if self._note is not None:
                        self._note(f"{len(expired)} expired objects deleted from {self.env[spec.env_var]}")
        except Exception:  # moto stopping, or busy: the next sweep tries again
            log.debug("lifecycle sweep skipped", exc_info=True)

    def _run_due_purges(self) -> None:
        if self._purges is None:
            return
        try:
            self._purges.run_due()
        except Exception:  # moto stopping, or busy: the next sweep tries again
            log.debug("purges not started", exc_info=True)

    def _note_replaced_environments(self) -> None:
        """Say which environment replaced each one ``crash`` killed, once its poller started it."""
        waiting = []
        for name, killed, before in self._killed_environments:
            poller = self._children.get(name)
            if poller is None or poller.process.poll() is not None:
                continue  # the poller is gone too (and replaced itself, if it crashed)
            fresh = set(children.child_pids(poller.process.pid)) - before - {killed}
            if not fresh:
                waiting.append((name, killed, before))
                continue
            self.replaced.append(f"{name}/env-{killed}")
            log.info("environment crashed; replaced", extra={"child": name, "pid": killed})
            if self._note is not None:
                self._note(f"execution environment {killed} of {name} killed; replaced by {min(fresh)}")
        self._killed_environments = waiting

    def _replace(self, child: Child) -> None:
        child.expected_exit = True  # handled: never replaced twice
        if child.log_file:
            child.log_file.close()
        log.info(
            "process crashed; replaced",
            extra={"child": child.name, "returncode": child.process.returncode},
        )
        self.replaced.append(child.name)
        if child.name in self._worker_names:
            index = self._worker_names.index(child.name)
            self.start_worker(index)
            new_name = self._worker_names[index]
        else:
            base = child.name.split(".")[0]
            generation = sum(1 for name in self._children if name.split(".")[0] == base)
            new_name = self._spawn(
                f"{base}.{generation}", *child.argv[child.argv.index("--child") + 2 :]
            ).name
        if self._note is not None:
            self._note(
                f"process {child.name} exited (code {child.process.returncode}); replaced by {new_name}"
            )

    def check(self) -> None:
        """Raise StackError if a child died on its own."""
        dead = self.dead_children()
        if dead:
            codes = ", ".join(f"{n} (exit code {self._children[n].process.returncode})" for n in dead)
            raise StackError(
                f"stopped unexpectedly: {codes}{children.log_tails(self.log_dir, self._children, dead)}"
            )

    # --- workers, for fault tests ------------------------------------------------------------

    @property
    def worker_pids(self) -> list[int | None]:
        return [
            self._children[name].process.pid if name and self._children[name].process.poll() is None else None
            for name in self._worker_names
        ]

    def start_worker(self, index: int) -> int:
        """Start a worker poller in slot ``index`` (a fresh process); returns its pid."""
        with self._lock:
            return self._start_worker(index)

    def _start_worker(self, index: int) -> int:
        while len(self._worker_names) <= index:
            self._worker_names.append(None)
        old = self._worker_names[index]
        if old and self._children[old].process.poll() is None:
            raise StackError(f"worker {index} is running")
        generation = sum(1 for name in self._children if name.startswith(f"worker-{index}."))
        name = f"worker-{index}.{generation}"
        share = environment_share(self.worker_environments, max(1, self.workers), index)
        child = self._spawn(name, "local.poller", *pollers.worker_args(self.env, name, share))
        self._worker_names[index] = name
        return child.process.pid

    def kill_worker(self, index: int) -> None:
        """SIGKILL worker ``index`` and its execution environments (a crash mid-invocation: their
        in-flight messages stay on the queue); it is not replaced until ``start_worker``."""
        with self._lock:
            name = self._worker_names[index]
            if not name:
                raise StackError(f"no worker {index}")
            child = self._children[name]
            child.expected_exit = True
            children.kill(child)
            if child.log_file:
                child.log_file.close()

    def crash(self, name_prefix: str, timeout: float = 10.0) -> int:
        """SIGKILL the running child whose name starts with ``name_prefix`` (``worker-1``,
        ``api-0``), as a crash: the stack replaces it. Of a poller, one execution environment
        is killed (a busy one if any: one invocation dies, as on Lambda; else an idle one that
        imported its handler), which the poller replaces; an api adapter is killed whole, its
        interactive environments with it (the api and admin functions run in it). Waits for such
        a child (or environment) to be running (one crashed a moment ago is being replaced).
        Returns the killed pid."""
        deadline = time.monotonic() + timeout
        while True:
            with self._lock:
                child = next(
                    (
                        c
                        for c in self._children.values()
                        if c.name.startswith(name_prefix) and not c.expected_exit and c.process.poll() is None
                    ),
                    None,
                )
                if child is not None and "local.poller" in child.argv:
                    environments = children.child_pids(child.process.pid)
                    busy = [pid for pid, name in environments.items() if name == BUSY_NAME]
                    ready = busy or [pid for pid, name in environments.items() if name == IDLE_NAME]
                    if ready:
                        pid = min(ready)
                        os.kill(pid, signal.SIGKILL)
                        self._killed_environments.append((child.name, pid, set(environments)))
                        return pid
                elif child is not None:
                    children.kill(child)
                    return child.process.pid
            if time.monotonic() > deadline:
                raise StackError(f"no running child (or environment of one) named {name_prefix}*")
            time.sleep(SUPERVISE_SECONDS)

    def pids(self, name_prefix: str) -> list[int]:
        """The pids of the running children whose names start with ``name_prefix``, and of their
        execution environments (a poller's; an api adapter's, the interactive function's)."""
        with self._lock:
            running = [
                c.process.pid
                for c in self._children.values()
                if c.name.startswith(name_prefix) and c.process.poll() is None
            ]
        return running + [pid for parent in running for pid in children.child_pids(parent)]

    def environment_pids(self, name_prefix: str = "worker-") -> list[int]:
        """The execution environments of the running pollers (or api adapters: the interactive
        function's) whose names start with ``name_prefix``."""
        with self._lock:
            running = [
                c.process.pid
                for c in self._children.values()
                if c.name.startswith(name_prefix) and c.process.poll() is None
            ]
        return sorted(pid for parent in running for pid in children.child_pids(parent))

    # --- internals -------------------------------------------------------------------------------

    def _spawn(self, name: str, module: str, *args: str) -> Child:
        child = children.spawn(
            name,
            module,
            args,
            env=self.env,
            log_dir=self.log_dir,
            log_max_bytes=self.log_max_bytes,
            on_line=self._on_line,
            echo=self._echo,
        )
        self._children[name] = child
        return child

    def _wait_ports(self, ports: list[int]) -> None:
        deadline = time.monotonic() + self.startup_timeout
        for port in ports:
            while not port_open(port):
                self.check()
                if time.monotonic() > deadline:
                    raise StackError(f"port {port} did not open in {self.startup_timeout:.0f} s")
                time.sleep(0.05)


def _state_line(stack: LocalStack) -> str:
    if stack.state_dir is None:
        return "not kept (BATCHGW_PERSIST=0)"
    found = "restored from" if stack.restored else "kept in"
    return f"{found} {_shown_path(stack.state_dir)} (make reset clears it)"


def _shown_path(path: Path) -> str:
    """``path`` relative to the working directory when it is under it (shorter in a banner)."""
    try:
        return str(path.resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--child"]:
        children.child_main(argv[1:])
        return 0
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--workers", type=int, default=None, help=f"worker pollers (${WORKERS_ENV}, default 2)"
    )
    parser.add_argument("--no-simulator", action="store_true", help="do not start local.simulator")
    args = parser.parse_args(argv)
    # Every process's whole output goes to its file in log_dir; the terminal gets the banner and
    # one line per event (``local.output``), and this process's own warnings.
    log_dir = output.log_dir_from_env()
    max_bytes = output.log_max_bytes_from_env()
    verbose = output.verbose_from_env()
    setup_logging(
        "run",
        file=log_dir / "run.log",
        file_max_bytes=max_bytes,
        stderr_level=logging.NOTSET if verbose else logging.WARNING,
    )

    stopping = False

    def request_stop(*_: Any) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGINT, request_stop)
    signal.signal(signal.SIGTERM, request_stop)
    feed = output.EventFeed()
    stack = LocalStack(
        workers=args.workers,
        simulator=not args.no_simulator,
        state_dir=state_dir_from_env(),
        log_dir=log_dir,
        log_max_bytes=max_bytes,
        on_line=feed.line,
        echo=verbose,
        note=feed.note,
        resuming=feed.resuming,
    )
    began = time.monotonic()
    try:
        stack.start()
    except (StackError, StateDirInUse) as exc:
        log.error("the stack did not start: %s", exc)
        return 1
    logs = f"{_shown_path(log_dir)}/<process>.log"
    print(
        output.banner(
            api_url=stack.api_url,
            sim_url=stack.sim_url,
            moto_url=stack.moto_url,
            state=_state_line(stack),
            logs=f"{logs} ({'also shown here' if verbose else f'{output.VERBOSE_ENV}=1 shows them here'})",
            ready_seconds=time.monotonic() - began,
        ),
        flush=True,
    )
    feed.start(stack.env)
    code = 0
    while not stopping:
        dead = stack.dead_children()  # crashed handler processes are replaced; these cannot be
        if dead:
            log.error("a process stopped unexpectedly; stopping the stack", extra={"children": dead})
            try:
                stack.check()
            except StackError as exc:
                print(f"\n{exc}", file=sys.stderr, flush=True)  # each one's exit code and log tail
            code = 1
            break
        time.sleep(0.2)
    print("stopping…", flush=True)
    stack.stop()
    feed.stop()
    return code


if __name__ == "__main__":
    sys.exit(main())
