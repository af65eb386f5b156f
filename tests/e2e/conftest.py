"""The local stack over real HTTP: one stack for the session, on free ports."""

from __future__ import annotations

import itertools
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from batchgw.storage.aws import CALLS_DIR_ENV

from local.run import LocalStack
from tests.support import wait_for

# Small limits so the rules show quickly; the model cap is what the cap test checks.
STACK_ENV = {
    "BATCH_MODEL_CONCURRENCY": "4",
    "BATCH_MAX_BODY_MB": "4",
    "BATCH_LEASE_SECONDS": "30",
    "BATCH_UPSTREAM_TIMEOUT_SECONDS": "3",
    "BATCH_WORKER_TIMEOUT_SECONDS": "60",
    "BATCH_RETRY_BASE_SECONDS": "0.2",
    "BATCH_RETRY_MAX_SECONDS": "1",
    # Tests provoke many failures on sim-chat on purpose; pausing it would slow the others.
    "BATCH_MODEL_PAUSE_AFTER_FAILURES": "1000",
    "BATCH_RECONCILE_SECONDS": "3",
}
MODEL_CAP = 4
FINAL = ("completed", "failed", "expired", "cancelled")


PERMISSIONS_CHECK = "test_aws_permissions.py"  # runs after every other test


# Where the stacks record their AWS calls when the suite runs in several processes (``make
# test``: pytest-xdist), for the check that runs after them all in a pytest of its own.
CALLS_DIR_OVERRIDE = "BATCHGW_TEST_AWS_CALLS_DIR"


def aws_calls_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where every test process's stacks recorded their calls (read as one)."""
    override = os.environ.get(CALLS_DIR_OVERRIDE)
    return Path(override) if override else aws_calls_dir(tmp_path_factory)


def aws_calls_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where the stacks' processes record the AWS calls each function makes (one directory per
    stack), for ``test_aws_permissions.py`` to check against the functions' roles."""
    override = os.environ.get(CALLS_DIR_OVERRIDE)
    if not override:
        return tmp_path_factory.getbasetemp() / "aws-calls"
    # Each test process's stacks apart (their log directories' names repeat); read as one.
    return Path(override) / os.environ.get("PYTEST_XDIST_WORKER", "main")


def stack_for(
    tmp_path_factory: pytest.TempPathFactory,
    name: str,
    env: dict[str, str],
    *,
    workers: int = 2,
    **options: Any,
) -> LocalStack:
    """A local stack on free ports (a context manager: ``with`` starts and stops it);
    ``options`` go to ``LocalStack`` (a ``state_dir`` and ``checkpoint_seconds`` to restart on)."""
    logs = tmp_path_factory.mktemp(f"{name}-logs")
    env = {**env, CALLS_DIR_ENV: str(aws_calls_dir(tmp_path_factory) / logs.name)}
    return LocalStack(
        api_port=0, sim_port=0, moto_port=0, env_overrides=env, workers=workers, log_dir=logs, **options
    )


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The check of the calls the stacks recorded comes last, after every test that drives them."""
    items.sort(key=lambda item: item.path.name == PERMISSIONS_CHECK)  # stable: the rest keep their order


@pytest.fixture(scope="session")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    with stack_for(tmp_path_factory, "stack", STACK_ENV) as running:
        yield running


@pytest.fixture(autouse=True)
def _stack_still_running(request: pytest.FixtureRequest) -> Iterator[None]:
    """A test whose stack lost its moto or simulator says so first, with the exit code and the
    log's tail (the short summary of a CI run shows the first line), not as the refused
    connections and timeouts that follow. Checked before the test, and after it: the test that
    was running when the process died says so too."""
    running = request.getfixturevalue("stack") if "stack" in request.fixturenames else None
    if isinstance(running, LocalStack):
        running.check()
    yield
    if isinstance(running, LocalStack):
        running.check()


class Api:
    """A thin client for one API key."""

    def __init__(self, stack: LocalStack, key: str) -> None:
        self.http = httpx.Client(
            base_url=stack.api_url, headers={"Authorization": f"Bearer {key}"}, timeout=30
        )

    def create(self, requests: list[dict[str, Any]], **extra: Any) -> httpx.Response:
        return self.http.post("/batches", json={"requests": requests, **extra})

    def batch(self, batch_id: str) -> dict[str, Any]:
        resp = self.http.get(f"/batches/{batch_id}")
        resp.raise_for_status()
        return dict(resp.json())

    def wait_final(self, batch_id: str, timeout: float = 60) -> dict[str, Any]:
        return wait_for(
            lambda: (b := self.batch(batch_id))["status"] in FINAL and b,
            timeout=timeout,
            interval=0.1,
            what=f"{batch_id} to end",
        )

    def results(self, batch_id: str, **params: Any) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        after = None
        while True:
            query = {**params, **({"after": after} if after else {})}
            page = self.http.get(f"/batches/{batch_id}/results", params=query).raise_for_status().json()
            out.extend(page["data"])
            if not page["has_more"]:
                return out
            after = page["last_id"]


@pytest.fixture(scope="session")
def alice(stack: LocalStack) -> Api:
    return Api(stack, "sk-local-alice")


@pytest.fixture(scope="session")
def bob(stack: LocalStack) -> Api:
    return Api(stack, "sk-local-bob")


@pytest.fixture(scope="session")
def admin(stack: LocalStack) -> Api:
    return Api(stack, "sk-local-admin")


@pytest.fixture
def sim(stack: LocalStack) -> httpx.Client:
    client = httpx.Client(base_url=stack.sim_url, timeout=10)
    client.post("/_sim/reset").raise_for_status()
    return client


def chat(custom_id: str, text: str, model: str = "sim-chat", **body: Any) -> dict[str, Any]:
    return {
        "custom_id": custom_id,
        "body": {"model": model, "messages": [{"role": "user", "content": text}], **body},
    }


def pause(seconds: float) -> None:
    """For ordering created_at values only (they have one-second resolution)."""
    time.sleep(seconds)


_names = itertools.count()


class Account:
    """A user made through the admin API, with one key (more on demand)."""

    def __init__(self, stack: LocalStack, role: str = "internal", **quotas: Any) -> None:
        self.stack = stack
        self.admin = root(stack, "sk-local-admin")
        n = next(_names)
        made = self.admin.post(
            "/admin/users",
            json={"name": f"user {n}", "email": f"user{n}@example.com", "role": role, **quotas},
        )
        assert made.status_code == 200, made.text
        self.id = made.json()["id"]
        self.key_id, self.api = self.new_key()

    def new_key(self, **fields: Any) -> tuple[str, Api]:
        made = self.admin.post(f"/admin/users/{self.id}/keys", json=fields)
        assert made.status_code == 200, made.text
        return made.json()["id"], Api(self.stack, made.json()["key"])

    def update(self, **fields: Any) -> None:
        self.admin.patch(f"/admin/users/{self.id}", json=fields).raise_for_status()


def root(stack: LocalStack, key: str) -> httpx.Client:
    """A client for the routes outside /v1 (the admin API)."""
    base = stack.api_url.removesuffix("/v1")
    return httpx.Client(base_url=base, headers={"Authorization": f"Bearer {key}"}, timeout=30)
