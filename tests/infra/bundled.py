"""The app as ``make deploy`` synthesizes it: through the pinned CDK CLI (``infra/package.json``)
with bundling on, so the layers are built as for a deploy (the dependencies layer by pip from
``requirements/lambda.txt``, which needs the package index; pip's cache keeps its wheels).

The suite bundles once: the session fixture ``bundled`` (``tests/infra/conftest.py``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from infra.app import NAG_REPORT, STACK_NAME
from infra.constructs import REPO_ROOT

CDK_CLI = REPO_ROOT / "infra" / "node_modules" / ".bin" / "cdk"
APP = f"{sys.executable} -m infra.app"  # what make deploy passes: "$(PY) -m infra.app"
TIMEOUT_SECONDS = 900


@dataclass
class Bundled:
    outdir: Path
    nag_findings: list[str]
    seconds: float

    @property
    def template_path(self) -> Path:
        return self.outdir / f"{STACK_NAME}.template.json"

    @property
    def template(self) -> dict[str, Any]:
        template: dict[str, Any] = json.loads(self.template_path.read_text())
        return template

    def layer_asset(self, description_starts: str) -> tuple[str, Path]:
        """(asset hash, bundled directory) of the layer whose description starts so."""
        manifest = json.loads((self.outdir / f"{STACK_NAME}.assets.json").read_text())
        for resource in self.template["Resources"].values():
            props = resource.get("Properties", {})
            if resource["Type"] == "AWS::Lambda::LayerVersion" and props["Description"].startswith(
                description_starts
            ):
                asset_hash = props["Content"]["S3Key"].split(".")[0]
                return asset_hash, self.outdir / manifest["files"][asset_hash]["source"]["path"]
        raise AssertionError(f"no layer described {description_starts!r}")


def cli_environment(**extra: str) -> dict[str, str]:
    return {
        **os.environ,
        "JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION": "20",
        "JSII_SILENCE_WARNING_UNTESTED_NODE_VERSION": "1",
        "CDK_DISABLE_CLI_TELEMETRY": "true",
        **extra,
    }


def bundle(outdir: Path) -> Bundled:
    """``cdk synth`` with the app and the bundling ``make deploy`` runs; fails on any error."""
    assert CDK_CLI.exists(), f"{CDK_CLI} is missing: make install (npm ci --prefix infra) installs it"
    report = outdir.parent / f"{outdir.name}.nag.json"
    started = time.monotonic()
    done = subprocess.run(
        [str(CDK_CLI), "synth", "--app", APP, "--output", str(outdir), "--quiet", "--no-notices"],
        cwd=REPO_ROOT,
        env=cli_environment(**{NAG_REPORT: str(report)}),
        capture_output=True,
        text=True,
        timeout=TIMEOUT_SECONDS,
        check=False,
    )
    assert done.returncode == 0, f"cdk synth failed ({done.returncode}):\n{done.stdout}\n{done.stderr}"
    return Bundled(outdir, json.loads(report.read_text()), time.monotonic() - started)
