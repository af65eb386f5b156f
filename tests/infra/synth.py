"""BatchGwStack synthesized offline (bundling skipped), and what the infra tests read of it."""

from __future__ import annotations

import os

os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aws_cdk import App, CfnElement
from aws_cdk import aws_lambda as lambda_
from aws_cdk.assertions import Template
from constructs import IConstruct

from infra.app import SKIP_BUNDLING, cdk_json_context
from infra.stack import BatchGwStack


@dataclass
class Synth:
    stack: BatchGwStack
    template: Template
    outdir: Path

    @property
    def resources(self) -> dict[str, Any]:
        resources_: dict[str, Any] = self.template.to_json()["Resources"]
        return resources_

    def id(self, construct: IConstruct) -> str:
        """The logical id of a construct (or of the CloudFormation resource it wraps)."""
        element = construct if isinstance(construct, CfnElement) else construct.node.default_child
        assert isinstance(element, CfnElement)
        return self.stack.get_logical_id(element)

    def props(self, construct: IConstruct) -> dict[str, Any]:
        props: dict[str, Any] = self.resources[self.id(construct)]["Properties"]
        return props

    def asset_path(self, asset_hash: str) -> Path:
        manifest = json.loads((self.outdir / f"{self.stack.artifact_id}.assets.json").read_text())
        return self.outdir / manifest["files"][asset_hash]["source"]["path"]

    def code_asset(self, construct: IConstruct, key: str = "Code") -> Path:
        s3_key = self.props(construct)[key]["S3Key"]
        return self.asset_path(s3_key.split(".")[0])

    def statements(self, function: lambda_.Function) -> list[tuple[str, Any]]:
        """(action, resource) pairs of every policy statement on the function's role."""
        role = self.props(function)["Role"]["Fn::GetAtt"][0]
        pairs: list[tuple[str, Any]] = []
        for resource in self.resources.values():
            if resource["Type"] != "AWS::IAM::Policy" or {"Ref": role} not in resource["Properties"]["Roles"]:
                continue
            for statement in resource["Properties"]["PolicyDocument"]["Statement"]:
                assert statement["Effect"] == "Allow"
                for action in as_list(statement["Action"]):
                    pairs.extend((action, res) for res in as_list(statement["Resource"]))
        return pairs

    def actions(self, function: lambda_.Function) -> set[str]:
        return {action for action, _ in self.statements(function)}


def as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def synthesize(outdir: Path, **context: Any) -> Synth:
    app = App(context={**cdk_json_context(), **SKIP_BUNDLING, **context}, outdir=str(outdir))
    stack = BatchGwStack(app, "BatchGwTest")
    assembly = app.synth()
    return Synth(stack, Template.from_stack(stack), Path(assembly.directory))
