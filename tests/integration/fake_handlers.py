"""Stand-in handlers for the local stack's tests (the real ones live in ``functions/``).

They run wherever the stack calls them (the moto process for Lambda tasks, an adapter or
poller process), so they leave their traces in the stack's S3 bucket, which a test reads.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import boto3
from batchgw.config.resources import DATA_BUCKET

from local.crashes import LambdaDied


def _s3() -> Any:
    return boto3.client("s3")


def _put(key: str, value: Any) -> None:
    _s3().put_object(Bucket=os.environ[DATA_BUCKET.env_var], Key=key, Body=json.dumps(value).encode())


# --- Lambda tasks of the workflow (moto's Lambda hook) ------------------------------------------


def lifecycle(event: dict[str, Any], context: Any) -> dict[str, Any]:
    """Drives the real ASL: prepare -> park (token saved under ``tokens/<batch>``) -> finalize.

    ``action == "boom"`` raises, for the error-path test.
    """
    action, batch_id = event["action"], event.get("batch_id", "")
    _put(
        f"calls/{batch_id}/{action}",
        {
            "event": event,
            "function": context.function_name,
            "remaining_ms": context.get_remaining_time_in_millis(),
        },
    )
    if action == "prepare":
        return {"next": "park", "wait_seconds": 0}
    if action == "park":
        _put(f"tokens/{batch_id}", event["token"])
        return {"parked": True}
    if action == "finalize":
        return {"status": "completed"}
    if action == "boom":
        raise ValueError(f"boom for {batch_id}")
    return {"next": "finalize", "wait_seconds": 0}


# --- the api handler (the adapter) ------------------------------------------------------------


def echo_api(event: dict[str, Any], context: Any) -> dict[str, Any]:
    """Answers with the event it got; ``/raise`` raises; ``/big`` answers a 7 MB body,
    ``/big-escaped`` one over 6 MB only with its characters escaped, ``/surrogate`` a lone
    surrogate."""
    path = event["rawPath"]
    if path.endswith("/raise"):
        raise RuntimeError("handler failure")
    if path.endswith("/big"):
        return {"statusCode": 200, "body": "x" * (7 * 1024 * 1024)}
    if path.endswith("/big-escaped"):  # 3.3 MB in UTF-8, 6.6 MB with every character escaped
        return {"statusCode": 200, "body": "中" * 1_100_000}
    if path.endswith("/surrogate"):  # Python 3.12's runtime cannot encode it: a MarshalError
        return {"statusCode": 200, "body": "\ud800"}
    if path.endswith("/binary"):
        return {
            "statusCode": 201,
            "headers": {"content-type": "application/octet-stream"},
            "cookies": ["a=1", "b=2"],
            "body": "AAEC/w==",
            "isBase64Encoded": True,
        }
    if path.endswith("/bare"):
        return {"bare": True}  # no statusCode: API Gateway answers 200 with this JSON
    return {
        "statusCode": 200,
        "headers": {"content-type": "application/json"},
        "body": json.dumps({"event": event, "function": context.function_name}),
    }


# --- the interactive function (the adapter's execution environments: processes) ---------------

SERVED: list[str] = []  # the requests this environment's module served


def interactive(event: dict[str, Any], context: Any) -> dict[str, Any]:
    """Answers its process, how many requests its module served and the function it runs as.
    The body's ``do`` makes it raise (``raise``), die as a crash does (``die``), answer a 7 MB
    body (``big``) or what Lambda cannot serialize (``unserializable``), run ``seconds``
    (``sleep``), or wait until the file ``until`` exists (``hold``)."""
    SERVED.append(context.aws_request_id)
    body = json.loads(event.get("body") or "{}")
    do = body.get("do")
    if do == "raise":
        raise RuntimeError("interactive failure")
    if do == "die":
        os.kill(os.getpid(), signal.SIGKILL)
    if do == "big":
        return {"statusCode": 200, "body": "x" * (7 * 1024 * 1024)}
    if do == "unserializable":
        return {"statusCode": 200, "body": {"a set"}}
    if do == "sleep":
        time.sleep(float(body["seconds"]))
    deadline = time.monotonic() + 30
    while do == "hold" and not Path(body["until"]).exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    answer = {
        "pid": os.getpid(),
        "served": len(SERVED),
        "function": context.function_name,
        "variable": os.environ.get("AWS_LAMBDA_FUNCTION_NAME"),
    }
    return {"statusCode": 200, "headers": {"content-type": "application/json"}, "body": json.dumps(answer)}


# --- the worker (pollers) -----------------------------------------------------------------------

SEEN: list[dict[str, Any]] = []  # the records this copy of the module saw
_seen_lock = threading.Lock()
# A file each record seen is appended to (a JSON line), for the tests of a poller whose
# execution environments are processes of their own.
SEEN_FILE_ENV = "BATCHGW_TEST_SEEN_FILE"


def worker(event: dict[str, Any], context: Any) -> dict[str, Any]:
    """Reports a record as failed when its body says ``fail``; raises for ``raise``."""
    failures = []
    for record in event["Records"]:
        seen = {**record, "remaining_ms": context.get_remaining_time_in_millis()}
        with _seen_lock:
            SEEN.append(seen)
            if os.environ.get(SEEN_FILE_ENV):
                with open(os.environ[SEEN_FILE_ENV], "a") as out:
                    out.write(json.dumps(seen) + "\n")
        body = json.loads(record["body"])
        if body.get("raise"):
            raise RuntimeError("worker failure")
        if body.get("fail"):
            failures.append({"itemIdentifier": record["messageId"]})
    return {"batchItemFailures": failures}


def s3_worker(event: dict[str, Any], context: Any) -> dict[str, Any]:
    """For a worker in its own process: records each message under ``seen/<id>/<pid>``."""
    for record in event["Records"]:
        _put(f"seen/{json.loads(record['body'])['id']}/{os.getpid()}", record["attributes"])
    return {"batchItemFailures": []}


def mortal(event: dict[str, Any], context: Any) -> dict[str, Any]:
    """Dies as a chaos run's task does (``{"die": true}``), raises (``{"raise": true}``), or
    answers; counts its calls in its module's globals (``CALLS``), one count per environment."""
    CALLS.append(event)
    if event.get("die"):
        raise LambdaDied("mortal died")
    if event.get("raise"):
        raise RuntimeError("mortal raised")
    return {"calls": len(CALLS)}


CALLS: list[dict[str, Any]] = []
