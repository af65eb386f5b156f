"""What the benchmark watches besides wall time: slot occupancy, AWS calls and CPU per process."""

from __future__ import annotations

import json
import os
import threading
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import boto3
import httpx
from batchgw.config import resources
from batchgw.storage.aws import read_recorded_calls

# --- the simulator's slots ------------------------------------------------------------------


@dataclass(frozen=True)
class Sample:
    at: float  # time.monotonic()
    requests: int
    in_flight: int


@dataclass
class Occupancy:
    """In-flight upstream requests over a window, from ``/_sim/stats`` samples."""

    samples: int
    mean_in_flight: float
    first_request_at: float | None  # first sample with a request seen
    last_busy_at: float | None  # last sample with a request in flight
    busy_mean_in_flight: float  # mean between those two (ramp-up and tail excluded)

    def fraction(self, cap: int) -> float:
        return self.mean_in_flight / cap if cap else 0.0

    def busy_fraction(self, cap: int) -> float:
        return self.busy_mean_in_flight / cap if cap else 0.0


class SimSampler:
    """Samples the simulator's in-flight count for one model every ``interval`` seconds."""

    def __init__(self, sim_url: str, model: str, interval: float = 0.1) -> None:
        self._url = f"{sim_url}/_sim/stats"
        self._model = model
        self._interval = interval
        self._stop = threading.Event()
        self._samples: list[Sample] = []
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="sim-sampler", daemon=True)
        self.errors = 0

    def __enter__(self) -> SimSampler:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _run(self) -> None:
        with httpx.Client(timeout=5) as client:
            next_at = time.monotonic()
            while not self._stop.is_set():
                try:
                    stats = client.get(self._url).raise_for_status().json()["models"][self._model]
                except (httpx.HTTPError, KeyError, ValueError):
                    self.errors += 1
                else:
                    sample = Sample(time.monotonic(), int(stats["requests"]), int(stats["in_flight"]))
                    with self._lock:
                        self._samples.append(sample)
                next_at += self._interval
                self._stop.wait(max(0.0, next_at - time.monotonic()))

    def occupancy(self, start: float, end: float) -> Occupancy:
        with self._lock:
            window = [s for s in self._samples if start <= s.at <= end]
        if not window:
            return Occupancy(0, 0.0, None, None, 0.0)
        first = next((s.at for s in window if s.requests > 0), None)
        last = next((s.at for s in reversed(window) if s.in_flight > 0), None)
        busy = [s for s in window if first is not None and last is not None and first <= s.at <= last]
        return Occupancy(
            samples=len(window),
            mean_in_flight=sum(s.in_flight for s in window) / len(window),
            first_request_at=first,
            last_busy_at=last,
            busy_mean_in_flight=sum(s.in_flight for s in busy) / len(busy) if busy else 0.0,
        )

    def throughput(self, start: float, end: float, bucket: float = 10.0) -> list[int]:
        """Upstream requests that arrived in each ``bucket`` seconds from ``start`` to ``end``."""
        with self._lock:
            window = [s for s in self._samples if start <= s.at <= end]
        if not window:
            return []
        counts = [0] * (int((end - start) // bucket) + 1)
        previous = window[0].requests
        for sample in window[1:]:
            counts[int((sample.at - start) // bucket)] += sample.requests - previous
            previous = sample.requests
        return counts


def sim_stats(client: httpx.Client, model: str) -> dict[str, int]:
    stats = client.get("/_sim/stats").raise_for_status().json()["models"][model]
    return {k: int(v) for k, v in stats.items()}


def sim_reset(client: httpx.Client) -> None:
    client.post("/_sim/reset").raise_for_status()


# --- moto's latency ---------------------------------------------------------------------------


class MotoProbe:
    """Times one consistent DynamoDB GetItem on moto every ``interval`` seconds.

    Every call on the per-item path goes through the same server (and, for DynamoDB, the
    same lock), so this is what each of them waits under the load of the moment.
    """

    def __init__(self, env: Mapping[str, str], interval: float = 0.25) -> None:
        self._client = boto3.client(  # type: ignore[call-overload]
            "dynamodb",
            endpoint_url=env["AWS_ENDPOINT_URL"],
            region_name=env["AWS_DEFAULT_REGION"],
            aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"],
        )
        self._table = env[resources.BATCHES.env_var]
        self._interval = interval
        self._stop = threading.Event()
        self._samples: list[tuple[float, float]] = []
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="moto-probe", daemon=True)

    def once(self) -> float:
        start = time.perf_counter()
        self._client.get_item(
            TableName=self._table,
            Key={"pk": {"S": "bench-probe"}, "sk": {"S": "meta"}},
            ConsistentRead=True,
        )
        return time.perf_counter() - start

    def idle_latencies(self, count: int = 20) -> list[float]:
        return [self.once() for _ in range(count)]

    def __enter__(self) -> MotoProbe:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            at = time.monotonic()
            try:
                seconds = self.once()
            except Exception:  # a probe that fails says nothing about latency
                continue
            with self._lock:
                self._samples.append((at, seconds))

    def latencies(self, start: float, end: float) -> list[float]:
        with self._lock:
            return [seconds for at, seconds in self._samples if start <= at <= end]


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


# --- the stack's processes --------------------------------------------------------------------

_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class StackProcess:
    pid: int
    # moto+lifecycle | api | worker (its execution environments) | worker-poller | flex-worker
    # and flex-poller (the worker on the flex queue) | simulator | poller:<handler> (the poller
    # and its environments) | other
    role: str


def _stat_fields(pid: int) -> list[str]:
    text = Path(f"/proc/{pid}/stat").read_text()
    return text[text.rindex(")") + 2 :].split()  # fields from the 3rd (state) on


# The flex queue's poller (``local.pollers.event_pollers`` names each poller after its queue).
FLEX_POLLER = f"poller-{resources.FLEX_QUEUE.logical_id.lower()}"


def _role(argv: list[str]) -> str:
    # local.run starts children as: python -m local.run --child <parent pid> <module> [args]
    module = argv[5] if len(argv) > 5 and argv[1:4] == ["-m", "local.run", "--child"] else ""
    if module == "local.moto_server":
        return "moto+lifecycle"
    if module == "local.adapter":
        return "api"
    if module == "local.simulator":
        return "simulator"
    # the worker on the flex queue (``local.pollers``): its poller and environments apart
    flex = "--name" in argv and argv[argv.index("--name") + 1] == FLEX_POLLER
    if module == "local.poller":
        handler = argv[argv.index("--handler") + 1] if "--handler" in argv else ""
        if handler.startswith("functions.worker."):
            return "flex-poller" if flex else "worker-poller"
        return f"poller:{handler}"
    if argv[1:3] == ["-m", "local.environments"]:  # a poller's (or the adapter's) execution environment
        handler = argv[argv.index("--handler") + 1] if "--handler" in argv else ""
        if handler.startswith("functions.interactive."):
            return "interactive"
        if handler.startswith("functions.worker."):
            return "flex-worker" if flex else "worker"
        return f"poller:{handler}"
    return "other"


def stack_processes(parent: int | None = None) -> list[StackProcess]:
    """The live child processes of ``parent`` (default: this one), and the execution
    environments its pollers and api adapters run (``local.environments``), each with its role. Environments
    come and go (started on demand, reaped when idle): these are the ones alive now."""
    parent = os.getpid() if parent is None else parent
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parents[int(entry.name)] = int(_stat_fields(int(entry.name))[1])
            except (OSError, ValueError, IndexError):
                continue
    children = {pid for pid, ppid in parents.items() if ppid == parent}
    found = []
    for pid in children | {pid for pid, ppid in parents.items() if ppid in children}:
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")[:-1]
        except OSError:
            continue
        role = _role(argv)
        if pid in children or role != "other":
            found.append(StackProcess(pid, role))
    return sorted(found, key=lambda p: (p.role, p.pid))


def cpu_seconds(pids: list[int]) -> dict[int, float]:
    """User + system CPU seconds each process has used so far (missing processes left out)."""
    out = {}
    for pid in pids:
        try:
            fields = _stat_fields(pid)
        except OSError:
            continue
        out[pid] = (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS  # utime, stime
    return out


def peak_rss_mb(pids: list[int]) -> dict[int, float]:
    """Each process's peak resident memory so far (``VmHWM``), in MB (missing ones left out)."""
    out = {}
    for pid in pids:
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            continue
        for line in status.splitlines():
            if line.startswith("VmHWM:"):
                out[pid] = int(line.split()[1]) / 1024  # kB
    return out


# --- AWS calls --------------------------------------------------------------------------------


@dataclass
class CallSnapshot:
    """AWS calls recorded so far (``batchgw.storage.aws``, ``BATCHGW_AWS_CALLS_DIR``), in total
    and per pid."""

    total: Counter[str]
    by_pid: dict[int, Counter[str]] = field(default_factory=dict)

    def __sub__(self, before: CallSnapshot) -> CallSnapshot:
        by_pid = {
            pid: Counter({k: v - before.by_pid.get(pid, Counter())[k] for k, v in calls.items()})
            for pid, calls in self.by_pid.items()
        }
        total = Counter({k: v - before.total[k] for k, v in self.total.items()})
        return CallSnapshot(+total, {pid: +calls for pid, calls in by_pid.items()})

    def by_role(self, roles: dict[int, str]) -> dict[str, Counter[str]]:
        out: dict[str, Counter[str]] = {}
        for pid, calls in self.by_pid.items():
            out.setdefault(roles.get(pid, "exited"), Counter()).update(calls)
        return out


def snapshot_calls(directory: Path) -> CallSnapshot:
    by_pid: dict[int, Counter[str]] = {}
    for path in directory.glob("*.json"):  # <function>.<pid>.json: a process may have several
        try:
            calls = Counter(json.loads(path.read_text()))
            by_pid.setdefault(int(path.stem.rpartition(".")[2]), Counter()).update(calls)
        except (OSError, ValueError):
            continue
    return CallSnapshot(read_recorded_calls(directory), by_pid)


CALLS_FLUSH_WAIT_SECONDS = 1.5  # the per-process files are rewritten every 0.5 s


def settled_calls(directory: Path) -> CallSnapshot:
    """A snapshot taken once every process has flushed what it counted up to now."""
    time.sleep(CALLS_FLUSH_WAIT_SECONDS)
    return snapshot_calls(directory)
