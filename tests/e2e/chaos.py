"""A seeded chaos run on a local stack: many concurrent batches while worker processes
crash at random moments, the workflow's tasks die at random AWS calls (``local.crashes``:
before a call is sent, or after it was made and its answer lost), the simulator answers
random retryable errors, timeouts and ``model_queued``, chain messages are delivered
again, random batches are cancelled, and (``--throttle-rate``) DynamoDB refuses random
calls for throughput (``local.throttling``), as a provisioned table past its capacity does.

Afterwards, for every batch: a final status; ``request_counts`` equal to its terminal
requests; every request exactly one terminal outcome. Overall: the upstream requests the
simulator saw lie between the calls whose outcome was recorded and those plus the
attempts lost with their workers; no live model slot; no message left on the work queue;
nothing in its dead-letter queue.

``make chaos`` runs it long and prints the totals (``python -m tests.e2e.chaos --help``);
``tests/e2e/test_chaos.py`` runs a short form in ``make test``.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

import boto3
import httpx
from batchgw.config import resources
from batchgw.domain.chains import ChainMessage

from local import crashes, throttling
from local import env as local_env
from local.run import LocalStack
from tests.support import wait_for

CHAOS_ENV = {
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
}
FINAL = ("completed", "failed", "expired", "cancelled")
TERMINAL = ("completed", "failed", "cancelled", "expired")
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


@dataclass
class ChaosConfig:
    seed: int = 7
    batches: int = 8
    requests: int = 30  # per batch
    kills: int = 4
    duplicates: int = 6
    cancels: int = 2
    workers: int = 3
    window_seconds: float = 0  # 0: no window
    timeout: float = 240
    reconcile_seconds: float = 2
    worker_timeout_seconds: float = 12
    task_crash_rate: float = 0.0  # per AWS call of a workflow task: it dies there
    throttle_rate: float = 0.0  # per DynamoDB item call: refused for throughput (local.throttling)


@dataclass
class ChaosReport:
    batches: int = 0
    requests: int = 0
    kills: int = 0
    duplicates: int = 0
    cancels: int = 0
    faults: int = 0
    task_deaths: int = 0
    throttled: int = 0
    statuses: Counter[str] = field(default_factory=Counter)
    outcomes: Counter[str] = field(default_factory=Counter)
    upstream_seen: int = 0
    calls_recorded: int = 0
    lost_attempts: int = 0
    seconds: float = 0.0
    violations: list[str] = field(default_factory=list)
    failed_batches: list[str] = field(default_factory=list)  # each with its error's message

    def lines(self) -> list[str]:
        return [
            f"batches {self.batches} ({dict(self.statuses)})",
            f"requests {self.requests} ({dict(self.outcomes)})",
            f"kills {self.kills}, duplicated chain messages {self.duplicates}, cancels {self.cancels}, "
            f"requests with faults {self.faults}, workflow task deaths {self.task_deaths}, "
            f"dynamodb calls refused for throughput {self.throttled}",
            f"upstream requests seen {self.upstream_seen}: calls recorded {self.calls_recorded}, "
            f"attempts lost with their worker {self.lost_attempts}",
            *(f"  failed batch {failed}" for failed in self.failed_batches),
            f"seconds {self.seconds:.1f}, violations {len(self.violations)}",
            *(f"  VIOLATION: {v}" for v in self.violations),
        ]


class Chaos:
    def __init__(self, stack: LocalStack, config: ChaosConfig) -> None:
        self.stack = stack
        self.config = config
        self.rng = random.Random(config.seed)
        self.report = ChaosReport()
        self.api = httpx.Client(
            base_url=stack.api_url, headers={"Authorization": "Bearer sk-local-alice"}, timeout=30
        )
        self.sim = httpx.Client(base_url=stack.sim_url, timeout=10)
        session = boto3.session.Session(
            aws_access_key_id="testing", aws_secret_access_key="testing", region_name=local_env.REGION
        )
        endpoint = stack.env["AWS_ENDPOINT_URL"]
        self.sqs = session.client("sqs", endpoint_url=endpoint)  # type: ignore[call-overload]
        self.dynamodb = session.client("dynamodb", endpoint_url=endpoint)  # type: ignore[call-overload]
        self.queue = stack.env[resources.WORK_QUEUE.env_var]
        self.dlq = self.sqs.get_queue_url(QueueName=local_env.dead_letter_queue_name(resources.WORK_QUEUE))[
            "QueueUrl"
        ]

    # --- the run ------------------------------------------------------------------------------

    def run(self) -> ChaosReport:
        started = time.monotonic()
        self.sim.post("/_sim/reset").raise_for_status()
        batch_ids = [self._create(i) for i in range(self.config.batches)]
        self.report.batches = len(batch_ids)
        self._disturb(batch_ids)
        done = {b: self._wait_final(b) for b in batch_ids}
        for batch_id, batch in done.items():
            if batch is not None:
                self._check_batch(batch_id, batch)
        self._check_upstream(batch_ids)
        self._check_drained()
        self.report.task_deaths = self._logged(crashes.DIED)
        self.report.throttled = self._logged(throttling.THROTTLED)
        self.report.seconds = time.monotonic() - started
        return self.report

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
        resp = self.api.post("/batches", json={"requests": requests})
        resp.raise_for_status()
        return str(resp.json()["id"])

    def _disturb(self, batch_ids: list[str]) -> None:
        """Kills, duplicate deliveries and cancels, in a seeded random order and rhythm."""
        actions = (
            ["kill"] * self.config.kills
            + ["duplicate"] * self.config.duplicates
            + ["cancel"] * self.config.cancels
        )
        self.rng.shuffle(actions)
        cancellable = list(batch_ids)
        for action in actions:
            time.sleep(self.rng.uniform(0.3, 1.5))
            if action == "kill":
                self.stack.crash(f"worker-{self.rng.randrange(self.config.workers)}")
                self.report.kills += 1
            elif action == "duplicate":
                batch_id = self.rng.choice(batch_ids)
                chains = int(CHAOS_ENV["BATCH_MODEL_CONCURRENCY"])
                chain = self.rng.randrange(chains)
                self.sqs.send_message(
                    QueueUrl=self.queue, MessageBody=ChainMessage(batch_id, chain, chain, chains).encode()
                )
                self.report.duplicates += 1
            elif cancellable:
                batch_id = cancellable.pop(self.rng.randrange(len(cancellable)))
                self.api.post(f"/batches/{batch_id}/cancel").raise_for_status()
                self.report.cancels += 1

    def _logged(self, event: str) -> int:
        """How many times moto's process logged ``event`` (a task's death, a refusal)."""
        log = self.stack.log_dir / "moto.log" if self.stack.log_dir else None
        if log is None or not log.exists():
            return 0
        return sum(event in line for line in log.read_text(errors="replace").splitlines())

    def _wait_final(self, batch_id: str) -> dict[str, Any] | None:
        try:
            return wait_for(
                lambda: (b := self.api.get(f"/batches/{batch_id}").json())["status"] in FINAL and b,
                timeout=self.config.timeout,
                interval=0.5,
                what=f"{batch_id} to end",
            )
        except AssertionError:
            status = self.api.get(f"/batches/{batch_id}").json()["status"]
            self.report.violations.append(f"{batch_id} did not end (still {status})")
            return None

    # --- the checks ---------------------------------------------------------------------------

    def _results(self, batch_id: str) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        after = None
        while True:
            params = {"limit": 1000, **({"after": after} if after else {})}
            page = self.api.get(f"/batches/{batch_id}/results", params=params).raise_for_status().json()
            out.extend(page["data"])
            if not page["has_more"]:
                return out
            after = page["last_id"]

    def _check_batch(self, batch_id: str, batch: dict[str, Any]) -> None:
        violations = self.report.violations
        self.report.statuses[batch["status"]] += 1
        if batch["status"] == "failed":
            self.report.failed_batches.append(f"{batch_id}: {(batch.get('error') or {}).get('message')}")
        results = self._results(batch_id)
        ids = [r["custom_id"] for r in results]
        if len(ids) != self.config.requests or len(set(ids)) != len(ids):
            violations.append(f"{batch_id}: {len(ids)} results, {len(set(ids))} distinct")
        statuses = Counter(r["status"] for r in results)
        self.report.outcomes.update(statuses)
        unfinished = {s: n for s, n in statuses.items() if s not in TERMINAL}
        if unfinished:
            violations.append(f"{batch_id} ended {batch['status']} with requests not ended: {unfinished}")
        counts = batch["request_counts"]
        expected = {
            "total": self.config.requests,
            "completed": statuses["completed"],
            "failed": statuses["failed"] + statuses["expired"],
        }
        if counts != expected:
            violations.append(f"{batch_id}: request_counts {counts}, results say {expected}")

    def _check_upstream(self, batch_ids: list[str]) -> None:
        calls = lost = 0
        table = self.stack.env[resources.REQUESTS.env_var]
        for batch_id in batch_ids:
            kwargs: dict[str, Any] = {
                "TableName": table,
                "KeyConditionExpression": "pk = :pk",
                "ExpressionAttributeValues": {":pk": {"S": batch_id}},
                "ProjectionExpression": "calls, lost",
            }
            while True:
                page = self.dynamodb.query(**kwargs)
                for item in page["Items"]:
                    calls += int(item.get("calls", {"N": "0"})["N"])
                    lost += int(item.get("lost", {"N": "0"})["N"])
                if "LastEvaluatedKey" not in page:
                    break
                kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]
        seen = int(self.sim.get("/_sim/stats").json()["models"]["sim-chat"]["requests"])
        self.report.upstream_seen, self.report.calls_recorded, self.report.lost_attempts = seen, calls, lost
        if not calls <= seen <= calls + lost:
            self.report.violations.append(
                f"the simulator saw {seen} requests; recorded calls {calls}, lost attempts {lost}"
            )

    def _check_drained(self) -> None:
        def live_slots() -> list[float]:
            item = self.dynamodb.get_item(
                TableName=self.stack.env[resources.CONTROL.env_var],
                Key={"pk": {"S": "slots#sim-chat"}, "sk": {"S": "slots"}},
            ).get("Item", {})
            now = time.time()
            return [
                float(Decimal(v["N"]))
                for v in item.get("s", {}).get("M", {}).values()
                if float(Decimal(v["N"])) > now
            ]

        def queue_depth(url: str) -> int:
            names = [
                "ApproximateNumberOfMessages",
                "ApproximateNumberOfMessagesNotVisible",
                "ApproximateNumberOfMessagesDelayed",
            ]
            attributes = self.sqs.get_queue_attributes(QueueUrl=url, AttributeNames=names)["Attributes"]
            return sum(int(attributes[n]) for n in names)

        # A message a crashed worker had received but not yet started comes back only after
        # the queue's visibility timeout (six worker timeouts), to be dropped: wait that long.
        drain = 6 * self.config.worker_timeout_seconds + 40
        for what, check in (
            ("a live model slot", lambda: not live_slots()),
            ("messages on the work queue", lambda: queue_depth(self.queue) == 0),
        ):
            try:
                wait_for(check, timeout=drain, interval=0.5, what=what)
            except AssertionError:
                self.report.violations.append(f"still {what} after every batch ended")
        dead = queue_depth(self.dlq)
        if dead:
            self.report.violations.append(f"{dead} messages in the dead-letter queue")


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
    return LocalStack(
        api_port=0, sim_port=0, moto_port=0, env_overrides=env, workers=config.workers, log_dir=log_dir
    )


def main(argv: list[str] | None = None) -> int:
    defaults = ChaosConfig()
    parser = argparse.ArgumentParser(description="A seeded chaos run on a local stack; prints the totals.")
    for name in ("seed", "batches", "requests", "kills", "duplicates", "cancels", "workers"):
        parser.add_argument(f"--{name}", type=int, default=getattr(defaults, name))
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
    parser.add_argument("--timeout", type=float, default=600)
    args = parser.parse_args(argv)
    config = ChaosConfig(**{k: v for k, v in vars(args).items()})
    log_dir = Path(tempfile.mkdtemp(prefix="batchgw-chaos-"))
    print(f"chaos: {json.dumps(vars(args))}; stack logs in {log_dir}", flush=True)
    with chaos_stack(log_dir, config) as stack:
        report = Chaos(stack, config).run()
        replaced = len(stack.replaced)
    print("\n".join(report.lines()))
    print(f"processes replaced after a crash {replaced}")
    return 1 if report.violations else 0


if __name__ == "__main__":
    sys.exit(main())
