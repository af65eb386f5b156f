"""moto in-process (``mock_aws``): the gateway's real stores against fake AWS."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import Any

import pytest
from batchgw.api import auth
from batchgw.config import resources
from batchgw.config.catalog import load_catalog
from batchgw.config.settings import Settings
from batchgw.deps import Deps, build_deps
from batchgw.observability import SERVICE
from batchgw.run import owner
from batchgw.storage import aws
from batchgw.storage.workflow import Next, step
from moto import mock_aws

from local import moto_patches
from local.bootstrap import create_bucket, create_key, create_queue, create_table
from local.keys import local_accounts
from local.simulator import Simulator
from tests.support import REPO_ROOT, FakeClock

REGION = "us-east-1"


@dataclass
class FakeWorkflow:
    """Records what the gateway asks of Step Functions (the e2e tests run the real one)."""

    started: list[str] = field(default_factory=list)
    woken: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    stopped: list[str] = field(default_factory=list)
    purges: list[str] = field(default_factory=list)

    def start(self, batch_id: str) -> None:
        self.started.append(batch_id)

    def stop(self, batch_id: str) -> None:
        self.stopped.append(batch_id)

    def start_purge(self, batch_id: str) -> None:
        self.purges.append(batch_id)

    def wake(self, token: str, next_state: Next) -> bool:
        self.woken.append((token, step(next_state)))
        return True


@pytest.fixture
def logged() -> Iterator[list[logging.LogRecord]]:
    """What the gateway logs (through ``batchgw.observability.logger``), DEBUG lines included."""
    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    keep, service = Keep(), logging.getLogger(SERVICE)
    level = service.level
    service.addHandler(keep)
    service.setLevel(logging.DEBUG)
    yield records
    service.setLevel(level)
    service.removeHandler(keep)


@pytest.fixture
def sim() -> Iterator[Simulator]:
    simulator = Simulator(port=0, backup_port=0).start()
    try:
        yield simulator
    finally:
        simulator.stop()


@pytest.fixture(autouse=True)
def fresh_caches() -> Iterator[None]:
    """What a process caches of keys and accounts belongs to one test's moto."""
    auth.forget_keys()
    owner.forget_accounts()
    yield
    auth.forget_keys()
    owner.forget_accounts()


# Credentials and region for boto3 against a fake AWS (never a real account).
FAKE_AWS_ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": REGION,
}


@pytest.fixture
def aws_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name, value in FAKE_AWS_ENV.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    moto_patches.apply()
    with mock_aws():
        aws.reset_clients()
        yield
    aws.reset_clients()


def make_deps(sim: Simulator, clock: FakeClock, **overrides: Any) -> Deps:
    """Resources from the shared specs, the repo's catalog pointed at ``sim``."""
    settings = Settings.model_validate({"BATCHGW_WORK_QUEUE_URL": "", **overrides})
    clients = aws.get_clients()
    names = {spec.logical_id: getattr(settings, spec.settings_field) for spec in resources.TABLES}
    for spec in resources.TABLES:
        create_table(clients.dynamodb, spec, names[spec.logical_id])
    url = create_queue(clients.sqs, resources.WORK_QUEUE, settings.work_visibility_seconds)
    create_bucket(clients.s3, resources.DATA_BUCKET, settings.data_bucket)
    events = create_queue(
        clients.sqs, resources.WEBHOOK_QUEUE, resources.WEBHOOK_QUEUE.visibility_seconds or 60
    )
    settings = settings.model_copy(
        update={"work_queue_url": url, "webhook_queue_url": events, "webhook_key_id": create_key(clients.kms)}
    )
    catalog = load_catalog(
        REPO_ROOT / "config" / "models.local.json",
        {"BATCHGW_SIM_PORT": str(sim.port), "BATCHGW_SIM_BACKUP_PORT": str(sim.backup_port)},
    )
    deps = build_deps(settings, catalog, clock=clock)
    deps.workflow = FakeWorkflow()  # type: ignore[assignment]
    for user, key in local_accounts():
        deps.accounts.create(user, [key])
    return deps


def tune(deps: Deps, monkeypatch: pytest.MonkeyPatch, **changes: Any) -> None:
    """Scheduling's constants changed for the runs started from now on (``scheduling.tuning``)."""
    monkeypatch.setattr(deps, "tuning", replace(deps.tuning, **changes))


def receive_all(deps: Deps) -> list[dict[str, Any]]:
    """Every message now visible on the work queue (and delete none)."""
    out: list[dict[str, Any]] = []
    while True:
        resp = aws.get_clients().sqs.receive_message(
            QueueUrl=deps.settings.work_queue_url, MaxNumberOfMessages=10, VisibilityTimeout=600
        )
        messages = resp.get("Messages", [])
        if not messages:
            return out
        out.extend(messages)


def chat_request(custom_id: str, text: str, model: str = "sim-chat") -> dict[str, Any]:
    return {"custom_id": custom_id, "body": {"model": model, "messages": [{"role": "user", "content": text}]}}


def body_of(requests: list[dict[str, Any]]) -> bytes:
    return json.dumps({"requests": requests}).encode()
