"""The Lambda functions, their environment, their log groups and their permissions."""

from __future__ import annotations

import re

from aws_cdk import Duration
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_lambda_event_sources as event_sources
from aws_cdk import aws_logs as logs
from aws_cdk import aws_secretsmanager as secretsmanager
from aws_cdk import aws_stepfunctions as sfn
from batchgw.config.catalog import Catalog
from batchgw.config.settings import Settings
from constructs import Construct

from infra.constructs import REPO_ROOT
from infra.constructs.layers import ARCHITECTURE, ASSET_EXCLUDES, MODELS_CONFIG_PATH, RUNTIME, Layers
from infra.constructs.queues import Queues
from infra.constructs.storage import Storage

# The worker's (and lifecycle's) Lambda timeout: the longest Lambda allows. Everything
# that must fit inside one worker invocation derives from it.
WORKER_TIMEOUT_SECONDS = 900
# One upstream call must end well inside a worker invocation...
UPSTREAM_TIMEOUT_SECONDS = 600
# ...and an item's lease outlives the call (plus recording its result) but not the worker.
LEASE_SECONDS = UPSTREAM_TIMEOUT_SECONDS + 120
assert UPSTREAM_TIMEOUT_SECONDS < LEASE_SECONDS < WORKER_TIMEOUT_SECONDS

# The HTTP API gives up after 30 s; the handler must answer before it does.
API_TIMEOUT = Duration.seconds(29)
# Worker invocations in flight at once, whatever the depth of the work queue. The
# per-model caps are lease slots in DynamoDB; this bounds the whole gateway.
WORKER_MAX_CONCURRENCY = 50
WORKER_BATCH_SIZE = 10

LOG_RETENTION = logs.RetentionDays.ONE_MONTH
SERVICE_NAME = "batchgw"

# A complete secret ARN ends with the six characters Secrets Manager appends to the name.
_COMPLETE_SECRET_ARN = re.compile(r"^arn:[^:]+:secretsmanager:.*-[A-Za-z0-9]{6}$")


def work_visibility_timeout() -> Duration:
    """The work queue's visibility timeout, by the same rule the local stack applies."""
    settings = Settings.model_validate({"BATCH_WORKER_TIMEOUT_SECONDS": WORKER_TIMEOUT_SECONDS})
    return Duration.seconds(settings.work_visibility_seconds)


def upstream_secret_ids(catalog: Catalog) -> list[str]:
    """The Secrets Manager ids of the upstream keys the config's routes name."""
    return sorted({m.route.api_key_secret for m in catalog.models.values() if m.route.api_key_secret})


class Functions(Construct):
    """The ``api``, ``worker`` and ``lifecycle`` functions, each granted only what it uses.

    ``state_machine_arn`` is a plain string built from the state machine's fixed name:
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
        state_machine_arn: str,
    ) -> None:
        super().__init__(scope, construct_id)
        self.environment = {
            **storage.environment,
            **queues.environment,
            "BATCHGW_STATE_MACHINE_ARN": state_machine_arn,
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
        self.worker = self._function(
            "Worker",
            "worker",
            timeout=Duration.seconds(WORKER_TIMEOUT_SECONDS),
            memory_size=1024,
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
        self.all = [self.api, self.worker, self.lifecycle]

        self.worker.add_event_source(
            event_sources.SqsEventSource(
                queues.work,
                batch_size=WORKER_BATCH_SIZE,
                report_batch_item_failures=True,
                max_concurrency=WORKER_MAX_CONCURRENCY,
            )
        )
        workflow = sfn.StateMachine.from_state_machine_arn(self, "Workflow", state_machine_arn)
        self._grant(storage, queues, workflow)
        self._grant_upstream_secrets(upstream_secret_ids(layers.catalog))

    def _function(
        self, construct_id: str, folder: str, *, timeout: Duration, memory_size: int, description: str
    ) -> lambda_.Function:
        log_group = logs.LogGroup(self, f"{construct_id}Logs", retention=LOG_RETENTION)
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
        )

    def _grant(self, storage: Storage, queues: Queues, workflow: sfn.IStateMachine) -> None:
        for function in self.all:
            for table in storage.tables.values():
                table.grant_read_write_data(function)
            for bucket in storage.buckets.values():
                bucket.grant_read_write(function)
            # every function may wake a parked workflow (the last item, a cancel, park itself)
            workflow.grant_task_response(function)
        workflow.grant_start_execution(self.api)
        # Deleting a batch stops its execution: the executions of this state machine only.
        workflow.grant_execution(self.api, "states:StopExecution")
        for function in (self.worker, self.lifecycle):
            queues.work.grant_send_messages(function)
        # The worker delays work it cannot run yet (retry backoff, a full model).
        queues.work.grant(self.worker, "sqs:ChangeMessageVisibility")

    def _grant_upstream_secrets(self, secret_ids: list[str]) -> None:
        for number, secret_id in enumerate(secret_ids):
            construct_id = f"UpstreamKey{number}"
            secret: secretsmanager.ISecret
            if _COMPLETE_SECRET_ARN.match(secret_id):
                secret = secretsmanager.Secret.from_secret_complete_arn(self, construct_id, secret_id)
            elif secret_id.startswith("arn:"):
                secret = secretsmanager.Secret.from_secret_partial_arn(self, construct_id, secret_id)
            else:
                secret = secretsmanager.Secret.from_secret_name_v2(self, construct_id, secret_id)
            secret.grant_read(self.worker)
