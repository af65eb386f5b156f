"""Webhook function: FIFO batch events → ``batchgw.run.webhooks``, one user's in order.

An event that must wait (a retry's backoff, a suspended endpoint) stays invisible that long
and is reported failed, so the rest of its user's events wait behind it while other users'
go on (``skip_group_on_error``).
"""

from __future__ import annotations

from batchgw import coldstart

coldstart.loading()

from typing import Any

from aws_lambda_powertools.utilities.batch import SqsFifoPartialProcessor, process_partial_response
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
from aws_lambda_powertools.utilities.typing import LambdaContext
from batchgw.deps import get_deps
from batchgw.domain.webhooks import EventMessage
from batchgw.observability import logger, new_tracer
from batchgw.run.webhooks import Later, deliver

coldstart.loaded()

processor = SqsFifoPartialProcessor(skip_group_on_error=True)
# Every event waiting is not an error of the invocation: report each, raise nothing.
processor.raise_on_entire_batch_failure = False
tracer = new_tracer()


class EventWaits(Exception):
    """The event is to be tried again later (its message is kept invisible until then)."""


def record_handler(record: SQSRecord) -> None:
    deps = get_deps()
    outcome = deliver(deps, EventMessage.decode(record.body))
    if isinstance(outcome, Later):
        deps.events.hold(record.receipt_handle, outcome.seconds)
        raise EventWaits(f"try again in {outcome.seconds:.0f} s")


@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler(capture_response=False)
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    return dict(
        process_partial_response(
            event=event, record_handler=record_handler, processor=processor, context=context
        )
    )
