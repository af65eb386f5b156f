"""Worker function: SQS work messages → ``batchgw.run.chain``, reporting partial failures."""

from __future__ import annotations

from batchgw import coldstart

coldstart.loading()

import uuid
from typing import Any

from aws_lambda_powertools.utilities.batch import (
    AsyncBatchProcessor,
    EventType,
    async_process_partial_response,
)
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
from aws_lambda_powertools.utilities.typing import LambdaContext
from batchgw.deps import get_deps
from batchgw.domain.chains import decode
from batchgw.observability import logger, metrics, new_tracer
from batchgw.run.chain import run_message

coldstart.loaded()

processor = AsyncBatchProcessor(event_type=EventType.SQS)


async def record_handler(record: SQSRecord, lambda_context: LambdaContext) -> None:
    deps = get_deps()
    # The deadline on the same clock the worker reads, so a test's clock governs it too.
    deadline = deps.clock() + lambda_context.get_remaining_time_in_millis() / 1000
    owner = f"{lambda_context.aws_request_id}:{uuid.uuid4().hex[:8]}"
    await run_message(
        deps,
        decode(record.body),
        owner=owner,
        deadline=deadline,
        receipt=record.receipt_handle,
        source=record.event_source_arn,
    )


tracer = new_tracer()


@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler(capture_response=False)
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    try:
        return dict(
            async_process_partial_response(
                event=event, record_handler=record_handler, processor=processor, context=context
            )
        )
    finally:
        metrics.flush()
