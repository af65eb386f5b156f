"""The local stack's state across restarts: moto's DynamoDB, S3 and KMS, snapshotted to disk.

moto keeps everything in memory. The moto process (``local.moto_server --state-dir DIR``)
restores ``DIR/moto-state.pickle`` before it serves, writes it again every
``BATCHGW_STATE_CHECKPOINT_SECONDS`` while it serves (when a write came since the last
one), and once more when it is stopped cleanly (SIGTERM). A stack killed outright loses
at most one checkpoint interval; what it loses is what a crash at that instant would
lose, which the gateway survives (invariant 2: a worker may die at any line).

What is kept: every DynamoDB table (its keys, indexes and TTL setting, and its items), every
S3 bucket's objects (bytes, metadata, ETag, LastModified) and unfinished multipart uploads
(a finalize writes its result files in parts across steps), and the KMS keys (their
material: the webhook secrets sealed with them must open again). What is not: SQS messages
and Step Functions executions (``local.resume`` starts the workflows again, and they send
the work again), IAM, Lambda and the state machine (re-created by ``local.bootstrap``).

Consistency: every DynamoDB, S3 and KMS request that may write passes a ``Gate``; a
checkpoint closes it, waits for the writes in flight, copies the state into plain Python
values, opens it, then writes the file (reads go by: they change nothing). So a snapshot
never holds half a request (a TransactWriteItems is in it whole or not at all). What a
series of requests leaves half done is what a crash there would leave, which the gateway
survives. Files are written atomically: a temporary file, fsync, then a rename over the old one,
so a kill mid-write leaves the previous checkpoint whole.

Pinned to moto 5.2.5's backends, like the rest of ``local.moto_server``'s hooks. The file
holds plain values only (dicts, lists, strings, bytes, numbers, datetimes), no moto object.
"""

from __future__ import annotations

import logging
import os
import pickle
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from moto.dynamodb.models import DynamoDBBackend, dynamodb_backends
from moto.kms.models import KmsBackend, kms_backends
from moto.moto_server.werkzeug_app import DomainDispatcherApplication
from moto.s3.models import FakeDeleteMarker, S3Backend, s3_backends

from local.env import ACCOUNT_ID, REGION

log = logging.getLogger("local.state")

FORMAT = 1
MAX_HELD_SHARE = 0.1  # of the time, at most, writes wait for checkpoints
# The services whose state is snapshotted: the requests that may change it pass the gate.
GATED_SERVICES = frozenset({"dynamodb", "s3", "kms"})
# Requests that change nothing go by the gate: a checkpoint holds no read back, and an idle
# stack (whose api processes still read their settings every few seconds) writes no snapshot.
_READ_ACTIONS = {
    "dynamodb": ("Get", "BatchGet", "TransactGet", "Query", "Scan", "Describe", "List"),
    "kms": ("Describe", "List", "Get", "Encrypt", "Decrypt", "GenerateDataKey", "GenerateRandom", "Verify"),
}
_READ_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


# --- the gate: requests between snapshots ------------------------------------------------------


class Gate:
    """Writes pass together; ``closed()`` waits for those in flight, holds new ones back
    until it ends, and takes precedence over writes arriving meanwhile (a steady stream of
    them cannot starve a checkpoint).

    A request that passes must never wait for another request (none of the gated services
    calls back into moto), or closing would deadlock.
    """

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._in_flight = 0
        self._closers = 0  # checkpoints waiting for, or holding, the gate
        self._shut = False
        self.passed = 0  # writes that went through: a checkpoint with none since is skipped

    @contextmanager
    def request(self) -> Iterator[None]:
        with self._cond:
            while self._closers:
                self._cond.wait()
            self._in_flight += 1
        try:
            yield
        finally:
            with self._cond:
                self._in_flight -= 1
                self.passed += 1
                if not self._in_flight:
                    self._cond.notify_all()

    @contextmanager
    def closed(self) -> Iterator[None]:
        self.shut()
        try:
            yield
        finally:
            with self._cond:
                self._shut = False
                self._closers -= 1
                self._cond.notify_all()

    def shut(self) -> None:
        """Wait for the requests in flight and hold every later one back, for good."""
        with self._cond:
            self._closers += 1
            while self._in_flight or self._shut:
                self._cond.wait()
            self._shut = True


def changes_state(service: str | None, environ: dict[str, Any]) -> bool:
    """Whether a request may change what is snapshotted: a write to DynamoDB, S3 or KMS. The
    rest go as they are (a Lambda invoke runs a handler that calls moto again, a long poll
    waits 20 s: neither may hold a checkpoint back)."""
    if service not in GATED_SERVICES:
        return False
    if service == "s3":
        return environ.get("REQUEST_METHOD", "GET").upper() not in _READ_METHODS
    action = str(environ.get("HTTP_X_AMZ_TARGET", "")).rpartition(".")[2]
    return not action.startswith(_READ_ACTIONS[service])


def install_gate(gate: Gate) -> None:
    """Make every request that may change a snapshotted service's state pass ``gate``."""

    def __call__(self: DomainDispatcherApplication, environ: dict[str, Any], start_response: Any) -> Any:
        app = self.get_application(environ)  # what moto's own __call__ does, then calls it
        if changes_state(getattr(app, "service", None), environ):
            with gate.request():
                return app(environ, start_response)
        return app(environ, start_response)

    DomainDispatcherApplication.__call__ = __call__  # type: ignore[method-assign]


# --- capture and apply: moto's backends <-> plain values ------------------------------------------


def _dynamodb() -> DynamoDBBackend:
    return dynamodb_backends[ACCOUNT_ID][REGION]


def _s3() -> S3Backend:
    return s3_backends[ACCOUNT_ID]["aws"]


def _kms() -> KmsBackend:
    return kms_backends[ACCOUNT_ID][REGION]


def capture() -> dict[str, Any]:
    """The state of the snapshotted services, as plain values (call with the gate closed)."""
    tables = []
    for table in _dynamodb().tables.values():
        tables.append(
            {
                "name": table.name,
                "schema": table.schema,
                "attr": table.attr,
                "global_indexes": [
                    {"IndexName": i.name, "KeySchema": i.schema, "Projection": i.projection}
                    for i in table.global_indexes
                ],
                "indexes": [i.describe() for i in table.indexes],
                "billing_mode": table.billing_mode,
                "ttl": dict(table.ttl),
                "items": [item.to_json()["Attributes"] for item in table.all_items()],
            }
        )
    buckets = []
    for bucket in _s3().buckets.values():
        objects = [
            _object(key)
            for key in bucket.keys.values()  # the latest version of each (buckets are unversioned)
            if not isinstance(key, FakeDeleteMarker)
        ]
        uploads = [
            {
                "id": upload.id,
                "key": upload.key_name,
                "metadata": dict(upload.metadata),
                "parts": {number: part.value for number, part in upload.parts.items()},
            }
            for upload in bucket.multiparts.values()
        ]
        buckets.append({"name": bucket.name, "objects": objects, "uploads": uploads})
    keys = [
        {
            "id": key.id,
            "description": key.description,
            "key_usage": key.key_usage,
            "key_spec": key.key_spec,
            "policy": key.policy,
            "key_material": key.key_material,
            "creation_date": key.creation_date,
        }
        for key in _kms().keys.values()
    ]
    return {"format": FORMAT, "taken_at": time.time(), "dynamodb": tables, "s3": buckets, "kms": keys}


def _object(key: Any) -> dict[str, Any]:
    return {
        "key": key.name,
        "value": key.value,
        "metadata": dict(key.metadata),
        "etag": key.etag.strip('"'),  # a completed multipart upload's ETag is not the MD5 of its bytes
        "last_modified": key.last_modified,  # the lifecycle rules count from it
    }


def apply(state: dict[str, Any]) -> None:
    """Load ``state`` (from ``capture``) into moto's empty backends (before it serves)."""
    if state.get("format") != FORMAT:
        raise ValueError(f"snapshot format {state.get('format')!r}, expected {FORMAT}")
    _apply_tables(state["dynamodb"])
    _apply_buckets(state["s3"])
    _apply_keys(state["kms"])


def _apply_tables(tables: list[dict[str, Any]]) -> None:
    dynamodb = _dynamodb()
    for spec in tables:
        table = dynamodb.create_table(
            spec["name"],
            schema=spec["schema"],
            throughput=None,
            attr=spec["attr"],
            global_indexes=spec["global_indexes"],
            indexes=spec["indexes"],
            streams=None,
            billing_mode=spec["billing_mode"],
            sse_specification=None,
            tags=[],
            deletion_protection_enabled=False,
            warm_throughput=None,
        )
        table.ttl = spec["ttl"]
        for attrs in spec["items"]:
            table.put_item(attrs)


def _apply_buckets(buckets: list[dict[str, Any]]) -> None:
    s3 = _s3()
    for spec in buckets:
        bucket = s3.create_bucket(spec["name"], REGION)
        for obj in spec["objects"]:
            key = s3.put_object(spec["name"], obj["key"], obj["value"], etag=obj["etag"])
            key.metadata.clear()
            key.metadata.update(obj["metadata"])
            key.last_modified = obj["last_modified"]
        for upload in spec["uploads"]:
            multipart = s3.create_multipart_upload(
                spec["name"], upload["key"], upload["metadata"], "STANDARD", {}, None, "", ""
            )
            bucket.multiparts.pop(multipart.id)
            multipart.id = upload["id"]  # the batch records that name it must find it
            bucket.multiparts[multipart.id] = multipart
            for number, value in sorted(upload["parts"].items()):
                multipart.set_part(number, value)


def _apply_keys(keys: list[dict[str, Any]]) -> None:
    kms = _kms()
    for spec in keys:
        key = kms.create_key(spec["policy"], spec["key_usage"], spec["key_spec"], spec["description"], None)
        kms.keys.pop(key.id)
        key.id = spec["id"]  # what the sealed secrets name, with the material that opens them
        key.arn = key.arn.rsplit("/", 1)[0] + "/" + spec["id"]
        key.key_material = spec["key_material"]
        key.creation_date = spec["creation_date"]
        kms.keys[key.id] = key


# --- the file ------------------------------------------------------------------------------------


def write_atomic(path: Path, state: dict[str, Any]) -> int:
    """Write ``state`` to ``path`` all or nothing: a reader (or a restart after a kill
    mid-write) finds the previous file or this one, whole. Returns the bytes written."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as out:
            pickle.dump(state, out, protocol=pickle.HIGHEST_PROTOCOL)
            out.flush()
            os.fsync(out.fileno())
            size = out.tell()
        os.replace(temp, path)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)  # the rename itself survives a power cut
    finally:
        os.close(directory)
    return size


def read(path: Path) -> dict[str, Any] | None:
    """The snapshot at ``path``, or None if there is none."""
    try:
        with path.open("rb") as source:
            state: dict[str, Any] = pickle.load(source)  # written by this module, on this machine
    except FileNotFoundError:
        return None
    return state


# --- checkpoints ---------------------------------------------------------------------------------


@dataclass
class Checkpoint:
    taken_at: float
    seconds_closed: float  # how long requests were held back
    seconds: float  # the whole checkpoint, written
    bytes: int


class Checkpointer:
    """Snapshots the moto process's state to ``path``: ``restore`` once before serving,
    ``start`` the periodic checkpoints, ``final`` at a clean stop."""

    def __init__(self, path: Path, interval: float, gate: Gate) -> None:
        self.path = path
        self.interval = interval
        self.gate = gate
        self._passed_at_last = -1
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()  # one checkpoint at a time

    def restore(self) -> bool:
        """Load the snapshot, if there is one; whether there was."""
        started = time.monotonic()
        state = read(self.path)
        if state is None:
            return False
        apply(state)
        log.info(
            "state restored",
            extra={
                "path": str(self.path),
                "taken_at": state["taken_at"],
                "items": sum(len(t["items"]) for t in state["dynamodb"]),
                "objects": sum(len(b["objects"]) for b in state["s3"]),
                "seconds": round(time.monotonic() - started, 3),
            },
        )
        return True

    def checkpoint(self, *, force: bool = False) -> Checkpoint | None:
        """Write a snapshot now (unless no request came since the last one)."""
        with self._lock:
            started = time.monotonic()
            with self.gate.closed():
                if not force and self.gate.passed == self._passed_at_last:
                    return None
                self._passed_at_last = self.gate.passed
                state = capture()
            closed = time.monotonic() - started
            size = write_atomic(self.path, state)
            return Checkpoint(state["taken_at"], closed, time.monotonic() - started, size)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="state-checkpoints", daemon=True)
        self._thread.start()

    def next_wait(self, last: Checkpoint | None) -> float:
        """Seconds until the next checkpoint: the interval, or longer when the last one held
        writes back for more than a tenth of it (a big state: writes are never held back for
        more than a tenth of the time, at the price of a longer interval to lose)."""
        if last is None:
            return self.interval
        return max(self.interval, last.seconds_closed / MAX_HELD_SHARE)

    def _run(self) -> None:
        wait = self.interval
        while not self._stop.wait(wait):
            try:
                done = self.checkpoint()
            except Exception:  # a failed checkpoint leaves the last one; the next tries again
                log.exception("checkpoint failed", extra={"path": str(self.path)})
                continue
            if done is not None:
                log.debug("checkpoint", extra=vars(done))
                wait = self.next_wait(done)

    def final(self) -> None:
        """The last snapshot: the gate stays closed after it, so nothing changes until exit."""
        self._stop.set()
        with self._lock:
            self.gate.shut()  # never opened again: the process exits next
            state = capture()
            size = write_atomic(self.path, state)
            self._passed_at_last = self.gate.passed
        log.info("state saved", extra={"path": str(self.path), "bytes": size})
