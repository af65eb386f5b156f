"""moto in server mode, with Step Functions executing and Lambda tasks reaching our handlers.

``python -m local.moto_server [--port N] [--state-dir DIR]`` serves every AWS service the
gateway uses on 127.0.0.1 (``BATCHGW_MOTO_PORT``, default 8082) until SIGTERM/SIGINT. With
``--state-dir``, DynamoDB, S3 and KMS are restored from ``DIR`` before it serves and saved
there at checkpoints and at a clean stop (``local.state``).

Hooks, for the local stack only and pinned to moto 5.2.5's behaviour: DynamoDB's fixes
(``local.moto_patches``), an atomic ReceiveMessage (``install_atomic_receive``), requests
recorded one at a time (``install_recording_lock``), handlers found once per host and class
(``install_cheap_dispatch``), each state machine parsed once (``install_parsed_definitions``),
the Lambda hook (``install_lambda_hook``), connections
kept between requests (``local.keep_alive``), and short garbage-collection pauses
(``local.collector``); for chaos runs, tasks that die mid-run
(``local.crashes``). Without Docker, moto's Lambda is ``LambdaSimpleBackend``, whose
``invoke`` just echoes the payload. Step Functions' ``lambda:invoke`` and
``lambda:invoke.waitForTaskToken`` tasks reach it as an ordinary ``Invoke`` call over HTTP
(moto's interpreter builds a boto3 client on ``localhost:$MOTO_PORT``), so replacing that
one method makes both resources run the real handler:

- the function's name selects a dotted handler path (``local.env.lambda_handlers``:
  the defaults plus ``BATCHGW_LAMBDA_HANDLERS``); a function not in the table keeps
  moto's echo;
- the handler gets the decoded JSON payload and a Lambda-like context; its JSON return
  value is the invoke ``Payload`` (``$.Payload`` in the ASL);
- an exception becomes what the Lambda Python runtime answers: ``X-Amz-Function-Error:
  Unhandled`` and ``{"errorMessage", "errorType", "requestId", "stackTrace"}``. moto's
  interpreter names the task failure after ``errorType`` (e.g. ``ValueError``), which
  ``States.TaskFailed`` and ``States.ALL`` match, as on AWS.

Handlers run in moto's request threads, in this process, with the stack's environment
(their boto3 calls come back to this server over HTTP, like any other process's); each
concurrent invocation has an execution environment of its own (``local.env.HandlerPool``).
An ``Event`` invocation runs in a background thread and answers 202 at once.
"""

from __future__ import annotations

import argparse
import functools
import importlib
import importlib.util
import json
import logging
import os
import signal
import sys
import threading
import time
import traceback
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import moto
from batchgw.storage.aws import FUNCTION_NAME_ENV, calls_made_for, get_clients
from moto.awslambda_simple.models import LambdaSimpleBackend
from moto.core import responses as core_responses
from moto.core.utils import method_names_from_class
from moto.moto_api._internal.models import moto_api_backend
from moto.moto_api._internal.recorder.models import Recorder
from moto.moto_server.werkzeug_app import DomainDispatcherApplication
from moto.server import ThreadedMotoServer
from moto.sqs.models import SQSBackend
from moto.stepfunctions.parser.asl.component.component import Component
from moto.stepfunctions.parser.asl.component.eval_component import EvalComponent

from local import collector, crashes, denials, keep_alive, moto_patches, state, throttling
from local.env import (
    DEFAULT_CHECKPOINT_SECONDS,
    DEFAULT_MOTO_PORT,
    HOST,
    MOTO_PORT_ENV,
    HandlerPool,
    LambdaContext,
    lambda_handlers,
    setup_logging,
    snapshot_path,
)
from local.invocations import record_invocation

if TYPE_CHECKING:
    from moto.stepfunctions.parser.backend.execution_worker import ExecutionWorker

log = logging.getLogger("local.moto_server")

PINNED_MOTO_VERSION = "5.2.5"
_PRELOADED = (
    "moto.dynamodb.responses",
    "moto.s3.responses",
    "moto.sqs.responses",
    "moto.awslambda_simple.responses",
    "moto.stepfunctions.responses",
    "moto.stepfunctions.parser.models",
)
MOTO_CONFIG: dict[str, Any] = {
    "stepfunctions": {"execute_state_machine": True},
    "lambda": {"use_docker": False},
}


def _error_payload(exc: BaseException, request_id: str, error_type: str | None = None) -> bytes:
    return json.dumps(
        {
            "errorMessage": str(exc),
            "errorType": error_type or type(exc).__name__,
            "requestId": request_id,
            "stackTrace": traceback.format_tb(exc.__traceback__),
        }
    ).encode()


def run_handler(pool: HandlerPool, function: Any, event: Any, response_headers: dict[str, Any]) -> bytes:
    """Run one invocation the way the Lambda Python runtime would.

    Returns the response payload; on failure sets ``x-amz-function-error`` (which
    botocore reads as ``FunctionError``) and returns the runtime's error document.
    """
    context = LambdaContext(
        function_name=function.function_name,
        timeout_seconds=float(function.timeout),
        memory_limit_in_mb=int(function.memory_size),
    )
    try:
        # this process runs every hooked function: each invocation's AWS calls count as its own
        with calls_made_for(function.function_name), pool.environment() as handler:
            started = time.monotonic()
            try:
                result = handler(event, context)
            except Exception as exc:
                log.warning("handler raised", extra={"function": function.function_name}, exc_info=True)
                response_headers["x-amz-function-error"] = "Unhandled"
                return _error_payload(exc, context.aws_request_id)
            finally:
                record_invocation(function.function_name, time.monotonic() - started)
    except crashes.LambdaDied as exc:  # a chaos run's death: the process exited, its environment gone
        response_headers["x-amz-function-error"] = "Unhandled"
        return _error_payload(exc, context.aws_request_id, "Runtime.ExitError")
    except Exception as exc:  # the environment could not start: the module does not import
        log.exception("cannot import handler", extra={"handler": pool.path})
        response_headers["x-amz-function-error"] = "Unhandled"
        return _error_payload(exc, context.aws_request_id, "Runtime.ImportModuleError")
    try:
        return json.dumps(result).encode()
    except (TypeError, ValueError) as exc:
        response_headers["x-amz-function-error"] = "Unhandled"
        return _error_payload(exc, context.aws_request_id, "Runtime.MarshalError")


def _header(headers: Any, name: str) -> str | None:
    for key, value in (headers or {}).items():
        if key.lower() == name.lower():
            return str(value)
    return None


def install_lambda_hook(handlers: Mapping[str, str]) -> None:
    """Make moto's Docker-less Lambda run our handlers for the functions in ``handlers``."""
    echo = LambdaSimpleBackend.invoke
    pools = {name: HandlerPool(path) for name, path in handlers.items()}  # Lambda scales: unbounded

    def invoke(
        self: LambdaSimpleBackend,
        function_name: str,
        qualifier: str | None,
        body: Any,
        headers: Any,
        response_headers: Any,
    ) -> str | bytes | None:
        function = self.get_function(function_name, qualifier)  # unknown -> ResourceNotFound, as on AWS
        pool = pools.get(function.function_name)
        if pool is None:
            return echo(self, function_name, qualifier, body, headers, response_headers)
        event = json.loads(body) if body else {}
        invocation_type = _header(headers, "X-Amz-Invocation-Type") or "RequestResponse"
        if invocation_type == "DryRun":
            return b""
        if invocation_type == "Event":
            threading.Thread(
                target=run_handler, args=(pool, function, event, {}), daemon=True, name="lambda-event"
            ).start()
            return b""
        payload = run_handler(pool, function, event, response_headers)
        response_headers["Content-Length"] = str(len(payload))
        return payload

    LambdaSimpleBackend.invoke = invoke  # type: ignore[method-assign]


def install_atomic_receive() -> None:
    """Make a ReceiveMessage take its messages atomically, as SQS does.

    moto 5.2.5 scans a queue and marks messages received without a lock, so two
    concurrent receives (the pollers run many) can take the same message: measured 3
    duplicates in 2,000 messages with 32 receivers. SQS's at-least-once delivery makes a
    duplicate possible, not routine; the gateway must survive one, and its tests make
    them on purpose. Here each scan runs under its queue's lock, and the long poll waits
    outside it.

    A receive whose client has gone (a killed worker's open long poll) takes no message:
    moto would hand them to the closed connection and hide them for the visibility timeout,
    where SQS hands them to a poller that is still there (Lambda's pollers outlive a
    function's crash).
    """
    scan = SQSBackend.receive_message
    guard = threading.Lock()
    locks: dict[str, threading.Lock] = {}

    def receive_message(
        self: SQSBackend,
        queue_name: str,
        count: int,
        wait_seconds_timeout: int,
        visibility_timeout: int,
        message_attribute_names: list[str] | None = None,
    ) -> list[Any]:
        with guard:
            lock = locks.setdefault(queue_name, threading.Lock())
        deadline = time.monotonic() + (wait_seconds_timeout or 0)
        while True:
            if keep_alive.client_gone():
                return []
            with lock:
                found = scan(self, queue_name, count, 0, visibility_timeout, message_attribute_names)
            remaining = deadline - time.monotonic()
            if found or remaining <= 0:
                return found
            waited = time.monotonic()
            self.get_queue(queue_name).wait_for_messages(min(1.0, remaining))  # type: ignore[arg-type]
            if time.monotonic() - waited < 0.01:  # visible but not deliverable (a busy FIFO group)
                time.sleep(min(0.05, max(0.0, remaining)))

    SQSBackend.receive_message = receive_message  # type: ignore[method-assign]


def install_recording_lock() -> None:
    """Record one request at a time (``make cost`` records every request to replay it).

    moto 5.2.5's recorder appends each request to its file in two writes and without a
    lock, so two request threads can interleave their lines: a batch write's 37 KB line
    split by another request, seen once in a ``make bench`` cost run. The replay then
    lacks the items that line stored, and every later write to them fails.
    """
    record = Recorder._record_request
    lock = threading.Lock()

    def record_request(self: Recorder, request: Any, body: bytes | None = None) -> None:
        with lock:
            record(self, request, body)

    Recorder._record_request = record_request  # type: ignore[method-assign]


def install_cheap_dispatch() -> None:
    """Find each request's handler without listing moto's package or its methods again.

    moto 5.2.5 does both per request, though neither answer can change while it serves
    (with both kept, its CPU per request in ``make bench``'s throughput run fell by about a
    fifth, and so did the dispatcher lock's waits):

    - the backend for a host: ``get_backend_for_host`` lists moto's package directory
      (a ``stat`` per entry) and tries its URL patterns one by one, under the dispatcher's
      lock. Its answer depends on the host alone; here each host's answer is kept.
    - the actions a response class answers: ``inspect.getmembers`` of the class, on
      every request. Here each class's names are kept (every patch here replaces
      existing methods, before the server starts, and adds none).
    """
    find = DomainDispatcherApplication.get_backend_for_host
    backends: dict[str | None, Any] = {}

    def get_backend_for_host(self: DomainDispatcherApplication, host: str | None) -> Any:
        if host not in backends:
            backends[host] = find(self, host)
        return backends[host]

    DomainDispatcherApplication.get_backend_for_host = get_backend_for_host  # type: ignore[method-assign]
    core_responses.method_names_from_class = functools.lru_cache(maxsize=None)(method_names_from_class)


def _fix_heap_keys(component: Any, seen: set[int] | None = None) -> None:
    """Give every component of a parsed program its heap key now. moto draws a component's key
    (its slot in an execution's heap: a Retry's attempt count...) on first use, unlocked: two
    executions sharing the program could draw two and lose what was stored under the first."""
    seen = set() if seen is None else seen
    if id(component) in seen:
        return
    seen.add(id(component))
    if isinstance(component, EvalComponent):
        _ = component.heap_key
    if isinstance(component, (list, tuple, set, frozenset)):
        children: Any = component
    elif isinstance(component, dict):
        children = component.values()
    elif isinstance(component, Component):
        children = vars(component).values()
    else:
        return
    for child in children:
        if not isinstance(child, (str, bytes, int, float, bool, type(None))):
            _fix_heap_keys(child, seen)


def install_parsed_definitions() -> None:
    """Parse a state machine's definition once, not once per execution.

    moto 5.2.5 parses the definition (ANTLR, then its preprocessor) at the start of every
    execution: a quarter of moto's time while a restart started the workflows of 86 batches
    again (py-spy), about 30 ms of CPU each. The parsed program is a tree of components that
    keep each execution's state in its environment, never in themselves (they are built so), so
    executions share it once its heap keys are drawn (``_fix_heap_keys``).
    """
    # here, not at the top: after ``defer_batch_models`` (``configure``)
    from moto.stepfunctions.parser.asl.parse.asl_parser import AmazonStateLanguageParser
    from moto.stepfunctions.parser.backend.execution_worker import ExecutionWorker

    parsed: dict[str, EvalComponent] = {}
    lock = threading.Lock()

    def entrypoint(self: ExecutionWorker) -> EvalComponent:
        definition = self._evaluation_details.state_machine_details.definition
        with lock:
            program = parsed.get(definition)
            if program is None:
                program = AmazonStateLanguageParser.parse(definition)[0]
                _fix_heap_keys(program)
                if len(parsed) >= 16:  # a test that updates its state machine again and again
                    parsed.clear()
                parsed[definition] = program
        return program

    ExecutionWorker._get_evaluation_entrypoint = entrypoint  # type: ignore[method-assign]


def defer_batch_models() -> None:
    """Import ``moto.batch``'s models (and EC2's, which they import) on first use, not with the
    Step Functions interpreter.

    moto 5.2.5's interpreter imports ``moto.batch.utils`` (for a Batch task's job statuses), and
    so ``moto.batch``, whose ``__init__`` imports its models: Batch's, ECS's and EC2's, whose
    instance types and regions are read from moto's data files as they import. That was about a
    second of the moto process's CPU at every start of a local stack (``-X importtime``), for
    services the gateway never calls. Here ``moto.batch`` is the package without its
    ``__init__`` run, its submodules found as before; a name read from it (``batch_backends``,
    when a request reaches Batch) imports its models then, as its ``__init__`` would have.
    """
    if "moto.batch" in sys.modules:
        return
    spec = importlib.util.find_spec("moto.batch")
    if spec is None:
        return
    package = importlib.util.module_from_spec(spec)  # not executed: no models imported

    def models_attribute(name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(importlib.import_module("moto.batch.models"), name)

    package.__getattr__ = models_attribute  # type: ignore[method-assign]
    sys.modules["moto.batch"] = package
    moto.batch = package  # type: ignore[attr-defined]


def configure() -> None:
    """Apply ``MOTO_CONFIG`` in process (what ``POST /moto-api/config`` does)."""
    defer_batch_models()
    if moto.__version__ != PINNED_MOTO_VERSION:
        log.warning(
            "the Lambda hook was written against moto %s, found %s", PINNED_MOTO_VERSION, moto.__version__
        )
    moto_api_backend.set_config(MOTO_CONFIG)
    # moto imports a service on its first request; the Step Functions interpreter alone
    # takes over a second, so pay for it before the port opens.
    for module in _PRELOADED:
        importlib.import_module(module)


def serve(
    port: int, state_dir: Path | None = None, checkpoint_seconds: float = DEFAULT_CHECKPOINT_SECONDS
) -> None:
    """Serve until SIGTERM/SIGINT, then exit the process (saving the state first, with
    ``state_dir``)."""
    # The Step Functions interpreter reaches Lambda (and the rest) on localhost:$MOTO_PORT.
    os.environ["MOTO_PORT"] = str(port)
    configure()
    handlers = lambda_handlers()
    if len(handlers) == 1:
        # As in that function's environment on Lambda: the calls its invocations make off their
        # own context (boto3's S3 transfer threads) are recorded as its own too.
        os.environ[FUNCTION_NAME_ENV] = next(iter(handlers))
    install_lambda_hook(handlers)
    install_atomic_receive()
    install_recording_lock()
    install_cheap_dispatch()
    install_parsed_definitions()
    moto_patches.apply()  # DynamoDB: atomic conditional writes, cheap transactions
    keep_alive.install()  # connections kept between requests (werkzeug closes each one)
    collector.install()  # no full collection stalls every AWS call for long
    crashes.install(get_clients().events, os.environ)  # chaos runs only: tasks dying mid-run
    throttling.install(os.environ)  # chaos runs only: DynamoDB refusing for throughput
    denials.install(os.environ)  # tests only: partitions nobody may reach
    checkpoints = None
    if state_dir is not None:
        gate = state.Gate()
        state.install_gate(gate)
        checkpoints = state.Checkpointer(snapshot_path(state_dir), checkpoint_seconds, gate)
        checkpoints.restore()  # before the port opens: the stack's bootstrap finds it all
    server = ThreadedMotoServer(ip_address=HOST, port=port, verbose=False)
    server.start()
    log.info("moto listening", extra={"port": port})
    if checkpoints is not None:
        checkpoints.start()

    stop = threading.Event()

    def stop_on(signum: int, _: object) -> None:
        # A stack whose moto stopped shows its log's tail: it says whether it was told to.
        log.info("moto stopping", extra={"signal": signal.Signals(signum).name})
        stop.set()

    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, stop_on)
    while not stop.wait(0.5):
        pass
    if checkpoints is not None:
        checkpoints.final()  # writes to DynamoDB, S3 and KMS wait from now on, until the exit
    server.stop()
    # Running executions live in moto's non-daemon threads; nothing of them must survive.
    logging.shutdown()
    os._exit(0)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=int(os.environ.get(MOTO_PORT_ENV, DEFAULT_MOTO_PORT)))
    parser.add_argument("--state-dir", type=Path, default=None, help="restore from and save to DIR")
    parser.add_argument(
        "--checkpoint-seconds", type=float, default=DEFAULT_CHECKPOINT_SECONDS, help="between checkpoints"
    )
    args = parser.parse_args(argv)
    setup_logging("moto")
    # moto logs every error a state raises at ERROR, even one the ASL expects and handles
    # (a Choice's IsPresent on a missing path); executions' failures show in their history.
    logging.getLogger("moto.stepfunctions.parser.asl.component.eval_component").setLevel(logging.CRITICAL)
    log.info("lambda handlers", extra={"table": lambda_handlers()})
    serve(args.port, args.state_dir, args.checkpoint_seconds)


if __name__ == "__main__":
    main()
