"""Lifecycle function: the workflow's steps (prepare, park, reconcile, expire, cancel,
finalize, fail, purge, and the provider step of a batch run on its provider's batch service,
with its wait for the next poll)."""

from __future__ import annotations

from batchgw import coldstart

coldstart.loading()

from collections.abc import Callable
from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext
from batchgw.deps import Deps, get_deps
from batchgw.observability import logger, metrics, new_tracer
from batchgw.provider.cleanup import provider_purge
from batchgw.provider.executor import provider_park, provider_step
from batchgw.run import ending, lifecycle, reconcile

coldstart.loaded()

STEPS: dict[str, Callable[[Deps, dict[str, Any]], dict[str, Any]]] = {
    "prepare": lambda deps, event: lifecycle.prepare(deps, event["batch_id"]),
    "park": lambda deps, event: lifecycle.park(deps, event["batch_id"], event["token"]),
    "reconcile": lambda deps, event: reconcile.reconcile(deps, event["batch_id"]),
    "expire": lambda deps, event: lifecycle.expire(deps, event["batch_id"]),
    "cancel": lambda deps, event: lifecycle.cancel(deps, event["batch_id"]),
    "finalize": lambda deps, event: ending.finalize(deps, event["batch_id"]),
    "fail": lambda deps, event: ending.fail(deps, event["batch_id"], ending.cause_of(event.get("error"))),
    # What a provider-run batch left at its provider goes first (nothing for any other batch).
    "purge": lambda deps, event: provider_purge(deps, event["batch_id"]),
    "provider": lambda deps, event: provider_step(deps, event["batch_id"]),
    "provider_park": lambda deps, event: provider_park(deps, event["batch_id"], event["token"]),
}


tracer = new_tracer()


@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler(capture_response=False)
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    action = event["action"]
    logger.append_keys(batch_id=event.get("batch_id"), action=action)
    step = STEPS.get(action)
    if step is None:
        raise ValueError(f"unknown lifecycle action {action!r}")
    try:
        return step(get_deps(), event)
    finally:
        metrics.flush()
