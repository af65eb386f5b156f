"""A local SQS event source mapping: queue messages in, SQS Lambda events to a handler.

``python -m local.poller --queue-url URL --handler functions.worker.handler.handler``
does what Lambda's event source mapping does for the deployed worker:

- long-polls the queue (up to ``--batch-size`` messages, all attributes) and invokes the
  handler with the SQS event (``Records`` of ``aws:sqs``) and a Lambda-like context whose
  remaining time counts down from ``BATCH_WORKER_TIMEOUT_SECONDS``;
- honours ``ReportBatchItemFailures``: only the messages not listed in
  ``batchItemFailures`` are deleted; listed ones come back after their visibility
  timeout (and reach the dead-letter queue through the queue's redrive policy). A
  handler exception, a response Lambda would reject (an unknown or empty
  ``itemIdentifier``, a value that is not JSON) or an invocation past the timeout
  leaves the whole batch;
- runs up to ``--environments`` invocations at once, each in an execution environment of
  its own (``local.environments``): a child process that imported the handler once and serves
  one invocation at a time, as on Lambda; as many slots receive whenever they are idle, as the
  mapping's pollers scale with the backlog, and hand what they receive to an idle environment
  (or a new one, cold, while fewer than ``--environments`` exist; one idle for
  ``BATCHGW_ENVIRONMENT_IDLE_SECONDS`` is reaped). An environment that dies mid-invocation
  leaves its whole batch, back after its visibility timeout, and is replaced.

This process and each environment have the variables Lambda's runtime sets
(``local.env.lambda_runtime_env``: ``LAMBDA_TASK_ROOT``, ``AWS_LAMBDA_FUNCTION_NAME``...), and
each environment one event loop that all its invocations run on, so an async handler runs as
on Lambda: Powertools' ``AsyncBatchProcessor`` reuses the loop rather than making one per
invocation. Nothing is shared between two environments but the AWS services.
SIGTERM/SIGINT stop receiving and give running invocations ``--grace-seconds`` to end.
"""

from __future__ import annotations

import argparse
import base64
import json
import logging
import os
import signal
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from batchgw.config.resources import WORK_QUEUE
from batchgw.storage import aws
from botocore.config import Config

from local.env import (
    DEFAULT_WORKER_HANDLER,
    PREFIX,
    REGION,
    WORKER_ENVIRONMENTS_ENV,
    WORKER_HANDLER_ENV,
    lambda_runtime_env,
    setup_logging,
    worker_environments,
)
from local.environments import (
    DEFAULT_IDLE_SECONDS,
    IDLE_SECONDS_ENV,
    EnvironmentDied,
    EnvironmentPool,
    HandlerFailed,
)
from local.invocations import record_invocation

log = logging.getLogger("local.poller")

DEFAULT_TIMEOUT_SECONDS = 900.0
MAX_BATCH_SIZE = 10  # one ReceiveMessage; the mapping's batching window is not modelled
DEFAULT_MEMORY_MB = 1024  # what the Lambda context and AWS_LAMBDA_FUNCTION_MEMORY_SIZE report
# How long an idle slot's ReceiveMessage waits for a message: SQS's longest, as Lambda's event
# source mapping long-polls. moto answers as soon as a message arrives (``local.moto_server``),
# so it costs no latency, and an idle slot makes 3 receives a minute instead of 60.
LONG_POLL_SECONDS = 20
WORKER_BATCH_SIZE_ENV = "BATCHGW_WORKER_BATCH_SIZE"


@dataclass
class PollerStats:
    invocations: int = 0
    deleted: int = 0
    failed: int = 0  # messages left on the queue (reported, or their whole batch failed)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, deleted: int, failed: int) -> None:
        with self._lock:
            self.invocations += 1
            self.deleted += deleted
            self.failed += failed


def _message_attribute(value: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"stringListValues": [], "binaryListValues": [], "dataType": value["DataType"]}
    if "StringValue" in value:
        out["stringValue"] = value["StringValue"]
    if "BinaryValue" in value:
        out["binaryValue"] = base64.b64encode(value["BinaryValue"]).decode("ascii")
    return out


def sqs_event(messages: Sequence[Mapping[str, Any]], queue_arn: str, region: str = REGION) -> dict[str, Any]:
    """The event Lambda's SQS mapping builds from received messages."""
    records = []
    for message in messages:
        record: dict[str, Any] = {
            "messageId": message["MessageId"],
            "receiptHandle": message["ReceiptHandle"],
            "body": message["Body"],
            "attributes": dict(message.get("Attributes", {})),
            "messageAttributes": {
                name: _message_attribute(value)
                for name, value in message.get("MessageAttributes", {}).items()
            },
            "md5OfBody": message["MD5OfBody"],
            "eventSource": "aws:sqs",
            "eventSourceARN": queue_arn,
            "awsRegion": region,
        }
        if "MD5OfMessageAttributes" in message:
            record["md5OfMessageAttributes"] = message["MD5OfMessageAttributes"]
        records.append(record)
    return {"Records": records}


def failed_message_ids(response: Any, message_ids: Sequence[str]) -> set[str]:
    """The messages a handler's response leaves on the queue, as Lambda reads it.

    No response, an empty one, or an empty/null ``batchItemFailures``: none. An entry
    without a known ``itemIdentifier``: all of them (Lambda fails the whole batch).
    """
    every = set(message_ids)
    try:
        json.dumps(response)
    except (TypeError, ValueError):
        return every
    if not isinstance(response, dict):
        return set()
    failures = response.get("batchItemFailures") or []
    if not isinstance(failures, list):
        return every
    failed = set()
    for entry in failures:
        identifier = entry.get("itemIdentifier") if isinstance(entry, dict) else None
        if not isinstance(identifier, str) or identifier not in every:
            return every
        failed.add(identifier)
    return failed


class Poller:
    """Feeds one queue to one handler; ``start``/``stop``, or ``poll_once`` step by step."""

    def __init__(
        self,
        queue_url: str,
        handler_path: str,
        *,
        sqs: Any = None,
        batch_size: int = MAX_BATCH_SIZE,
        environments: int = 1,
        wait_seconds: int = LONG_POLL_SECONDS,
        timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS,
        function_name: str = f"{PREFIX}-worker",
        memory_mb: int = DEFAULT_MEMORY_MB,
        idle_seconds: float = DEFAULT_IDLE_SECONDS,
        name: str = "worker",
    ) -> None:
        if not 1 <= batch_size <= MAX_BATCH_SIZE:
            raise ValueError(f"batch size must be within 1..{MAX_BATCH_SIZE}")
        self.queue_url = queue_url
        self.handler_path = handler_path
        self.batch_size = batch_size
        self.concurrency = max(1, environments)  # slots: one per environment there may be
        self.wait_seconds = wait_seconds
        self.timeout_seconds = timeout_seconds
        self.function_name = function_name
        self.memory_mb = memory_mb
        if sqs is None:
            # The event source mapping's own calls count too when a benchmark counts calls.
            session = aws.get_clients().session
            sqs = session.create_client(
                "sqs", config=Config(max_pool_connections=self.concurrency + 4, retries={"mode": "standard"})
            )
        self.sqs = sqs
        self.handlers = EnvironmentPool(
            handler_path,
            max_size=self.concurrency,
            function_name=function_name,
            memory_mb=memory_mb,
            name=name,
            idle_seconds=idle_seconds,
        )
        self.stats = PollerStats()
        self._queue_arn: str | None = None
        self._stopping = threading.Event()
        self._slots: list[threading.Thread] = []
        self._busy = 0  # slots invoking the handler now (not those waiting in a long poll)
        self._idle = threading.Condition()

    @property
    def queue_arn(self) -> str:
        if self._queue_arn is None:
            attributes = self.sqs.get_queue_attributes(QueueUrl=self.queue_url, AttributeNames=["QueueArn"])
            self._queue_arn = str(attributes["Attributes"]["QueueArn"])
        return self._queue_arn

    # --- one invocation ------------------------------------------------------------------

    def poll_once(self) -> int:
        """Receive one batch (long poll) and process it; returns the number of messages."""
        received = self.sqs.receive_message(
            QueueUrl=self.queue_url,
            MaxNumberOfMessages=self.batch_size,
            WaitTimeSeconds=self.wait_seconds,
            AttributeNames=["All"],
            MessageAttributeNames=["All"],
        )
        messages = received.get("Messages", [])
        if messages and self._stopping.is_set():
            self._give_back(messages)  # received while stopping: for the next poller, now
            return 0
        if messages:
            with self._invoking():
                self.process(messages)
        return len(messages)

    @contextmanager
    def _invoking(self) -> Iterator[None]:
        with self._idle:
            self._busy += 1
        try:
            yield
        finally:
            with self._idle:
                self._busy -= 1
                self._idle.notify_all()

    def _give_back(self, messages: Sequence[Mapping[str, Any]]) -> None:
        for message in messages:
            try:
                self.sqs.change_message_visibility(
                    QueueUrl=self.queue_url, ReceiptHandle=message["ReceiptHandle"], VisibilityTimeout=0
                )
            except Exception:  # it comes back when its visibility ends
                log.warning("could not give a message back", exc_info=True)

    def process(self, messages: Sequence[Mapping[str, Any]]) -> set[str]:
        """Invoke the handler with these messages, delete the successes; returns the failed ids."""
        ids = [m["MessageId"] for m in messages]
        event = sqs_event(messages, self.queue_arn)
        timeout = self.timeout_seconds
        try:
            with self.handlers.environment() as environment:
                started = time.monotonic()  # after the cold start, if any: Lambda times init apart
                response = environment.invoke(event, timeout)
        except EnvironmentDied as exc:
            # As on Lambda: the batch comes back after its visibility timeout.
            log.error("environment died; the batch stays", extra={"messages": len(ids), "why": str(exc)})
            failed = set(ids)
        except HandlerFailed as exc:
            log.error(
                "worker handler raised; the batch stays", extra={"messages": len(ids), "error": str(exc)}
            )
            failed = set(ids)
        else:
            elapsed = time.monotonic() - started
            record_invocation(self.function_name, elapsed)
            if elapsed > timeout:
                log.error("invocation timed out; the batch stays", extra={"seconds": round(elapsed, 1)})
                failed = set(ids)
            else:
                failed = failed_message_ids(response, ids)
        done = [m for m in messages if m["MessageId"] not in failed]
        self._delete(done)
        self.stats.add(deleted=len(done), failed=len(failed))
        if failed:
            log.info("messages left for redelivery", extra={"failed": len(failed), "deleted": len(done)})
        return failed

    def _delete(self, messages: Sequence[Mapping[str, Any]]) -> None:
        for start in range(0, len(messages), 10):
            entries = [
                {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]}
                for i, m in enumerate(messages[start : start + 10])
            ]
            result = self.sqs.delete_message_batch(QueueUrl=self.queue_url, Entries=entries)
            for failure in result.get("Failed", []):
                log.warning("delete failed; the message will come back", extra={"error": failure.get("Code")})

    # --- running ---------------------------------------------------------------------------

    def _slot(self) -> None:
        while not self._stopping.is_set():
            try:
                self.poll_once()
            except Exception:
                log.exception("poll failed")
                self._stopping.wait(1.0)

    def start(self) -> None:
        _ = self.queue_arn  # fail now if the queue does not exist
        self.handlers.warm()  # and if the handler does not import
        for index in range(self.concurrency):
            slot = threading.Thread(target=self._slot, name=f"poller-slot-{index}", daemon=True)
            slot.start()
            self._slots.append(slot)

    def stop(self, grace_seconds: float = 10.0) -> bool:
        """Stop receiving; wait up to ``grace_seconds`` for running invocations. True if all ended.

        Slots waiting in a long poll are not waited for (a poll lasts up to ``wait_seconds``):
        what they receive from now on is given back at once, not run."""
        self._stopping.set()
        with self._idle:
            clean = self._idle.wait_for(lambda: self._busy == 0, timeout=grace_seconds)
        self.handlers.close()
        return clean


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queue-url", default=os.environ.get(WORK_QUEUE.env_var))
    parser.add_argument("--handler", default=os.environ.get(WORKER_HANDLER_ENV, DEFAULT_WORKER_HANDLER))
    parser.add_argument(
        "--batch-size", type=int, default=int(os.environ.get(WORKER_BATCH_SIZE_ENV, MAX_BATCH_SIZE))
    )
    parser.add_argument(
        "--environments",
        type=int,
        default=worker_environments(os.environ),
        help=f"execution environments at most (default: {WORKER_ENVIRONMENTS_ENV} or 8)",
    )
    parser.add_argument(
        "--idle-seconds",
        type=float,
        default=float(os.environ.get(IDLE_SECONDS_ENV, DEFAULT_IDLE_SECONDS)),
        help="an environment idle this long is reaped",
    )
    parser.add_argument("--wait-seconds", type=int, default=LONG_POLL_SECONDS)
    parser.add_argument(
        "--timeout-seconds",
        type=float,
        default=float(os.environ.get("BATCH_WORKER_TIMEOUT_SECONDS", DEFAULT_TIMEOUT_SECONDS)),
        help="the function timeout (default: BATCH_WORKER_TIMEOUT_SECONDS or 900)",
    )
    parser.add_argument("--function-name", default=f"{PREFIX}-worker")
    parser.add_argument("--memory-mb", type=int, default=DEFAULT_MEMORY_MB, help="the function's memory")
    parser.add_argument("--grace-seconds", type=float, default=10.0)
    parser.add_argument("--name", default="worker", help="the name in log lines")
    args = parser.parse_args(argv)
    setup_logging(args.name)
    if not args.queue_url:
        parser.error(f"--queue-url (or {WORK_QUEUE.env_var}) is required")
    # As in the function's environment on Lambda (its AWS calls, and the mapping's, which Lambda
    # makes with the function's role, are recorded under its AWS_LAMBDA_FUNCTION_NAME); set
    # before the handler is imported, as the runtime sets them before it loads the handler.
    os.environ.update(lambda_runtime_env(args.function_name, args.handler, memory_mb=args.memory_mb))
    poller = Poller(
        args.queue_url,
        args.handler,
        batch_size=args.batch_size,
        environments=args.environments,
        wait_seconds=args.wait_seconds,
        timeout_seconds=args.timeout_seconds,
        function_name=args.function_name,
        memory_mb=args.memory_mb,
        idle_seconds=args.idle_seconds,
        name=args.name,
    )
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    poller.start()
    log.info(
        "polling",
        extra={"queue": args.queue_url, "handler": args.handler, "environments": poller.concurrency},
    )
    stop.wait()
    clean = poller.stop(args.grace_seconds)
    log.info("stopped", extra={"clean": clean, "invocations": poller.stats.invocations})
    logging.shutdown()
    os._exit(0)  # slots still running past the grace period die here, as a frozen Lambda would


if __name__ == "__main__":
    main()
