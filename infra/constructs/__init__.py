"""The stack's building blocks, one construct per concern; ``infra/stack.py`` composes them."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from aws_cdk import Acknowledgment, CfnElement, Stack, Validations
from constructs import IConstruct

# Asset paths and ``batchgw.config.resources.WORKFLOW_ASL`` are relative to the repository root,
# wherever the app or the tests are started from.
REPO_ROOT = Path(__file__).resolve().parents[2]


def acknowledge(construct: IConstruct, findings: Mapping[str, str]) -> None:
    """Accept cdk-nag findings (the AwsSolutions pack, ``tests/infra/test_cdk_nag.py``) on
    ``construct`` and everything in it: finding id -> why it stands."""
    for finding, reason in findings.items():
        Validations.of(construct).acknowledge(Acknowledgment(id=finding, reason=reason))


def nag_arn(construct: IConstruct, suffix: str = "") -> str:
    """How cdk-nag names the ``Arn`` attribute of ``construct``'s resource in a finding
    (``<LogicalId.Arn>``), followed by ``suffix``."""
    element = construct.node.default_child
    assert isinstance(element, CfnElement)
    return f"<{Stack.of(construct).get_logical_id(element)}.Arn>{suffix}"
