"""Workflow tasks that die mid-run (``local.crashes``), as chaos runs make them: at an AWS
call, before it is sent or after its answer came, and answered as an exited runtime."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

import pytest
from batchgw.storage.aws import AwsClients, calls_made_for

from local import crashes
from local.env import HandlerPool
from local.moto_server import run_handler
from tests.integration import fake_handlers
from tests.support import bare_table

TABLE = "crash-probe"


def test_crash_rates_are_read_per_function_and_a_bad_one_is_refused() -> None:
    env = {crashes.CRASHES_ENV: "batchgw-lifecycle=0.05, other=1"}
    assert crashes.crash_rates(env) == {"batchgw-lifecycle": 0.05, "other": 1.0}
    assert crashes.crash_rates({}) == {}
    for bad in ("batchgw-lifecycle", "batchgw-lifecycle=1.5", "=0.1", "x=-0.1"):
        with pytest.raises(ValueError, match=crashes.CRASHES_ENV):
            crashes.crash_rates({crashes.CRASHES_ENV: bad})


@pytest.mark.usefixtures("aws_env")
def test_a_crashing_functions_call_dies_before_it_is_sent_or_after_it_was_made() -> None:
    clients = AwsClients()
    installed = crashes.install(
        clients.events, {crashes.CRASHES_ENV: "doomed=1", crashes.CRASH_SEED_ENV: "3"}
    )
    assert installed is not None
    dynamodb = bare_table(clients.dynamodb, TABLE)  # made off any invocation: never dies

    deaths: dict[str, str] = {}
    with calls_made_for("doomed"):
        for index in range(40):
            try:
                dynamodb.put_item(TableName=TABLE, Item={"pk": {"S": f"k{index}"}})
            except crashes.LambdaDied as died:
                deaths[f"k{index}"] = str(died).split()[2]  # "doomed died <when> PutItem"

    # Rate 1: every call dies, half before it is sent and half after it was made.
    assert len(deaths) == 40 == installed.deaths
    assert {"before", "after"} == set(deaths.values())
    for key, when in deaths.items():
        stored = dynamodb.get_item(TableName=TABLE, Key={"pk": {"S": key}}).get("Item")
        assert (stored is not None) == (when == "after"), key

    with calls_made_for("spared"):  # a function not listed never dies
        for index in range(20):
            dynamodb.put_item(TableName=TABLE, Item={"pk": {"S": f"s{index}"}})
    assert installed.deaths == 40


def test_no_crashes_are_installed_unless_asked() -> None:
    assert crashes.install(object(), {}) is None


def _invoke(pool: HandlerPool, event: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    function = SimpleNamespace(function_name="mortal", timeout=30, memory_size=512)
    headers: dict[str, Any] = {}
    payload = json.loads(run_handler(pool, function, event, headers))
    return payload, headers


def test_a_task_that_died_answers_as_an_exited_runtime_and_the_next_starts_cold() -> None:
    pool = HandlerPool(f"{fake_handlers.__name__}.mortal")
    assert _invoke(pool, {})[0] == {"calls": 1}
    raised, headers = _invoke(pool, {"raise": True})
    assert raised["errorType"] == "RuntimeError" and headers["x-amz-function-error"] == "Unhandled"
    assert pool.size == 1  # an exception leaves the environment as it was

    died, headers = _invoke(pool, {"die": True})
    assert died["errorType"] == "Runtime.ExitError" and headers["x-amz-function-error"] == "Unhandled"
    answered, _ = _invoke(pool, {})
    assert pool.size == 2  # the environment died with its invocation: a new one was made
    assert answered == {"calls": 1}  # with fresh globals: a cold start
