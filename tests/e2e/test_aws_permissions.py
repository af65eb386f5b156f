"""Every AWS call a function made while the e2e tests ran is allowed by that function's role.

moto checks no permission, so a grant missing from ``infra/`` only fails once deployed. The
e2e stacks record each function's calls (``conftest.stack_for``); this check runs after every
other test (``conftest.pytest_collection_modifyitems``) and maps them to IAM actions
(``tests/infra/iam_check.py``) against the synthesized template's role policies.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from batchgw.storage.aws import read_recorded_calls_by_function

from local.env import PREFIX
from tests.e2e.conftest import aws_calls_dir
from tests.infra.iam_check import function_roles, missing_permissions, synthesize

pytestmark = pytest.mark.e2e


def test_every_recorded_aws_call_is_allowed_by_its_functions_role(
    tmp_path_factory: pytest.TempPathFactory, tmp_path: Path
) -> None:
    recorded = aws_calls_dir(tmp_path_factory)
    calls = read_recorded_calls_by_function(recorded) if recorded.is_dir() else {}
    stack, template = synthesize(tmp_path / "cdk.out")
    roles = function_roles(stack, template, PREFIX)

    silent = sorted(set(roles) - set(calls))
    assert not silent, (
        f"no AWS calls recorded for {silent} in {recorded}: run this with the e2e tests that drive "
        "the local stack (pytest tests/e2e), whose processes record their calls there"
    )
    problems = missing_permissions({f: set(ops) for f, ops in calls.items()}, roles)
    assert not problems, "the functions made AWS calls their roles do not allow:\n" + "\n".join(problems)
