"""boto3 clients, created lazily (moto must be up first) from one session per process.

Every AWS call the gateway makes goes through these clients, so a benchmark can count
them by hooking the session's events (``count_calls``).
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cached_property, lru_cache
from pathlib import Path
from typing import Any

import boto3
from botocore.config import Config

_CONFIG = Config(
    retries={"mode": "standard", "max_attempts": 5},
    max_pool_connections=128,
    connect_timeout=5,
    read_timeout=60,
)


@dataclass
class AwsClients:
    """The clients one process uses; each is created on first use and then shared."""

    session: boto3.session.Session = field(default_factory=boto3.session.Session)

    def _client(self, name: str) -> Any:
        return self.session.client(name, config=_CONFIG)  # type: ignore[call-overload]

    @cached_property
    def dynamodb(self) -> Any:
        return self._client("dynamodb")

    @cached_property
    def s3(self) -> Any:
        return self._client("s3")

    @cached_property
    def sqs(self) -> Any:
        return self._client("sqs")

    @cached_property
    def sfn(self) -> Any:
        return self._client("stepfunctions")

    @cached_property
    def secrets(self) -> Any:
        return self._client("secretsmanager")


_clients_lock = threading.Lock()


@lru_cache(maxsize=1)
def _build_clients() -> AwsClients:
    clients = AwsClients()
    calls_dir = os.environ.get(CALLS_DIR_ENV)
    if calls_dir:
        record_calls(clients.session, Path(calls_dir))
    return clients


def get_clients() -> AwsClients:
    """This process's clients (built once, even when threads ask at the same moment)."""
    with _clients_lock:
        return _build_clients()


def reset_clients() -> None:
    """Forget this process's clients (tests that start a fresh moto)."""
    with _clients_lock:
        _build_clients.cache_clear()


# Benchmarks set this to a directory: every process then writes the AWS calls it made
# there (``<pid>.json``, refreshed twice a second), so calls can be summed across processes.
CALLS_DIR_ENV = "BATCHGW_AWS_CALLS_DIR"


def record_calls(session: boto3.session.Session, directory: Path) -> CallCounter:
    """Count ``session``'s calls and keep ``directory/<pid>.json`` up to date with them."""
    counter = CallCounter()
    session.events.register("before-call", counter)
    directory.mkdir(parents=True, exist_ok=True)
    target = directory / f"{os.getpid()}.json"

    def flush() -> None:
        while True:
            with counter._lock:
                snapshot = dict(counter.calls)
            tmp = target.with_suffix(".tmp")
            tmp.write_text(json.dumps(snapshot))
            tmp.replace(target)
            time.sleep(0.5)

    threading.Thread(target=flush, name="aws-call-counter", daemon=True).start()
    return counter


def read_recorded_calls(directory: Path) -> Counter[str]:
    """The calls every process recorded in ``directory``, summed."""
    total: Counter[str] = Counter()
    for path in directory.glob("*.json"):
        total.update(json.loads(path.read_text()))
    return total


class CallCounter:
    """Counts AWS API calls by ``service.Operation`` (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.calls: Counter[str] = Counter()

    def __call__(self, event_name: str, **_: Any) -> None:
        # event_name is "before-call.<service>.<Operation>"
        parts = event_name.split(".", 2)
        with self._lock:
            self.calls[".".join(parts[1:])] += 1

    @property
    def total(self) -> int:
        with self._lock:
            return sum(self.calls.values())


@contextmanager
def count_calls(session: boto3.session.Session) -> Iterator[CallCounter]:
    """Count every API call made by clients of ``session`` while the block runs."""
    counter = CallCounter()
    session.events.register("before-call", counter)
    try:
        yield counter
    finally:
        session.events.unregister("before-call", counter)
