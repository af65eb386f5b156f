"""``make bench-yield`` (``python -m bench.yield_run``): does batch work give way to interactive
traffic on the same model, and does it use what interactive traffic leaves idle?

Modelled on llm-d's batch-gateway benchmark. One local stack; the simulator serves
``sim-chat`` with a fixed number of sequences (``--capacity``, 16) of ``--latency-ms`` (500)
each, the rest queued (``local.sim_capacity``). Interactive requests come in cycles of a burst
(``--burst-rps`` 15 for ``--burst-seconds`` 60) and a quiet phase (``--quiet-rps`` 1 for
``--quiet-seconds`` 60), ``--cycles`` 3 times, after an unmeasured burst (``--warm-up-seconds``
10), each run starting once every process has read the setting it turns (the stack's
``--refresh-seconds``, 5, and one more), by one of two ways (``--via``):

- ``gateway`` (the default): through the gateway's own interactive path
  (``POST /v1/chat/completions``), whose requests count as interactive load by themselves;
- ``reporter``: straight to the simulator, the benchmark playing another gateway that
  reports what it has in flight as the contract says (``PUT /admin/interactive-load/{reporter}``,
  on every change, at most every ``REPORT_EVERY_SECONDS``, with a short ttl).

Four runs of the same interactive load:

- **alone**: no batch;
- **yield**: a ``--batch`` (3,000) request batch on the same model, BATCH_YIELD_TO_INTERACTIVE on;
- **no_yield**: the same batch with it off, for contrast;
- **flex**: the yield run again, with ``--flex-rps`` (0.5) flex requests in its quiet phases,
  each paired with a batch of one sent with it (``bench.yield_flex``: whether flex goes
  first, and whether interactive traffic keeps its latency with flex running; 0: no such run).

It reports, from one run of all three: interactive p50/p99 latency in the yield and no-yield
runs against the alone run, measured two ways: at the model (what the simulator measured of
the interactive requests: their wait in its queue and their work, the whole run), and end to
end (arrival to answer, as the caller sees it, over the requests sent while the batch ran, the
same offsets in the alone run); the batch's use of what interactive traffic leaves idle in the
quiet phases (its sequences at the model over the capacity less the interactive ones, as
the simulator counts them by source), while it had work to fill them: its drain, the last
seconds when fewer of its requests were left to start than there was room, cannot fill the
model whatever yields, so it is left out (and reported with it, ``idle_utilization_with_drain``,
and per quiet phase); the batch's progress over time (a staircase, as a PNG beside the JSON,
and every sample in ``yield_samples.json``).

Keys in ``bench/last.json``: ``yield_interactive_p99_ratio`` (at the model; goal <= 1.05),
``yield_interactive_p99_ratio_end_to_end``, ``yield_idle_utilization`` (goal >= 0.90),
``yield_flex_start_ratio`` (goal <= 1), ``yield_flex_interactive_p99_ratio`` (goal <= 1.05),
and ``yield`` (the details). The ratio at the model is the one the goal is about: whether batch
work makes interactive requests wait for the model. End to end, through the gateway, the
local stack adds its own cost: every process of it (the workers, moto, the interactive
function) shares this machine's cores, so a running batch slows the interactive path's own
steps here, as it would not on AWS, where each runs apart.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import tempfile
import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx
from batchgw.storage.aws import CALLS_DIR_ENV

from bench.metric_logs import metric_values
from bench.sched_rates import RateSampler, print_rates, rates
from bench.yield_figures import (
    batch_window,
    idle_lost,
    idle_utilization,
    latencies,
    quiet_phases,
    quiet_shares,
    spread,
)
from bench.yield_flex import FLEX_START_RATIO_GOAL, FlexLine
from local.env import WORKER_ENVIRONMENTS_ENV, worker_environments
from local.run import LocalStack

MODEL = "sim-chat"
REPORTER = "bench-interactive"
REPORT_EVERY_SECONDS = 0.1  # the interactive side's report, at most this often
REPORT_TTL_SECONDS = 3
SAMPLE_EVERY_SECONDS = 0.25
SHARE_EVERY_SAMPLES = 4  # the gateway's own views (the batch share, the batch's progress), once a second
P99_RATIO_GOAL = 1.05
IDLE_UTILIZATION_GOAL = 0.90
DEFAULT_OUT = Path(__file__).resolve().parent / "last.json"
# The worker's execution environments the yield run has at least: the 16 invocations at once
# its figures were first measured with (2 pollers of 8 threads), so they stay comparable.
MIN_ENVIRONMENTS = 16
CALLS_SUBDIR = "calls"  # of the stack's log directory: the calls each process recorded


@dataclass(frozen=True)
class Cycles:
    burst_rps: float = 15.0
    burst_seconds: float = 60.0
    quiet_rps: float = 1.0
    quiet_seconds: float = 60.0
    cycles: int = 3

    @property
    def seconds(self) -> float:
        return self.cycles * (self.burst_seconds + self.quiet_seconds)

    def phase_at(self, offset: float) -> str:
        """``burst`` or ``quiet``, at ``offset`` seconds from the start."""
        within = offset % (self.burst_seconds + self.quiet_seconds)
        return "burst" if within < self.burst_seconds else "quiet"

    def send_offsets(self) -> list[float]:
        """When each interactive request is sent, evenly spaced at each phase's rate."""
        offsets: list[float] = []
        for cycle in range(self.cycles):
            start = cycle * (self.burst_seconds + self.quiet_seconds)
            for begin, seconds, rps in (
                (start, self.burst_seconds, self.burst_rps),
                (start + self.burst_seconds, self.quiet_seconds, self.quiet_rps),
            ):
                count = int(seconds * rps)
                offsets += [begin + i / rps for i in range(count)]
        return offsets


@dataclass
class Sent:
    offset: float  # seconds from the run's start
    latency: float | None = None  # seconds, None: failed
    status: int | None = None


@dataclass
class Sample:
    offset: float
    running: int  # sequences the simulator runs now (batch and interactive)
    interactive: int  # interactive requests in flight (sent, not answered)
    completed: int  # the batch's completed + failed requests
    batch_at_model: int  # of the sequences running, the batch's (the simulator counts by source)
    interactive_at_model: int  # and the interactive requests'
    share: int | None = None  # the batch share the gateway says it has now (slots)
    why: str | None = None  # and why (GET /admin/batch/models)
    # The batch's requests the simulator has answered so far, read with ``batch_at_model``
    # (``completed`` is the gateway's count, read once a second: up to a second behind).
    batch_answered: int | None = None
    held: int | None = None  # the batch slots its chains hold (``running`` there), read with ``share``


@dataclass
class Run:
    mode: str
    sent: list[Sent] = field(default_factory=list)
    samples: list[Sample] = field(default_factory=list)
    batch_started: float | None = None  # offsets of the batch's run
    batch_ended: float | None = None
    batch_requests: int = 0  # the batch's size (0: no batch)
    reports: int = 0
    # The interactive requests' latency as the model's server measured it (its queue and its
    # work, without the way there): the run's whole, from /_sim/stats.
    at_model: dict[str, Any] = field(default_factory=dict)
    # The run's start and end by the wall clock (``time.time``), as the workers' EMF lines
    # are stamped: which of their AnswerToNextCall values are this run's.
    wall: tuple[float, float] | None = None
    # From each answer to the chain's next call, ms: AnswerToNextCall as the workers wrote it.
    answer_to_next_call: list[float] = field(default_factory=list)
    # Scheduling's calls so far and the busy worker environments, once a second.
    rate_sampler: RateSampler | None = None
    flex: FlexLine | None = None  # the flex run's flex requests and their paired batches


VIA = ("gateway", "reporter")


class Interactive:
    """The interactive side: requests through the gateway's interactive path (``via``
    ``gateway``), or straight to the simulator with their load reported (``reporter``)."""

    def __init__(self, stack: LocalStack, latency_ms: int, via: str) -> None:
        self.via = via
        self.url = stack.api_url if via == "gateway" else f"{stack.sim_url}/v1"
        self.admin_url = stack.api_url.removesuffix("/v1")
        self.latency_ms = latency_ms
        self.in_flight = 0
        self._changed = asyncio.Event()

    async def run(self, cycles: Cycles, run: Run, t0: float, stop: threading.Event | None = None) -> None:
        """Send ``cycles`` from ``t0`` and wait for every answer; no more once ``stop`` is set."""
        limits = httpx.Limits(max_connections=512, max_keepalive_connections=512)
        key = {"Authorization": "Bearer sk-local-bob"} if self.via == "gateway" else {}
        async with (
            httpx.AsyncClient(base_url=self.url, headers=key, timeout=120, limits=limits) as sim,
            httpx.AsyncClient(
                base_url=self.admin_url, headers={"Authorization": "Bearer sk-local-admin"}, timeout=10
            ) as admin,
        ):
            done = asyncio.Event()
            if self.via == "gateway":
                done.set()  # its requests count by themselves: nothing to report
            reporter = asyncio.create_task(self._report(admin, run, done))
            tasks = []
            for i, offset in enumerate(cycles.send_offsets()):
                delay = t0 + offset - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)
                if stop is not None and stop.is_set():
                    break
                sent = Sent(offset)
                run.sent.append(sent)
                tasks.append(asyncio.create_task(self._one(sim, sent, i, t0)))
            await asyncio.gather(*tasks)
            done.set()
            await reporter
            if self.via == "reporter":
                await admin.delete(f"/admin/interactive-load/{REPORTER}")

    async def _one(self, sim: httpx.AsyncClient, sent: Sent, i: int, t0: float) -> None:
        body = {
            "model": MODEL,
            "messages": [
                {"role": "user", "content": f"interactive {i} [[sim latency_ms={self.latency_ms}]]"}
            ],
        }
        self.in_flight += 1
        self._changed.set()
        started = time.monotonic()
        try:
            answer = await sim.post("/chat/completions", json=body)
            sent.status = answer.status_code
            sent.latency = time.monotonic() - started if answer.status_code == 200 else None
        except httpx.HTTPError:
            sent.latency = None
        finally:
            self.in_flight -= 1
            self._changed.set()

    async def _report(self, admin: httpx.AsyncClient, run: Run, done: asyncio.Event) -> None:
        """Report the in-flight count when it changes (at most every REPORT_EVERY_SECONDS),
        and at least once a second, until ``done``."""
        last = -math.inf
        while not done.is_set():
            with suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), timeout=1.0)
            wait = last + REPORT_EVERY_SECONDS - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            self._changed.clear()
            load = {"models": {MODEL: self.in_flight}, "ttl_seconds": REPORT_TTL_SECONDS}
            try:
                await admin.put(f"/admin/interactive-load/{REPORTER}", json=load)
                run.reports += 1
            except httpx.HTTPError:
                pass
            last = time.monotonic()


def sample(
    stack: LocalStack,
    run: Run,
    interactive: Interactive,
    batch_id: str | None,
    t0: float,
    stop: threading.Event,
) -> None:
    """Every SAMPLE_EVERY_SECONDS: the simulator's running sequences, the interactive in
    flight, and the batch's progress."""
    with (
        httpx.Client(base_url=stack.sim_url, timeout=10) as sim,
        httpx.Client(
            base_url=stack.api_url, headers={"Authorization": "Bearer sk-local-alice"}, timeout=10
        ) as api,
        httpx.Client(
            base_url=stack.api_url.removesuffix("/v1"),
            headers={"Authorization": "Bearer sk-local-admin"},
            timeout=10,
        ) as admin,
    ):
        share: dict[str, Any] = {"slots": None, "reason": None}
        held: int | None = None
        taken = completed = 0
        while not stop.wait(SAMPLE_EVERY_SECONDS):
            stats = sim.get("/_sim/stats").json()
            queue = stats["queues"][MODEL]
            running = int(queue["running"])
            by_source = queue["running_by_source"]
            answered = int(stats["latency"][MODEL]["batch"]["answered"])
            # The gateway's views cost the stack's one database (moto) calls the batch's own
            # requests queue behind: read once a second, the simulator's view every sample.
            looks = taken % SHARE_EVERY_SAMPLES == 0
            if looks:
                models = admin.get("/admin/batch/models").json()["data"]
                model = next(m for m in models if m["id"] == MODEL)
                share, held = model["batch_share"], int(model["running"])
            taken += 1
            if looks and run.rate_sampler is not None:
                run.rate_sampler.look(time.monotonic() - t0)
            if looks and batch_id is not None:
                batch = api.get(f"/batches/{batch_id}").json()
                counts = batch["request_counts"]
                completed = int(counts["completed"]) + int(counts["failed"])
                offset = time.monotonic() - t0
                if batch["status"] == "in_progress" and run.batch_started is None:
                    run.batch_started = offset
                if (
                    batch["status"] in ("completed", "failed", "expired", "cancelled")
                    and run.batch_ended is None
                ):
                    run.batch_ended = offset
            run.samples.append(
                Sample(
                    time.monotonic() - t0,
                    running,
                    interactive.in_flight,
                    completed,
                    int(by_source["batch"]),
                    int(by_source["interactive"]),
                    share["slots"],
                    share["reason"],
                    answered if batch_id is not None else None,
                    held=held,
                )
            )


def one_run(stack: LocalStack, mode: str, cycles: Cycles, args: argparse.Namespace) -> Run:
    run = Run(mode)
    admin = httpx.Client(
        base_url=stack.api_url.removesuffix("/v1"),
        headers={"Authorization": "Bearer sk-local-admin"},
        timeout=30,
    )
    admin.patch(
        "/admin/config/BATCH_YIELD_TO_INTERACTIVE", json={"value": mode != "no_yield"}
    ).raise_for_status()
    if mode == "flex":
        run.flex = FlexLine(args.flex_rps, args.latency_ms)
    time.sleep(args.refresh_seconds + 1)  # every process has read it (BATCHGW_RUNTIME_REFRESH_SECONDS)
    httpx.post(f"{stack.sim_url}/_sim/reset").raise_for_status()  # its latencies are this run's
    interactive = Interactive(stack, args.latency_ms, args.via)
    assert stack.log_dir is not None  # yield_stack gives it one
    if args.scheduling_calls:
        run.rate_sampler = RateSampler(stack.log_dir / CALLS_SUBDIR, stack.environment_pids)
    batch_id = None
    t0 = time.monotonic()
    wall_start = time.time()
    if mode != "alone":
        api = httpx.Client(
            base_url=stack.api_url, headers={"Authorization": "Bearer sk-local-alice"}, timeout=60
        )
        lines = [
            {
                "custom_id": f"b{i}",
                "body": {
                    "model": MODEL,
                    "messages": [
                        {"role": "user", "content": f"batch {i} [[sim latency_ms={args.latency_ms}]]"}
                    ],
                },
            }
            for i in range(args.batch)
        ]
        batch_id = api.post("/batches", json={"requests": lines}).raise_for_status().json()["id"]
        run.batch_requests = len(lines)
    stop = threading.Event()
    sampler = threading.Thread(target=sample, args=(stack, run, interactive, batch_id, t0, stop), daemon=True)
    sampler.start()
    asyncio.run(_load(interactive, stack, cycles, run, t0))
    stop.set()
    sampler.join(timeout=30)
    run.wall = (wall_start, time.time())
    measured = httpx.get(f"{stack.sim_url}/_sim/stats").json()["latency"][MODEL]["interactive"]
    run.at_model = {"p50_ms": measured["p50_ms"], "p99_ms": measured["p99_ms"]}
    if batch_id is not None:  # what it did not finish within the cycles is not measured
        httpx.post(
            f"{stack.api_url}/batches/{batch_id}/cancel", headers={"Authorization": "Bearer sk-local-alice"}
        )
    return run


async def _load(interactive: Interactive, stack: LocalStack, cycles: Cycles, run: Run, t0: float) -> None:
    """The run's interactive load, and its flex requests beside it (the flex run's)."""
    flex = run.flex.run(stack.api_url, cycles, t0) if run.flex is not None else asyncio.sleep(0)
    await asyncio.gather(interactive.run(cycles, run, t0), flex)


# The warm-up burst before the first run: long enough that the interactive function has as
# many warm environments as a burst keeps busy, as it has in the runs after it.
WARM_UP_SECONDS = 10.0
REFRESH_SECONDS = 5.0  # how old the settings a process uses may be (BATCHGW_RUNTIME_REFRESH_SECONDS)


def warm_up(stack: LocalStack, cycles: Cycles, args: argparse.Namespace) -> None:
    """Send one unmeasured burst of interactive requests first: the interactive function's
    environments then start (paying their import) before the alone run, not in it, as they
    were started already in the runs after it (an idle one is reaped only after minutes)."""
    burst = Cycles(cycles.burst_rps, args.warm_up_seconds, 0.0, 0.0, 1)
    print(f"  warm-up: {args.warm_up_seconds:.0f} s of interactive burst, not measured...", flush=True)
    asyncio.run(Interactive(stack, args.latency_ms, args.via).run(burst, Run("warm-up"), time.monotonic()))


def read_answer_to_next_call(runs: Iterable[Run], log_dir: Path) -> None:
    """Each run's AnswerToNextCall values, from the workers' logs in ``log_dir``."""
    lines = [line for path in sorted(log_dir.glob("worker-*.log")) for line in path.read_text().splitlines()]
    for run in runs:
        if run.wall is not None:
            run.answer_to_next_call = metric_values(lines, "AnswerToNextCall", *run.wall)


def summary(runs: dict[str, Run], cycles: Cycles, capacity: int) -> dict[str, Any]:
    window = batch_window(runs["yield" if "yield" in runs else next(m for m in runs if m != "alone")], cycles)
    alone = latencies(runs["alone"], window)
    alone["at_model"] = runs["alone"].at_model
    out: dict[str, Any] = {"window_seconds": [round(window[0], 1), round(window[1], 1)], "alone": alone}
    for mode in [m for m in ("yield", "no_yield", "flex") if m in runs]:
        figures = latencies(runs[mode], window)
        figures["p99_ratio"] = (
            None
            if not alone["p99_ms"] or figures["p99_ms"] is None
            else round(figures["p99_ms"] / alone["p99_ms"], 3)
        )
        figures["at_model"] = at_model = runs[mode].at_model
        figures["p99_ratio_at_model"] = (
            None
            if not alone["at_model"].get("p99_ms") or at_model.get("p99_ms") is None
            else round(at_model["p99_ms"] / alone["at_model"]["p99_ms"], 3)
        )
        figures["idle_utilization"] = idle_utilization(runs[mode], cycles, capacity)
        figures["idle_utilization_with_drain"] = idle_utilization(runs[mode], cycles, capacity, drain=True)
        figures["quiet_phases"] = quiet_phases(runs[mode], cycles, capacity)
        figures["idle_lost"] = idle_lost(runs[mode], cycles, capacity)
        figures["quiet_share"] = quiet_shares(runs[mode], cycles, capacity)
        figures["answer_to_next_call"] = spread(runs[mode].answer_to_next_call)
        figures["batch_completed"] = max((s.completed for s in runs[mode].samples), default=0)
        # As many as batch_completed when every request was answered at its first attempt
        # (what counting the drain by the simulator's answers takes: ``draining``).
        answered = (s.batch_answered or 0 for s in runs[mode].samples)
        figures["batch_answered_at_model"] = max(answered, default=0)
        ended = runs[mode].batch_ended
        figures["batch_seconds"] = None if ended is None else round(ended, 1)
        figures["reports"] = runs[mode].reports
        sampler = runs[mode].rate_sampler
        figures["scheduling_calls"] = (
            None if sampler is None else rates(sampler.looks, cycles.phase_at, window)
        )
        flex = runs[mode].flex
        if flex is not None:
            figures["flex"] = flex.figures()
        out[mode] = figures
    return out


def chart(runs: dict[str, Run], cycles: Cycles, path: Path) -> None:
    """The batch's progress over time in each run, the bursts shaded."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(10, 5))
    for cycle in range(cycles.cycles):
        start = cycle * (cycles.burst_seconds + cycles.quiet_seconds)
        axis.axvspan(start, start + cycles.burst_seconds, color="orange", alpha=0.15, lw=0)
    for mode, style in (("yield", "-"), ("no_yield", "--"), ("flex", ":")):
        if mode not in runs:
            continue
        samples = runs[mode].samples
        axis.step(
            [s.offset for s in samples], [s.completed for s in samples], style, where="post", label=mode
        )
    axis.set_xlabel("seconds (shaded: interactive bursts)")
    axis.set_ylabel("batch requests done")
    axis.set_title("Batch progress beside interactive traffic")
    axis.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)


@contextmanager
def yield_stack(
    capacity: int,
    workers: int,
    environments: int = MIN_ENVIRONMENTS,
    *,
    record_calls: bool = False,
    refresh_seconds: float = REFRESH_SECONDS,
) -> Iterator[LocalStack]:
    env = {
        WORKER_ENVIRONMENTS_ENV: str(environments),
        "BATCH_MODEL_CONCURRENCY": str(capacity),
        "BATCHGW_SIM_CAPACITY": str(capacity),
        "BATCH_SLOT_WAIT_SECONDS": "0.5",
        "BATCH_MAX_ACTIVE_PER_USER": "100",
        "BATCHGW_RUNTIME_REFRESH_SECONDS": f"{refresh_seconds:g}",
        "BATCH_API_RATE_PER_KEY": "0",  # the interactive callers' rate is the load, not a limit
    }
    log_dir = Path(tempfile.mkdtemp(prefix="batchgw-yield-"))
    if record_calls:  # what each process's calls touched, counted (CPU in every process)
        env[CALLS_DIR_ENV] = str(log_dir / CALLS_SUBDIR)
    with LocalStack(
        api_port=0, sim_port=0, moto_port=0, env_overrides=env, workers=workers, log_dir=log_dir
    ) as stack:
        yield stack


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    defaults = Cycles()
    for name in ("burst_rps", "burst_seconds", "quiet_rps", "quiet_seconds"):
        parser.add_argument(f"--{name.replace('_', '-')}", type=float, default=getattr(defaults, name))
    parser.add_argument("--cycles", type=int, default=defaults.cycles)
    parser.add_argument("--batch", type=int, default=3000)
    parser.add_argument("--capacity", type=int, default=16)
    parser.add_argument("--latency-ms", type=int, default=500)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument(
        "--environments",
        type=int,
        default=max(MIN_ENVIRONMENTS, worker_environments(os.environ)),
        help=f"the worker's execution environments (at least {MIN_ENVIRONMENTS})",
    )
    parser.add_argument("--via", choices=VIA, default="gateway", help="how interactive requests are sent")
    parser.add_argument("--warm-up-seconds", type=float, default=WARM_UP_SECONDS, help="the unmeasured burst")
    parser.add_argument(
        "--refresh-seconds",
        type=float,
        default=REFRESH_SECONDS,
        help="the stack's BATCHGW_RUNTIME_REFRESH_SECONDS: a run starts one second after that",
    )
    parser.add_argument(
        "--scheduling-calls",
        action="store_true",
        help="count scheduling's reads and writes per second (every process records its calls:"
        " CPU the headline figures are measured without)",
    )
    parser.add_argument(
        "--flex-rps",
        type=float,
        default=0.5,
        help="flex requests a second in the quiet phases of a fourth run (0: no flex run)",
    )
    parser.add_argument(
        "--runs",
        default="",
        help="only these runs, comma-separated (alone and one more at least), to diagnose",
    )
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    if args.environments < MIN_ENVIRONMENTS:
        parser.error(f"--environments must be at least {MIN_ENVIRONMENTS}")
    modes = ("alone", "yield", "no_yield", *(("flex",) if args.flex_rps > 0 else ()))
    if args.runs:
        asked = args.runs.split(",")
        if "alone" not in asked or len(asked) < 2 or not set(asked) <= set(modes):
            parser.error(f"--runs: alone and at least one of {', '.join(modes[1:])}")
        modes = tuple(m for m in modes if m in asked)
    cycles = Cycles(args.burst_rps, args.burst_seconds, args.quiet_rps, args.quiet_seconds, args.cycles)
    shape = {
        **asdict(cycles),
        "batch": args.batch,
        "capacity": args.capacity,
        "latency_ms": args.latency_ms,
        "via": args.via,
    }
    print(f"yield bench: {json.dumps(shape)}", flush=True)
    runs: dict[str, Run] = {}
    record, refresh = args.scheduling_calls, args.refresh_seconds
    with yield_stack(
        args.capacity, args.workers, args.environments, record_calls=record, refresh_seconds=refresh
    ) as stack:
        environments = stack.worker_environments
        warm_up(stack, cycles, args)
        for mode in modes:
            print(f"  {mode}: {cycles.seconds:.0f} s of interactive load...", flush=True)
            runs[mode] = one_run(stack, mode, cycles, args)
        assert stack.log_dir is not None  # yield_stack gives it one
        read_answer_to_next_call(runs.values(), stack.log_dir)
    figures = summary(runs, cycles, args.capacity)
    figures["shape"] = shape
    figures["worker_environments"] = environments
    chart_path = args.out.with_name("yield.png")
    chart(runs, cycles, chart_path)
    figures["chart"] = str(chart_path)
    samples_path = args.out.with_name("yield_samples.json")
    samples_path.write_text(
        json.dumps({mode: [asdict(s) for s in run.samples] for mode, run in runs.items()}) + "\n"
    )
    figures["samples"] = str(samples_path)
    print(json.dumps(figures, indent=2))
    yielding = figures.get("yield", {})  # absent in a diagnosis without it (--runs)
    ratio = yielding.get("p99_ratio_at_model")
    end_to_end = yielding.get("p99_ratio")
    utilization = yielding.get("idle_utilization")
    print(f"interactive p99 at the model, batch yielding / alone: {ratio} (goal <= {P99_RATIO_GOAL})")
    print(f"interactive p99 end to end ({args.via}), batch yielding / alone: {end_to_end}")
    print(f"batch's use of idle capacity in quiet phases: {utilization} (goal >= {IDLE_UTILIZATION_GOAL})")
    flex = figures.get("flex")
    if flex is not None:
        line = flex["flex"]
        print(
            f"flex in the quiet phases: started after {line['flex_start_p50_ms']} ms at p50 where a batch "
            f"sent with it started after {line['batch_start_p50_ms']} ms: {line['flex_start_ratio']} "
            f"(goal <= {FLEX_START_RATIO_GOAL}; {line['flex_answered']} of {line['sent']} answered, "
            f"{line['flex_refused']} refused); interactive p99 at the model with flex running / alone: "
            f"{flex['p99_ratio_at_model']} (goal <= {P99_RATIO_GOAL})"
        )
    if yielding.get("scheduling_calls"):
        print_rates(yielding["scheduling_calls"], environments)
    result = json.loads(args.out.read_text()) if args.out.exists() else {}
    result.update(
        {
            "yield_interactive_p99_ratio": ratio,
            "yield_interactive_p99_ratio_end_to_end": end_to_end,
            "yield_idle_utilization": utilization,
            "yield_flex_start_ratio": None if flex is None else flex["flex"]["flex_start_ratio"],
            "yield_flex_interactive_p99_ratio": None if flex is None else flex["p99_ratio_at_model"],
            "yield": figures,
        }
    )
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"written to {args.out} and {chart_path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
