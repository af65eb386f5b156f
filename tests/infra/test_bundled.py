"""The app as ``make deploy`` builds it: the pinned CDK CLI runs ``python -m infra.app`` with
bundling on (``tests/infra/bundled.py``, once per session). cfn-lint and cdk-nag on that
template are in ``test_stack.py`` and ``test_cdk_nag.py``."""

from __future__ import annotations

import json
import os

os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")

import subprocess
from pathlib import Path

import pytest
from aws_cdk import App

from infra.app import SKIP_BUNDLING, cdk_json_context
from infra.constructs.layers import LAMBDA_LOCK, locked_requirements
from infra.stack import BatchGwStack
from tests.infra.bundled import CDK_CLI, Bundled, cli_environment

# What Lambda takes of a function and all its layers, unzipped.
LAMBDA_UNZIPPED_LIMIT_BYTES = 250 * 1024 * 1024


@pytest.fixture(scope="module")
def synth_hash(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The dependencies layer's asset hash in this process's synth with bundling skipped."""
    app = App(context={**cdk_json_context(), **SKIP_BUNDLING}, outdir=str(tmp_path_factory.mktemp("cdk.out")))
    stack = BatchGwStack(app, "BatchGwHash")
    template = json.loads(json.dumps(app.synth().get_stack_by_name("BatchGwHash").template))
    layer = stack.get_logical_id(stack.layers.dependencies.node.default_child)  # type: ignore[arg-type]
    return str(template["Resources"][layer]["Properties"]["Content"]["S3Key"].split(".")[0])


def _size(directory: Path) -> int:
    return sum(path.stat().st_size for path in directory.rglob("*") if path.is_file())


def _installed(site: Path) -> dict[str, str]:
    """name -> version of each distribution pip installed into ``site``."""
    found = {}
    for info in site.glob("*.dist-info"):
        fields = dict(
            line.split(": ", 1) for line in (info / "METADATA").read_text().splitlines() if ": " in line
        )
        found[fields["Name"].lower().replace("_", "-")] = fields["Version"]
    return found


def test_the_cdk_cli_bundles_the_dependencies_layer_with_exactly_the_locked_packages(
    bundled: Bundled,
) -> None:
    _, layer = bundled.layer_asset("batchgw: third-party packages")
    installed = _installed(layer / "python")
    assert installed == locked_requirements()
    assert installed["boto3"] and installed["botocore"]  # the tests' versions, not the runtime's
    # built for the Lambda platform: pydantic-core's extension is an aarch64 Linux one
    (extension,) = (layer / "python" / "pydantic_core").glob("_pydantic_core.*.so")
    assert "aarch64-linux-gnu" in extension.name and "312" in extension.name


def test_the_bundled_layers_fit_lambdas_size_limit(bundled: Bundled) -> None:
    layers = [
        bundled.layer_asset(prefix)[1]
        for prefix in ("batchgw: third-party packages", "batchgw: the code", "batchgw: the models")
    ]
    sizes = [_size(layer) for layer in layers]
    # a function's own code is a handler file of a few KB: the layers are nearly all of it
    assert sum(sizes) < LAMBDA_UNZIPPED_LIMIT_BYTES / 2, sizes
    assert (layers[1] / "python" / "batchgw" / "__init__.py").exists()


def test_the_dependencies_layers_asset_hash_is_the_lock_not_the_build(
    bundled: Bundled, synth_hash: str
) -> None:
    """The same hash bundled or not, from one run to the next: a deploy uploads and publishes
    the layer again only when the lock (or pip's command) changes."""
    asset_hash, _ = bundled.layer_asset("batchgw: third-party packages")
    assert asset_hash == synth_hash


def test_deploying_without_aws_credentials_stops_at_the_credentials(bundled: Bundled, tmp_path: Path) -> None:
    """``cdk deploy`` of the bundled assembly (as ``make deploy`` runs it after the synth) in a
    shell with no AWS credentials: everything before AWS passes, then it asks for them."""
    environment = {k: v for k, v in cli_environment().items() if not k.startswith("AWS_")}
    environment.update(HOME=str(tmp_path), AWS_EC2_METADATA_DISABLED="true")
    done = subprocess.run(
        [str(CDK_CLI), "deploy", "--app", str(bundled.outdir), "--require-approval", "never", "--no-notices"],
        cwd=tmp_path,
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    output = done.stdout + done.stderr
    assert done.returncode != 0
    assert "Unable to resolve AWS account to use" in output, output


def test_the_lock_pins_every_package_with_hashes() -> None:
    text = LAMBDA_LOCK.read_text()
    pins = locked_requirements()
    assert len(pins) >= 10 and {"boto3", "botocore", "pydantic-core"} <= set(pins)
    for block in text.split("\n")[1:]:
        if block and not block[0].isspace() and not block.startswith("#"):
            assert "==" in block  # an exact version for each package ...
    assert text.count("--hash=sha256:") >= len(pins)  # ... and the hashes of its files
