"""The CDK app.

``python -m infra.app`` (``make synth``) synthesizes offline into ``cdk.out/`` with asset
bundling skipped: no AWS account, Docker or network. Such an assembly is for reading and
linting, not for deploying, since its dependencies layer is unbuilt.

The CDK CLI (``cdk synth``/``cdk deploy``, see ``cdk.json``) bundles as usual. The
environment variable ``BATCHGW_BUNDLE`` overrides either way: ``1`` bundles, ``0`` skips.
``BATCHGW_NAG_REPORT=<file>`` writes cdk-nag's AwsSolutions findings on the stack there (a
JSON list; the tests read it from the app the CLI bundles).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from aws_cdk import App, Tags

from infra.constructs import REPO_ROOT
from infra.nag import nag_findings
from infra.stack import BatchGwStack

STACK_NAME = "BatchGw"
SKIP_BUNDLING: dict[str, Any] = {"aws:cdk:bundling-stacks": []}
# Set by the CDK CLI for the app it runs.
_CLI_OUTDIR = "CDK_OUTDIR"
NAG_REPORT = "BATCHGW_NAG_REPORT"


def cdk_json_context() -> dict[str, Any]:
    """The context (feature flags) of ``cdk.json``, so that a synth without the CLI
    (``make synth``, the tests) builds the same template as ``cdk synth``.
    """
    context: dict[str, Any] = json.loads((REPO_ROOT / "cdk.json").read_text()).get("context", {})
    return context


def bundling_enabled(environ: Mapping[str, str]) -> bool:
    flag = environ.get("BATCHGW_BUNDLE")
    if flag is not None:
        return flag.strip().lower() in {"1", "true", "yes"}
    return _CLI_OUTDIR in environ


def build_app(environ: Mapping[str, str] = os.environ) -> App:
    app = App(
        context=cdk_json_context(),
        # after the CLI's context, which names the stacks to bundle
        post_cli_context=None if bundling_enabled(environ) else SKIP_BUNDLING,
        outdir=None if _CLI_OUTDIR in environ else str(REPO_ROOT / "cdk.out"),
    )
    stack = BatchGwStack(app, STACK_NAME)
    Tags.of(stack).add("project", "batchgw")
    if report := environ.get(NAG_REPORT):
        Path(report).write_text(json.dumps(nag_findings(stack), indent=1))
    return app


def main() -> None:
    assembly = build_app().synth()
    print(f"synthesized {STACK_NAME} into {assembly.directory}")


if __name__ == "__main__":
    main()
