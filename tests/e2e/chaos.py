"""A seeded chaos run on a local stack: many concurrent batches while worker processes
crash at random moments, the workflow's tasks die at random AWS calls (``local.crashes``:
before a call is sent, or after it was made and its answer lost), the simulator answers
random retryable errors, timeouts and ``model_queued``, chain messages are delivered
again, random batches are cancelled, interactive load reporters (``--reporters``) report
load on the batches' model and die mid-run, and (``--throttle-rate``) DynamoDB refuses random
calls for throughput (``local.throttling``), as a provisioned table past its capacity does.

Afterwards, for every batch: a final status; ``request_counts`` equal to its terminal
requests; every request exactly one terminal outcome. Overall: the upstream requests the
simulator saw lie between the calls whose outcome was recorded and those plus the
attempts lost with their workers; the known cost charged to each user and key equal, to
the nano-dollar, to what the attempts recorded in the request log (the unknown cost charged
at the attempts' most printed beside it); no live model slot; no message left on the work
queue; nothing in its dead-letter queue; no dead reporter's load still counting.

It also measures how fast batches end, with goals the run fails on (``LATENCY_GOAL_SECONDS``):

- **cancel to cancelled**, for every batch a cancel ended: from the moment the cancel's
  answer came back to the batch's end. A batch whose
  cancel raced a deliberate worker kill is measured apart, from the later of its cancel and
  the kill, its goal the lease plus the same margin: a kill came from one lease before its
  cancel until it ended, and one of its requests lost an attempt with its worker (``lost``
  as stored), so a request may have been left leased by a dead worker, which only the
  reconciler ends once the lease runs out (its requests may have run on until the kill:
  the time from the cancel is printed beside it);
- **last request's end to final status**, for every batch: from the latest ``ended_at``
  of its requests to the batch's end.

Both are measured less the time the batch's workflow lost to deliberate task deaths in
that span (each printed beside it): a workflow task that died is tried again after its
Retry's interval (1, 2, 4 s...: the workflow's design, as on AWS), so from when the dead
attempt was scheduled to when its retry was is the fault's own cost, read from the
execution's history, not the gateway's slowness.

Both read the stack's tables, as the checks below do (the API shows neither when each
request ended nor its batch's end to the millisecond): a batch's end is its record's
``ended_at``, the clock reading of the finalize that gave it its final status, taken just
before its result files are written (for these batches, a fraction of a second before the
status reads final). An observer thread polls every unfinished batch in turn, from the
first create on, to know when all have ended; when it first saw each final is reported
too, as an upper bound (its round, also reported, is slow on a loaded machine, whose API
answers slowly). The whole run has one time
budget (``--timeout``, the drain included): whatever is not done by then, or whatever the
harness itself hit (an HTTP error, a timeout), is a violation in the report, which is always
printed.

This module drives the run (the workload, the disturbances, the observer); the checks and
the measures once every batch has ended are in ``chaos_checks.py``, what a run is asked and
what it found, with the latencies' arithmetic, in ``chaos_report.py``.

``make chaos`` runs it long and prints the totals (``python -m tests.e2e.chaos --help``);
``tests/e2e/test_chaos.py`` runs a short form in ``make test``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path
from typing import Any

import boto3
import httpx
from batchgw.config import resources
from batchgw.domain.chains import ChainMessage

from local import crashes, throttling
from local import env as local_env
from local.run import LocalStack
from tests.e2e.chaos_checks import Checks
from tests.e2e.chaos_report import ChaosConfig, ChaosReport
from tests.support import wait_for

CHAOS_ENV = {
    # The harness is one client (alice's key) polling every unfinished batch and response in
    # turn: at the api's own pace it passes the per-key request rate, which is not under test.
    "BATCH_API_RATE_PER_KEY": "1000",
    "BATCH_MODEL_CONCURRENCY": "6",
    "BATCH_LEASE_SECONDS": "3",
    "BATCH_PREPARE_LEASE_SECONDS": "4",
    "BATCH_UPSTREAM_TIMEOUT_SECONDS": "2",
    "BATCH_RETRY_BASE_SECONDS": "0.2",
    "BATCH_RETRY_MAX_SECONDS": "1",
    "BATCH_MODEL_PAUSE_AFTER_FAILURES": "25",
    "BATCH_MODEL_PAUSE_SECONDS": "1",
    "BATCH_MODEL_QUEUED_PAUSE_MAX_SECONDS": "1",
    "BATCH_MAX_ACTIVE_PER_USER": "1000",
    # A provider-run batch learns of a cancel at its next poll: polled every 2 s at most here.
    "BATCH_PROVIDER_POLL_MAX_SECONDS": "2",
}
FINAL = ("completed", "failed", "expired", "cancelled")
SETTLED = ("completed", "failed", "cancelled", "incomplete")  # a background response's ends


def path_of(batch_id: str) -> str:
    """The API path of a batch, or of a background response (``resp_``)."""
    return f"/responses/{batch_id}" if batch_id.startswith("resp_") else f"/batches/{batch_id}"


# What the drain check keeps of the budget at least (a queue drains within a visibility).
DRAIN_SHARE = 0.3
# How long the stack may take to start, apart from the run's budget.
STARTUP_SECONDS = 180.0
# What a request may ask of the simulator, with its weight.
FAULTS = [
    ("", 10),
    ("[[sim status=503 fail=1]]", 3),
    ("[[sim status=429 fail=2]]", 2),
    ("[[sim status=500 fail=1]]", 2),
    ("[[sim queued fail=1 retry_after=1]]", 2),
    ("[[sim status=400]]", 1),
    ("[[sim hang fail=1]]", 1),
]


class Observer:
    """Polls every batch not yet seen final, in turn, from its create on; notes when each
    was first seen final (time.time(), as the stack's processes stamp their records)."""

    def __init__(self, api_url: str) -> None:
        self.api = httpx.Client(
            base_url=api_url, headers={"Authorization": "Bearer sk-local-alice"}, timeout=30
        )
        self.watched: list[str] = []
        self.final: dict[str, dict[str, Any]] = {}  # by batch: the batch as first seen final
        self.final_at: dict[str, float] = {}
        self.rounds: list[float] = []
        self.errors = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="chaos-observer", daemon=True)

    def watch(self, batch_id: str) -> None:
        with self._lock:
            self.watched.append(batch_id)
        if not self._thread.is_alive():
            self._thread.start()

    def unfinished(self) -> list[str]:
        with self._lock:
            return [b for b in self.watched if b not in self.final]

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=40)

    def _run(self) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            polled = self.unfinished()
            for batch_id in polled:
                try:
                    batch = self.api.get(path_of(batch_id)).json()
                except (httpx.HTTPError, ValueError):
                    self.errors += 1  # a loaded stack: asked again next round
                    continue
                if batch.get("status") in (SETTLED if batch.get("object") == "response" else FINAL):
                    with self._lock:
                        self.final[batch_id], self.final_at[batch_id] = batch, time.time()
            if polled:
                self.rounds.append(time.monotonic() - started)
            self._stop.wait(0.05)


class Reporter:
    """A gateway process reporting its interactive load on sim-chat (``PUT
    /admin/interactive-load/{id}``) every half second, until ``die``: then it stops, as a
    killed process does, without removing its report (its ttl makes it vanish)."""

    TTL_SECONDS = 2

    def __init__(self, api_url: str, name: str, seed: int) -> None:
        self.name = name
        self.reports = 0
        self.errors = 0
        self._rng = random.Random(seed)
        self._admin = httpx.Client(
            base_url=api_url.removesuffix("/v1"),
            headers={"Authorization": "Bearer sk-local-admin"},
            timeout=10,
        )
        self._dead = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"chaos-{name}", daemon=True)
        self._thread.start()

    def die(self) -> None:
        self._dead.set()
        self._thread.join(timeout=15)

    def _run(self) -> None:
        while not self._dead.is_set():
            load = {"models": {"sim-chat": self._rng.randint(0, 3)}, "ttl_seconds": self.TTL_SECONDS}
            try:
                self._admin.put(f"/admin/interactive-load/{self.name}", json=load).raise_for_status()
                self.reports += 1
            except httpx.HTTPError:
                self.errors += 1  # a loaded stack: reported again in a moment
            self._dead.wait(0.5)


class Chaos:
    def __init__(self, stack: LocalStack, config: ChaosConfig) -> None:
        self.stack = stack
        self.config = config
        self.rng = random.Random(config.seed)
        self.responses_rng = random.Random(config.seed + 1)  # the background responses' draws
        self.report = ChaosReport()
        self.api = httpx.Client(
            base_url=stack.api_url, headers={"Authorization": "Bearer sk-local-alice"}, timeout=30
        )
        self.sim = httpx.Client(base_url=stack.sim_url, timeout=10)
        session = boto3.session.Session(
            aws_access_key_id="testing", aws_secret_access_key="testing", region_name=local_env.REGION
        )
        self.sqs = session.client("sqs", endpoint_url=stack.env["AWS_ENDPOINT_URL"])  # type: ignore[call-overload]
        self.queue = stack.env[resources.WORK_QUEUE.env_var]
        self.observer = Observer(stack.api_url)
        self.cancelled_at: dict[str, float] = {}  # by batch: when its cancel's answer came
        self.created_at: dict[str, float] = {}  # by batch: when its create's answer came
        self.kills_at: list[float] = []
        self.reporters: list[Reporter] = []
        self.admin = httpx.Client(
            base_url=stack.api_url.removesuffix("/v1"),
            headers={"Authorization": "Bearer sk-local-admin"},
            timeout=30,
        )
        self.revocable: dict[str, str] = {}  # by provider-run batch with a key of its own: the key's id
        self.deadline = math.inf
        self.report.lease_seconds = float(CHAOS_ENV["BATCH_LEASE_SECONDS"])

    # --- the run ------------------------------------------------------------------------------

    def run(self) -> ChaosReport:
        """Run, within the budget (``ChaosConfig.timeout``); the report always comes back:
        what the harness could not do in time, or hit on its way, is a violation in it."""
        started = time.monotonic()
        self.deadline = started + self.config.timeout
        self.report.load = [os.getloadavg()[0]]
        batch_ids: list[str] = []
        try:
            self.sim.post("/_sim/reset").raise_for_status()
            for i in range(self.config.batches):
                batch_ids.append(self._create(i))
                self.observer.watch(batch_ids[-1])
            self.report.batches = len(batch_ids)
            response_ids = [self._create_response(i) for i in range(self.config.responses)]
            for response_id in response_ids:
                self.observer.watch(response_id)
            self.report.responses = len(response_ids)
            self.reporters = [
                Reporter(self.stack.api_url, f"chaos-gateway-{i}", self.config.seed + i)
                for i in range(self.config.reporters)
            ]
            self._disturb(batch_ids, response_ids)
            self._wait_final(batch_ids + response_ids)
            checks = self._checks()
            for batch_id, batch in dict(self.observer.final).items():
                if batch_id not in response_ids:
                    checks.check_batch(batch_id, batch)
            for response_id in response_ids:
                checks.check_response(response_id)
            checks.measure(batch_ids)
            checks.check_upstream(batch_ids + response_ids)
            checks.check_money(batch_ids + response_ids)
            checks.check_drained()
        except Exception as exc:  # the harness's own trouble: reported, not lost
            self.report.violations.append(f"the harness stopped: {type(exc).__name__}: {exc}")
            traceback.print_exc()
        finally:
            for reporter in self.reporters:
                reporter.die()  # (each died already, unless the harness stopped early)
            self.report.reports = sum(r.reports for r in self.reporters)
            self.observer.stop()
            self.report.poll_rounds = list(self.observer.rounds)
            self.report.task_deaths = self._logged(crashes.DIED)
            self.report.throttled = self._logged(throttling.THROTTLED)
            self.report.seconds = time.monotonic() - started
            self.report.load.append(os.getloadavg()[0])
        return self.report

    def _left(self) -> float:
        return max(0.0, self.deadline - time.monotonic())

    def _create(self, number: int) -> str:
        requests = []
        for i in range(self.config.requests):
            fault = self.rng.choices([f for f, _ in FAULTS], weights=[w for _, w in FAULTS])[0]
            self.report.faults += bool(fault)
            latency = self.rng.randint(20, 400)
            text = f"chaos {number}.{i} {fault} [[sim latency_ms={latency}]]"
            requests.append(
                {
                    "custom_id": f"c-{number}-{i}",
                    "body": {"model": "sim-chat", "messages": [{"role": "user", "content": text}]},
                }
            )
        self.report.requests += len(requests)
        on_provider = number < self.config.provider_batches
        self.report.provider_batches += on_provider
        mode = {"execution_mode": "provider"} if on_provider else {}
        key = None
        if on_provider and number < self.config.revocations:
            key = self.admin.post("/admin/users/user-alice/keys", json={"name": f"chaos {number}"})
            key.raise_for_status()
        headers = {"Authorization": f"Bearer {key.json()['key']}"} if key is not None else {}
        # Every batch has a priority; half of them a complete_by, within the window.
        scheduling: dict[str, int] = {"priority": self.rng.randint(-10, 10)}
        if self.rng.random() < 0.5:
            window = self.config.window_seconds or 600
            scheduling["complete_by"] = int(time.time() + window * self.rng.uniform(0.3, 0.7))
            self.report.deadlines += 1
        body = {"requests": requests, **mode, **scheduling}
        resp = self.api.post("/batches", json=body, headers=headers)
        if resp.status_code == 422 and resp.json()["error"]["code"] == "deadline_infeasible":
            self.report.deadlines_refused += 1
            body.pop("complete_by")
            resp = self.api.post("/batches", json=body, headers=headers)
        resp.raise_for_status()
        batch_id = str(resp.json()["id"])
        if key is not None:
            self.revocable[batch_id] = str(key.json()["id"])
        self.created_at[batch_id] = time.time()
        return batch_id

    def _create_response(self, number: int) -> str:
        """A background response of one faulted request, as a batch's requests are."""
        rng = self.responses_rng
        fault = rng.choices([f for f, _ in FAULTS], weights=[w for _, w in FAULTS])[0]
        self.report.faults += bool(fault)
        text = f"chaos response {number} {fault} [[sim latency_ms={rng.randint(20, 400)}]]"
        body = {"model": "sim-chat", "input": text, "background": True, "priority": rng.randint(-10, 10)}
        resp = self.api.post("/responses", json=body)
        resp.raise_for_status()
        response_id = str(resp.json()["id"])
        self.created_at[response_id] = time.time()
        return response_id

    def _disturb(self, batch_ids: list[str], response_ids: list[str]) -> None:
        """Kills, duplicate deliveries and cancels, in a seeded random order and rhythm (the
        cancels and duplicates reach background responses too)."""
        actions = (
            ["kill"] * self.config.kills
            + ["duplicate"] * self.config.duplicates
            + ["cancel"] * self.config.cancels
            + ["reporter dies"] * len(self.reporters)
            + ["reprioritize"] * self.config.reprioritizations
        )
        self.rng.shuffle(actions)
        # A quarter of the responses are cancelled, each at its own place: drawn from their own
        # generator, the batches' disturbances come as they would without responses.
        for _ in range(len(response_ids) // 4):
            actions.insert(self.responses_rng.randrange(len(actions) + 1), "cancel response")
        # The revocations come first, while the provider still runs those batches (its
        # simulated batches end within seconds).
        actions = ["revoke"] * len(self.revocable) + actions
        cancellable, cancellable_responses = list(batch_ids), list(response_ids)
        living = list(self.reporters)
        revocable = list(self.revocable)
        for action in actions:
            time.sleep(self.rng.uniform(0.3, 1.5))
            if action == "revoke":
                batch_id = revocable.pop(self.rng.randrange(len(revocable)))
                self.admin.post(f"/admin/keys/{self.revocable[batch_id]}/revoke").raise_for_status()
            elif action == "reporter dies":
                living.pop(self.rng.randrange(len(living))).die()
                self.report.reporters += 1
            elif action == "kill":
                self.stack.crash(f"worker-{self.rng.randrange(self.config.workers)}")
                self.kills_at.append(time.time())
                self.report.kills += 1
            elif action == "reprioritize":  # one that ended meanwhile answers 409: nothing changes
                batch_id = self.rng.choice(batch_ids)
                change = self.api.patch(f"/batches/{batch_id}", json={"priority": self.rng.randint(-10, 10)})
                if change.status_code != 409:
                    change.raise_for_status()
                    self.report.reprioritized += 1
            elif action == "duplicate":
                batch_id = self.rng.choice(batch_ids)
                chains = int(CHAOS_ENV["BATCH_MODEL_CONCURRENCY"])
                chain = self.rng.randrange(chains)
                if response_ids and self.responses_rng.random() < 0.5:  # a response's one chain
                    batch_id, chains, chain = self.responses_rng.choice(response_ids), 1, 0
                self.sqs.send_message(
                    QueueUrl=self.queue, MessageBody=ChainMessage(batch_id, chain, chain, chains).encode()
                )
                self.report.duplicates += 1
            elif action == "cancel response":
                response_id = cancellable_responses.pop(
                    self.responses_rng.randrange(len(cancellable_responses))
                )
                self.api.post(f"{path_of(response_id)}/cancel").raise_for_status()
                self.report.response_cancels += 1
            elif cancellable:
                batch_id = cancellable.pop(self.rng.randrange(len(cancellable)))
                self.api.post(f"{path_of(batch_id)}/cancel").raise_for_status()
                self.cancelled_at[batch_id] = time.time()
                self.report.cancels += 1

    def _logged(self, event: str) -> int:
        """How many times moto's process logged ``event`` (a task's death, a refusal)."""
        log = self.stack.log_dir / "moto.log" if self.stack.log_dir else None
        if log is None or not log.exists():
            return 0
        return sum(event in line for line in log.read_text(errors="replace").splitlines())

    def _wait_final(self, batch_ids: list[str]) -> None:
        """Wait until the observer has seen every batch final, within the budget but for the
        share the drain check keeps."""
        keep = DRAIN_SHARE * self.config.timeout
        try:
            wait_for(
                lambda: not self.observer.unfinished(),
                timeout=max(1.0, self._left() - keep),
                interval=0.2,
                what="every batch to end",
            )
        except AssertionError:
            for batch_id in self.observer.unfinished():
                try:
                    status = self.api.get(path_of(batch_id)).json().get("status")
                except (httpx.HTTPError, ValueError) as exc:
                    status = f"unknown: {type(exc).__name__}"
                self.report.violations.append(f"{batch_id} did not end within the budget (still {status})")

    def _checks(self) -> Checks:
        """The checks of what this run did and saw (see ``chaos_checks``)."""
        return Checks(
            stack=self.stack,
            config=self.config,
            report=self.report,
            api=self.api,
            sim=self.sim,
            sqs=self.sqs,
            queue=self.queue,
            deadline=self.deadline,
            final=self.observer.final,
            final_at=self.observer.final_at,
            created_at=self.created_at,
            cancelled_at=self.cancelled_at,
            kills_at=self.kills_at,
            revocable=self.revocable,
            reporter_ttl=Reporter.TTL_SECONDS if self.reporters else None,
        )


def chaos_stack(log_dir: Path, config: ChaosConfig) -> LocalStack:
    env = {
        **CHAOS_ENV,
        "BATCH_COMPLETION_WINDOW_HOURS": str(config.window_seconds / 3600),
        "BATCH_RECONCILE_SECONDS": str(config.reconcile_seconds),
        "BATCH_WORKER_TIMEOUT_SECONDS": str(config.worker_timeout_seconds),
    }
    if config.task_crash_rate:
        tasks = ",".join(
            f"{local_env.function_name(s)}={config.task_crash_rate}" for s in resources.WORKFLOW_SUBSTITUTIONS
        )
        env.update({crashes.CRASHES_ENV: tasks, crashes.CRASH_SEED_ENV: str(config.seed)})
    if config.throttle_rate:
        env.update(
            {
                throttling.THROTTLE_RATE_ENV: str(config.throttle_rate),
                throttling.THROTTLE_SEED_ENV: str(config.seed),
            }
        )
    # A loaded machine starts moto and the handlers slowly: the start has a budget of its own.
    return LocalStack(
        api_port=0,
        sim_port=0,
        moto_port=0,
        env_overrides=env,
        workers=config.workers,
        log_dir=log_dir,
        startup_timeout=STARTUP_SECONDS,
    )


def main(argv: list[str] | None = None) -> int:
    defaults = ChaosConfig()
    parser = argparse.ArgumentParser(description="A seeded chaos run on a local stack; prints the totals.")
    names = (
        "seed",
        "batches",
        "requests",
        "kills",
        "duplicates",
        "cancels",
        "workers",
        "reporters",
        "responses",
    )
    for name in (*names, "provider_batches", "revocations"):
        parser.add_argument(f"--{name.replace('_', '-')}", type=int, default=getattr(defaults, name))
    parser.add_argument("--window-seconds", type=float, default=defaults.window_seconds)
    parser.add_argument("--reconcile-seconds", type=float, default=defaults.reconcile_seconds)
    parser.add_argument("--worker-timeout-seconds", type=float, default=defaults.worker_timeout_seconds)
    parser.add_argument(
        "--task-crash-rate",
        type=float,
        default=defaults.task_crash_rate,
        help="per AWS call of a workflow task",
    )
    parser.add_argument(
        "--throttle-rate",
        type=float,
        default=defaults.throttle_rate,
        help="per DynamoDB item call (moto refuses it for throughput)",
    )
    # The run's budget: a loaded machine needs it (the messages a killed poller had received
    # are hidden for a visibility timeout, which the drain check waits out).
    parser.add_argument("--timeout", type=float, default=900, help="the whole run's budget, in seconds")
    args = parser.parse_args(argv)
    config = ChaosConfig(**{k: v for k, v in vars(args).items()})
    log_dir = Path(tempfile.mkdtemp(prefix="batchgw-chaos-"))
    print(f"chaos: {json.dumps(vars(args))}; stack logs in {log_dir}", flush=True)
    try:
        with chaos_stack(log_dir, config) as stack:
            report = Chaos(stack, config).run()
            replaced = len(stack.replaced)
    except Exception as exc:  # the stack did not start (or stop): say so, do not die silently
        print(f"chaos: the local stack failed: {type(exc).__name__}: {exc}", flush=True)
        return 2
    print("\n".join(report.lines()))
    print(f"processes replaced after a crash {replaced}")
    return 1 if report.violations else 0


if __name__ == "__main__":
    sys.exit(main())
