"""botocore clients, created lazily (moto must be up first) from one session per process.

botocore's, not boto3's: boto3's package (its resources, docs and S3 transfer manager) adds
tens of milliseconds to a cold start and the gateway needs none of it, except the managed
transfers S3's client gets from it (``upload_fileobj``), which the S3 client alone loads.
botocore itself is imported here, with the handler: every first request needs it.

Every AWS call the gateway makes goes through these clients, so a benchmark can count
them by hooking the session's events (``count_calls``), and a test can check that each
function's role allows every call it made, on the resources it made it on (``record_calls``,
by function, with what each call touched: ``batchgw.storage.touches``).
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from functools import cache, cached_property, lru_cache
from pathlib import Path
from typing import Any, Protocol

import botocore.session
from botocore.config import Config
from botocore.session import Session

from batchgw.storage.touches import Touch, touches


def _new_session() -> Session:
    return botocore.session.Session()


@cache
def _config(service: str) -> Config:
    """Every client's retries, pool and timeouts (and S3's signature)."""
    config = Config(
        retries={"mode": "standard", "max_attempts": 5},
        max_pool_connections=128,
        connect_timeout=5,
        read_timeout=60,
    )
    if service == "s3":
        # S3 signs with SigV4, so a presigned PUT signs the headers it was made with: its
        # Content-Length binds the upload to the declared size. Every write sends a CRC32 and
        # every whole-object read checks the stored one (botocore's defaults since 1.36, named
        # here so that no environment variable or older default turns them off): the S3
        # adapter keeps each object's checksum what S3 computes for it (``storage.blobs``).
        config = config.merge(
            Config(
                signature_version="s3v4",
                request_checksum_calculation="when_supported",
                response_checksum_validation="when_supported",
            )
        )
    return config


class EventSource(Protocol):
    """What ``count_calls`` and ``record_calls`` hook: ``AwsClients``, or a boto3 session."""

    @property
    def events(self) -> Any: ...


# The check ``fenced`` runs before each try of every AWS call made in its block.
_fence: ContextVar[Callable[[], None] | None] = ContextVar("batchgw_fence", default=None)


@contextmanager
def fenced(check: Callable[[], None] | None) -> Iterator[None]:
    """Run ``check`` before every try of every AWS call made in this block (and in the tasks
    and threads it starts with its context), the SDK's own retries included: what it raises
    ends the call, that try unsent. Writes that must land while a lease holds are sent only
    after ``check`` found it holding (``run.prepare_lease``). ``fenced(None)``: the calls of
    the block are not checked (a check's own calls)."""
    token = _fence.set(check)
    try:
        yield
    finally:
        _fence.reset(token)


def _check_fence(**_: Any) -> None:
    check = _fence.get()
    if check is not None:
        check()


@dataclass
class AwsClients:
    """The clients one process uses; each is created on first use and then shared."""

    session: Session = field(default_factory=_new_session)

    def __post_init__(self) -> None:
        # First, before any handler that answers the call in place of sending it (moto's).
        self.events.register_first("before-send", _check_fence)

    @property
    def events(self) -> Any:
        """The session's event emitter: every client of it fires its events there."""
        return self.session.get_component("event_emitter")

    def _client(self, name: str) -> Any:
        return self.session.create_client(name, config=_config(name))

    @cached_property
    def dynamodb(self) -> Any:
        return self._client("dynamodb")

    @cached_property
    def s3(self) -> Any:
        # boto3 gives S3 clients their managed transfers (``upload_fileobj``); importing it
        # costs a cold start tens of ms, so only a process that uses S3 pays for it.
        import boto3.session

        session = boto3.session.Session(botocore_session=self.session)
        return session.client("s3", config=_config("s3"))  # type: ignore[call-overload]

    @cached_property
    def sqs(self) -> Any:
        return self._client("sqs")

    @cached_property
    def sfn(self) -> Any:
        return self._client("stepfunctions")

    @cached_property
    def secrets(self) -> Any:
        return self._client("secretsmanager")

    @cached_property
    def kms(self) -> Any:
        return self._client("kms")


class LazyClient:
    """A client that is made the first time it is used, not when an adapter is given it.

    Making a client costs tens of milliseconds (S3's ~60 ms) of a cold start; a process whose
    requests never touch a service (the api serving status polls and S3) never pays for it.
    """

    def __init__(self, make: Callable[[], Any]) -> None:
        self._make = make
        self._client: Any = None

    def __getattr__(self, name: str) -> Any:
        if self._client is None:
            self._client = self._make()
        return getattr(self._client, name)


_clients_lock = threading.Lock()


@lru_cache(maxsize=1)
def _build_clients() -> AwsClients:
    clients = AwsClients()
    calls_dir = os.environ.get(CALLS_DIR_ENV)
    if calls_dir:
        record_calls(clients, Path(calls_dir))
    return clients


def get_clients() -> AwsClients:
    """This process's clients (built once, even when threads ask at the same moment)."""
    with _clients_lock:
        return _build_clients()


def reset_clients() -> None:
    """Forget this process's clients (tests that start a fresh moto)."""
    with _clients_lock:
        _build_clients.cache_clear()


# Benchmarks and tests set this to a directory: every process then writes the AWS calls it
# made there, per Lambda function it made them for: ``<function>.<pid>.json``
# (``service.Operation`` -> count, refreshed twice a second), so calls can be summed across
# processes, and ``<function>.<pid>.touched.jsonl`` (one ``Touch`` a line and how many calls
# touched it: what the calls touched, presigned URLs' included), so they can be checked against
# each function's role, and a benchmark can tell which partitions the calls went to.
CALLS_DIR_ENV = "BATCHGW_AWS_CALLS_DIR"
TOUCHED_SUFFIX = ".touched.jsonl"
UNREADABLE = "?"  # the resource of a call whose parameters could not be read
# Lambda names the function in every execution environment; the local stack sets it in each
# handler process. A process that runs several functions (moto's Lambda hook) names the one
# of each invocation with ``calls_made_for``.
FUNCTION_NAME_ENV = "AWS_LAMBDA_FUNCTION_NAME"
UNATTRIBUTED = "unattributed"  # calls made outside any function
_invoked_function: ContextVar[str | None] = ContextVar("batchgw_invoked_function", default=None)


@contextmanager
def calls_made_for(function_name: str) -> Iterator[None]:
    """Count the calls made in this block (and in the tasks and threads it starts with its
    context, such as ``asyncio.to_thread``) as ``function_name``'s."""
    token = _invoked_function.set(function_name)
    try:
        yield
    finally:
        _invoked_function.reset(token)


def current_function() -> str:
    return _invoked_function.get() or os.environ.get(FUNCTION_NAME_ENV) or UNATTRIBUTED


def invoked_function() -> str | None:
    """The function ``calls_made_for`` names in this context; None off it (a thread started
    without the context, such as boto3's S3 transfer threads)."""
    return _invoked_function.get()


def record_calls(session: EventSource, directory: Path) -> None:
    """Count ``session``'s calls and keep ``directory/<function>.<pid>.json`` up to date with them,
    and what they touched in ``directory/<function>.<pid>.touched.jsonl``.

    A call of an operation the function had not made before, or one that touches something it
    had not touched before, is written before it is sent, so the sets of operations and of
    touches on disk are complete even if the process is killed the next moment; counts follow
    within half a second. A presigned URL is recorded as touching what it grants (it acts with
    the role of the function that signed it), and not counted: it makes no call.
    """
    counters: dict[str, CallCounter] = {}
    touched: dict[str, Counter[Touch]] = {}
    lock = threading.Lock()  # guards ``counters``, ``touched`` and the files
    directory.mkdir(parents=True, exist_ok=True)
    pid = os.getpid()

    def write(target: Path, text: str) -> None:
        tmp = target.with_suffix(".tmp")
        tmp.write_text(text)
        tmp.replace(target)

    def flush() -> None:
        with lock:
            for function, counter in counters.items():
                with counter._lock:
                    snapshot = dict(counter.calls)
                write(directory / f"{function}.{pid}.json", json.dumps(snapshot))
            for function, seen in touched.items():
                lines = [json.dumps([*touch.to_json(), n]) for touch, n in sorted(seen.items())]
                write(directory / f"{function}.{pid}{TOUCHED_SUFFIX}", "".join(f"{line}\n" for line in lines))

    def count(event_name: str, **_: Any) -> None:
        function = current_function()
        with lock:
            counter = counters.setdefault(function, CallCounter())
        if counter.count(event_name) == 1:  # the operation's first call: on disk before it is sent
            flush()

    def touch(event_name: str, params: Any = None, **_: Any) -> None:
        operation = event_name.split(".", 1)[1]
        try:
            found = touches(operation, params or {})
        except Exception:  # recording must never fail the call: the check reports what it could not read
            found = [Touch(operation, resource=UNREADABLE)]
        function = current_function()
        with lock:
            seen = touched.setdefault(function, Counter())
            new = any(touch not in seen for touch in found)
            seen.update(found)
        if new:  # on disk before it is sent
            flush()

    def keep_flushing() -> None:
        while True:
            time.sleep(0.5)
            flush()

    session.events.register("before-parameter-build", touch)
    session.events.register("before-call", count)
    threading.Thread(target=keep_flushing, name="aws-call-counter", daemon=True).start()


def read_recorded_calls(directory: Path) -> Counter[str]:
    """The calls every process recorded in ``directory``, summed."""
    total: Counter[str] = Counter()
    for path in directory.glob("*.json"):
        total.update(json.loads(path.read_text()))
    return total


def read_recorded_calls_by_function(directory: Path) -> dict[str, Counter[str]]:
    """The calls recorded in ``directory`` (and its subdirectories), summed per function."""
    by_function: dict[str, Counter[str]] = {}
    for path in directory.rglob("*.json"):
        function, _, _pid = path.stem.rpartition(".")
        by_function.setdefault(function or UNATTRIBUTED, Counter()).update(json.loads(path.read_text()))
    return by_function


def read_recorded_touches_by_function(directory: Path) -> dict[str, set[Touch]]:
    """What the calls recorded in ``directory`` (and its subdirectories) touched, per function."""
    return {function: set(counts) for function, counts in read_recorded_touch_counts(directory).items()}


def read_recorded_touch_counts(directory: Path) -> dict[str, Counter[Touch]]:
    """How many calls recorded in ``directory`` (and its subdirectories) touched each thing,
    per function."""
    by_function: dict[str, Counter[Touch]] = {}
    for path in directory.rglob(f"*{TOUCHED_SUFFIX}"):
        function, _, _pid = path.name.removesuffix(TOUCHED_SUFFIX).rpartition(".")
        counts = by_function.setdefault(function or UNATTRIBUTED, Counter())
        for line in path.read_text().splitlines():
            if line:
                *fields, n = json.loads(line)
                counts[Touch.from_json(fields)] += n
    return by_function


class CallCounter:
    """Counts AWS API calls by ``service.Operation`` (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.calls: Counter[str] = Counter()

    def __call__(self, event_name: str, **_: Any) -> None:
        self.count(event_name)

    def count(self, event_name: str) -> int:
        """Count one call (``event_name`` is ``before-call.<service>.<Operation>``); returns how
        many calls of that operation there have been."""
        operation = event_name.split(".", 1)[1]
        with self._lock:
            self.calls[operation] += 1
            return self.calls[operation]

    @property
    def total(self) -> int:
        with self._lock:
            return sum(self.calls.values())


@contextmanager
def count_calls(session: EventSource) -> Iterator[CallCounter]:
    """Count every API call made by clients of ``session`` while the block runs."""
    counter = CallCounter()
    session.events.register("before-call", counter)
    try:
        yield counter
    finally:
        session.events.unregister("before-call", counter)
