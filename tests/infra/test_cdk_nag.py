"""cdk-nag's AwsSolutions pack on the synthesized stack: nothing stands unless acknowledged in the
construct that causes it, with its reason (``infra.constructs.acknowledge``)."""

from __future__ import annotations

import os

os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")

from pathlib import Path

import pytest
from aws_cdk import App
from aws_cdk import aws_s3 as s3

from infra.app import SKIP_BUNDLING, cdk_json_context
from infra.nag import nag_findings as _findings
from infra.stack import BatchGwStack
from tests.infra.bundled import Bundled


@pytest.mark.parametrize("capacity", ["on-demand", "provisioned"])
def test_the_stack_passes_the_aws_solutions_checks(tmp_path: Path, capacity: str) -> None:
    context = {**cdk_json_context(), **SKIP_BUNDLING, "tableCapacity": capacity}
    app = App(context=context, outdir=str(tmp_path))
    findings = _findings(BatchGwStack(app, "BatchGwNag"))
    assert not findings, "cdk-nag AwsSolutions findings (errors and warnings):\n" + "\n".join(findings)


def test_a_finding_nothing_acknowledges_is_reported(tmp_path: Path) -> None:
    app = App(context={**cdk_json_context(), **SKIP_BUNDLING}, outdir=str(tmp_path))
    stack = BatchGwStack(app, "BatchGwNag")
    s3.Bucket(stack.storage, "Unlogged", enforce_ssl=True)  # no server access logs
    findings = _findings(stack)
    assert len(findings) == 1
    assert "AwsSolutions-S1 at BatchGwNag/Storage/Unlogged/Resource" in findings[0]


def test_the_stack_the_cdk_cli_bundles_passes_the_aws_solutions_checks(bundled: Bundled) -> None:
    findings = bundled.nag_findings
    assert not findings, "cdk-nag AwsSolutions findings (errors and warnings):\n" + "\n".join(findings)
