"""cdk-nag's AwsSolutions pack on a stack: what stands unless acknowledged in the construct
that causes it, with its reason (``infra.constructs.acknowledge``).

``tests/infra`` runs it on the stack built in the test and, through ``BATCHGW_NAG_REPORT``
(``infra/app.py``), on the app the CDK CLI bundles, as ``make deploy`` runs it.
"""

from __future__ import annotations

from aws_cdk import Stack


def nag_findings(stack: Stack) -> list[str]:
    """One line per finding, errors and warnings: severity, rule, where, what."""
    from cdk_nag import AwsSolutionsChecks  # a development tool: only when asked

    report = AwsSolutionsChecks().validate_scope(stack)
    findings = []
    for violation in report.violations:
        where = ", ".join(
            str(r.construct_path or r.resource_logical_id) for r in violation.violating_resources
        )
        findings.append(f"{violation.severity} {violation.rule_name} at {where}: {violation.description}")
    return findings
