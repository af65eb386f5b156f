"""The local stack's ports, resource names and process environment, in one place.

Every process of the local stack (moto, the api adapter, the pollers, the simulator)
gets the same environment, built here by ``stack_env``. Resource *definitions* come
from ``batchgw.config.resources``; this module only decides the local *names* of those
resources (``batchgw-<logical id>``) and the values moto gives them.

Also here: what every local process needs to call a real handler the way Lambda does
(``HandlerPool``, ``LambdaContext``), to log, and to end with its parent.
"""

from __future__ import annotations

import asyncio
import fcntl
import importlib
import importlib.util
import itertools
import json
import logging
import logging.handlers
import os
import signal
import socket
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import lru_cache
from pathlib import Path
from types import ModuleType
from typing import IO, Any

from batchgw.config import resources
from batchgw.config.resources import QueueSpec

REPO_ROOT = Path(__file__).resolve().parents[1]
HOST = "127.0.0.1"

# moto's fixed identity: every ARN it hands out uses these.
ACCOUNT_ID = "123456789012"
REGION = "us-east-1"
PREFIX = "batchgw"

# Ports (each overridable so two stacks can run side by side).
API_PORT_ENV = "BATCHGW_PORT"
SIM_PORT_ENV = "BATCHGW_SIM_PORT"
MOTO_PORT_ENV = "BATCHGW_MOTO_PORT"
SIM_BACKUP_PORT_ENV = "BATCHGW_SIM_BACKUP_PORT"  # the simulator's second route
DEFAULT_API_PORT = 8080
DEFAULT_SIM_PORT = 8081
DEFAULT_MOTO_PORT = 8082
# The backup route's port: a free one unless set, so that a second stack started with only
# the three documented ports set never collides with the first on it.
DEFAULT_SIM_BACKUP_PORT = 0
# The local stack's clock: start "now" at this instant (unix seconds or ISO 8601), so a test
# can run across a UTC day or month boundary; every process gets the offset it makes.
FAKE_NOW_ENV = "BATCHGW_FAKE_NOW"
CLOCK_OFFSET_ENV = "BATCHGW_CLOCK_OFFSET"

# Which real handler each local entry point calls (dotted paths, ``pkg.mod.func`` or
# ``pkg.mod:func``); tests point these at fakes.
API_HANDLER_ENV = "BATCHGW_API_HANDLER"
WORKER_HANDLER_ENV = "BATCHGW_WORKER_HANDLER"
LAMBDA_HANDLERS_ENV = "BATCHGW_LAMBDA_HANDLERS"  # JSON: {"<function name>": "<dotted path>"}
DEFAULT_API_HANDLER = "functions.api.handler.handler"
DEFAULT_WORKER_HANDLER = "functions.worker.handler.handler"

# Process counts of the stack (``local.run``).
WORKERS_ENV = "BATCHGW_WORKERS"
API_PROCESSES_ENV = "BATCHGW_API_PROCESSES"
# The worker function's execution environments (``local.environments``), shared out among the
# worker pollers; at most ``resources.WORKER_MAX_CONCURRENCY``, as on AWS.
WORKER_ENVIRONMENTS_ENV = "BATCHGW_WORKER_ENVIRONMENTS"
# 8: each is a Python process (~75 MB resident after a batch, ~0.5 s to import the worker); 8
# of them, 10 messages an invocation, keep more requests running than moto serves on 2 cores.
DEFAULT_WORKER_ENVIRONMENTS = 8
# The worker's environments for the flex queue (``resources.FLEX_QUEUE``, a mapping of its own),
# at most ``resources.FLEX_MAX_CONCURRENCY``: started when flex requests come, reaped idle.
FLEX_ENVIRONMENTS_ENV = "BATCHGW_FLEX_ENVIRONMENTS"
DEFAULT_FLEX_ENVIRONMENTS = 4
# The interactive function's execution environments (``local.environments``, started by the
# api adapter): at most this many in the whole stack, shared out among the adapters
# (``BATCHGW_API_PROCESSES``), each at least one; an environment serves one request at a time.
INTERACTIVE_CONCURRENCY_ENV = "BATCHGW_INTERACTIVE_CONCURRENCY"
DEFAULT_INTERACTIVE_CONCURRENCY = 64

# The stack's state across restarts (``local.state``): ``make run`` keeps it in
# BATCHGW_STATE_DIR (default .local/state/<BATCHGW_PORT>: two stacks side by side on other
# ports keep apart), checkpointed every BATCHGW_STATE_CHECKPOINT_SECONDS; BATCHGW_PERSIST=0
# keeps nothing. A LocalStack built in code keeps nothing unless given a state_dir, so that
# test stacks never share one; a stack holds a lock on its state dir while it runs.
STATE_DIR_ENV = "BATCHGW_STATE_DIR"
CHECKPOINT_SECONDS_ENV = "BATCHGW_STATE_CHECKPOINT_SECONDS"
PERSIST_ENV = "BATCHGW_PERSIST"
STATE_ROOT = REPO_ROOT / ".local" / "state"
DEFAULT_CHECKPOINT_SECONDS = 5.0
SNAPSHOT_NAME = "moto-state.pickle"
LOCK_NAME = "stack.lock"

STATE_MACHINE_NAME = f"{PREFIX}-batch"
LAMBDA_ROLE_NAME = f"{PREFIX}-local"

# Variables a user may have exported that could send boto3 to a real account; the
# children's environment drops them (and any AWS_ENDPOINT_URL_<SERVICE>).
_AWS_VARS_DROPPED = (
    "AWS_PROFILE",
    "AWS_DEFAULT_PROFILE",
    "AWS_SESSION_TOKEN",
    "AWS_SECURITY_TOKEN",
    "AWS_ROLE_ARN",
    "AWS_WEB_IDENTITY_TOKEN_FILE",
    "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
    "AWS_CONTAINER_CREDENTIALS_FULL_URI",
)


# --- ports ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Ports:
    api: int = DEFAULT_API_PORT
    sim: int = DEFAULT_SIM_PORT
    moto: int = DEFAULT_MOTO_PORT
    sim_backup: int = DEFAULT_SIM_BACKUP_PORT

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Ports:
        env = os.environ if environ is None else environ
        return cls(
            api=int(env.get(API_PORT_ENV, DEFAULT_API_PORT)),
            sim=int(env.get(SIM_PORT_ENV, DEFAULT_SIM_PORT)),
            moto=int(env.get(MOTO_PORT_ENV, DEFAULT_MOTO_PORT)),
            sim_backup=int(env.get(SIM_BACKUP_PORT_ENV, DEFAULT_SIM_BACKUP_PORT)),
        )

    def resolved(self) -> Ports:
        """These ports with every 0 replaced by a free port (distinct from the others)."""
        taken = {p for p in self.all() if p}
        chosen = []
        for port in self.all():
            if not port:
                port = free_port(exclude=taken)
                taken.add(port)
            chosen.append(port)
        return Ports(*chosen)

    def all(self) -> tuple[int, ...]:
        return (self.api, self.sim, self.moto, self.sim_backup)


def state_dir_from_env(environ: Mapping[str, str] | None = None) -> Path | None:
    """Where ``make run`` keeps its state: BATCHGW_STATE_DIR, else a folder of
    ``.local/state`` named after the API's port (BATCHGW_PORT, 8080); None when
    BATCHGW_PERSIST is off (0, false, no, off)."""
    env = os.environ if environ is None else environ
    if env.get(PERSIST_ENV, "1").strip().lower() in ("0", "false", "no", "off"):
        return None
    given = env.get(STATE_DIR_ENV)
    return Path(given) if given else STATE_ROOT / str(int(env.get(API_PORT_ENV) or DEFAULT_API_PORT))


class StateDirInUse(RuntimeError):
    """Another running stack keeps its state in the same folder."""


def lock_state_dir(state_dir: Path) -> IO[str]:
    """Hold ``state_dir`` for one stack: an exclusive lock on its lock file, kept while the
    returned file is open (the kernel lets it go when the holder dies, however it dies).
    Raises StateDirInUse when another stack holds it: two stacks restoring and saving one
    state would each overwrite the other's."""
    state_dir.mkdir(parents=True, exist_ok=True)
    handle = (state_dir / LOCK_NAME).open("a+")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.close()
        raise StateDirInUse(
            f"{state_dir} holds the state of a stack that is running: stop it, or start this one "
            f"on another {API_PORT_ENV} or {STATE_DIR_ENV}"
        ) from None
    return handle


def snapshot_path(state_dir: str | Path) -> Path:
    """The file a stack's state is saved in, in ``state_dir``."""
    return Path(state_dir) / SNAPSHOT_NAME


def free_port(exclude: set[int] | frozenset[int] = frozenset()) -> int:
    """A TCP port on loopback that nothing listens on right now."""
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind((HOST, 0))
            port = int(sock.getsockname()[1])
        if port not in exclude:
            return port


def port_open(port: int, host: str = HOST, timeout: float = 0.2) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def wait_for_port(port: int, deadline_seconds: float, host: str = HOST) -> bool:
    deadline = time.monotonic() + deadline_seconds
    while time.monotonic() < deadline:
        if port_open(port, host):
            return True
        time.sleep(0.05)
    return False


# --- local names of the resources ------------------------------------------------------


def _local_name(logical_id: str) -> str:
    return f"{PREFIX}-{logical_id.lower()}"


def table_name(spec: resources.TableSpec) -> str:
    return _local_name(spec.logical_id)


def bucket_name(spec: resources.BucketSpec) -> str:
    return _local_name(spec.logical_id)


def queue_name(spec: QueueSpec) -> str:
    return _local_name(spec.logical_id) + (".fifo" if spec.fifo else "")


def dead_letter_queue_name(spec: QueueSpec) -> str:
    return _local_name(spec.logical_id) + "-dlq" + (".fifo" if spec.fifo else "")


def queue_url(moto_port: int, name: str) -> str:
    """moto's URL for a queue named ``name`` (its format: endpoint/account/name)."""
    return f"http://{HOST}:{moto_port}/{ACCOUNT_ID}/{name}"


def queue_arn(name: str) -> str:
    return f"arn:aws:sqs:{REGION}:{ACCOUNT_ID}:{name}"


def function_name(substitution: str) -> str:
    """The local function behind an ASL placeholder: ``LifecycleFunctionArn`` -> ``batchgw-lifecycle``."""
    return _local_name(substitution.removesuffix("FunctionArn"))


def function_arn(name: str) -> str:
    return f"arn:aws:lambda:{REGION}:{ACCOUNT_ID}:function:{name}"


def state_machine_arn(name: str = STATE_MACHINE_NAME) -> str:
    return f"arn:aws:states:{REGION}:{ACCOUNT_ID}:stateMachine:{name}"


def role_arn() -> str:
    return f"arn:aws:iam::{ACCOUNT_ID}:role/{LAMBDA_ROLE_NAME}"


def default_lambda_handlers() -> dict[str, str]:
    """Function name -> handler, one per workflow placeholder: ``functions.<x>.handler.handler``."""
    return {
        function_name(sub): f"functions.{sub.removesuffix('FunctionArn').lower()}.handler.handler"
        for sub in resources.WORKFLOW_SUBSTITUTIONS
    }


def lambda_handlers(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The moto Lambda hook's dispatch table: the defaults, overridden by ``BATCHGW_LAMBDA_HANDLERS``."""
    env = os.environ if environ is None else environ
    table = default_lambda_handlers()
    raw = env.get(LAMBDA_HANDLERS_ENV, "").strip()
    if raw:
        overrides = json.loads(raw)
        if not isinstance(overrides, dict):
            raise ValueError(f"{LAMBDA_HANDLERS_ENV} must be a JSON object")
        table.update({str(k): str(v) for k, v in overrides.items()})
    return table


# --- the environment every process gets --------------------------------------------------


def stack_env(
    ports: Ports,
    base: Mapping[str, str] | None = None,
    overrides: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The stack's own variables (not a whole process environment; see ``process_env``).

    ``BATCH_*`` and ``BATCHGW_*`` variables found in ``base`` (default: this process's
    environment) pass through, so a user or a test can shrink any setting; the stack's
    own values (endpoint, resource names, ports) win over them, and ``overrides`` win
    over everything.
    """
    source = os.environ if base is None else base
    env = {k: v for k, v in source.items() if k.startswith(("BATCH_", "BATCHGW_"))}
    env.update(
        {
            "AWS_ENDPOINT_URL": f"http://{HOST}:{ports.moto}",
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_DEFAULT_REGION": REGION,
            "AWS_REGION": REGION,
            "AWS_EC2_METADATA_DISABLED": "true",
            "MOTO_PORT": str(ports.moto),  # moto's Step Functions interpreter calls back into itself
            API_PORT_ENV: str(ports.api),
            SIM_PORT_ENV: str(ports.sim),
            MOTO_PORT_ENV: str(ports.moto),
            SIM_BACKUP_PORT_ENV: str(ports.sim_backup),
            "BATCHGW_MODELS_CONFIG": str(REPO_ROOT / "config" / "models.local.json"),
            "POWERTOOLS_SERVICE_NAME": PREFIX,
            "POWERTOOLS_TRACE_DISABLED": "true",  # no X-Ray daemon here
            "BATCHGW_STATE_MACHINE_ARN": state_machine_arn(),
        }
    )
    # The key the local routes (config/models.local.json) send the simulator: shaped like a
    # real one, so a test can check it never reaches a result.
    env.setdefault("BATCHGW_SIM_API_KEY", "sk-sim-local-upstream-key")
    for table in resources.TABLES:
        env[table.env_var] = table_name(table)
    for bucket in resources.BUCKETS:
        env[bucket.env_var] = bucket_name(bucket)
    for queue in resources.QUEUES:
        env[queue.env_var] = queue_url(ports.moto, queue_name(queue))
    env.update(overrides or {})
    fake_now = env.get(FAKE_NOW_ENV)
    if fake_now and CLOCK_OFFSET_ENV not in (overrides or {}):
        # Read once, here: every process of the stack (and each one that replaces a crashed
        # one) runs its clock the same seconds ahead or behind.
        env[CLOCK_OFFSET_ENV] = f"{instant(fake_now) - time.time():.3f}"
    return env


def worker_environments(environ: Mapping[str, str]) -> int:
    """The worker's environments: ``BATCHGW_WORKER_ENVIRONMENTS`` (default 8), within 1 and the
    deployed maximum concurrency."""
    count = int(environ.get(WORKER_ENVIRONMENTS_ENV) or DEFAULT_WORKER_ENVIRONMENTS)
    if not 1 <= count <= resources.WORKER_MAX_CONCURRENCY:
        raise ValueError(f"{WORKER_ENVIRONMENTS_ENV} must be within 1..{resources.WORKER_MAX_CONCURRENCY}")
    return count


def flex_environments(environ: Mapping[str, str]) -> int:
    """The worker's environments on the flex queue: ``BATCHGW_FLEX_ENVIRONMENTS`` (default 4),
    within 1 and the deployed maximum concurrency."""
    count = int(environ.get(FLEX_ENVIRONMENTS_ENV) or DEFAULT_FLEX_ENVIRONMENTS)
    if not 1 <= count <= resources.FLEX_MAX_CONCURRENCY:
        raise ValueError(f"{FLEX_ENVIRONMENTS_ENV} must be within 1..{resources.FLEX_MAX_CONCURRENCY}")
    return count


def interactive_environments(environ: Mapping[str, str]) -> int:
    """The interactive function's environments in the stack: ``BATCHGW_INTERACTIVE_CONCURRENCY``
    (default 64), at least 1."""
    count = int(environ.get(INTERACTIVE_CONCURRENCY_ENV) or DEFAULT_INTERACTIVE_CONCURRENCY)
    if count < 1:
        raise ValueError(f"{INTERACTIVE_CONCURRENCY_ENV} must be at least 1")
    return count


def environment_share(total: int, pollers: int, index: int) -> int:
    """Poller (or adapter) ``index``'s share of ``total`` environments among ``pollers`` (each at
    least one)."""
    return max(1, total // pollers + (1 if index < total % pollers else 0))


def instant(text: str) -> float:
    """Unix seconds, or an ISO 8601 time (``2026-12-31T23:59:50Z``), as unix seconds."""
    try:
        return float(text)
    except ValueError:
        pass
    parsed = datetime.fromisoformat(text.replace("Z", "+00:00"))
    return (parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)).timestamp()


def process_env(stack: Mapping[str, str], base: Mapping[str, str] | None = None) -> dict[str, str]:
    """A child process's whole environment: ``base`` (PATH, HOME...) plus the stack's variables.

    Variables that could point boto3 at a real account or another endpoint are dropped.
    """
    source = dict(os.environ if base is None else base)
    env = {
        k: v
        for k, v in source.items()
        if k not in _AWS_VARS_DROPPED and not k.startswith("AWS_ENDPOINT_URL_")
    }
    env.update(stack)
    env["PYTHONUNBUFFERED"] = "1"
    pythonpath = [str(REPO_ROOT), *filter(None, env.get("PYTHONPATH", "").split(os.pathsep))]
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(pythonpath))
    return env


# --- calling a real handler the way Lambda does --------------------------------------------

Handler = Callable[[Any, Any], Any]


def _split_handler_path(path: str) -> tuple[str, str]:
    module_name, sep, attr = path.partition(":")
    if not sep:
        module_name, _, attr = path.rpartition(".")
    if not module_name or not attr:
        raise ValueError(f"not a handler path: {path!r}")
    return module_name, attr


def _handler_of(module: ModuleType, path: str, attr: str) -> Handler:
    handler = getattr(module, attr)
    if not callable(handler):
        raise TypeError(f"{path} is not callable")
    return handler  # type: ignore[no-any-return]


@lru_cache(maxsize=64)
def load_handler(path: str) -> Handler:
    """Import ``pkg.mod.func`` (or ``pkg.mod:func``) and return the function."""
    module_name, attr = _split_handler_path(path)
    return _handler_of(importlib.import_module(module_name), path, attr)


_copies = itertools.count(1)


def load_handler_copy(path: str) -> Handler:
    """The handler from a fresh, private execution of its module (new module globals).

    What it imports stays shared with the rest of the process.
    """
    module_name, attr = _split_handler_path(path)
    original = importlib.import_module(module_name)
    spec = original.__spec__
    if spec is None or spec.origin is None or spec.loader is None:
        raise ImportError(f"cannot load a second copy of {module_name}")
    name = f"{module_name}__env{next(_copies)}"
    copy_spec = importlib.util.spec_from_file_location(name, spec.origin)
    if copy_spec is None or copy_spec.loader is None:
        raise ImportError(f"cannot load a second copy of {module_name}")
    module = importlib.util.module_from_spec(copy_spec)
    module.__package__ = original.__package__  # relative imports resolve as in the original
    sys.modules[name] = module  # dataclasses and pydantic look their module up by name
    copy_spec.loader.exec_module(module)
    return _handler_of(module, path, attr)


@dataclass(eq=False)
class _Environment:
    """One execution environment: its handler (its own module globals) and its event loop,
    which every invocation in it runs on, as Lambda's runtime keeps one loop per process."""

    handler: Handler
    loop: asyncio.AbstractEventLoop = field(default_factory=asyncio.new_event_loop)


class HandlerPool:
    """Lambda execution environments for one handler, created on demand and reused.

    On Lambda every concurrent invocation has its own process, so handler modules keep
    per-invocation state in globals (a Powertools resolver's current event, a
    ``BatchProcessor``'s records). Here concurrent invocations share a process, so each
    environment gets its own copy of the handler's module (the first one is the module
    itself); one environment serves one invocation at a time. ``max_size`` bounds the
    concurrency, as a function's reserved concurrency would (None: unbounded).

    Each environment also has one event loop, the invoking thread's current loop while it
    runs (``asyncio.get_event_loop()`` answers it): on Lambda the handler's process keeps
    the loop it made on its first invocation, and Powertools' ``AsyncBatchProcessor`` runs
    every invocation on it once ``LAMBDA_TASK_ROOT`` is set (``lambda_runtime_env``).
    """

    def __init__(self, path: str, max_size: int | None = None) -> None:
        self.path = path
        self._idle: list[_Environment] = []
        self._created = 0
        self._lock = threading.Lock()
        self._slots = threading.BoundedSemaphore(max_size) if max_size else None

    @property
    def size(self) -> int:
        return self._created

    def warm(self) -> None:
        """Create the first environment now (a cold start at launch, not on the first call)."""
        with self.environment():
            pass

    @contextmanager
    def environment(self) -> Iterator[Handler]:
        if self._slots is not None:
            self._slots.acquire()
        try:
            with self._lock:
                found = self._idle.pop() if self._idle else None
                first = self._created == 0
                if found is None:
                    self._created += 1
            if found is None:
                try:
                    found = _Environment(load_handler(self.path) if first else load_handler_copy(self.path))
                except BaseException:
                    with self._lock:
                        self._created -= 1
                    raise
            asyncio.set_event_loop(found.loop)
            try:
                yield found.handler
            except Exception:
                self._release(found)
                raise
            except BaseException:
                found.loop.close()
                raise  # the environment died with its invocation: the next one starts cold
            else:
                self._release(found)
            finally:
                asyncio.set_event_loop(None)  # the thread's next invocation may be another environment's
        finally:
            if self._slots is not None:
                self._slots.release()

    def _release(self, found: _Environment) -> None:
        with self._lock:
            self._idle.append(found)


def lambda_runtime_env(function_name: str, handler_path: str, *, memory_mb: int) -> dict[str, str]:
    """The variables Lambda's runtime sets in each execution environment of a function, with
    local values (the task root is the repository; the log stream names the process).

    Code reads them to tell Lambda from elsewhere: Powertools' ``AsyncBatchProcessor`` reuses
    the environment's event loop only when ``LAMBDA_TASK_ROOT`` is set, and makes (and leaves)
    a new loop per invocation otherwise. ``AWS_LAMBDA_RUNTIME_API`` is left out: nothing here
    answers the runtime API.
    """
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    return {
        "LAMBDA_TASK_ROOT": str(REPO_ROOT),
        "LAMBDA_RUNTIME_DIR": sys.prefix,
        "_HANDLER": handler_path,
        "AWS_EXECUTION_ENV": f"AWS_Lambda_python{version}",
        "AWS_LAMBDA_FUNCTION_NAME": function_name,
        "AWS_LAMBDA_FUNCTION_VERSION": "$LATEST",
        "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": str(memory_mb),
        "AWS_LAMBDA_INITIALIZATION_TYPE": "on-demand",
        "AWS_LAMBDA_LOG_GROUP_NAME": f"/aws/lambda/{function_name}",
        "AWS_LAMBDA_LOG_STREAM_NAME": log_stream_name(),
        "AWS_REGION": REGION,
        "AWS_DEFAULT_REGION": REGION,
    }


def log_stream_name() -> str:
    """This process's log stream, as its Lambda context and runtime variables name it."""
    return f"local/{os.getpid()}"


@dataclass
class LambdaContext:
    """The attributes of the Lambda context object handlers (and Powertools) read."""

    function_name: str
    timeout_seconds: float = 900.0
    memory_limit_in_mb: int = 1024
    function_version: str = "$LATEST"
    aws_request_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    _deadline: float = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._deadline = time.monotonic() + self.timeout_seconds

    @property
    def invoked_function_arn(self) -> str:
        return function_arn(self.function_name)

    @property
    def log_group_name(self) -> str:
        return f"/aws/lambda/{self.function_name}"

    @property
    def log_stream_name(self) -> str:
        return log_stream_name()

    def get_remaining_time_in_millis(self) -> int:
        return max(0, int((self._deadline - time.monotonic()) * 1000))


# --- logs -------------------------------------------------------------------------------

_RECORD_FIELDS = frozenset(vars(logging.makeLogRecord({}))) | {"message", "asctime"}


class _KeyValueFormatter(logging.Formatter):
    """``time component LEVEL logger: message key=value ...`` (the record's ``extra`` fields)."""

    def formatMessage(self, record: logging.LogRecord) -> str:
        line = super().formatMessage(record)
        extra = {k: v for k, v in vars(record).items() if k not in _RECORD_FIELDS}
        if extra:
            line += " " + " ".join(f"{k}={v}" for k, v in extra.items())
        return line


def setup_logging(
    component: str,
    level: int = logging.INFO,
    *,
    file: Path | None = None,
    file_max_bytes: int = 10 * 2**20,
    stderr_level: int = logging.NOTSET,
) -> None:
    """Logs of a local process to stderr, tagged with its component name; with ``file``, to
    that file too (bounded: it turns into ``<file>.1`` at ``file_max_bytes``), and to stderr
    only from ``stderr_level`` up."""
    formatter = _KeyValueFormatter(f"%(asctime)s {component} %(levelname)s %(name)s: %(message)s")
    handler = logging.StreamHandler()
    handler.setFormatter(formatter)
    handler.setLevel(stderr_level)
    handlers: list[logging.Handler] = [handler]
    if file is not None:
        file.parent.mkdir(parents=True, exist_ok=True)
        to_file = logging.handlers.RotatingFileHandler(file, maxBytes=file_max_bytes, backupCount=1)
        to_file.setFormatter(formatter)
        handlers.append(to_file)
    root = logging.getLogger()
    root.handlers[:] = handlers
    root.setLevel(level)
    for noisy in ("botocore", "boto3", "urllib3", "werkzeug"):
        logging.getLogger(noisy).setLevel(max(level, logging.WARNING))


# --- children of the stack -------------------------------------------------------------------


def watch_parent(parent_pid: int, interval: float = 0.5) -> None:
    """SIGTERM this process when ``parent_pid`` is no longer its parent (the parent died).

    Keeps a killed ``local.run`` from leaving its children running.
    """

    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(interval)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, name="watch-parent", daemon=True).start()
