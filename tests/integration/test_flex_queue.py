"""Flex requests' work goes on a queue of its own (``resources.FLEX_QUEUE``), which the worker
takes through a mapping of its own: their messages are sent there, batches' stay on the work
queue, and a received message is held through the queue it came from."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from batchgw.config import resources
from batchgw.domain.chains import ChainMessage, decode
from batchgw.storage import aws
from batchgw.storage.queue import WorkQueue

from local.bootstrap import create_queue

REGION = "us-east-1"


@pytest.fixture
def queues(aws_env: None) -> Iterator[tuple[WorkQueue, str, str]]:
    sqs = aws.get_clients().sqs
    work = create_queue(sqs, resources.WORK_QUEUE, 60)
    flex = create_queue(sqs, resources.FLEX_QUEUE, 60)
    yield WorkQueue(sqs, work, flex), work, flex


def _bodies(url: str) -> list[str]:
    sqs = aws.get_clients().sqs
    got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, VisibilityTimeout=0)
    return [decode(m["Body"]).batch_id for m in got.get("Messages", [])]


def _arn(url: str) -> str:
    attributes = aws.get_clients().sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])
    return str(attributes["Attributes"]["QueueArn"])


def test_a_flex_requests_messages_go_on_the_flex_queue_and_a_batchs_on_the_work_queue(
    queues: tuple[WorkQueue, str, str],
) -> None:
    queue, work, flex = queues
    batch, flexed = ChainMessage("batch_01", 0, 0, 1), ChainMessage("flex_01", 0, 0, 1)
    queue.send(flexed)
    queue.send(batch)
    queue.send_many([ChainMessage("flex_02", 0, 0, 1), ChainMessage("batch_02", 0, 0, 1)])
    assert sorted(_bodies(flex)) == ["flex_01", "flex_02"]
    assert sorted(_bodies(work)) == ["batch_01", "batch_02"]


def test_without_a_flex_queue_a_flex_requests_messages_go_on_the_work_queue(
    queues: tuple[WorkQueue, str, str],
) -> None:
    _, work, _ = queues
    WorkQueue(aws.get_clients().sqs, work).send(ChainMessage("flex_01", 0, 0, 1))
    assert _bodies(work) == ["flex_01"]


def test_a_received_message_is_held_through_the_queue_it_came_from(
    queues: tuple[WorkQueue, str, str],
) -> None:
    queue, work, flex = queues
    sqs = aws.get_clients().sqs
    queue.send(ChainMessage("flex_01", 0, 0, 1))
    queue.send(ChainMessage("batch_01", 0, 0, 1))
    flex_receipt = sqs.receive_message(QueueUrl=flex, VisibilityTimeout=30)["Messages"][0]["ReceiptHandle"]
    work_receipt = sqs.receive_message(QueueUrl=work, VisibilityTimeout=30)["Messages"][0]["ReceiptHandle"]
    # Each held through its own queue: both kept (nothing reported lost), now visible again.
    assert queue.hold_many([flex_receipt], 0, _arn(flex)) == []
    assert queue.hold_many([work_receipt], 0, _arn(work)) == []
    assert _bodies(flex) == ["flex_01"] and _bodies(work) == ["batch_01"]
