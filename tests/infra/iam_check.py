"""Do the functions' roles allow the AWS calls the functions make, on what they make them on?

The local stack runs every handler on moto, which checks no permission, so a call a role does
not allow only fails once deployed. The e2e stacks record each function's calls and what each
touched (``batchgw.storage.aws.record_calls``, ``batchgw.storage.touches``: the table and the
partition of every item, the bucket and the key prefix of every object, the queue, the state
machine, the key). This module turns each into the IAM requests it makes (action, resource ARN,
``dynamodb:LeadingKeys``) and evaluates them against the role policies of the synthesized
template: actions with IAM wildcards, ``Resource`` ARNs resolved from the template's
intrinsics, the ``ForAllValues:StringLike`` condition on leading keys and the ``StringLike``
one on a listing's ``s3:prefix``. A condition it does not model never counts as allowing.

Both sides are brought to the same canonical ARNs, named by the logical ids of
``batchgw.config.resources`` (``arn:aws:dynamodb:<region>:<account>:table/Control``), so the
local stack's names and the template's references meet.
"""

from __future__ import annotations

import os

os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any

from aws_cdk import App, CfnElement
from aws_cdk.assertions import Template
from batchgw.config import resources
from batchgw.storage.aws import UNREADABLE
from batchgw.storage.touches import Touch
from constructs import IConstruct

from infra.app import SKIP_BUNDLING, cdk_json_context
from infra.stack import BatchGwStack
from local.env import ACCOUNT_ID, PREFIX, REGION, STATE_MACHINE_NAME, bucket_name, queue_name, table_name

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
    # DynamoDB authorizes a transaction item by item, as the single-item operations. Without
    # the items (an operation recorded alone), every kind it may hold is required.
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
# S3 actions on the bucket itself; every other S3 action is on an object.
BUCKET_LEVEL = frozenset({"s3:ListBucket", "s3:ListAllMyBuckets", "s3:ListBucketMultipartUploads"})
# What a touched partition or key kind's ``*`` stands for when matched against a policy's
# pattern: text no pattern spells out, which only a pattern's own ``*`` matches.
ANY_TEXT = "\x00"


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


@dataclass(frozen=True)
class Request:
    """One IAM authorization: ``action`` on ``resource`` (a canonical ARN; None: on whatever
    resource), with the item's partition key for ``dynamodb:LeadingKeys`` (None: none)."""

    action: str
    resource: str | None = None
    leading_key: str | None = None
    prefix: str | None = None  # a listing's ``s3:prefix`` (None: a listing of the whole bucket)

    def allowed_by(self, statements: Iterable[Mapping[str, Any]]) -> bool:
        """Whether some statement allows it and none denies it."""
        statements = list(statements)
        if any(s["Effect"] == "Deny" and _applies(s, self) for s in statements):
            return False
        return any(
            s["Effect"] == "Allow" and _applies(s, self) and self._conditions_hold(s) for s in statements
        )

    def _conditions_hold(self, statement: Mapping[str, Any]) -> bool:
        for operator, entries in statement.get("Condition", {}).items():
            for key, values in entries.items():
                if (operator, key) == ("StringLike", "s3:prefix"):
                    # No prefix in the request: the key is absent and StringLike fails, as on AWS.
                    if self.prefix is None or not any(
                        fnmatchcase(self.prefix, str(v)) for v in _as_list(values)
                    ):
                        return False
                    continue
                if operator != "ForAllValues:StringLike" or key != "dynamodb:LeadingKeys":
                    return False  # not modelled here: never counted as allowing
                if self.leading_key is None:
                    continue  # no leading key in the request: ForAllValues holds, as on AWS
                if not any(fnmatchcase(self.leading_key, str(v)) for v in _as_list(values)):
                    return False
        return True


def _as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def _matches(patterns: Any, action: str) -> bool:
    """IAM action matching: case-insensitive, ``*`` and ``?`` wildcards."""
    return any(fnmatchcase(action.lower(), str(pattern).lower()) for pattern in _as_list(patterns))


def _applies(statement: Mapping[str, Any], request: Request) -> bool:
    if "NotAction" in statement:
        acts = not _matches(statement["NotAction"], request.action)
    else:
        acts = _matches(statement.get("Action", []), request.action)
    if not acts or request.resource is None:
        return acts
    return any(
        fnmatchcase(request.resource, str(pattern)) for pattern in _as_list(statement.get("Resource", []))
    )


def allows(statements: Iterable[Mapping[str, Any]], action: str) -> bool:
    """Whether the statements allow ``action`` on some resource (and no statement denies it)."""
    return Request(action).allowed_by(statements)


# --- canonical ARNs -------------------------------------------------------------------------------


def table_arn(logical_id: str) -> str:
    return f"arn:aws:dynamodb:{REGION}:{ACCOUNT_ID}:table/{logical_id}"


def bucket_arn(logical_id: str) -> str:
    return f"arn:aws:s3:::{logical_id}"


def queue_arn(logical_id: str) -> str:
    return f"arn:aws:sqs:{REGION}:{ACCOUNT_ID}:{logical_id}"


WEBHOOK_KEY_ARN = f"arn:aws:kms:{REGION}:{ACCOUNT_ID}:key/WebhookSecrets"


class LocalNames:
    """The local stack's resource names (``local.env``) -> canonical ARNs."""

    def __init__(self) -> None:
        self.tables = {table_name(spec): spec.logical_id for spec in resources.TABLES}
        self.buckets = {bucket_name(spec): spec.logical_id for spec in resources.BUCKETS}
        self.queues = {queue_name(spec): spec.logical_id for spec in resources.QUEUES}

    def requests(self, touch: Touch) -> list[Request]:
        """The IAM requests one recorded touch makes."""
        service = touch.operation.partition(".")[0]
        if service == "dynamodb" and touch.part and touch.operation != "dynamodb.BatchWriteItem":
            actions: tuple[str, ...] = (f"dynamodb:{touch.part}Item",)  # a transaction's item
        elif touch.operation in ("s3.CopyObject", "s3.UploadPartCopy"):
            actions = ("s3:GetObject",) if touch.part == "source" else ("s3:PutObject",)
        else:
            actions = iam_actions(touch.operation)
        leading = self._kind(touch.key) if service == "dynamodb" and touch.key else None
        prefix = self._kind(touch.key) if service == "s3" and touch.key else None
        return [
            Request(
                action,
                self._resource(service, action, touch),
                leading,
                prefix if action == "s3:ListBucket" else None,
            )
            for action in actions
        ]

    @staticmethod
    def _kind(kind: str) -> str:
        return kind[:-1] + ANY_TEXT if kind.endswith("*") else kind

    def _resource(self, service: str, action: str, touch: Touch) -> str | None:
        name = touch.resource
        if name == UNREADABLE:
            return "unreadable: the call's parameters could not be read"
        if not name:
            return None
        if service == "dynamodb":
            table, _, index = name.partition("/index/")
            arn = table_arn(self.tables.get(table, f"unknown:{table}"))
            return f"{arn}/index/{index}" if index else arn
        if service == "s3":
            arn = bucket_arn(self.buckets.get(name, f"unknown:{name}"))
            return arn if action in BUCKET_LEVEL else f"{arn}/{self._kind(touch.key) or ANY_TEXT}"
        if service == "sqs":
            return queue_arn(self.queues.get(name, f"unknown:{name}"))
        if service == "sfn":
            kind = "execution" if action == "states:StopExecution" else "stateMachine"
            suffix = f":{ANY_TEXT}" if kind == "execution" else ""
            return f"arn:aws:states:{REGION}:{ACCOUNT_ID}:{kind}:{name}{suffix}"
        if service == "kms":
            return WEBHOOK_KEY_ARN  # the stack's one key
        return None  # secrets: the worker's upstream keys, none on the local stack


class TemplateArns:
    """The synthesized template's ``Resource`` values -> canonical ARNs (with their wildcards)."""

    def __init__(self, stack: BatchGwStack) -> None:
        storage, queues = stack.storage, stack.queues
        self.by_logical_id = {
            **{
                _logical_id(stack, storage.tables[s.logical_id]): table_arn(s.logical_id)
                for s in resources.TABLES
            },
            **{
                _logical_id(stack, storage.buckets[s.logical_id]): bucket_arn(s.logical_id)
                for s in resources.BUCKETS
            },
            **{
                _logical_id(stack, queues.queues[s.logical_id]): queue_arn(s.logical_id)
                for s in resources.QUEUES
            },
            _logical_id(stack, storage.webhook_key): WEBHOOK_KEY_ARN,
        }
        self.workflow_name = stack.workflow.name

    def resolve(self, value: Any) -> str:
        if isinstance(value, str):
            return value.replace(self.workflow_name, STATE_MACHINE_NAME)
        if isinstance(value, dict) and "Ref" in value:
            return {"AWS::Partition": "aws", "AWS::Region": REGION, "AWS::AccountId": ACCOUNT_ID}.get(
                value["Ref"], f"unresolved:{value['Ref']}"
            )
        if isinstance(value, dict) and "Fn::GetAtt" in value:
            logical_id, attribute = value["Fn::GetAtt"]
            return (
                self.by_logical_id.get(logical_id, f"unresolved:{logical_id}") if attribute == "Arn" else ""
            )
        if isinstance(value, dict) and "Fn::Join" in value:
            separator, parts = value["Fn::Join"]
            return str(separator).join(self.resolve(part) for part in parts)
        return f"unresolved:{value!r}"

    def statements(self, statements: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """``statements`` with their resources resolved."""
        return [
            {**s, "Resource": [self.resolve(r) for r in _as_list(s.get("Resource", []))]}
            if "Resource" in s
            else s
            for s in statements
        ]


def _logical_id(stack: BatchGwStack, construct: IConstruct) -> str:
    element = construct if isinstance(construct, CfnElement) else construct.node.default_child
    assert isinstance(element, CfnElement)
    return stack.get_logical_id(element)


# --- the check ------------------------------------------------------------------------------------


def missing_permissions(
    calls: Mapping[str, Iterable[str | Touch]], roles: Mapping[str, list[dict[str, Any]]]
) -> list[str]:
    """What the roles do not allow: for each function (by name) what it touched (or, recorded
    alone, the operations it called), against the statements of each function's role (by the
    same names, resources resolved: ``function_roles``). An empty list: all allowed."""
    names = LocalNames()
    problems = []
    for function, made in sorted(calls.items()):
        touched = sorted({Touch(m) if isinstance(m, str) else m for m in made})
        if function not in roles:
            problems.append(
                f"{function}: calls made outside a known function: {sorted({t.operation for t in touched})}"
            )
            continue
        for touch in touched:
            try:
                requests = names.requests(touch)
            except UnknownOperation as exc:
                problems.append(f"{function}: {exc}")
                continue
            problems += [
                f"{function}: {touch.operation} needs {_described(request)}, which its role does not allow"
                for request in requests
                if not request.allowed_by(roles[function])
            ]
    return list(dict.fromkeys(problems))


def _described(request: Request) -> str:
    text = request.action
    if request.resource is not None:
        text += f" on {request.resource.replace(ANY_TEXT, '*')}"
    if request.leading_key is not None:
        text += f" for partition {request.leading_key.replace(ANY_TEXT, '*')}"
    if request.action == "s3:ListBucket":
        text += (
            " of the whole bucket"
            if request.prefix is None
            else f" under {request.prefix.replace(ANY_TEXT, '*')}"
        )
    return text


def synthesize(outdir: Path) -> tuple[BatchGwStack, dict[str, Any]]:
    """The stack, synthesized offline as ``tests/infra/synth.py`` does, and its template."""
    app = App(context={**cdk_json_context(), **SKIP_BUNDLING}, outdir=str(outdir))
    stack = BatchGwStack(app, "BatchGwPermissions")
    return stack, Template.from_stack(stack).to_json()


def role_statements(template: Mapping[str, Any], function_id: str) -> list[dict[str, Any]]:
    """Every statement of the policies on the role of the function with logical id ``function_id``:
    its ``AWS::IAM::Policy`` resources and the role's inline policies."""
    resources_ = template["Resources"]
    role = resources_[function_id]["Properties"]["Role"]["Fn::GetAtt"][0]
    documents = [p.get("PolicyDocument", {}) for p in resources_[role]["Properties"].get("Policies", [])]
    documents += [
        r["Properties"]["PolicyDocument"]
        for r in resources_.values()
        if r["Type"] == "AWS::IAM::Policy" and {"Ref": role} in r["Properties"].get("Roles", [])
    ]
    return [statement for document in documents for statement in _as_list(document.get("Statement", []))]


def function_roles(
    stack: BatchGwStack, template: Mapping[str, Any], prefix: str = PREFIX
) -> dict[str, list[dict[str, Any]]]:
    """``<prefix>-api``, ``-admin``, ``-worker``, ``-lifecycle``, ``-webhooks`` (the local stack's
    names) -> their role's statements, resources resolved to canonical ARNs."""
    arns = TemplateArns(stack)
    return {
        f"{prefix}-{name}": arns.statements(role_statements(template, _logical_id(stack, function)))
        for name, function in stack.functions.by_name.items()
    }
