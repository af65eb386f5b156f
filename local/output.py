"""Where the local stack's output goes when ``make run`` runs it: files, and a calm terminal.

Every process of the stack writes its whole output (Powertools' JSON lines, the local
modules' ``key=value`` lines, tracebacks) through a pipe to ``local.run``, which copies it to
``<log dir>/<process>.log`` (``BATCHGW_LOG_DIR``, default ``.local/logs/<BATCHGW_PORT>``).
Each file is bounded (``BoundedLog``): at ``BATCHGW_LOG_MAX_MB`` (default 10) it becomes
``<process>.log.1``, replacing the previous one, and a new file starts, so a process never
holds more than twice that on disk, however long the stack runs.

The terminal gets the banner (``banner``) and then one line per notable event
(``EventFeed``): a batch started, paused, resumed, refused, expiring or ended (with its
counts), a setting or a model's cap changed, a webhook suspended or disabled, a process
that crashed and was replaced. Never a line per request. ``BATCHGW_VERBOSE=1`` copies every
process's output to the terminal as well, as the stack did before.

The events are read from the processes' structured log lines (the ``message`` of
Powertools' JSON lines), the one place every process already reports them.
"""

from __future__ import annotations

import json
import logging
import os
import queue
import sys
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import IO, Any, TextIO

import boto3
from batchgw.config import resources
from batchgw.storage.batches import BatchStore
from batchgw.storage.files import FileStore
from batchgw.storage.usage import UsageStore

from local.env import API_PORT_ENV, DEFAULT_API_PORT, REPO_ROOT
from local.keys import LOCAL_KEYS

log = logging.getLogger("local.output")

LOG_DIR_ENV = "BATCHGW_LOG_DIR"
LOG_MAX_MB_ENV = "BATCHGW_LOG_MAX_MB"
VERBOSE_ENV = "BATCHGW_VERBOSE"
LOG_ROOT = REPO_ROOT / ".local" / "logs"
DEFAULT_LOG_MAX_MB = 10.0
REMEMBERED_BATCHES = 10_000  # batches whose last shown state is kept, to show each change once


def log_dir_from_env(environ: Mapping[str, str] | None = None) -> Path:
    """Where ``make run`` writes its processes' logs: BATCHGW_LOG_DIR, else a folder of
    ``.local/logs`` named after the API's port (stacks side by side keep apart)."""
    env = os.environ if environ is None else environ
    given = env.get(LOG_DIR_ENV)
    return Path(given) if given else LOG_ROOT / str(int(env.get(API_PORT_ENV) or DEFAULT_API_PORT))


def log_max_bytes_from_env(environ: Mapping[str, str] | None = None) -> int:
    env = os.environ if environ is None else environ
    return int(float(env.get(LOG_MAX_MB_ENV) or DEFAULT_LOG_MAX_MB) * 2**20)


def verbose_from_env(environ: Mapping[str, str] | None = None) -> bool:
    env = os.environ if environ is None else environ
    return env.get(VERBOSE_ENV, "0").strip().lower() in ("1", "true", "yes", "on")


# --- the files ------------------------------------------------------------------------------------


class BoundedLog:
    """An append-only log file that never grows past ``max_bytes``: the write that would take
    it past becomes the first of a new file, the old one kept as ``<name>.1`` (the one before
    is dropped). None: unbounded."""

    def __init__(self, path: Path, max_bytes: int | None) -> None:
        self.path = path
        self.max_bytes = max_bytes
        path.parent.mkdir(parents=True, exist_ok=True)
        self._file: IO[bytes] = path.open("ab")
        self._size = self._file.tell()

    def write(self, data: bytes) -> None:
        if self.max_bytes is not None and self._size and self._size + len(data) > self.max_bytes:
            self._file.close()
            os.replace(self.path, self.path.with_name(self.path.name + ".1"))
            self._file = self.path.open("ab")
            self._size = 0
        self._file.write(data)
        self._file.flush()  # a dead process's tail is read from the file (``LocalStack.check``)
        self._size += len(data)

    def close(self) -> None:
        self._file.close()


def pump(
    source: IO[bytes],
    target: BoundedLog,
    *,
    name: str,
    on_line: Callable[[str, bytes], None] | None = None,
    echo: IO[bytes] | None = None,
) -> None:
    """Copy a process's output, line by line, to its log (and ``echo``), handing each line to
    ``on_line``, until the process closes it (it exited). Closes the log."""
    try:
        for line in iter(source.readline, b""):
            target.write(line)
            if echo is not None:
                echo.write(line)
                echo.flush()
            if on_line is not None:
                on_line(name, line)
    finally:
        target.close()
        source.close()


# --- the terminal ----------------------------------------------------------------------------------


def banner(
    *,
    api_url: str,
    sim_url: str,
    moto_url: str,
    state: str,
    logs: str,
    ready_seconds: float,
) -> str:
    """What ``make run`` prints once the stack serves."""
    base = api_url.removesuffix("/v1")
    keys = "\n".join(f"  {key:<16} {user} ({role})" for key, (user, role) in LOCAL_KEYS.items())
    return (
        f"\nbatchgw is running (ready in {ready_seconds:.1f} s).\n"
        f"  API        {api_url}\n"
        f"  console    {base}/console/\n"
        f"  simulator  {sim_url}\n"
        f"  moto       {moto_url}\n"
        f"  state      {state}\n"
        f"  logs       {logs}\n"
        f"API keys:\n{keys}\n"
        "Ctrl-C stops it. Events from here on: one line each.\n"
    )


def _short(value: Any) -> str:
    return "" if value is None else str(value)


class EventFeed:
    """Turns the processes' log lines into one terminal line per notable event.

    ``line`` is called from each process's pump thread and only looks at the line; what is
    shown is formatted and printed by the feed's own thread (an ended batch's counts are read
    from its table there), so a slow terminal or read never holds a process's output back.
    """

    # Powertools ``message`` -> what the event is. The batch's last shown state is kept so that
    # a change reported once per chain (a pause) shows once.
    BATCH_EVENTS = {
        "batch started": "started",
        "batch paused": "paused",
        "batch resumed": "resumed",
        "batch window closed": "expiring",
        "batch failing for its owner": "failing",
        "batch input refused": "refused",
        "batch ended": "ended",
        "batch purged": "purged",
    }
    OTHER_EVENTS = frozenset(
        {"setting overridden", "setting reset", "model cap set", "webhook suspended", "webhook disabled: 410"}
    )

    def __init__(self, out: TextIO | None = None) -> None:
        self.out = out if out is not None else sys.stdout
        self._queue: queue.Queue[dict[str, Any] | str | list[str] | None] = queue.Queue()
        self._shown: OrderedDict[str, str] = OrderedDict()
        self._env: Mapping[str, str] | None = None
        self._store: BatchStore | None = None
        self._thread: threading.Thread | None = None
        self.shown = 0  # lines printed

    def start(self, env: Mapping[str, str]) -> None:
        """Show events from now on (``env``: the stack's, to read an ended batch's counts)."""
        self._env = env
        self._thread = threading.Thread(target=self._run, name="event-feed", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        if self._thread is not None:
            self._queue.put(None)
            self._thread.join(timeout=5)
            self._thread = None

    def line(self, process: str, raw: bytes) -> None:
        """One line of a process's output (called from its pump thread): keep it if it reports
        an event. Cheap for every other line."""
        if not raw.startswith(b"{") or b'"message"' not in raw:
            return
        try:
            record = json.loads(raw)
        except ValueError:
            return
        message = record.get("message") if isinstance(record, dict) else None
        if message in self.BATCH_EVENTS or message in self.OTHER_EVENTS:
            self._queue.put(record)

    def note(self, text: str) -> None:
        """An event the stack itself saw (a process replaced, files expired)."""
        self._queue.put(text)

    def resuming(self, batch_ids: list[str]) -> None:
        """These batches' workflows start again after a restart: their prepare step reports
        them started again, which is no change to show (the stack notes how many resumed)."""
        self._queue.put(list(batch_ids))

    # --- the feed's thread ------------------------------------------------------------------------

    def _run(self) -> None:
        while (item := self._queue.get()) is not None:
            if isinstance(item, list):
                for batch_id in item:
                    self._remember(batch_id, "started")
                continue
            try:
                text = item if isinstance(item, str) else self._describe(item)
            except Exception:  # an event is never worth the feed: the log has it whole
                log.debug("event not shown", exc_info=True)
                continue
            if text:
                self.out.write(f"{time.strftime('%H:%M:%S')} {text}\n")
                self.out.flush()
                self.shown += 1

    def _describe(self, record: Mapping[str, Any]) -> str | None:
        message = record["message"]
        if message in self.OTHER_EVENTS:
            return self._other(message, record)
        batch_id = str(record.get("batch_id"))
        state = self.BATCH_EVENTS[message]
        if self._shown.get(batch_id) == state:
            return None
        self._remember(batch_id, state)
        if state == "started":
            return f"batch {batch_id} started: {record.get('total')} requests"
        if state == "paused":
            return f"batch {batch_id} paused: {record.get('reason')}"
        if state == "failing":
            return f"batch {batch_id} failing: {record.get('reason')}"
        if state == "refused":
            return f"batch {batch_id} failed validation: {record.get('problems')} problems"
        if state == "expiring":
            return f"batch {batch_id} expiring: its completion window closed"
        if state == "ended":
            return f"batch {batch_id} {record.get('status')}{self._counts(batch_id)}"
        return f"batch {batch_id} {state}"

    def _remember(self, batch_id: str, state: str) -> None:
        self._shown[batch_id] = state
        self._shown.move_to_end(batch_id)
        while len(self._shown) > REMEMBERED_BATCHES:
            self._shown.popitem(last=False)

    @staticmethod
    def _other(message: str, record: Mapping[str, Any]) -> str:
        if message == "setting overridden":
            return f"setting {record.get('setting')} = {record.get('value')} (by {record.get('by')})"
        if message == "setting reset":
            return f"setting {record.get('setting')} reset to its default (by {record.get('by')})"
        if message == "model cap set":
            return f"model {record.get('model')} cap = {_short(record.get('cap'))} (by {record.get('by')})"
        if message == "webhook suspended":
            return f"webhook of {record.get('user_id')} suspended for {record.get('seconds')} s"
        return f"webhook of {record.get('user_id')} disabled: its endpoint answered 410"

    def _counts(self, batch_id: str) -> str:
        """``: N completed, M failed of T, $cost``, or nothing when they cannot be read (the
        line shows without them)."""
        try:
            store = self._batches()
            found = store.get(batch_id) if store is not None else None
        except Exception:  # moto stopping, or busy
            log.debug("counts not read", exc_info=True)
            found = None
        if found is None:
            return ""
        counts, total = found.counts, found.record.total
        line = f": {counts.completed} completed, {counts.failed} failed"
        if counts.cancelled:
            line += f", {counts.cancelled} cancelled"
        return f"{line} of {total}, ${counts.cost_usd}"

    def _batches(self) -> BatchStore | None:
        if self._store is None and self._env and "AWS_ENDPOINT_URL" in self._env:
            env = self._env
            session = boto3.session.Session(
                region_name=env["AWS_DEFAULT_REGION"],
                aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
                aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"],
            )
            dynamodb = session.client("dynamodb", endpoint_url=env["AWS_ENDPOINT_URL"])  # type: ignore[call-overload]
            usage = UsageStore(dynamodb, env[resources.CONTROL.env_var])
            files = FileStore(dynamodb, env[resources.FILES.env_var], usage)
            self._store = BatchStore(dynamodb, env[resources.BATCHES.env_var], usage, files)
        return self._store
