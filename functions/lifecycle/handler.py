"""Lifecycle function: the workflow's steps (prepare, park, expire, cancel, finalize, purge)."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext
from batchgw.deps import get_deps
from batchgw.observability import logger
from batchgw.run import lifecycle


@logger.inject_lambda_context(clear_state=True)
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    deps = get_deps()
    action = event["action"]
    batch_id = event["batch_id"]
    logger.append_keys(batch_id=batch_id, action=action)
    if action == "prepare":
        return lifecycle.prepare(deps, batch_id)
    if action == "park":
        return lifecycle.park(deps, batch_id, event["token"])
    if action == "finalize":
        return lifecycle.finalize(deps, batch_id)
    if action == "expire":
        return lifecycle.expire(deps, batch_id)
    if action == "cancel":
        return lifecycle.cancel(deps, batch_id)
    if action == "purge":
        return lifecycle.purge(deps, batch_id)
    raise ValueError(f"unknown lifecycle action {action!r}")
