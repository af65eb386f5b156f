"""The local poller runs a handler as Lambda's runtime does: each execution environment a
process of its own (its own module state, one invocation at a time, reused while warm,
replaced when it dies), with the runtime's variables (``LAMBDA_TASK_ROOT``,
``AWS_LAMBDA_FUNCTION_NAME``...) and one event loop per environment, reused by every
invocation in it (so Powertools' ``AsyncBatchProcessor`` takes its Lambda path, as on Lambda,
and does not make and leave a loop per invocation).

Stacks of moto and one worker poller (no api, no simulator) run the stand-in handler of
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
    return _sender(stack)


def _sender(stack: LocalStack) -> Callable[[dict[str, Any]], None]:
    sqs = boto3.client(
        "sqs",
        endpoint_url=stack.moto_url,
        region_name=local_env.REGION,
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )
    queue = stack.env[resources.WORK_QUEUE.env_var]
    return lambda body: sqs.send_message(QueueUrl=queue, MessageBody=json.dumps(body))


def _report(reports: Path, name: str, timeout: float = 30.0) -> dict[str, Any]:
    path = reports / f"{name}.json"
    wait_for(path.exists, timeout=timeout, what=f"{path.name} written")
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


def test_an_idle_environment_is_reused_with_its_state_and_its_one_loop(
    stack: LocalStack, send: Callable[[dict[str, Any]], None], reports: Path
) -> None:
    # One after another: the same (idle) environment each time: its process, its module-level
    # cache (which counted every invocation), its loop.
    one_by_one = []
    for n in range(4):
        send({"n": f"seq-{n}"})
        one_by_one.append(_report(reports, f"seq-{n}"))
    assert len({report["pid"] for report in one_by_one}) == 1
    assert len({report["cache"] for report in one_by_one}) == 1
    counts = [report["cache_invocations"] for report in one_by_one]
    assert counts == sorted(counts) and len(set(counts)) == 4
    assert len({report["loop"] for report in one_by_one}) == 1
    assert all(report["loops_seen"] == 1 for report in one_by_one)
    assert one_by_one[0]["pid"] in stack.environment_pids("worker-0")
    assert one_by_one[0]["pid"] not in stack.worker_pids  # not the poller's process


def test_two_concurrent_invocations_run_in_different_processes_with_different_caches(
    stack: LocalStack, send: Callable[[dict[str, Any]], None], reports: Path
) -> None:
    # Two at once: the second goes to another environment, a process of its own.
    send({"n": "held", "hold": True})
    _report(reports, "started-held")
    send({"n": "beside"})
    beside = _report(reports, "beside")
    (reports / "release-held").touch()
    held = _report(reports, "held")
    assert beside["pid"] != held["pid"]
    assert beside["cache"] != held["cache"] and beside["loop"] != held["loop"]
    assert {beside["pid"], held["pid"]} <= set(stack.environment_pids("worker-0"))

    # And each keeps its loop: every report of an environment names one loop, the only one it saw.
    send({"n": "after"})
    every = [held, beside, _report(reports, "after")]
    loops: dict[str, set[int]] = {}
    for report in every:
        loops.setdefault(report["environment"], set()).add(report["loop"])
        assert report["loops_seen"] == 1
    assert all(len(ids) == 1 for ids in loops.values()) and len(loops) == 2


def test_a_killed_environment_is_replaced_and_its_message_runs_again_after_the_visibility_timeout(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    reports = tmp_path_factory.mktemp("killed-reports")
    overrides = {
        local_env.WORKER_HANDLER_ENV: HANDLER,
        runtime_handlers.REPORT_DIR_ENV: str(reports),
        "BATCH_WORKER_TIMEOUT_SECONDS": "1",  # the work queue's visibility: 6 s
    }
    with LocalStack(
        0,
        0,
        0,
        env_overrides=overrides,
        workers=1,
        simulator=False,
        api=False,
        log_dir=tmp_path_factory.mktemp("killed-logs"),
    ) as stack:
        _sender(stack)({"n": "doomed", "hold": True})
        started = _report(reports, "started-doomed")
        killed = stack.crash("worker-0")  # the environment running it: busy, so chosen
        assert killed == started["pid"] and started["deliveries"] == 1
        wait_for(lambda: stack.replaced == [f"worker-0.0/env-{killed}"], timeout=30, what="its replacement")
        assert killed not in stack.environment_pids("worker-0")

        again = _report(reports, "doomed", timeout=60)
        assert again["deliveries"] == 2 and again["pid"] != killed
        assert again["at"] - started["at"] >= 6 - 0.5  # back only once its visibility timeout ended
        assert stack.worker_pids[0] is not None  # the poller itself lived on
        stack.check()
