"""Step Functions: one execution per batch (``infra/workflow/batch.asl.json``), parked on a
task token while the batch's requests run, and woken by whoever ends the last one."""

from __future__ import annotations

import json
from enum import StrEnum
from typing import Any

from botocore.exceptions import ClientError

from batchgw.domain.errors import StorageError

# Tokens that no longer wait (already woken, timed out, or the execution ended).
_STALE_TOKEN = {"TaskDoesNotExist", "TaskTimedOut", "InvalidToken"}


class Next(StrEnum):
    """Where the workflow goes after a step (its ``Route`` state reads ``$.step.next``)."""

    PARK = "park"  # wait for the batch's requests to end, or ``wait_seconds`` (then reconcile)
    RECONCILE = "reconcile"
    EXPIRE = "expire"
    CANCEL = "cancel"
    FINALIZE = "finalize"
    # Submit to, poll or collect from its provider's batch service, after ``wait_seconds``.
    PROVIDER = "provider"


def step(next_state: Next, wait_seconds: int = 0) -> dict[str, Any]:
    """A step's output as the workflow routes on it."""
    return {"next": next_state.value, "wait_seconds": wait_seconds}


class Workflow:
    def __init__(self, client: Any, state_machine_arn: str) -> None:
        self._sfn = client
        self._arn = state_machine_arn

    def start(self, batch_id: str) -> None:
        """Start the batch's execution, named after the batch (so a retry cannot start two)."""
        self._start(batch_id, {"batch_id": batch_id})

    def start_purge(self, batch_id: str) -> None:
        """Start the purge of a deleted batch (the same state machine, purge branch)."""
        self._start(f"{batch_id}-purge", {"batch_id": batch_id, "purge": True})

    def _start(self, name: str, payload: dict[str, Any]) -> None:
        try:
            self._sfn.start_execution(stateMachineArn=self._arn, name=name, input=json.dumps(payload))
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") == "ExecutionAlreadyExists":
                return
            raise StorageError(f"could not start workflow execution {name}") from exc

    def stop(self, batch_id: str) -> None:
        """Stop the batch's execution, if it still runs (its batch was deleted)."""
        arn = self._arn.replace(":stateMachine:", ":execution:") + f":{batch_id}"
        try:
            self._sfn.stop_execution(executionArn=arn, cause="batch deleted")
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") not in (
                "ExecutionDoesNotExist",
                "ValidationException",
            ):
                raise StorageError(f"could not stop the workflow of {batch_id}") from exc

    def wake(self, token: str, next_state: Next) -> bool:
        """Resume a parked execution towards ``next_state``; False if the token no longer waits."""
        try:
            self._sfn.send_task_success(taskToken=token, output=json.dumps(step(next_state)))
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in _STALE_TOKEN:
                return False
            raise StorageError("could not wake a batch workflow") from exc
        return True
