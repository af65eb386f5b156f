"""The Lambda functions, their environment, their log groups and their permissions."""

from __future__ import annotations

import re
from typing import Any

from aws_cdk import Duration
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_lambda_event_sources as event_sources
from aws_cdk import aws_logs as logs
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_secretsmanager as secretsmanager
from aws_cdk import aws_stepfunctions as sfn
from batchgw.config import resources
from batchgw.config.catalog import Catalog
from batchgw.config.settings import WEBHOOK_FUNCTION_SECONDS, Settings
from constructs import Construct

from infra.constructs import REPO_ROOT, acknowledge, nag_arn
from infra.constructs.layers import ARCHITECTURE, ASSET_EXCLUDES, MODELS_CONFIG_PATH, RUNTIME, Layers
from infra.constructs.queues import Queues
from infra.constructs.storage import Storage
from infra.constructs.workflow import state_machine_arn

# The worker's (and lifecycle's) Lambda timeout: the longest Lambda allows. Everything
# that must fit inside one worker invocation derives from it.
WORKER_TIMEOUT_SECONDS = 900
# One upstream call must end well inside a worker invocation...
UPSTREAM_TIMEOUT_SECONDS = 600
# ...and a request's lease is a few minutes, renewed while its call runs: a dead worker's
# requests come back a few minutes later, however long a call may take.
LEASE_SECONDS = 180
assert LEASE_SECONDS < UPSTREAM_TIMEOUT_SECONDS < WORKER_TIMEOUT_SECONDS

# The HTTP API gives up after 30 s; the handler must answer before it does.
API_TIMEOUT = Duration.seconds(29)
# One event per invocation (a FIFO group's order is kept whatever the batch size); the
# receiver's 15 s (BATCH_WEBHOOK_TIMEOUT_SECONDS, every redirect included) with room to spare,
# within the webhook queue's visibility (resources.WEBHOOK_QUEUE).
WEBHOOK_TIMEOUT = Duration.seconds(WEBHOOK_FUNCTION_SECONDS)
# Worker invocations in flight at once (``resources.WORKER_MAX_CONCURRENCY``: the local
# stack's environments are bounded by it too).
WORKER_MAX_CONCURRENCY = resources.WORKER_MAX_CONCURRENCY
WORKER_BATCH_SIZE = 10

LOG_RETENTION = logs.RetentionDays.ONE_MONTH
SERVICE_NAME = "batchgw"

# What a function may do with the objects under a key prefix of the data bucket
# (``batchgw.storage.blobs``), itself or through the URLs it presigns, by its access in
# ``resources.DATA_PREFIXES``: read them (HeadObject is GetObject); write them (whole or in
# parts, whose list completes an upload; a copy's target), delete them and abort an unfinished
# upload in parts; or only delete them.
OBJECT_READ_ACTIONS = ["s3:GetObject"]
OBJECT_WRITE_ACTIONS = [
    "s3:PutObject",
    "s3:DeleteObject",
    "s3:ListMultipartUploadParts",
    "s3:AbortMultipartUpload",
]
OBJECT_DELETE_ACTIONS = ["s3:DeleteObject"]
# The functions that list the bucket: both delete a batch's objects by prefix, and read whether
# an object exists (a presigned upload not made yet, a result file's part) as a listing of its
# key. ListBucket has no per-key resource: an ``s3:prefix`` condition holds each to the key
# prefixes it touches. (HeadObject of a missing key would answer 403 under that condition, not
# 404: nothing heads an object.) Keys are ids; no content is listed.
LISTS_BUCKET = (resources.API, resources.LIFECYCLE)

# What a function may do with a table's items (DynamoDB authorizes each item of a transaction
# or a batch write by itself, with these actions and its key). No Scan: nothing scans, and a
# Scan has no leading key for a partition condition to hold it to.
ITEM_READ_ACTIONS = [
    "dynamodb:GetItem",
    "dynamodb:BatchGetItem",
    "dynamodb:Query",
    "dynamodb:ConditionCheckItem",
]
ITEM_WRITE_ACTIONS = [
    "dynamodb:PutItem",
    "dynamodb:UpdateItem",
    "dynamodb:DeleteItem",
    "dynamodb:BatchWriteItem",
]
ITEM_DELETE_ACTIONS = ["dynamodb:DeleteItem", "dynamodb:BatchWriteItem"]
# The control table's condition: every partition key an operation touches (each item's, a
# Query's) matches one of the function's patterns in ``resources.CONTROL_PARTITIONS``.
LEADING_KEYS = "dynamodb:LeadingKeys"

# A complete secret ARN ends with the six characters Secrets Manager appends to the name.
_COMPLETE_SECRET_ARN = re.compile(r"^arn:[^:]+:secretsmanager:.*-[A-Za-z0-9]{6}$")


def work_visibility_timeout() -> Duration:
    """The work queue's visibility timeout, by the same rule the local stack applies."""
    settings = Settings.model_validate({"BATCH_WORKER_TIMEOUT_SECONDS": WORKER_TIMEOUT_SECONDS})
    return Duration.seconds(settings.work_visibility_seconds)


def upstream_secret_ids(catalog: Catalog) -> list[str]:
    """The Secrets Manager ids of the upstream keys the config's routes name."""
    return sorted(
        {r.api_key_secret for m in catalog.models.values() for r in m.routes if r.api_key_secret is not None}
    )


def batch_service_secret_ids(catalog: Catalog) -> set[str]:
    """Of those, the keys of routes whose provider's batch service runs batches (``batch_api``):
    the lifecycle function's provider step calls them too."""
    return {
        r.api_key_secret
        for m in catalog.models.values()
        for r in m.routes
        if r.api_key_secret is not None and r.batch_api
    }


class Functions(Construct):
    """The ``api``, ``admin``, ``worker``, ``lifecycle``, ``webhooks`` and ``interactive``
    functions, each granted
    only what it uses: its share of the tables, the control table's partitions and the bucket's
    key prefixes as ``batchgw.config.resources`` declares them, and the queues, workflow and keys
    its code calls.

    The state machine's ARN is a plain string built from its fixed name, ``workflow_name``:
    the state machine invokes ``lifecycle`` and ``lifecycle`` answers its task tokens, so
    referring to the state machine resource here would be a dependency cycle.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        storage: Storage,
        queues: Queues,
        layers: Layers,
        workflow_name: str,
    ) -> None:
        super().__init__(scope, construct_id)
        workflow_arn = state_machine_arn(self, workflow_name)
        self.environment = {
            **storage.environment,
            **queues.environment,
            "BATCHGW_STATE_MACHINE_ARN": workflow_arn,
            "BATCHGW_MODELS_CONFIG": MODELS_CONFIG_PATH,
            "BATCH_WORKER_TIMEOUT_SECONDS": str(WORKER_TIMEOUT_SECONDS),
            "BATCH_UPSTREAM_TIMEOUT_SECONDS": str(UPSTREAM_TIMEOUT_SECONDS),
            "BATCH_LEASE_SECONDS": str(LEASE_SECONDS),
            "POWERTOOLS_SERVICE_NAME": SERVICE_NAME,
            "POWERTOOLS_METRICS_NAMESPACE": SERVICE_NAME,
        }
        Settings.from_env(self.environment)  # fail the synth, not the cold start
        self._layers = layers.all

        self.api = self._function(
            "Api", "api", timeout=API_TIMEOUT, memory_size=1024, description="batchgw: the HTTP API"
        )
        self.admin = self._function(
            "Admin",
            "admin",
            timeout=API_TIMEOUT,
            memory_size=1024,
            description="batchgw: the HTTP API's /admin routes (users, keys, runtime settings)",
        )
        self.worker = self._function(
            "Worker",
            "worker",
            timeout=Duration.seconds(WORKER_TIMEOUT_SECONDS),
            # It waits on upstream calls: ~10 ms of CPU per request (under a quarter of the
            # vCPU share this buys, at ten chains of 2 s calls), ~95 MB resident at its busiest
            # in `make cost` and 183-229 MB with every answer near the 4 MiB limit
            # (`python -m bench.worker_memory`): 384 MB leaves 150 MB over the worst. More
            # buys shorter CPU bursts, not more throughput, at more GB-seconds.
            memory_size=384,
            description="batchgw: runs batch requests against the upstream models",
        )
        self.lifecycle = self._function(
            "Lifecycle",
            "lifecycle",
            timeout=Duration.seconds(WORKER_TIMEOUT_SECONDS),
            # finalize assembles result files
            memory_size=2048,
            description="batchgw: the workflow's steps (prepare, park, expire, cancel, finalize)",
        )
        self.webhooks = self._function(
            "Webhooks",
            "webhooks",
            timeout=WEBHOOK_TIMEOUT,
            memory_size=512,
            description="batchgw: signs and delivers batch events to users' webhooks",
        )
        self.interactive = self._function(
            "Interactive",
            "interactive",
            timeout=API_TIMEOUT,
            # It waits on one upstream call at a time, its answer (5 MB at most) passed on whole.
            memory_size=512,
            description="batchgw: the reference interactive path (one request straight to its model)",
        )
        # by the names ``resources`` declares their access under
        self.by_name = {
            resources.API: self.api,
            resources.ADMIN: self.admin,
            resources.WORKER: self.worker,
            resources.LIFECYCLE: self.lifecycle,
            resources.WEBHOOKS: self.webhooks,
            resources.INTERACTIVE: self.interactive,
        }
        assert tuple(self.by_name) == resources.FUNCTIONS
        self.all = list(self.by_name.values())

        self.worker.add_event_source(
            event_sources.SqsEventSource(
                queues.work,
                batch_size=WORKER_BATCH_SIZE,
                report_batch_item_failures=True,
                max_concurrency=WORKER_MAX_CONCURRENCY,
            )
        )
        # Flex requests' work, one message an invocation in environments of its own.
        self.worker.add_event_source(
            event_sources.SqsEventSource(
                queues.flex,
                batch_size=resources.FLEX_QUEUE.batch_size,
                report_batch_item_failures=True,
                max_concurrency=resources.FLEX_MAX_CONCURRENCY,
            )
        )
        self.webhooks.add_event_source(
            event_sources.SqsEventSource(
                queues.webhooks,
                batch_size=resources.WEBHOOK_QUEUE.batch_size,
                report_batch_item_failures=True,
            )
        )
        workflow = sfn.StateMachine.from_state_machine_arn(self, "Workflow", workflow_arn)
        self._grant(storage, queues, workflow)
        self._grant_upstream_secrets(
            upstream_secret_ids(layers.catalog), batch_service_secret_ids(layers.catalog)
        )
        self._acknowledge(storage, workflow_name)

    def _function(
        self, construct_id: str, folder: str, *, timeout: Duration, memory_size: int, description: str
    ) -> lambda_.Function:
        log_group = logs.LogGroup(self, f"{construct_id}Logs", retention=LOG_RETENTION)
        role = iam.Role(self, f"{construct_id}Role", assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"))
        # Its own log group only, where AWSLambdaBasicExecutionRole would allow writing to any.
        log_group.grant_write(role)
        return lambda_.Function(
            self,
            construct_id,
            description=description,
            runtime=RUNTIME,
            architecture=ARCHITECTURE,
            handler="handler.handler",
            code=lambda_.Code.from_asset(str(REPO_ROOT / "functions" / folder), exclude=ASSET_EXCLUDES),
            layers=self._layers,
            environment=self.environment,
            timeout=timeout,
            memory_size=memory_size,
            tracing=lambda_.Tracing.ACTIVE,
            log_group=log_group,
            role=role,
        )

    def _grant(self, storage: Storage, queues: Queues, workflow: sfn.IStateMachine) -> None:
        for name, function in self.by_name.items():
            self._grant_tables(name, function, storage)
            self._grant_control(name, function, storage.tables[resources.CONTROL.logical_id])
            self._grant_objects(name, function, storage.buckets[resources.DATA_BUCKET.logical_id])
        # Who wakes a parked workflow: a cancel (api; admin, as a deleted user's provider-run
        # batches are cancelled; interactive, a flex request given up), the last item
        # (worker), park itself (lifecycle).
        for function in (self.api, self.admin, self.worker, self.lifecycle, self.interactive):
            workflow.grant_task_response(function)
        # A batch is started by the api; deleting one (a user's, or a deleted user's every batch)
        # stops its execution and starts its purge: the executions of this state machine only.
        for function in (self.api, self.admin):
            workflow.grant_start_execution(function)
            workflow.grant_execution(function, "states:StopExecution")
        # ...and a background response (a batch of one request) by the interactive function.
        workflow.grant_start_execution(self.interactive)
        for function in (self.worker, self.lifecycle):
            queues.work.grant_send_messages(function)
            queues.flex.grant_send_messages(function)
        # The worker delays work it cannot run yet (retry backoff, a full model).
        queues.work.grant(self.worker, "sqs:ChangeMessageVisibility")
        queues.flex.grant(self.worker, "sqs:ChangeMessageVisibility")
        # The api seals a new webhook secret; only the function that signs deliveries opens one.
        storage.webhook_key.grant(self.api, "kms:Encrypt")
        storage.webhook_key.grant(self.webhooks, "kms:Decrypt")
        # A batch's end is announced by the workflow's steps; a waiting event stays invisible.
        queues.webhooks.grant_send_messages(self.lifecycle)
        # ...and an endpoint's test event by the api, sent (and signed) by the webhook function.
        queues.webhooks.grant_send_messages(self.api)
        queues.webhooks.grant(self.webhooks, "sqs:ChangeMessageVisibility")

    @staticmethod
    def _allow(
        function: lambda_.Function,
        actions: list[str],
        resources_: list[str],
        conditions: dict[str, Any] | None = None,
    ) -> None:
        function.add_to_role_policy(
            iam.PolicyStatement(actions=actions, resources=resources_, conditions=conditions)
        )

    def _grant_tables(self, name: str, function: lambda_.Function, storage: Storage) -> None:
        """The tables ``name`` touches, as ``resources.TABLE_ACCESS`` says (a table's indexes
        with its reads)."""
        for spec in resources.TABLES:
            access = resources.TABLE_ACCESS.get(spec.logical_id)
            if access is None:
                continue
            arn = storage.tables[spec.logical_id].table_arn
            if access.reads(name):
                self._allow(function, ITEM_READ_ACTIONS, [arn, *([f"{arn}/index/*"] if spec.indexes else [])])
            if access.writes(name):
                self._allow(function, ITEM_WRITE_ACTIONS, [arn])
            elif access.deletes(name):
                self._allow(function, ITEM_DELETE_ACTIONS, [arn])

    def _grant_control(self, name: str, function: lambda_.Function, table: dynamodb.ITable) -> None:
        """The control table's partitions ``name`` touches (``resources.CONTROL_PARTITIONS``),
        held to them by a ``dynamodb:LeadingKeys`` condition on every statement."""
        partitions = resources.CONTROL_PARTITIONS
        for actions, patterns in (
            (ITEM_READ_ACTIONS, [p for p, a in partitions.items() if a.reads(name)]),
            (ITEM_WRITE_ACTIONS, [p for p, a in partitions.items() if a.writes(name)]),
            (
                ITEM_DELETE_ACTIONS,
                [p for p, a in partitions.items() if a.deletes(name) and not a.writes(name)],
            ),
        ):
            if patterns:
                condition = {"ForAllValues:StringLike": {LEADING_KEYS: sorted(patterns)}}
                self._allow(function, actions, [table.table_arn], condition)

    def _grant_objects(self, name: str, function: lambda_.Function, bucket: s3.IBucket) -> None:
        """The bucket's key prefixes ``name`` touches (``resources.DATA_PREFIXES``)."""
        by_actions: dict[tuple[str, ...], list[str]] = {}
        for prefix, access in resources.DATA_PREFIXES.items():
            under = bucket.arn_for_objects(f"{prefix}*")
            if access.reads(name):
                by_actions.setdefault(tuple(OBJECT_READ_ACTIONS), []).append(under)
            if access.writes(name):
                by_actions.setdefault(tuple(OBJECT_WRITE_ACTIONS), []).append(under)
            elif access.deletes(name):
                by_actions.setdefault(tuple(OBJECT_DELETE_ACTIONS), []).append(under)
        for actions, objects in by_actions.items():
            self._allow(function, list(actions), objects)
        if name in LISTS_BUCKET:
            listed = sorted(f"{p}*" for p, access in resources.DATA_PREFIXES.items() if access.touches(name))
            self._allow(
                function, ["s3:ListBucket"], [bucket.bucket_arn], {"StringLike": {"s3:prefix": listed}}
            )

    def _acknowledge(self, storage: Storage, workflow_name: str) -> None:
        """The cdk-nag findings on the functions that stand, each with its reason."""
        findings = {
            "AwsSolutions-L1": (
                f"{RUNTIME.name} is pinned together with the dependencies layer, whose wheels are built "
                "for it (layers.PYTHON_VERSION); a newer runtime is a change of its own, with the layer "
                "rebuilt and the suite run on it"
            ),
            "AwsSolutions-IAM5[Resource::*]": (
                "active X-Ray tracing: xray:PutTraceSegments and xray:PutTelemetryRecords have no "
                "resource-level permissions, so AWS requires Resource *"
            ),
        }
        bucket = storage.buckets[resources.DATA_BUCKET.logical_id]
        for prefix in resources.DATA_PREFIXES:
            findings[f"AwsSolutions-IAM5[Resource::{nag_arn(bucket, f'/{prefix}*')}]"] = (
                f"the objects under {prefix} only, whose keys (per batch, file and upload) are made at "
                "runtime; granted to the functions resources.DATA_PREFIXES names, with only the actions "
                "of their access (OBJECT_READ_ACTIONS, OBJECT_WRITE_ACTIONS, OBJECT_DELETE_ACTIONS)"
            )
        for spec in resources.TABLES:
            if spec.indexes:
                table = storage.tables[spec.logical_id]
                findings[f"AwsSolutions-IAM5[Resource::{nag_arn(table, '/index/*')}]"] = (
                    f"Query on the {spec.logical_id} table's global secondary indexes "
                    f"({', '.join(index.name for index in spec.indexes)}); CDK grants a table's indexes "
                    "as <table ARN>/index/*, which covers no other table's"
                )
        acknowledge(self, findings)
        executions = f"arn:<AWS::Partition>:states:<AWS::Region>:<AWS::AccountId>:execution:{workflow_name}:*"
        for function in (self.api, self.admin):
            assert function.role is not None
            acknowledge(
                function.role,
                {
                    f"AwsSolutions-IAM5[Resource::{executions}]": (
                        "deleting a batch stops its execution (states:StopExecution), which is named after "
                        "the batch at runtime: the executions of this one state machine only"
                    )
                },
            )

    def _grant_upstream_secrets(self, secret_ids: list[str], batch_services: set[str]) -> None:
        for number, secret_id in enumerate(secret_ids):
            construct_id = f"UpstreamKey{number}"
            secret: secretsmanager.ISecret
            if _COMPLETE_SECRET_ARN.match(secret_id):
                secret = secretsmanager.Secret.from_secret_complete_arn(self, construct_id, secret_id)
            elif secret_id.startswith("arn:"):
                secret = secretsmanager.Secret.from_secret_partial_arn(self, construct_id, secret_id)
            else:
                secret = secretsmanager.Secret.from_secret_name_v2(self, construct_id, secret_id)
            # the two functions that call the upstreams
            secret.grant_read(self.worker)
            secret.grant_read(self.interactive)
            if secret_id in batch_services:  # the provider step submits to its batch service
                secret.grant_read(self.lifecycle)
