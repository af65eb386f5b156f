"""Every AWS call a function made while the e2e tests ran is allowed by that function's role, on
the resources it made it on.

moto checks no permission, so a grant missing from ``infra/`` only fails once deployed. The
e2e stacks record each function's calls and what each touched (``conftest.stack_for``: the
table and partition of every item, the bucket and key prefix of every object, the queue...);
this check runs after every other test (``conftest.pytest_collection_modifyitems``) and
evaluates them (``tests/infra/iam_check.py``) against the synthesized template's role
policies: actions, resource ARNs and the control table's ``dynamodb:LeadingKeys`` conditions.
With ``tests/infra``'s proofs that each role holds no more than its share, the roles are pinned
to what the code uses.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from batchgw.storage.aws import read_recorded_calls_by_function, read_recorded_touches_by_function
from batchgw.storage.touches import Touch

from local.env import PREFIX
from tests.e2e.conftest import aws_calls_root
from tests.infra.iam_check import function_roles, missing_permissions, synthesize

# After every test that drives a stack: ``make test`` runs it after the rest.
pytestmark = [pytest.mark.e2e, pytest.mark.serial]


def test_every_recorded_aws_call_is_allowed_by_its_functions_role_on_what_it_touched(
    tmp_path_factory: pytest.TempPathFactory, tmp_path: Path
) -> None:
    recorded = aws_calls_root(tmp_path_factory)
    calls = read_recorded_calls_by_function(recorded) if recorded.is_dir() else {}
    touched = read_recorded_touches_by_function(recorded) if recorded.is_dir() else {}
    stack, template = synthesize(tmp_path / "cdk.out")
    roles = function_roles(stack, template, PREFIX)

    silent = sorted(set(roles) - set(calls))
    assert not silent, (
        f"no AWS calls recorded for {silent} in {recorded}: run this with the e2e tests that drive "
        "the local stack (pytest tests/e2e), whose processes record their calls there"
    )
    # What each call touched; an operation recorded without (an older recording) by its actions.
    made: dict[str, set[str | Touch]] = {}
    for function in set(calls) | set(touched):
        seen = touched.get(function, set())
        described = {touch.operation for touch in seen}
        made[function] = {*seen, *(op for op in calls.get(function, {}) if op not in described)}
    problems = missing_permissions(made, roles)
    assert not problems, "the functions made AWS calls their roles do not allow:\n" + "\n".join(problems)
