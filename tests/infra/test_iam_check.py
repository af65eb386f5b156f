"""The permission check the e2e run ends with (``tests/e2e/test_aws_permissions.py``), on its own:
it finds what a role lacks, on which resource and partition, and the roles hold what the code is
known to call."""

from __future__ import annotations

import os

os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")

from typing import Any

import pytest
from aws_cdk import CfnElement
from batchgw.storage.touches import Touch
from constructs import IConstruct

from infra.stack import BatchGwStack
from local.env import PREFIX
from tests.infra.iam_check import (
    Request,
    allows,
    function_roles,
    iam_actions,
    missing_permissions,
    role_statements,
    synthesize,
)

CONTROL, FILES, BATCHES, DATA = "batchgw-control", "batchgw-files", "batchgw-batches", "batchgw-data"


@pytest.fixture(scope="module")
def synthesized(tmp_path_factory: pytest.TempPathFactory) -> tuple[BatchGwStack, dict[str, Any]]:
    return synthesize(tmp_path_factory.mktemp("cdk.out"))


@pytest.fixture(scope="module")
def roles(synthesized: tuple[BatchGwStack, dict[str, Any]]) -> dict[str, Any]:
    return function_roles(*synthesized, PREFIX)


def test_a_call_the_role_does_not_allow_is_reported_with_the_function_and_the_action(
    roles: dict[str, Any],
) -> None:
    calls = {
        "batchgw-api": {"dynamodb.GetItem", "sqs.ReceiveMessage"},  # the api never consumes a queue
        "batchgw-worker": {"sfn.SendTaskSuccess", "sfn.StopExecution"},  # only the api stops executions
        # a batch's objects listed to delete them; never the whole bucket, nor another prefix
        "batchgw-lifecycle": {
            Touch("s3.ListObjectsV2", "", DATA, "inputs/*"),
            Touch("s3.ListObjectsV2", "", DATA, "uploads/*"),
            "s3.ListObjectsV2",
        },
    }
    assert missing_permissions(calls, roles) == [
        "batchgw-api: sqs.ReceiveMessage needs sqs:ReceiveMessage, which its role does not allow",
        "batchgw-lifecycle: s3.ListObjectsV2 needs s3:ListBucket of the whole bucket, which its role does "
        "not allow",
        "batchgw-lifecycle: s3.ListObjectsV2 needs s3:ListBucket on arn:aws:s3:::Data under uploads/*, "
        "which its role does not allow",
        "batchgw-worker: sfn.StopExecution needs states:StopExecution, which its role does not allow",
    ]


def test_calls_outside_the_known_functions_and_of_unknown_services_are_reported(
    roles: dict[str, Any],
) -> None:
    problems = missing_permissions(
        {"unattributed": {"s3.GetObject"}, "batchgw-api": {"ec2.RunInstances"}}, roles
    )
    assert problems == [
        "batchgw-api: no IAM mapping for 'ec2.RunInstances': add its service to IAM_PREFIX",
        "unattributed: calls made outside a known function: ['s3.GetObject']",
    ]


def test_the_calls_each_function_is_known_to_make_are_allowed(roles: dict[str, Any]) -> None:
    assert set(roles) == {
        f"{PREFIX}-{name}" for name in ("api", "admin", "worker", "lifecycle", "webhooks", "interactive")
    }
    calls: dict[str, set[str | Touch]] = {
        "batchgw-api": {
            Touch("dynamodb.GetItem", "", CONTROL, "key#*"),  # the caller's key
            Touch("dynamodb.Query", "", CONTROL, "user#*"),  # and account
            Touch("dynamodb.Query", "", CONTROL, "runtime"),
            Touch("dynamodb.Query", "", CONTROL, "spend#*"),  # quotas
            Touch("dynamodb.PutItem", "", CONTROL, "idem#*"),  # an Idempotency-Key claimed
            Touch("dynamodb.UpdateItem", "", CONTROL, "uploads#*"),
            Touch("dynamodb.PutItem", "", CONTROL, "webhook#*"),
            Touch("dynamodb.Query", "", f"{BATCHES}/index/by_owner", "user*"),
            Touch("dynamodb.PutItem", "", BATCHES, "batch*"),
            Touch("dynamodb.TransactWriteItems", "Update", BATCHES, "batch*"),  # a cancel halts it
            Touch("dynamodb.Query", "", BATCHES, "batch*"),  # its run marks, before a delete
            Touch("dynamodb.UpdateItem", "", FILES, "file*"),
            Touch("s3.PutObject", "", DATA, "inputs/*"),
            Touch("s3.CopyObject", "source", DATA, "incoming/*"),
            Touch("s3.CopyObject", "", DATA, "files/*"),
            Touch("s3.GetObject", "", DATA, "bodies/*"),  # a result's body
            Touch("s3.ListObjectsV2", "", DATA, "incoming/*"),  # whether an upload arrived
            Touch("s3.ListObjectsV2", "", DATA, "exports/*"),
            Touch("s3.CompleteMultipartUpload", "", DATA, "uploads/*"),
            Touch("sfn.StartExecution", "", "batchgw-batch"),
            Touch("sfn.StopExecution", "", "batchgw-batch"),  # DELETE /v1/batches/{id}
            Touch("sfn.SendTaskSuccess"),  # a cancel wakes the workflow
            Touch("kms.Encrypt", "", "any-key-id"),  # a new webhook secret
        },
        "batchgw-admin": {
            Touch("dynamodb.TransactWriteItems", "Put", CONTROL, "user#*"),  # a new user and key
            Touch("dynamodb.TransactWriteItems", "Put", CONTROL, "users"),
            Touch("dynamodb.TransactWriteItems", "Put", CONTROL, "key#*"),
            Touch("dynamodb.TransactWriteItems", "Put", CONTROL, "keyid#*"),
            Touch("dynamodb.UpdateItem", "", CONTROL, "user#*"),  # a key revoked
            Touch("dynamodb.PutItem", "", CONTROL, "runtime"),  # a setting changed
            Touch("dynamodb.GetItem", "", CONTROL, "slots#*"),
            Touch("dynamodb.BatchWriteItem", "Delete", CONTROL, "whevents#*"),  # a user deleted
            Touch("dynamodb.DeleteItem", "", BATCHES, "batch*"),
            Touch("dynamodb.Query", "", f"{FILES}/index/by_owner", "user*"),
            Touch("s3.DeleteObject", "", DATA, "files/*"),
            Touch("sfn.StopExecution", "", "batchgw-batch"),
            Touch("sfn.StartExecution", "", "batchgw-batch"),  # the purge
        },
        "batchgw-webhooks": {
            "sqs.ReceiveMessage",
            "sqs.DeleteMessageBatch",
            Touch("sqs.ChangeMessageVisibility", "", "batchgw-webhooks.fifo"),  # an event that waits
            "kms.Decrypt",
            Touch("dynamodb.GetItem", "", CONTROL, "webhook#*"),
            Touch("dynamodb.PutItem", "", CONTROL, "whevents#*"),
            Touch("dynamodb.UpdateItem", "", CONTROL, "webhook#*"),
        },
        "batchgw-worker": {
            "sqs.ReceiveMessage",  # the event source mapping's, with the worker's role
            "sqs.DeleteMessageBatch",
            Touch("sqs.ChangeMessageVisibility", "", "batchgw-work"),
            Touch("sqs.SendMessageBatch", "", "batchgw-work"),
            "sfn.SendTaskSuccess",
            Touch("dynamodb.TransactWriteItems", "Update", CONTROL, "spend#*"),  # money, in the attempt's
            Touch("dynamodb.TransactWriteItems", "Update", "batchgw-requests", "batch*"),  # transaction
            Touch("dynamodb.TransactWriteItems", "ConditionCheck", BATCHES, "batch*"),
            Touch("dynamodb.UpdateItem", "", CONTROL, "slots#*"),
            Touch("dynamodb.UpdateItem", "", CONTROL, "uslots#*"),
            Touch("dynamodb.Query", "", CONTROL, "user#*"),  # the owner still active
            Touch("dynamodb.Query", "", CONTROL, "spend#*"),  # and within their quotas
            Touch("dynamodb.PutItem", "", BATCHES, "batch*"),  # a chain's run mark
            Touch("dynamodb.DeleteItem", "", BATCHES, "batch*"),
            Touch("dynamodb.TransactWriteItems", "Update", BATCHES, "batch*"),  # a batch halted
            Touch("s3.PutObject", "", DATA, "bodies/*"),
        },
        "batchgw-interactive": {
            Touch("dynamodb.GetItem", "", CONTROL, "key#*"),  # the caller's key
            Touch("dynamodb.Query", "", CONTROL, "user#*"),  # and account
            Touch("dynamodb.Query", "", CONTROL, "runtime"),
            Touch("dynamodb.Query", "", CONTROL, "spend#*"),  # quotas
            Touch("dynamodb.UpdateItem", "", CONTROL, "rate#*"),  # the key's request rate
            Touch("dynamodb.PutItem", "", CONTROL, "interactive"),  # its request in flight
            Touch("dynamodb.DeleteItem", "", CONTROL, "interactive"),
            Touch("dynamodb.UpdateItem", "", CONTROL, "spend#*"),  # its cost, charged on its own
        },
        "batchgw-lifecycle": {
            Touch("sqs.SendMessage", "", "batchgw-webhooks.fifo"),  # a batch's end, to its owner's webhook
            Touch("dynamodb.BatchWriteItem", "Put", "batchgw-requests", "batch*"),
            Touch("dynamodb.GetItem", "", CONTROL, "webhook#*"),
            Touch("dynamodb.PutItem", "", CONTROL, "whevents#*"),  # its event's delivery, due now
            Touch("dynamodb.UpdateItem", "", CONTROL, "idem#*"),
            Touch("dynamodb.PutItem", "", FILES, "file*"),  # a result file
            Touch("s3.DeleteObjects", "", DATA, "bodies/*"),
            Touch("s3.GetObject", "", DATA, "inputs/*"),
            Touch("sqs.SendMessageBatch", "", "batchgw-work"),
            # result files in parts (batchgw.storage.blobs), which the e2e batches are too small for
            Touch("s3.CreateMultipartUpload", "", DATA, "files/*"),
            Touch("s3.UploadPart", "", DATA, "files/*"),
            Touch("s3.ListParts", "", DATA, "exports/*"),
            Touch("s3.CompleteMultipartUpload", "", DATA, "files/*"),
            Touch("s3.AbortMultipartUpload", "", DATA, "files/*"),
        },
    }
    assert missing_permissions(calls, roles) == []


def test_a_call_on_a_resource_or_partition_the_role_does_not_cover_is_reported(roles: dict[str, Any]) -> None:
    calls: dict[str, set[str | Touch]] = {
        # the internet-facing api writes no account, key or setting
        "batchgw-api": {
            Touch("dynamodb.UpdateItem", "", CONTROL, "user#*"),
            Touch("dynamodb.TransactWriteItems", "Put", CONTROL, "keyid#*"),
            Touch("dynamodb.PutItem", "", CONTROL, "runtime"),
            Touch("dynamodb.GetItem", "", CONTROL, "key#*"),  # reading its key is fine
        },
        "batchgw-worker": {
            Touch("dynamodb.GetItem", "", FILES, "file*"),  # no file records
            Touch("s3.GetObject", "", DATA, "files/*"),  # no files
        },
        "batchgw-lifecycle": {Touch("dynamodb.UpdateItem", "", CONTROL, "key#*")},
        "batchgw-webhooks": {Touch("s3.GetObject", "", DATA, "bodies/*")},
    }
    control, files = (
        f"arn:aws:dynamodb:us-east-1:123456789012:table/{name}" for name in ("Control", "Files")
    )
    denied = "which its role does not allow"
    assert missing_permissions(calls, roles) == [
        f"batchgw-api: dynamodb.PutItem needs dynamodb:PutItem on {control} for partition runtime, {denied}",
        "batchgw-api: dynamodb.TransactWriteItems needs dynamodb:PutItem on "
        f"{control} for partition keyid#*, {denied}",
        "batchgw-api: dynamodb.UpdateItem needs dynamodb:UpdateItem on "
        f"{control} for partition user#*, {denied}",
        "batchgw-lifecycle: dynamodb.UpdateItem needs dynamodb:UpdateItem on "
        f"{control} for partition key#*, {denied}",
        f"batchgw-webhooks: s3.GetObject needs s3:GetObject on arn:aws:s3:::Data/bodies/*, {denied}",
        f"batchgw-worker: dynamodb.GetItem needs dynamodb:GetItem on {files} for partition file*, {denied}",
        f"batchgw-worker: s3.GetObject needs s3:GetObject on arn:aws:s3:::Data/files/*, {denied}",
    ]


def test_a_partition_pattern_covers_its_own_kind_of_key_only() -> None:
    statement = {
        "Effect": "Allow",
        "Action": "dynamodb:GetItem",
        "Resource": "arn:t",
        "Condition": {"ForAllValues:StringLike": {"dynamodb:LeadingKeys": ["user#*", "key#*", "runtime"]}},
    }

    def reads(partition: str | None) -> bool:
        return Request("dynamodb:GetItem", "arn:t", partition).allowed_by([statement])

    assert reads("user#\x00") and reads("key#\x00") and reads("runtime")
    assert not reads("users")  # the registry is not a user's partition
    assert not reads("keyid#\x00")  # nor a key id's a key hash's
    assert not reads("runtime#\x00")
    assert reads(None)  # no leading key at all: ForAllValues holds, as on AWS (hence no Scan is granted)
    assert not Request("dynamodb:GetItem", "arn:other", "runtime").allowed_by([statement])
    unknown = {**statement, "Condition": {"StringEquals": {"aws:SourceVpc": "vpc-1"}}}
    assert not Request("dynamodb:GetItem", "arn:t", "runtime").allowed_by([unknown])


def test_the_api_and_admin_may_stop_only_the_executions_of_their_own_state_machine(
    synthesized: tuple[BatchGwStack, dict[str, Any]],
) -> None:
    stack, template = synthesized

    def logical_id(construct: IConstruct) -> str:
        element = construct.node.default_child
        assert isinstance(element, CfnElement)
        return stack.get_logical_id(element)

    machine = template["Resources"][logical_id(stack.workflow.state_machine)]["Properties"]
    for function in (stack.functions.api, stack.functions.admin):
        stops = [
            statement["Resource"]
            for statement in role_statements(template, logical_id(function))
            if "states:StopExecution" in _as_list(statement["Action"])
        ]
        assert len(stops) == 1
        assert stops[0]["Fn::Join"][1][-1] == f":execution:{machine['StateMachineName']}:*"
    for function in (stack.functions.worker, stack.functions.lifecycle, stack.functions.webhooks):
        assert not allows(role_statements(template, logical_id(function)), "states:StopExecution")


def _as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


@pytest.mark.parametrize(
    ("operation", "actions"),
    [
        ("dynamodb.GetItem", ("dynamodb:GetItem",)),
        (
            "dynamodb.TransactWriteItems",  # no IAM action of its own: authorized item by item
            ("dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:DeleteItem", "dynamodb:ConditionCheckItem"),
        ),
        ("s3.PutObject", ("s3:PutObject",)),
        ("s3.UploadPart", ("s3:PutObject",)),
        ("s3.ListObjectsV2", ("s3:ListBucket",)),
        ("s3.HeadObject", ("s3:GetObject",)),
        ("sqs.SendMessageBatch", ("sqs:SendMessage",)),
        ("sfn.StopExecution", ("states:StopExecution",)),
        ("secrets-manager.GetSecretValue", ("secretsmanager:GetSecretValue",)),
    ],
)
def test_operations_map_to_the_iam_actions_they_need(operation: str, actions: tuple[str, ...]) -> None:
    assert iam_actions(operation) == actions


def test_actions_match_iam_wildcards_case_insensitively_and_a_deny_wins() -> None:
    statements = [
        {"Effect": "Allow", "Action": ["s3:GetObject*", "dynamodb:*"], "Resource": "*"},
        {"Effect": "Allow", "NotAction": "sqs:*", "Resource": "*"},
        {"Effect": "Deny", "Action": "dynamodb:DeleteTable", "Resource": "*"},
    ]
    assert allows(statements, "s3:GetObjectTagging")
    assert allows(statements, "s3:getobject")
    assert allows(statements, "dynamodb:Query")
    assert allows(statements, "states:StopExecution")  # by the NotAction statement
    assert not allows(statements, "sqs:SendMessage")
    assert not allows(statements, "dynamodb:DeleteTable")
    assert not allows([], "s3:GetObject")
