"""The batch workflow: one Standard Step Functions execution per batch, from the ASL
file the local stack runs too.
"""

from __future__ import annotations

import re

from aws_cdk import ArnFormat, Stack
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk import aws_stepfunctions as sfn
from batchgw.config import resources
from constructs import Construct

from infra.constructs import REPO_ROOT, acknowledge

LOG_RETENTION = logs.RetentionDays.ONE_MONTH
_PLACEHOLDER = re.compile(r"\$\{(\w+)\}")


def state_machine_arn(scope: Construct, name: str) -> str:
    """The ARN the state machine named ``name`` will have, without referring to it.

    Functions the state machine invokes need its ARN; a reference would be a cycle.
    """
    return Stack.of(scope).format_arn(
        service="states",
        resource="stateMachine",
        resource_name=name,
        arn_format=ArnFormat.COLON_RESOURCE_NAME,
    )


class Workflow(Construct):
    """The state machine named ``name``, whose Lambda tasks run ``lifecycle``."""

    def __init__(
        self, scope: Construct, construct_id: str, *, name: str, lifecycle: lambda_.IFunction
    ) -> None:
        super().__init__(scope, construct_id)
        self.name = name
        definition = REPO_ROOT / resources.WORKFLOW_ASL
        substitutions = {"LifecycleFunctionArn": lifecycle.function_arn}
        # The spec, the file and this construct must name the same placeholders: one left
        # unfilled would only fail at deploy time.
        placeholders = set(_PLACEHOLDER.findall(definition.read_text()))
        if placeholders != set(resources.WORKFLOW_SUBSTITUTIONS) or placeholders != set(substitutions):
            raise ValueError(
                f"{resources.WORKFLOW_ASL} uses {sorted(placeholders)}, the spec names "
                f"{sorted(resources.WORKFLOW_SUBSTITUTIONS)}, the stack fills {sorted(substitutions)}"
            )

        self.log_group = logs.LogGroup(self, "Logs", retention=LOG_RETENTION)
        self.state_machine = sfn.StateMachine(
            self,
            "StateMachine",
            state_machine_name=name,
            state_machine_type=sfn.StateMachineType.STANDARD,
            definition_body=sfn.DefinitionBody.from_file(str(definition)),
            definition_substitutions=substitutions,
            tracing_enabled=True,
            logs=sfn.LogOptions(
                destination=self.log_group, level=sfn.LogLevel.ALL, include_execution_data=True
            ),
        )
        # The definition comes from a file, so CDK cannot see the Lambda tasks in it. They invoke
        # the unqualified ARN: no version or alias (which grant_invoke's <ARN>:* would add).
        self.state_machine.add_to_role_policy(
            iam.PolicyStatement(actions=["lambda:InvokeFunction"], resources=[lifecycle.function_arn])
        )
        acknowledge(
            self.state_machine,
            {
                "AwsSolutions-IAM5[Resource::*]": (
                    "CDK's grants for the execution logs (logs:CreateLogDelivery, ...Describe*/List*, "
                    "PutResourcePolicy) and active tracing (xray:PutTraceSegments, ...): AWS requires "
                    "Resource * for these, which have no resource-level permissions"
                )
            },
        )
