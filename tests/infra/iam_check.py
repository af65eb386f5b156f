"""Do the functions' roles allow the AWS calls the functions make?

The local stack runs every handler on moto, which checks no permission, so a call a role does
not allow only fails once deployed. The e2e stacks record each function's calls
(``batchgw.storage.aws.record_calls``: ``service.Operation`` per function); this module maps
each to the IAM actions it needs and checks them against the role policies of the synthesized
template. Actions only: the recording does not keep resources, so resource scoping is
asserted by the infra tests.
"""

from __future__ import annotations

import os

os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")

from collections.abc import Iterable, Mapping
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any

from aws_cdk import App, CfnElement
from aws_cdk.assertions import Template

from infra.app import SKIP_BUNDLING, cdk_json_context
from infra.stack import BatchGwStack

# The service as recorded (botocore's event names: its service id, hyphenized) -> the IAM
# service prefix of its actions.
IAM_PREFIX = {
    "dynamodb": "dynamodb",
    "s3": "s3",
    "sqs": "sqs",
    "sfn": "states",
    "secrets-manager": "secretsmanager",
    "lambda": "lambda",
    "kms": "kms",
}

# Operations whose IAM actions are not ``<prefix>:<Operation>``.
IAM_ACTIONS: dict[str, tuple[str, ...]] = {
    # DynamoDB authorizes a transaction item by item, as the single-item operations. Which
    # kinds of item a transaction held is not recorded, so every kind it may hold is required.
    "dynamodb.TransactWriteItems": (
        "dynamodb:PutItem",
        "dynamodb:UpdateItem",
        "dynamodb:DeleteItem",
        "dynamodb:ConditionCheckItem",
    ),
    "dynamodb.TransactGetItems": ("dynamodb:GetItem",),
    "s3.HeadObject": ("s3:GetObject",),
    "s3.HeadBucket": ("s3:ListBucket",),
    "s3.ListObjects": ("s3:ListBucket",),
    "s3.ListObjectsV2": ("s3:ListBucket",),
    "s3.ListBuckets": ("s3:ListAllMyBuckets",),
    "s3.DeleteObjects": ("s3:DeleteObject",),
    "s3.CreateMultipartUpload": ("s3:PutObject",),
    "s3.UploadPart": ("s3:PutObject",),
    "s3.CompleteMultipartUpload": ("s3:PutObject",),
    "s3.ListParts": ("s3:ListMultipartUploadParts",),
    "s3.CopyObject": ("s3:GetObject", "s3:PutObject"),
    "s3.UploadPartCopy": ("s3:GetObject", "s3:PutObject"),
    "sqs.SendMessageBatch": ("sqs:SendMessage",),
    "sqs.DeleteMessageBatch": ("sqs:DeleteMessage",),
    "sqs.ChangeMessageVisibilityBatch": ("sqs:ChangeMessageVisibility",),
}


class UnknownOperation(ValueError):
    pass


def iam_actions(operation: str) -> tuple[str, ...]:
    """The IAM actions a call of ``operation`` (``service.Operation``, as recorded) needs."""
    if operation in IAM_ACTIONS:
        return IAM_ACTIONS[operation]
    service, _, name = operation.partition(".")
    if service not in IAM_PREFIX or not name:
        raise UnknownOperation(f"no IAM mapping for {operation!r}: add its service to IAM_PREFIX")
    return (f"{IAM_PREFIX[service]}:{name}",)


def _as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def _matches(patterns: Any, action: str) -> bool:
    """IAM action matching: case-insensitive, ``*`` and ``?`` wildcards."""
    return any(fnmatchcase(action.lower(), str(pattern).lower()) for pattern in _as_list(patterns))


def _applies(statement: Mapping[str, Any], action: str) -> bool:
    if "NotAction" in statement:
        return not _matches(statement["NotAction"], action)
    return _matches(statement.get("Action", []), action)


def allows(statements: Iterable[Mapping[str, Any]], action: str) -> bool:
    """Whether the statements allow ``action`` on some resource (and no statement denies it)."""
    statements = list(statements)
    if any(s["Effect"] == "Deny" and _applies(s, action) for s in statements):
        return False
    return any(s["Effect"] == "Allow" and _applies(s, action) for s in statements)


def role_statements(template: Mapping[str, Any], function_id: str) -> list[dict[str, Any]]:
    """Every statement of the policies on the role of the function with logical id ``function_id``:
    its ``AWS::IAM::Policy`` resources and the role's inline policies."""
    resources = template["Resources"]
    role = resources[function_id]["Properties"]["Role"]["Fn::GetAtt"][0]
    documents = [p.get("PolicyDocument", {}) for p in resources[role]["Properties"].get("Policies", [])]
    documents += [
        r["Properties"]["PolicyDocument"]
        for r in resources.values()
        if r["Type"] == "AWS::IAM::Policy" and {"Ref": role} in r["Properties"].get("Roles", [])
    ]
    return [statement for document in documents for statement in _as_list(document.get("Statement", []))]


def missing_permissions(
    calls: Mapping[str, Iterable[str]], roles: Mapping[str, list[dict[str, Any]]]
) -> list[str]:
    """What the roles do not allow: for each function (by name) the operations it called, against
    the statements of each function's role (by the same names). An empty list: all allowed."""
    problems = []
    for function, operations in sorted(calls.items()):
        if function not in roles:
            problems.append(f"{function}: calls made outside a known function: {sorted(operations)}")
            continue
        for operation in sorted(operations):
            try:
                actions = iam_actions(operation)
            except UnknownOperation as exc:
                problems.append(f"{function}: {exc}")
                continue
            problems += [
                f"{function}: {operation} needs {action}, which its role does not allow"
                for action in actions
                if not allows(roles[function], action)
            ]
    return problems


def synthesize(outdir: Path) -> tuple[BatchGwStack, dict[str, Any]]:
    """The stack, synthesized offline as ``tests/infra/test_stack.py`` does, and its template."""
    app = App(context={**cdk_json_context(), **SKIP_BUNDLING}, outdir=str(outdir))
    stack = BatchGwStack(app, "BatchGwPermissions")
    return stack, Template.from_stack(stack).to_json()


def function_roles(stack: BatchGwStack, template: Mapping[str, Any], prefix: str) -> dict[str, Any]:
    """``<prefix>-api``, ``-worker``, ``-lifecycle``, ``-webhooks`` (the local stack's names) -> their
    role's statements."""
    functions = stack.functions
    by_name = {
        "api": functions.api,
        "worker": functions.worker,
        "lifecycle": functions.lifecycle,
        "webhooks": functions.webhooks,
    }
    roles = {}
    for name, function in by_name.items():
        element = function.node.default_child
        assert isinstance(element, CfnElement)
        roles[f"{prefix}-{name}"] = role_statements(template, stack.get_logical_id(element))
    return roles
