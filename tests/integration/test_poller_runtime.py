"""The local poller runs a handler as Lambda's runtime does: with the runtime's variables
(``LAMBDA_TASK_ROOT``, ``AWS_LAMBDA_FUNCTION_NAME``...) and one event loop per execution
environment, reused by every invocation in it (so Powertools' ``AsyncBatchProcessor`` takes
its Lambda path, as on Lambda, and does not make and leave a loop per invocation).

One stack (moto and one worker poller; no api, no simulator) runs the stand-in handler of
``tests.integration.runtime_handlers``.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from batchgw.config import resources

from local import env as local_env
from local.run import LocalStack
from tests.integration import runtime_handlers
from tests.support import wait_for

HANDLER = f"{runtime_handlers.__name__}.handler"
SLOW_SECONDS = 3.0  # how long the first of two overlapping invocations runs: the second starts meanwhile


@pytest.fixture(scope="module")
def reports(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("runtime-reports")


@pytest.fixture(scope="module")
def stack(reports: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    overrides = {local_env.WORKER_HANDLER_ENV: HANDLER, runtime_handlers.REPORT_DIR_ENV: str(reports)}
    log_dir = tmp_path_factory.mktemp("runtime-logs")
    with LocalStack(
        0, 0, 0, env_overrides=overrides, workers=1, simulator=False, api=False, log_dir=log_dir
    ) as running:
        yield running


@pytest.fixture(scope="module")
def send(stack: LocalStack) -> Callable[[dict[str, Any]], None]:
    sqs = boto3.client(
        "sqs",
        endpoint_url=stack.moto_url,
        region_name=local_env.REGION,
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )
    queue = stack.env[resources.WORK_QUEUE.env_var]
    return lambda body: sqs.send_message(QueueUrl=queue, MessageBody=json.dumps(body))


def _report(reports: Path, name: str) -> dict[str, Any]:
    path = reports / f"{name}.json"
    wait_for(path.exists, timeout=30.0, what=f"{path.name} written")
    return dict(json.loads(path.read_text()))


def test_invocations_see_the_lambda_runtime_variables(
    stack: LocalStack, send: Callable[[dict[str, Any]], None], reports: Path
) -> None:
    send({"n": "variables"})
    seen = _report(reports, "variables")["variables"]
    assert seen["LAMBDA_TASK_ROOT"] == str(local_env.REPO_ROOT)
    assert seen["LAMBDA_RUNTIME_DIR"] and seen["_HANDLER"] == HANDLER
    assert seen["AWS_EXECUTION_ENV"] == f"AWS_Lambda_python{sys.version_info.major}.{sys.version_info.minor}"
    assert seen["AWS_LAMBDA_FUNCTION_NAME"] == "batchgw-worker"
    assert seen["AWS_LAMBDA_FUNCTION_VERSION"] == "$LATEST"
    assert int(seen["AWS_LAMBDA_FUNCTION_MEMORY_SIZE"]) > 0
    assert seen["AWS_LAMBDA_INITIALIZATION_TYPE"] == "on-demand"
    assert seen["AWS_LAMBDA_LOG_GROUP_NAME"] == "/aws/lambda/batchgw-worker"
    assert seen["AWS_LAMBDA_LOG_STREAM_NAME"] and seen["AWS_REGION"] == local_env.REGION


def test_each_environment_runs_every_invocation_on_its_one_loop(
    stack: LocalStack, send: Callable[[dict[str, Any]], None], reports: Path
) -> None:
    # One after another: the same (idle) environment each time, so the same loop.
    one_by_one = []
    for n in range(4):
        send({"n": f"seq-{n}"})
        one_by_one.append(_report(reports, f"seq-{n}"))
    assert len({report["environment"] for report in one_by_one}) == 1
    assert len({report["loop"] for report in one_by_one}) == 1
    assert all(report["loops_seen"] == 1 for report in one_by_one)

    # Two at once: a second environment, with a loop of its own.
    send({"n": "slow", "sleep": SLOW_SECONDS})
    _report(reports, "started-slow")
    send({"n": "beside"})
    beside = _report(reports, "beside")
    slow = _report(reports, "slow")
    assert beside["environment"] != slow["environment"] and beside["loop"] != slow["loop"]
    assert beside["pid"] == slow["pid"]  # environments of one poller process

    # And each keeps its loop: every report of an environment names one loop, the only one it saw.
    send({"n": "after"})
    every = [*one_by_one, slow, beside, _report(reports, "after")]
    loops: dict[str, set[int]] = {}
    for report in every:
        loops.setdefault(report["environment"], set()).add(report["loop"])
        assert report["loops_seen"] == 1
    assert all(len(ids) == 1 for ids in loops.values()) and len(loops) == 2
