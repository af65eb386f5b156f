"""Lambda execution environments for a local poller or the api adapter: one child process each.

On Lambda each execution environment of a function is a process of its own that imports the
handler once (its cold start) and then serves one invocation at a time, for as long as Lambda
keeps it warm; nothing but the AWS services is shared between two of them. Here too:

- ``EnvironmentPool`` (in the poller's process, or the adapter's for the interactive
  function: ``local.adapter``) hands an invocation to an idle environment,
  starts one when none is idle and fewer than ``max_size`` exist (with ``starts_at_once``, the
  adapter's, no more than that many at a time: past it an invocation waits for an environment
  to come free or a start to end), reaps one idle for longer than ``idle_seconds``, and
  replaces at once one that died (a chaos kill), as Lambda replaces an environment that
  crashed, or that did not answer within its invoker's wait (``invoke``'s ``wait_seconds``: the
  adapter's API Gateway timeout), as Lambda resets one whose invocation timed out;
- each environment is ``python -m local.environments --fd N --handler PATH ...``: it imports
  the handler, says it is ready, then answers each invocation (one JSON line each way on a
  socket pair) with the handler's response, or the error it raised. Its output goes where
  its parent's goes. It sets the variables Lambda's runtime sets (``lambda_runtime_env``,
  its own log stream) and keeps one event loop for every invocation, as the runtime does.

While it serves an invocation, an environment's process name (``/proc/<pid>/comm``) is
``BUSY_NAME``, else ``IDLE_NAME``: ``ps`` shows which are busy, and a chaos kill
(``LocalStack.crash``) chooses a busy one, so that it ends one invocation, as a crash on
Lambda does. An environment ends with its poller or adapter (it watches its parent).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ctypes
import json
import logging
import os
import socket
import subprocess
import sys
import threading
import time
import traceback
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import IO, Any

from local.env import REPO_ROOT, LambdaContext, lambda_runtime_env, load_handler, setup_logging, watch_parent

log = logging.getLogger("local.environments")

BUSY_NAME = "lambda-busy"
IDLE_NAME = "lambda-idle"
# Lambda keeps an idle environment for minutes (it does not say how long); two keep a stack's
# burst of batches warm from one to the next and give the memory back when it is quiet.
IDLE_SECONDS_ENV = "BATCHGW_ENVIRONMENT_IDLE_SECONDS"
DEFAULT_IDLE_SECONDS = 120.0
READY_SECONDS = 120.0  # a cold start on a loaded 2-core machine; past it the environment is dropped
_PR_SET_NAME = 15


class EnvironmentDied(RuntimeError):
    """The environment's process ended during the invocation (killed, or it exited)."""

    def __init__(self, message: str, *, killed: bool = False) -> None:
        super().__init__(message)
        self.killed = killed  # by a signal (a crash), rather than an exit of its own


class InvocationTimedOut(EnvironmentDied):
    """No answer within the invoker's wait: the environment is killed and replaced, as Lambda
    resets an environment whose invocation timed out."""


class HandlerFailed(RuntimeError):
    """The handler raised (or answered what Lambda cannot serialize); the environment lives on."""


class ResponseNotSerializable(HandlerFailed):
    """The handler answered what Lambda's runtime cannot serialize (a ``Runtime.MarshalError``)."""


def _set_process_name(name: str) -> None:
    with contextlib.suppress(OSError, AttributeError):  # Linux only; elsewhere a name is only a name
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_NAME, name.encode(), 0, 0, 0)


# --- the poller's side ------------------------------------------------------------------------------


@dataclass(eq=False)
class Environment:
    """One environment's process and the poller's end of its socket."""

    process: subprocess.Popen[bytes]
    channel: socket.socket
    reader: IO[bytes]
    ready: bool = False
    idle_since: float = field(default_factory=time.monotonic)

    @property
    def pid(self) -> int:
        return self.process.pid

    def _read(self, timeout: float | None) -> dict[str, Any]:
        self.channel.settimeout(timeout)
        try:
            line = self.reader.readline()
        except TimeoutError as exc:
            raise InvocationTimedOut(f"environment {self.pid}: no answer in {timeout} s") from exc
        except (OSError, ValueError) as exc:  # the socket reset by a dying process
            raise EnvironmentDied(f"environment {self.pid}: {exc}") from exc
        if not line:
            raise EnvironmentDied(f"environment {self.pid} exited")
        answer: dict[str, Any] = json.loads(line)
        return answer

    def wait_ready(self, timeout: float = READY_SECONDS) -> None:
        """Wait for the handler's import (the cold start); raises EnvironmentDied if it failed."""
        if self.ready:
            return
        try:
            answer = self._read(timeout)
        except InvocationTimedOut as exc:  # no invocation ran: it died starting, not timed out
            raise EnvironmentDied(f"environment {self.pid} did not start in {timeout} s") from exc
        if "error" in answer:
            raise EnvironmentDied(f"environment {self.pid} did not start: {answer['error']}")
        self.ready = True

    def invoke(self, event: Any, timeout_seconds: float, wait_seconds: float | None = None) -> Any:
        """The handler's response to ``event``; raises HandlerFailed if it raised (its subclass
        ResponseNotSerializable if it answered what Lambda cannot send back), EnvironmentDied if
        the process ended meanwhile, InvocationTimedOut if ``wait_seconds`` passed first (None:
        wait for the answer, however late; the invoker judges the timeout)."""
        self.wait_ready()
        request = {"event": event, "timeout_seconds": timeout_seconds, "request_id": str(uuid.uuid4())}
        try:
            self.channel.sendall(json.dumps(request).encode() + b"\n")
        except OSError as exc:
            raise EnvironmentDied(f"environment {self.pid}: {exc}") from exc
        answer = self._read(wait_seconds)
        if "error" in answer:
            failure = ResponseNotSerializable if answer.get("unserializable") else HandlerFailed
            raise failure(answer["error"])
        return answer.get("response")

    def hang_up(self) -> None:
        """Tell the process to end (it exits when its socket closes), not waiting for it."""
        with contextlib.suppress(OSError):
            self.channel.shutdown(socket.SHUT_RDWR)

    def close(self, timeout: float = 5.0) -> None:
        """End the process: it exits when its socket closes; killed if it does not in time."""
        self.hang_up()
        self.channel.close()
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


class EnvironmentPool:
    """The execution environments of one function, for one poller or adapter (see the module
    docstring)."""

    def __init__(
        self,
        handler_path: str,
        *,
        max_size: int,
        function_name: str,
        memory_mb: int,
        name: str = "worker",
        idle_seconds: float = DEFAULT_IDLE_SECONDS,
        starts_at_once: int | None = None,
    ) -> None:
        self.handler_path = handler_path
        self.max_size = max(1, max_size)
        self.function_name = function_name
        self.memory_mb = memory_mb
        self.name = name
        self.idle_seconds = idle_seconds
        # Cold starts running at once, at most (None: one for each invocation that finds no idle
        # environment, as on Lambda). Past it an invocation waits for an environment to be idle
        # or for a start to end, then takes the idle one or starts its own.
        self.starts_at_once = starts_at_once
        self._idle: list[Environment] = []
        self._busy: set[Environment] = set()  # and starting: each for the invocation that started it
        self._starting = 0
        self._room = threading.BoundedSemaphore(self.max_size)  # one per environment there may be
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)  # an environment idle, or a start ended
        self._closed = threading.Event()
        self.started = 0  # environments started (cold starts), replacements included
        self.reaped = 0
        self.replaced = 0
        self._reaper = threading.Thread(target=self._reap_loop, name=f"{name}-reaper", daemon=True)
        self._reaper.start()

    @property
    def size(self) -> int:
        with self._lock:
            return len(self._idle) + len(self._busy)

    def pids(self) -> list[int]:
        with self._lock:
            return sorted(e.pid for e in [*self._idle, *self._busy])

    def _start(self) -> Environment:
        ours, theirs = socket.socketpair()
        argv = [
            sys.executable,
            "-m",
            "local.environments",
            "--fd",
            str(theirs.fileno()),
            "--handler",
            self.handler_path,
            "--function-name",
            self.function_name,
            "--memory-mb",
            str(self.memory_mb),
            "--name",
            self.name,
            "--parent",
            str(os.getpid()),
        ]
        try:
            process = subprocess.Popen(
                argv, cwd=REPO_ROOT, stdin=subprocess.DEVNULL, pass_fds=[theirs.fileno()]
            )
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        self.started += 1
        return Environment(process, ours, ours.makefile("rb"))

    def warm(self, attempts: int = 5) -> None:
        """Start one environment now and wait for its import (a cold start at launch, and a
        handler that does not import fails here); one killed meanwhile is replaced and waited for."""
        for attempt in range(attempts):
            try:
                with self.environment():
                    return
            except EnvironmentDied as exc:
                if not exc.killed or attempt == attempts - 1:
                    raise

    @contextmanager
    def environment(self) -> Iterator[Environment]:
        """An idle environment (or a new one, cold) for one invocation; it is idle again after.
        Past ``starts_at_once`` cold starts running, it waits for one to end or for an idle one.

        One that died meanwhile is replaced by a new one (not waited for) and EnvironmentDied
        raised; one that never started is dropped."""
        self._room.acquire()
        try:
            found, cold = self._take()
            try:
                if cold:
                    self._wait_ready(found)
                else:
                    found.wait_ready()  # a replacement may still be importing
                yield found
            except EnvironmentDied as exc:
                exc.killed = self._drop(found)
                raise
            except BaseException:
                self._release(found)  # the handler's error, or the invoker's: the process lives on
                raise
            else:
                self._release(found)
        finally:
            self._room.release()

    def _take(self) -> tuple[Environment, bool]:
        """An idle environment, else one started now (True: cold, its import still running)."""
        with self._changed:
            while not self._idle and not self._may_start():
                self._changed.wait()
            if self._idle:
                found = self._idle.pop()
                self._busy.add(found)
                return found, False
            self._starting += 1
        try:
            found = self._start()
        except BaseException:
            self._started_one()
            raise
        with self._lock:
            self._busy.add(found)
        return found, True

    def _may_start(self) -> bool:
        return self.starts_at_once is None or self._starting < self.starts_at_once

    def _wait_ready(self, found: Environment) -> None:
        try:
            found.wait_ready()
        finally:
            self._started_one()

    def _started_one(self) -> None:
        with self._changed:
            self._starting -= 1
            self._changed.notify()

    def _release(self, found: Environment) -> None:
        found.idle_since = time.monotonic()
        with self._changed:
            self._busy.discard(found)
            if not self._closed.is_set():
                self._idle.append(found)
                self._changed.notify()
                return
        found.close()

    def _drop(self, found: Environment) -> bool:
        """Forget a dead environment; replace it unless it never imported the handler by itself
        (an import that fails would fail again). True if it was killed by a signal."""
        with self._lock:
            self._busy.discard(found)
            self._idle = [e for e in self._idle if e is not found]
        found.close(timeout=1.0)
        code = found.process.returncode
        killed = code is not None and code < 0
        with self._lock:  # never more than max_size: a slot may have started one meanwhile
            room = len(self._idle) + len(self._busy) < self.max_size
        if (found.ready or killed) and room and not self._closed.is_set():
            fresh = self._start()  # as Lambda replaces a crashed environment; it imports meanwhile
            with self._changed:
                self._idle.append(fresh)
                self._changed.notify()
            self.replaced += 1
            log.warning(
                "environment died; replaced",
                extra={"pid": found.pid, "returncode": code, "replacement": fresh.pid},
            )
        else:
            log.warning("environment dropped", extra={"pid": found.pid, "returncode": code})
        return killed

    def _reap_loop(self) -> None:
        interval = min(1.0, max(0.05, self.idle_seconds / 4))
        while not self._closed.wait(interval):
            now = time.monotonic()
            with self._lock:
                dead = [e for e in self._idle if e.process.poll() is not None]
                stale = [e for e in self._idle if e not in dead and now - e.idle_since > self.idle_seconds]
                self._idle = [e for e in self._idle if e not in dead and e not in stale]
            for environment in dead:
                self._drop(environment)
            for environment in stale:
                environment.close()
                self.reaped += 1
                log.info("idle environment reaped", extra={"pid": environment.pid})

    def close(self) -> None:
        """End every idle environment now; busy ones end when their invocation does."""
        self._closed.set()
        with self._lock:
            idle, self._idle = self._idle, []
        for environment in idle:
            environment.hang_up()  # all at once: each then exits while the others do
        for environment in idle:
            environment.close()


# --- the environment's side --------------------------------------------------------------------------


def _answer(channel: socket.socket, value: dict[str, Any]) -> None:
    try:
        line = json.dumps(value).encode()
    except (TypeError, ValueError) as exc:  # Lambda cannot serialize it: the invocation failed
        line = json.dumps({"error": f"Runtime.MarshalError: {exc}", "unserializable": True}).encode()
    channel.sendall(line + b"\n")


def serve(channel: socket.socket, handler_path: str, function_name: str, memory_mb: int) -> None:
    """Import the handler, then answer invocations one at a time until the socket closes."""
    try:
        handler = load_handler(handler_path)
    except Exception:
        _answer(channel, {"error": traceback.format_exc()})
        raise
    _set_process_name(IDLE_NAME)  # ready: a chaos kill may choose it
    loop = asyncio.new_event_loop()  # the runtime's one loop, every invocation's
    asyncio.set_event_loop(loop)
    _answer(channel, {"ready": os.getpid()})
    requests = channel.makefile("rb")
    for line in requests:
        request = json.loads(line)
        context = LambdaContext(
            function_name=function_name,
            timeout_seconds=float(request["timeout_seconds"]),
            memory_limit_in_mb=memory_mb,
            aws_request_id=request["request_id"],
        )
        _set_process_name(BUSY_NAME)
        try:
            response = handler(request["event"], context)
        except Exception as exc:
            log.exception("handler raised")
            _answer(channel, {"error": f"{type(exc).__name__}: {exc}"})
        else:
            _answer(channel, {"response": response})
        _set_process_name(IDLE_NAME)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fd", type=int, required=True, help="this end of the poller's socket pair")
    parser.add_argument("--handler", required=True)
    parser.add_argument("--function-name", required=True)
    parser.add_argument("--memory-mb", type=int, required=True)
    parser.add_argument("--name", default="worker", help="the poller's name, in log lines")
    parser.add_argument("--parent", type=int, required=True, help="the poller's pid: this ends with it")
    args = parser.parse_args(argv)
    setup_logging(f"{args.name}/env-{os.getpid()}")
    watch_parent(args.parent)
    # Set before the handler is imported, as the runtime sets them before it loads the handler.
    os.environ.update(lambda_runtime_env(args.function_name, args.handler, memory_mb=args.memory_mb))
    channel = socket.socket(fileno=args.fd)
    serve(channel, args.handler, args.function_name, args.memory_mb)
    logging.shutdown()


if __name__ == "__main__":
    main()
