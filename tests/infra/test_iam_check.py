"""The permission check the e2e run ends with (``tests/e2e/test_aws_permissions.py``), on its own:
it finds what a role lacks, and the roles hold what the code is known to call."""

from __future__ import annotations

import os

os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")

from typing import Any

import pytest
from aws_cdk import CfnElement
from constructs import IConstruct

from infra.stack import BatchGwStack
from local.env import PREFIX
from tests.infra.iam_check import (
    allows,
    function_roles,
    iam_actions,
    missing_permissions,
    role_statements,
    synthesize,
)


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
        "batchgw-api": {"dynamodb.GetItem", "sqs.SendMessageBatch"},  # the api never feeds the queue
        "batchgw-worker": {"sfn.SendTaskSuccess", "sfn.StopExecution"},  # only the api stops executions
        "batchgw-lifecycle": {"s3.ListObjectsV2"},
    }
    assert missing_permissions(calls, roles) == [
        "batchgw-api: sqs.SendMessageBatch needs sqs:SendMessage, which its role does not allow",
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
    assert set(roles) == {"batchgw-api", "batchgw-worker", "batchgw-lifecycle", "batchgw-webhooks"}
    calls = {
        "batchgw-api": {
            "dynamodb.TransactWriteItems",
            "s3.HeadObject",
            "s3.CopyObject",
            "s3.CompleteMultipartUpload",
            "sfn.StartExecution",
            "sfn.StopExecution",  # DELETE /v1/batches/{id}
            "kms.Encrypt",  # a new webhook secret
        },
        "batchgw-webhooks": {
            "sqs.ReceiveMessage",
            "sqs.DeleteMessageBatch",
            "sqs.ChangeMessageVisibility",  # an event that waits
            "kms.Decrypt",
            "dynamodb.GetItem",
            "dynamodb.PutItem",
            "dynamodb.UpdateItem",
        },
        "batchgw-worker": {
            "sqs.ReceiveMessage",  # the event source mapping's, with the worker's role
            "sqs.DeleteMessageBatch",
            "sqs.ChangeMessageVisibility",
            "sqs.SendMessageBatch",
            "sfn.SendTaskSuccess",
        },
        "batchgw-lifecycle": {
            "sqs.SendMessage",  # a batch's end, to its owner's webhook
            "dynamodb.BatchWriteItem",
            "s3.DeleteObjects",
            "sqs.SendMessageBatch",
            # result files in parts (batchgw.storage.blobs), which the e2e batches are too small for
            "s3.CreateMultipartUpload",
            "s3.UploadPart",
            "s3.ListParts",
            "s3.CompleteMultipartUpload",
            "s3.AbortMultipartUpload",
        },
    }
    assert missing_permissions(calls, roles) == []


def test_the_api_may_stop_only_the_executions_of_its_own_state_machine(
    synthesized: tuple[BatchGwStack, dict[str, Any]],
) -> None:
    stack, template = synthesized

    def logical_id(construct: IConstruct) -> str:
        element = construct.node.default_child
        assert isinstance(element, CfnElement)
        return stack.get_logical_id(element)

    machine = template["Resources"][logical_id(stack.workflow.state_machine)]["Properties"]
    stops = [
        statement["Resource"]
        for statement in role_statements(template, logical_id(stack.functions.api))
        if "states:StopExecution" in _as_list(statement["Action"])
    ]
    assert len(stops) == 1
    assert stops[0]["Fn::Join"][1][-1] == f":execution:{machine['StateMachineName']}:*"
    for function in (stack.functions.worker, stack.functions.lifecycle):
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
