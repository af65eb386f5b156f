"""A stand-in worker handler that reports how the local poller runs it (``test_poller_runtime``).

It is the real worker's shape (Powertools' ``AsyncBatchProcessor`` at module level, one
``async_process_partial_response`` per invocation) and writes, per message, a JSON file into
``$BATCHGW_TEST_RUNTIME_DIR``: the execution environment it ran in (its process, and a
module-level cache made at import, with the invocations it counted), the event loop it ran
on, how many times SQS delivered the message, and the Lambda runtime's variables as it saw
them. A message with ``"hold": true`` holds its invocation, on its first delivery, until the
file ``release-<n>`` appears in that directory (or its environment is killed).
"""

from __future__ import annotations

import asyncio
import json
import os
import time
import uuid
from pathlib import Path
from typing import Any

from aws_lambda_powertools.utilities.batch import (
    AsyncBatchProcessor,
    EventType,
    async_process_partial_response,
)
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord

REPORT_DIR_ENV = "BATCHGW_TEST_RUNTIME_DIR"
RUNTIME_VARIABLES = (
    "LAMBDA_TASK_ROOT",
    "LAMBDA_RUNTIME_DIR",
    "_HANDLER",
    "AWS_EXECUTION_ENV",
    "AWS_LAMBDA_FUNCTION_NAME",
    "AWS_LAMBDA_FUNCTION_VERSION",
    "AWS_LAMBDA_FUNCTION_MEMORY_SIZE",
    "AWS_LAMBDA_INITIALIZATION_TYPE",
    "AWS_LAMBDA_LOG_GROUP_NAME",
    "AWS_LAMBDA_LOG_STREAM_NAME",
    "AWS_REGION",
)

processor = AsyncBatchProcessor(event_type=EventType.SQS)
# Every loop this environment's invocations ran on, kept alive so that their ids stay unique.
_loops: list[asyncio.AbstractEventLoop] = []
# A module-level cache, as the worker keeps its pacer, slot board and share cache: made once per
# environment, so two environments never see the same one.
_cache: dict[str, Any] = {"token": uuid.uuid4().hex, "invocations": 0}
HOLD_SECONDS = 60.0  # a held invocation's longest wait for its release


def _write(name: str, value: dict[str, Any]) -> None:
    directory = Path(os.environ[REPORT_DIR_ENV])
    temporary = directory / f".{name}.tmp"
    temporary.write_text(json.dumps(value))
    temporary.rename(directory / f"{name}.json")  # a reader never sees half a file


async def _record(record: SQSRecord) -> None:
    body = json.loads(record.body)
    loop = asyncio.get_running_loop()
    if loop not in _loops:
        _loops.append(loop)
    _cache["invocations"] += 1
    deliveries = int(record.attributes.approximate_receive_count)
    _write(f"started-{body['n']}", {"pid": os.getpid(), "deliveries": deliveries, "at": time.time()})
    release = Path(os.environ[REPORT_DIR_ENV]) / f"release-{body['n']}"
    deadline = time.monotonic() + HOLD_SECONDS
    while body.get("hold") and deliveries == 1 and not release.exists() and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    _write(
        str(body["n"]),
        {
            "environment": f"{os.getpid()}/{_cache['token']}",
            "cache": _cache["token"],
            "cache_invocations": _cache["invocations"],
            "loop": id(loop),
            "loops_seen": len(_loops),
            "pid": os.getpid(),
            "deliveries": deliveries,
            "at": time.time(),
            "variables": {name: os.environ.get(name) for name in RUNTIME_VARIABLES},
        },
    )


def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    return dict(
        async_process_partial_response(
            event=event, record_handler=_record, processor=processor, context=context
        )
    )
