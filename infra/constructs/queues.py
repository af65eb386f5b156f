"""SQS queues, each with its dead-letter queue, built from ``batchgw.config.resources.QUEUES``."""

from __future__ import annotations

from aws_cdk import Duration
from aws_cdk import aws_sqs as sqs
from batchgw.config import resources
from constructs import Construct

# The longest SQS retention: a message that keeps failing stays inspectable for two weeks.
_DLQ_RETENTION = Duration.days(14)


class Queues(Construct):
    """Every queue in ``resources.QUEUES``; ``visibility_timeout`` is six worker timeouts."""

    def __init__(self, scope: Construct, construct_id: str, *, visibility_timeout: Duration) -> None:
        super().__init__(scope, construct_id)
        self.queues: dict[str, sqs.Queue] = {}
        self.dead_letter_queues: dict[str, sqs.Queue] = {}
        for spec in resources.QUEUES:
            dlq = sqs.Queue(
                self,
                f"{spec.logical_id}DeadLetter",
                fifo=spec.fifo or None,
                encryption=sqs.QueueEncryption.SQS_MANAGED,
                enforce_ssl=True,
                retention_period=_DLQ_RETENTION,
            )
            self.dead_letter_queues[spec.logical_id] = dlq
            self.queues[spec.logical_id] = sqs.Queue(
                self,
                spec.logical_id,
                fifo=spec.fifo or None,
                encryption=sqs.QueueEncryption.SQS_MANAGED,
                enforce_ssl=True,
                visibility_timeout=visibility_timeout
                if spec.visibility_seconds is None
                else Duration.seconds(spec.visibility_seconds),
                dead_letter_queue=sqs.DeadLetterQueue(queue=dlq, max_receive_count=spec.max_receive_count),
            )

    @property
    def work(self) -> sqs.Queue:
        return self.queues[resources.WORK_QUEUE.logical_id]

    @property
    def flex(self) -> sqs.Queue:
        return self.queues[resources.FLEX_QUEUE.logical_id]

    @property
    def webhooks(self) -> sqs.Queue:
        return self.queues[resources.WEBHOOK_QUEUE.logical_id]

    @property
    def environment(self) -> dict[str, str]:
        return {spec.env_var: self.queues[spec.logical_id].queue_url for spec in resources.QUEUES}
