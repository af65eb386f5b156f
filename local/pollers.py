"""The stack's pollers, as the deployed event source mappings: the workers on the work
queue, the worker's own on the flex queue, and a poller for every other queue whose handler
exists, each a ``local.poller`` process; here is what each one runs (``local.run`` starts
them).
"""

from __future__ import annotations

import importlib.util
import json
import logging
from collections.abc import Mapping

from batchgw.config import resources

from local.env import DEFAULT_WORKER_HANDLER, WORKER_HANDLER_ENV, flex_environments

log = logging.getLogger("local.run")  # the stack's own lines, as they were before this module

# Pollers for queues other than the work queue: logical id -> handler (JSON). By default a
# queue "Xyz" feeds ``functions.xyz.handler.handler`` when that module exists.
QUEUE_HANDLERS_ENV = "BATCHGW_QUEUE_HANDLERS"


def queue_handlers(environ: Mapping[str, str]) -> dict[str, str]:
    """Queue logical id -> handler for every queue but the work queue (the workers' own);
    the flex queue's is the worker's."""
    raw = environ.get(QUEUE_HANDLERS_ENV, "").strip()
    overrides: dict[str, str] = json.loads(raw) if raw else {}
    table = {}
    for queue in resources.QUEUES:
        if queue is resources.WORK_QUEUE:
            continue
        default = f"functions.{queue.logical_id.lower()}.handler.handler"
        if queue is resources.FLEX_QUEUE:
            default = environ.get(WORKER_HANDLER_ENV, DEFAULT_WORKER_HANDLER)
        path = overrides.get(queue.logical_id, default)
        module = path.partition(":")[0] if ":" in path else path.rpartition(".")[0]
        try:
            found = importlib.util.find_spec(module) is not None
        except ModuleNotFoundError:
            found = False
        if found:
            table[queue.logical_id] = path
        else:
            log.warning(
                "no handler for queue; not polled", extra={"queue": queue.logical_id, "handler": path}
            )
    return table


def event_pollers(env: Mapping[str, str]) -> dict[str, list[str]]:
    """Poller name -> its ``local.poller`` arguments, for every queue but the work queue."""
    table = {}
    for logical_id, path in queue_handlers(env).items():
        spec = next(q for q in resources.QUEUES if q.logical_id == logical_id)
        name = f"poller-{logical_id.lower()}"
        function = "worker" if spec is resources.FLEX_QUEUE else logical_id.lower()
        # Events are few: two environments at most (idle long polls are SQS calls too).
        environments = flex_environments(env) if spec is resources.FLEX_QUEUE else 2
        table[name] = [
            "--queue-url",
            env[spec.env_var],
            "--handler",
            path,
            "--name",
            name,
            "--function-name",
            f"batchgw-{function}",
            "--batch-size",
            str(spec.batch_size),
            "--environments",
            str(environments),
        ]
    return table


def worker_args(env: Mapping[str, str], name: str, environments: int) -> list[str]:
    """The ``local.poller`` arguments of the worker ``name``: the work queue, to the worker
    handler, in up to ``environments`` execution environments."""
    handler = env.get(WORKER_HANDLER_ENV, DEFAULT_WORKER_HANDLER)
    return [
        "--queue-url",
        env[resources.WORK_QUEUE.env_var],
        "--handler",
        handler,
        "--name",
        name,
        "--environments",
        str(environments),
    ]
