from __future__ import annotations

from typing import Any

import pytest
from aws_cdk import aws_lambda as lambda_

from tests.infra.bundled import Bundled, bundle
from tests.infra.iam_check import function_roles
from tests.infra.synth import Synth, synthesize


@pytest.fixture(scope="session")
def bundled(tmp_path_factory: pytest.TempPathFactory) -> Bundled:
    """The app bundled once for the session, through the CDK CLI (``tests/infra/bundled.py``)."""
    return bundle(tmp_path_factory.mktemp("bundled") / "cdk.out")


@pytest.fixture(scope="session")
def synth(tmp_path_factory: pytest.TempPathFactory) -> Synth:
    """The stack synthesized once for the session, bundling skipped."""
    return synthesize(tmp_path_factory.mktemp("cdk.out"))


@pytest.fixture(scope="session")
def functions(synth: Synth) -> dict[str, lambda_.Function]:
    return dict(synth.stack.functions.by_name)


@pytest.fixture(scope="session")
def roles(synth: Synth) -> dict[str, list[dict[str, Any]]]:
    """Each function's role statements by its name (``api``...), resources resolved to canonical ARNs."""
    resolved = function_roles(synth.stack, synth.template.to_json(), prefix="fn")
    return {name.removeprefix("fn-"): statements for name, statements in resolved.items()}
