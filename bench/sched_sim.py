"""``make bench-sched`` (``python -m bench.sched_sim``): one scheduler across every batch, by
simulation, at a scale no local stack reaches (issue 56).

A seeded discrete-event simulation (``heapq``) drives the pure rules of ``domain.shares`` (and,
for the baseline, ``domain.fairness``): ``--tenants`` (1,000, Zipf-sized: tenant i sends in
proportion to 1/i^1.1, weight 1, a few 2 or 0.5), ``--batches`` (10,000: 10 to 50,000 requests,
log-uniform; priority 0 mostly, some 1, 2 or -1; a quarter with a ``complete_by``, half tight,
half loose) arriving over ``--days`` (7) busier by day, ``--models`` (20, each with its mean
request length, 1 to 30 s log-uniform, exponential, and a cap set so its batch work fills 55 to
85 % of what interactive traffic leaves it). Interactive traffic takes each model's slots first,
diurnal, a new level every 5 minutes: the batch slots are the cap less it. A batch runs on its
tenant's favourite model mostly.

A decision is made on a model whenever something changes there: a batch arrives, a slot frees
(a batch's last requests ending, or a batch giving a slot back), interactive traffic moves. The
policy under test says which batches take the free slots and which give a slot back at their
next request; a running request is never interrupted. Requests are exponential, so a batch
that keeps its slots from one request to the next needs no event per request: its completions
are a Poisson process, and the simulation draws when its last waiting request starts (a Gamma
draw) and, when it must, how many ended by a given time (a Binomial one). Three policies:

- ``shares``: ``shares.allocate`` (tenants max-min fair by weight; priority, deadline, creation
  within a tenant), ``shares.giving_back`` at the next request; a create whose ``complete_by``
  ``shares.promise`` says cannot be met is refused (counted apart: not a batch);
- ``fifo``: the oldest batch first, across every tenant (the same give-back rule on that order);
- ``even``: today's per-batch even share (``fairness.gives_way``: the fewest-held batch takes a
  free slot; a batch over ``fairness.even_part`` gives way while a batch below it waits).

The baselines run the same batches less those ``shares`` refused, with the same deadlines.

Figures per policy:

- **deadlines met**: of the accepted batches with a ``complete_by``, the share that ended by it;
- **Jain's fairness index** across tenants with work waiting: at each decision on a model with two
  tenants or more holding or waiting for its slots, each tenant's slots held divided by its
  weighted max-min fair share (``shares.fair_shares`` of the batch slots over the tenants'
  demands: requests waiting plus running), Jain's index (sum x)^2 / (n sum x^2) over those
  ratios; averaged over time (each value weighs the time until the model's next decision),
  across models;
- **idle capacity used**: batch slot-seconds running (up to the batch slots) over the
  slot-seconds interactive traffic left idle that batch work could use (the batch slots, or the
  batch work's demand when less): a policy that keeps a slot back while work waits loses here;
- **CPU per decision**: ``time.process_time`` around the policy's calls, over the decisions
  (``shares`` also reports its promises, per create with a deadline).

``--quick`` runs a tiny size in seconds. Writes ``bench/last.json``'s ``sched_*`` keys (other
keys kept) and ``bench/sched.png``.
"""

from __future__ import annotations

import argparse
import heapq
import itertools
import json
import math
import random
import time
from collections import defaultdict, deque
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from batchgw.domain import fairness, shares
from batchgw.domain.shares import Claim

DAY = 86_400.0
INTERACTIVE_STEP_SECONDS = 300.0
DEADLINES_GOAL = 0.99
FAIRNESS_GOAL = 0.95
DEFAULT_SEED = 56
DEFAULT_OUT = Path(__file__).resolve().parent / "last.json"
POLICIES = ("shares", "fifo", "even")


@dataclass(frozen=True)
class Scale:
    tenants: int
    batches: int
    models: int
    days: float
    min_size: int
    max_size: int


FULL = Scale(tenants=1000, batches=10_000, models=20, days=7, min_size=10, max_size=50_000)
QUICK = Scale(tenants=30, batches=150, models=3, days=1, min_size=10, max_size=3_000)


# --- the workload ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Model:
    cap: int
    request_seconds: float
    interactive_peak: float  # of the cap, at the day's busiest
    phase: float  # seconds: when in the day its traffic peaks


@dataclass(frozen=True)
class Spec:
    batch_id: str
    tenant: str
    weight: float
    model: int
    size: int
    created_at: float
    priority: int
    complete_by: float | None


@dataclass(frozen=True)
class Workload:
    models: list[Model]
    batches: list[Spec]  # by created_at
    seed: int


def _diurnal(t: float, phase: float) -> float:
    """0 at the day's quietest, 1 at its busiest."""
    return 0.5 - 0.5 * math.cos(2 * math.pi * (t - phase) / DAY)


def make_workload(scale: Scale, seed: int) -> Workload:
    rng = random.Random(seed)
    horizon = scale.days * DAY
    tenant_weights = [rng.choices((1.0, 2.0, 0.5), (90, 5, 5))[0] for _ in range(scale.tenants)]
    popularity = list(itertools.accumulate(1 / (i + 1) ** 1.1 for i in range(scale.tenants)))
    model_popularity = list(itertools.accumulate(1 / (j + 1) ** 0.8 for j in range(scale.models)))
    favourite = [
        rng.choices(range(scale.models), cum_weights=model_popularity)[0] for _ in range(scale.tenants)
    ]
    request_seconds = [math.exp(rng.uniform(math.log(1), math.log(30))) for _ in range(scale.models)]
    peaks = [rng.uniform(0.3, 0.7) for _ in range(scale.models)]
    phases = [rng.uniform(10, 16) * 3600 for _ in range(scale.models)]
    raw = []
    for _ in range(scale.batches):
        tenant = rng.choices(range(scale.tenants), cum_weights=popularity)[0]
        if rng.random() < 0.7:
            model = favourite[tenant]
        else:
            model = rng.choices(range(scale.models), cum_weights=model_popularity)[0]
        size = round(math.exp(rng.uniform(math.log(scale.min_size), math.log(scale.max_size))))
        while True:  # arrivals: busier by day (1 to 0.3 of the peak rate)
            created_at = rng.uniform(0, horizon)
            if rng.random() < 0.3 + 0.7 * _diurnal(created_at, 13 * 3600):
                break
        priority = rng.choices((0, 1, 2, -1), (80, 10, 5, 5))[0]
        raw.append((tenant, model, size, created_at, priority, rng.random(), rng.random()))
    # Each model's cap: its batch work fills 55 to 85 % of what interactive traffic leaves it.
    work = [0.0] * scale.models
    for _, model, size, *_rest in raw:
        work[model] += size * request_seconds[model]
    models = []
    for index in range(scale.models):
        load = rng.uniform(0.55, 0.85)
        left = 1 - peaks[index] / 2  # interactive traffic takes half its peak on average
        cap = max(8, math.ceil(work[index] / (horizon * left * load)))
        models.append(Model(cap, request_seconds[index], peaks[index], phases[index]))
    batches = []
    for number, (tenant, model, size, created_at, priority, deadline_draw, tightness) in enumerate(raw):
        complete_by = None
        if deadline_draw < 0.25:
            spec = models[model]
            alone = size * spec.request_seconds / (spec.cap * (1 - spec.interactive_peak / 2))
            if deadline_draw < 0.125:  # tight: 2 to 6 times its time alone on the model, 10 min more
                complete_by = created_at + alone * (2 + 4 * tightness) + 600
            else:  # loose: 6 hours to 2 days
                complete_by = created_at + 6 * 3600 + tightness * 42 * 3600
        batches.append(
            Spec(
                f"b{number:05d}",
                f"t{tenant:04d}",
                tenant_weights[tenant],
                model,
                size,
                created_at,
                priority,
                complete_by,
            )
        )
    batches.sort(key=lambda spec: (spec.created_at, spec.batch_id))
    return Workload(models, batches, seed)


# --- the state -------------------------------------------------------------------------------------

IDLE, STEADY, GIVE, DRAIN = "idle", "steady", "give", "drain"


class Live:
    """A batch on its model: requests running (``held``, one slot each) and waiting.

    ``steady``: its completions are replaced from its waiting requests; ``due`` is when its
    last waiting request starts (``synced`` the time ``waiting`` was last counted). ``give``: it
    gives a slot back at its next completion (``due``). ``drain``: nothing waits; each
    completion (``due``) frees a slot. ``idle``: it holds none.
    """

    __slots__ = ("claim_base", "due", "held", "mode", "spec", "synced", "version", "waiting")

    def __init__(self, spec: Spec) -> None:
        self.spec = spec
        self.held = 0
        self.waiting = spec.size
        self.mode = IDLE
        self.due = math.inf
        self.synced = spec.created_at
        self.version = 0
        self.claim_base = Claim(
            spec.batch_id, spec.tenant, 0, spec.created_at, spec.priority, spec.complete_by, spec.weight
        )

    @property
    def demand(self) -> int:
        return self.held + self.waiting


@dataclass
class ModelState:
    spec: Model
    rng: random.Random
    interactive: int = 0
    live: dict[str, Live] = field(default_factory=dict)
    recent_slots: deque[int] = field(
        default_factory=lambda: deque(maxlen=round(DAY / INTERACTIVE_STEP_SECONDS))
    )
    # The figures between this model's decisions: since ``last_at``, these values held.
    last_at: float = 0.0
    last_jain: float | None = None
    last_used: int = 0
    last_usable: int = 0

    @property
    def slots(self) -> int:
        return max(0, self.spec.cap - self.interactive)


# --- the policies ----------------------------------------------------------------------------------

# A policy answers, for one model at one moment: the slots each batch takes now, and the
# batches that give a slot back at their next request.
Decision = tuple[dict[str, int], frozenset[str]]
Policy = Callable[[int, list[Live], shares.Pace], Decision]


def _fill_to(slots: int, live: list[Live], allocation: dict[str, int], order: list[Live]) -> Decision:
    """Free slots to the batches below their allocation, then (none idle) to any with work."""
    held = {batch.spec.batch_id: batch.held for batch in live}
    free = slots - sum(held.values())
    grants: dict[str, int] = {}
    if free > 0:
        for batch in order:
            want = min(allocation[batch.spec.batch_id] - batch.held, batch.waiting, free)
            if want > 0:
                grants[batch.spec.batch_id] = want
                free -= want
        for batch in order:
            if free <= 0:
                break
            more = min(batch.waiting - grants.get(batch.spec.batch_id, 0), free)
            if more > 0:
                grants[batch.spec.batch_id] = grants.get(batch.spec.batch_id, 0) + more
                free -= more
    for batch_id, count in grants.items():
        held[batch_id] += count
    return grants, shares.giving_back(slots, held, allocation)


def shares_policy(slots: int, live: list[Live], pace: shares.Pace) -> Decision:
    claims = [_claim(batch) for batch in live]
    allocation = shares.allocate(slots, claims, pace)
    # The least served first: a slot free goes where the allocation lacks most, by share.
    order = sorted(
        live,
        key=lambda b: (
            b.held / allocation[b.spec.batch_id] if allocation[b.spec.batch_id] else math.inf,
            b.spec.batch_id,
        ),
    )
    return _fill_to(slots, live, allocation, order)


def fifo_policy(slots: int, live: list[Live], pace: shares.Pace) -> Decision:
    order = sorted(live, key=lambda b: (b.spec.created_at, b.spec.batch_id))
    allocation: dict[str, int] = {}
    left = slots
    for batch in order:
        give = min(batch.demand, left)
        allocation[batch.spec.batch_id] = give
        left -= give
    return _fill_to(slots, live, allocation, order)


def even_policy(slots: int, live: list[Live], pace: shares.Pace) -> Decision:
    held = {batch.spec.batch_id: batch.held for batch in live if batch.held}
    free = slots - sum(held.values())
    grants: dict[str, int] = {}
    wanting = [
        (batch.held, batch.spec.created_at, batch.spec.batch_id, batch.waiting)
        for batch in live
        if batch.waiting
    ]
    heapq.heapify(wanting)
    while free > 0 and wanting:  # the fewest-held batch takes the next free slot
        count, created_at, batch_id, waiting = heapq.heappop(wanting)
        grants[batch_id] = grants.get(batch_id, 0) + 1
        held[batch_id] = held.get(batch_id, 0) + 1
        free -= 1
        if waiting > 1:
            heapq.heappush(wanting, (count + 1, created_at, batch_id, waiting - 1))
    waiting_ids = [
        batch.spec.batch_id for batch in live if batch.waiting - grants.get(batch.spec.batch_id, 0) > 0
    ]
    over: set[str] = set()
    if free <= 0 and waiting_ids:
        part = fairness.even_part(slots, len(set(held) | set(waiting_ids)))
        for batch_id, count in held.items():
            if count > part and fairness.gives_way(batch_id, slots, held, waiting_ids, holding=True):
                over.add(batch_id)
    return grants, frozenset(over)


POLICY: dict[str, Policy] = {"shares": shares_policy, "fifo": fifo_policy, "even": even_policy}


def _claim(batch: Live) -> Claim:
    base = batch.claim_base
    return Claim(
        base.batch_id,
        base.tenant,
        batch.demand,
        base.created_at,
        base.priority,
        base.complete_by,
        base.weight,
    )


# --- the simulation --------------------------------------------------------------------------------


@dataclass
class Figures:
    policy: str
    batches: int = 0
    refused: int = 0
    deadlines: int = 0
    deadlines_met: int = 0
    decisions: int = 0
    policy_cpu_seconds: float = 0.0
    promises: int = 0
    promise_cpu_seconds: float = 0.0
    jain_time: float = 0.0
    jain_weighted: float = 0.0
    used_slot_seconds: float = 0.0
    usable_slot_seconds: float = 0.0
    ended_at: float = 0.0
    late_seconds: list[float] = field(default_factory=list)
    waits: list[float] = field(default_factory=list)  # created to done, over the size
    refused_ids: set[str] = field(default_factory=set)

    def summary(self) -> dict[str, Any]:
        late = sorted(self.late_seconds)
        return {
            "batches": self.batches,
            "refused": self.refused,
            "deadlines": self.deadlines,
            "deadlines_met": round(self.deadlines_met / self.deadlines, 4) if self.deadlines else None,
            "fairness_jain": round(self.jain_weighted / self.jain_time, 4) if self.jain_time else None,
            "idle_utilization": round(self.used_slot_seconds / self.usable_slot_seconds, 4)
            if self.usable_slot_seconds
            else None,
            "decisions": self.decisions,
            "cpu_per_decision_us": round(1e6 * self.policy_cpu_seconds / self.decisions, 1)
            if self.decisions
            else None,
            "promises": self.promises,
            "cpu_per_promise_us": round(1e6 * self.promise_cpu_seconds / self.promises, 1)
            if self.promises
            else None,
            "late_p50_hours": round(late[len(late) // 2] / 3600, 2) if late else None,
            "ended_at_days": round(self.ended_at / DAY, 2),
        }


def jain(values: Iterable[float]) -> float:
    xs = list(values)
    square = sum(x * x for x in xs)
    return (sum(xs) ** 2) / (len(xs) * square) if square > 0 else 1.0


class Simulation:
    def __init__(self, workload: Workload, policy: str, refused: set[str] | None = None) -> None:
        self.workload = workload
        self.policy_name = policy
        self.policy = POLICY[policy]
        self.refused = refused  # the baselines: the batches ``shares`` refused
        self.figures = Figures(policy)
        self.rng = random.Random(workload.seed + 1)
        self.np_rng = np.random.default_rng(workload.seed + 2)
        self.models = [
            ModelState(spec, random.Random(f"{workload.seed}/{index}"))
            for index, spec in enumerate(workload.models)
        ]
        self.heap: list[tuple[float, int, int, Any]] = []
        self.counter = itertools.count()
        self.unfinished = 0

    # events: 0 an arrival, 1 interactive traffic moves, 2 a batch's due moment
    def push(self, at: float, kind: int, what: Any) -> None:
        heapq.heappush(self.heap, (at, next(self.counter), kind, what))

    def run(self) -> Figures:
        for spec in self.workload.batches:
            self.push(spec.created_at, 0, spec)
        self.unfinished = len(self.workload.batches)
        for index in range(len(self.models)):
            self.push(0.0, 1, index)
        while self.heap and self.unfinished:
            at, _, kind, what = heapq.heappop(self.heap)
            if kind == 0:
                self.arrive(at, what)
            elif kind == 1:
                self.traffic(at, what)
            else:
                batch, version = what
                if version == batch.version:
                    self.due(at, batch)
        self.figures.ended_at = max(self.figures.ended_at, 0.0)
        return self.figures

    def arrive(self, now: float, spec: Spec) -> None:
        model = self.models[spec.model]
        if self.refused is not None and spec.batch_id in self.refused:
            self.unfinished -= 1
            return
        if self.refused is None and spec.complete_by is not None:
            started = time.process_time()
            slots = (
                round(sum(model.recent_slots) / len(model.recent_slots))
                if model.recent_slots
                else model.slots
            )
            made = shares.promise(
                now,
                Claim(
                    spec.batch_id, spec.tenant, spec.size, now, spec.priority, spec.complete_by, spec.weight
                ),
                [_claim(batch) for batch in model.live.values()],
                slots=slots,
                request_seconds=model.spec.request_seconds,
            )
            self.figures.promise_cpu_seconds += time.process_time() - started
            self.figures.promises += 1
            if not made.feasible:
                self.figures.refused += 1
                self.figures.refused_ids.add(spec.batch_id)
                self.unfinished -= 1
                return
        self.figures.batches += 1
        model.live[spec.batch_id] = Live(spec)
        self.decide(now, spec.model)

    def traffic(self, now: float, index: int) -> None:
        model = self.models[index]
        spec = model.spec
        level = (
            spec.cap * spec.interactive_peak * _diurnal(now, spec.phase) * model.rng.lognormvariate(0, 0.15)
        )
        model.interactive = min(spec.cap, round(level))
        model.recent_slots.append(model.slots)
        self.push(now + INTERACTIVE_STEP_SECONDS, 1, index)
        self.decide(now, index)

    def due(self, now: float, batch: Live) -> None:
        if batch.mode == STEADY:  # its last waiting request starts now
            batch.waiting = 0
            batch.synced = now
        else:  # a request ended and its slot is let go (give, drain)
            batch.held -= 1
            if batch.held == 0 and batch.waiting == 0:
                self.end(now, batch)
        self.decide(now, batch.spec.model, changed=batch)

    def end(self, now: float, batch: Live) -> None:
        spec = batch.spec
        del self.models[spec.model].live[spec.batch_id]
        batch.version += 1
        batch.mode = IDLE
        self.unfinished -= 1
        self.figures.ended_at = now
        self.figures.waits.append(now - spec.created_at)
        if spec.complete_by is not None:
            self.figures.deadlines += 1
            if now <= spec.complete_by:
                self.figures.deadlines_met += 1
            else:
                self.figures.late_seconds.append(now - spec.complete_by)

    def sync(self, now: float, batch: Live) -> None:
        """Count the requests a steady batch started since it was last counted: given when its
        last one starts (``due``), the starts before are uniform over the time to it."""
        if batch.mode == STEADY and batch.waiting > 1 and now > batch.synced:
            share = (now - batch.synced) / (batch.due - batch.synced)
            batch.waiting -= int(self.np_rng.binomial(batch.waiting - 1, min(1.0, share)))
        batch.synced = now

    def decide(self, now: float, index: int, changed: Live | None = None) -> None:
        model = self.models[index]
        self.account(now, model)
        live = list(model.live.values())
        for batch in live:
            self.sync(now, batch)
        if live:
            started = time.process_time()
            grants, over = self.policy(model.slots, live, shares.Pace(now, model.spec.request_seconds))
            self.figures.policy_cpu_seconds += time.process_time() - started
            self.figures.decisions += 1
        else:
            grants, over = {}, frozenset()
        seconds = model.spec.request_seconds
        for batch in live:
            take = grants.get(batch.spec.batch_id, 0)
            batch.held += take
            batch.waiting -= take
            if batch.held == 0:
                mode = IDLE
            elif batch.waiting == 0:
                mode = DRAIN
            elif batch.spec.batch_id in over:
                mode = GIVE
            else:
                mode = STEADY
            if mode == batch.mode and not take and batch is not changed:
                continue  # its next moment stands (a Poisson process: nothing to redraw)
            batch.mode = mode
            batch.version += 1
            if mode == IDLE:
                batch.due = math.inf
                continue
            if mode == STEADY:
                batch.due = now + self.rng.gammavariate(batch.waiting, seconds / batch.held)
            else:
                batch.due = now + self.rng.expovariate(batch.held / seconds)
            self.push(batch.due, 2, (batch, batch.version))
        self.observe(now, model)

    def account(self, now: float, model: ModelState) -> None:
        elapsed = now - model.last_at
        if elapsed > 0:
            if model.last_jain is not None:
                self.figures.jain_time += elapsed
                self.figures.jain_weighted += elapsed * model.last_jain
            self.figures.used_slot_seconds += elapsed * model.last_used
            self.figures.usable_slot_seconds += elapsed * model.last_usable
        model.last_at = now

    def observe(self, now: float, model: ModelState) -> None:
        slots = model.slots
        demands: dict[str, int] = defaultdict(int)
        held: dict[str, int] = defaultdict(int)
        weights: dict[str, float] = {}
        for batch in model.live.values():
            demands[batch.spec.tenant] += batch.demand
            held[batch.spec.tenant] += batch.held
            weights[batch.spec.tenant] = batch.spec.weight
        total_demand = sum(demands.values())
        model.last_used = min(sum(held.values()), slots)
        model.last_usable = min(slots, total_demand)
        model.last_jain = None
        if len(demands) >= 2 and slots > 0:
            fair = shares.fair_shares(slots, demands, weights)
            model.last_jain = jain(held[tenant] / fair[tenant] for tenant in demands)


# --- the run ---------------------------------------------------------------------------------------


def simulate(workload: Workload, policies: Iterable[str] = POLICIES) -> dict[str, Figures]:
    ran: dict[str, Figures] = {}
    for policy in policies:
        started = time.monotonic()
        refused = None if policy == "shares" else ran["shares"].refused_ids
        ran[policy] = Simulation(workload, policy, refused).run()
        print(
            f"  {policy}: {time.monotonic() - started:.1f} s, {json.dumps(ran[policy].summary())}", flush=True
        )
    return ran


def chart(figures: dict[str, dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [
        ("deadlines_met", "deadlines met", DEADLINES_GOAL),
        ("fairness_jain", "Jain across tenants", FAIRNESS_GOAL),
        ("idle_utilization", "idle capacity used", None),
    ]
    fig, axes = plt.subplots(1, 3, figsize=(11, 3.6))
    for ax, (key, title, goal) in zip(axes, names, strict=True):
        values = [figures[policy][key] or 0.0 for policy in POLICIES]
        bars = ax.bar(POLICIES, values, color=["#2a7", "#999", "#c84"])
        ax.bar_label(bars, fmt="%.3f")
        if goal is not None:
            ax.axhline(goal, color="k", linestyle="--", linewidth=0.8)
        ax.set_ylim(0, 1.1)
        ax.set_title(title)
    fig.suptitle("one scheduler across every batch: shares against FIFO and the per-batch even share")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a tiny run, in seconds")
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument(
        "--shares-only", action="store_true", help="run the shares policy alone, print, write nothing"
    )
    args = parser.parse_args(argv)
    scale = QUICK if args.quick else FULL
    workload = make_workload(scale, args.seed)
    requests = sum(spec.size for spec in workload.batches)
    print(f"sched sim: {json.dumps(asdict(scale))}, seed {args.seed}, {requests:,} requests", flush=True)
    ran = simulate(workload, ("shares",) if args.shares_only else POLICIES)
    if args.shares_only:
        return 0
    figures = {policy: ran[policy].summary() for policy in POLICIES}
    chart_path = args.out.with_name("sched.png")
    chart(figures, chart_path)
    result = json.loads(args.out.read_text()) if args.out.exists() else {}
    suffix = {"shares": "", "fifo": "_fifo", "even": "_even"}
    for policy in POLICIES:
        result[f"sched_deadlines_met{suffix[policy]}"] = figures[policy]["deadlines_met"]
        result[f"sched_fairness_jain{suffix[policy]}"] = figures[policy]["fairness_jain"]
        result[f"sched_idle_utilization{suffix[policy]}"] = figures[policy]["idle_utilization"]
    result["sched_cpu_per_decision_us"] = figures["shares"]["cpu_per_decision_us"]
    result["sched"] = {
        "scale": asdict(scale),
        "seed": args.seed,
        "requests": requests,
        "models": [asdict(model) for model in workload.models],
        "policies": figures,
        "chart": str(chart_path),
    }
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    met, fair = figures["shares"]["deadlines_met"], figures["shares"]["fairness_jain"]
    print(f"deadlines met: {met} (goal >= {DEADLINES_GOAL})")
    print(f"Jain's index across tenants: {fair} (goal >= {FAIRNESS_GOAL})")
    print(f"written to {args.out} and {chart_path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
