"""The one stack: the batch API, its storage, queues, workflow and observability."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from aws_cdk import CfnOutput, Stack
from batchgw.config import resources
from constructs import Construct

from infra import capacity
from infra.constructs import REPO_ROOT
from infra.constructs.api import Api
from infra.constructs.functions import Functions, work_visibility_timeout
from infra.constructs.layers import Layers
from infra.constructs.observability import Observability
from infra.constructs.queues import Queues
from infra.constructs.storage import Storage
from infra.constructs.workflow import Workflow

# Context key naming the operator's models config (relative paths are from the repository root).
MODELS_CONFIG_CONTEXT = "modelsConfig"
DEFAULT_MODELS_CONFIG = "config/models.local.json"


class BatchGwStack(Stack):
    """Composes one construct per concern; the constructs stay reachable for tests."""

    def __init__(self, scope: Construct, construct_id: str, **kwargs: Any) -> None:
        kwargs.setdefault("description", "batchgw: batch inference API of an LLM gateway")
        super().__init__(scope, construct_id, **kwargs)

        self.storage = Storage(
            self,
            "Storage",
            capacity=capacity.TableCapacity.from_context(self.node.try_get_context(capacity.CONTEXT_KEY)),
        )
        self.queues = Queues(self, "Queues", visibility_timeout=work_visibility_timeout())
        self.layers = Layers(self, "Layers", models_config=self.models_config_path())
        # The state machine gets a fixed name so that the functions can know its ARN
        # before it exists (it invokes lifecycle: a reference would be a cycle).
        workflow_name = f"{self.stack_name}-batch"
        self.functions = Functions(
            self,
            "Functions",
            storage=self.storage,
            queues=self.queues,
            layers=self.layers,
            workflow_name=workflow_name,
        )
        self.workflow = Workflow(self, "Workflow", name=workflow_name, lifecycle=self.functions.lifecycle)
        self.api = Api(
            self,
            "Api",
            handler=self.functions.api,
            admin_handler=self.functions.admin,
            interactive_handler=self.functions.interactive,
        )
        self.observability = Observability(
            self,
            "Observability",
            http_api=self.api.http_api,
            api=self.functions.api,
            admin=self.functions.admin,
            worker=self.functions.worker,
            lifecycle=self.functions.lifecycle,
            interactive=self.functions.interactive,
            queues=self.queues.queues,
            dead_letter_queues=self.queues.dead_letter_queues,
            state_machine=self.workflow.state_machine,
            models=tuple(self.layers.catalog.models),
        )

        CfnOutput(self, "ApiBaseUrl", value=f"{self.api.url}v1", description="the OpenAI SDK's base_url")
        CfnOutput(self, "StateMachineArn", value=self.workflow.state_machine.state_machine_arn)
        CfnOutput(self, "AlarmTopicArn", value=self.observability.alarm_topic.topic_arn)
        CfnOutput(
            self,
            "ControlTableName",
            value=self.storage.tables[resources.CONTROL.logical_id].table_name,
            description="python -m batchgw.config --stack <name> changes runtime settings here",
        )
        for name, bucket in self.storage.buckets.items():
            CfnOutput(self, f"{name}BucketName", value=bucket.bucket_name)

    def models_config_path(self) -> Path:
        """The operator's models file: context ``modelsConfig``, else the local stack's."""
        value = self.node.try_get_context(MODELS_CONFIG_CONTEXT) or DEFAULT_MODELS_CONFIG
        path = Path(value)
        return path if path.is_absolute() else REPO_ROOT / path
