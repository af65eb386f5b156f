"""Each function's role in the synthesized template (``tests/infra/synth.py``): what it may do to
queues, executions, the control table's partitions, the tables, the bucket's prefixes and the
upstream secrets, and nothing more."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from aws_cdk import App
from batchgw.config import resources

from infra.app import SKIP_BUNDLING
from infra.constructs import REPO_ROOT
from infra.stack import BatchGwStack
from tests.infra.iam_check import ANY_TEXT, Request, bucket_arn, role_statements, table_arn
from tests.infra.synth import Synth, as_list, synthesize

# --- permissions -----------------------------------------------------------------------


def test_api_function_cannot_consume_or_feed_the_work_queue(synth: Synth, functions: dict[str, Any]) -> None:
    """Its only queue is the webhook queue, and only to send to it (an endpoint's test event,
    which the webhook function signs and sends)."""
    webhooks = {"Fn::GetAtt": [synth.id(synth.stack.queues.webhooks), "Arn"]}
    queued = [
        (action, resource)
        for action, resource in synth.statements(functions["api"])
        if action.startswith("sqs:")
    ]
    assert queued and all(resource == webhooks for _, resource in queued), queued
    assert {action for action, _ in queued} <= {
        "sqs:SendMessage",
        "sqs:GetQueueAttributes",
        "sqs:GetQueueUrl",
    }


def test_only_the_api_and_admin_functions_start_executions(synth: Synth, functions: dict[str, Any]) -> None:
    arn = synth.props(functions["api"])["Environment"]["Variables"]["BATCHGW_STATE_MACHINE_ARN"]
    assert ("states:StartExecution", arn) in synth.statements(functions["api"])  # a batch
    assert ("states:StartExecution", arn) in synth.statements(functions["admin"])  # a deleted user's purge
    for name in ("worker", "lifecycle", "webhooks"):
        assert "states:StartExecution" not in synth.actions(functions[name])


def test_the_functions_that_wake_a_parked_workflow_may_answer_its_task_tokens(
    synth: Synth, functions: dict[str, Any]
) -> None:
    for name, function in functions.items():
        arn = synth.props(function)["Environment"]["Variables"]["BATCHGW_STATE_MACHINE_ARN"]
        # a cancel (a deleted user's provider-run batches, by the admin; a flex request given
        # up, by the interactive function), the last request, park itself
        wakes = name in ("api", "admin", "worker", "lifecycle", "interactive")
        assert (("states:SendTaskSuccess", arn) in synth.statements(function)) == wakes, name


def test_worker_may_send_and_delay_work_messages(synth: Synth, functions: dict[str, Any]) -> None:
    work = {"Fn::GetAtt": [synth.id(synth.stack.queues.work), "Arn"]}
    statements = synth.statements(functions["worker"])
    for action in ("sqs:SendMessage", "sqs:ChangeMessageVisibility", "sqs:DeleteMessage"):
        assert (action, work) in statements
    lifecycle = synth.statements(functions["lifecycle"])
    assert ("sqs:SendMessage", work) in lifecycle
    assert ("sqs:DeleteMessage", work) not in lifecycle


CONTROL_ARN = table_arn(resources.CONTROL.logical_id)
READS = ("dynamodb:GetItem", "dynamodb:Query", "dynamodb:BatchGetItem", "dynamodb:ConditionCheckItem")
WRITES = ("dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:DeleteItem", "dynamodb:BatchWriteItem")


def _partition_key(pattern: str) -> str:
    """A partition key of a pattern's kind (``user#*`` -> ``user#`` and text no pattern spells)."""
    return pattern.replace("*", ANY_TEXT)


def _may(
    statements: list[dict[str, Any]], actions: tuple[str, ...], resource: str, key: str | None = None
) -> bool:
    """Whether every one of ``actions`` on ``resource`` (for partition ``key``) is allowed."""
    return all(Request(action, resource, key).allowed_by(statements) for action in actions)


def test_only_the_admin_role_writes_accounts_keys_and_runtime_settings(roles: dict[str, Any]) -> None:
    accounts = ("user#u1", "users", "key#0123abcd", "keyid#key_1", "runtime")
    for name, statements in roles.items():
        for key in accounts:
            for action in WRITES:
                assert Request(action, CONTROL_ARN, key).allowed_by(statements) == (name == "admin"), (
                    f"{name} {action} {key}"
                )
    # the api still reads a caller's key and account, and every function the runtime settings
    assert _may(roles["api"], READS, CONTROL_ARN, "key#0123abcd") and _may(
        roles["api"], READS, CONTROL_ARN, "user#u1"
    )
    assert not _may(roles["api"], READS, CONTROL_ARN, "keyid#key_1")
    assert all(_may(statements, READS, CONTROL_ARN, "runtime") for statements in roles.values())


def test_each_role_reads_and_writes_exactly_the_control_partitions_declared_for_it(
    roles: dict[str, Any],
) -> None:
    for name, statements in roles.items():
        for pattern, access in resources.CONTROL_PARTITIONS.items():
            key = _partition_key(pattern)
            assert _may(statements, READS, CONTROL_ARN, key) == access.reads(name), f"{name} reads {pattern}"
            assert _may(statements, WRITES, CONTROL_ARN, key) == access.writes(name), (
                f"{name} writes {pattern}"
            )
            deletes = _may(statements, ("dynamodb:DeleteItem",), CONTROL_ARN, key)
            assert deletes == access.deletes(name), f"{name} deletes {pattern}"
        # a partition nobody declared is nobody's
        assert not _may(statements, ("dynamodb:GetItem",), CONTROL_ARN, "undeclared#x")


def test_every_grant_on_the_control_table_is_held_to_partitions_and_nothing_scans(synth: Synth) -> None:
    control = synth.id(synth.stack.storage.tables[resources.CONTROL.logical_id])
    for function in synth.stack.functions.all:
        for statement in role_statements(synth.template.to_json(), synth.id(function)):
            actions = as_list(statement["Action"])
            assert not {a for a in actions if a in {"dynamodb:Scan", "dynamodb:*", "s3:*", "*"}}
            if any(r == {"Fn::GetAtt": [control, "Arn"]} for r in as_list(statement["Resource"])):
                assert as_list(statement["Resource"]) == [{"Fn::GetAtt": [control, "Arn"]}]
                assert set(statement["Condition"]) == {"ForAllValues:StringLike"}
                assert set(statement["Condition"]["ForAllValues:StringLike"]) == {"dynamodb:LeadingKeys"}
        # "*" resources only for actions that have no resource of their own
        assert {a.split(":")[0] for a, res in synth.statements(function) if res == "*"} <= {"xray"}


def test_each_role_touches_only_the_tables_declared_for_it(roles: dict[str, Any]) -> None:
    for name, statements in roles.items():
        for spec in resources.TABLES:
            if spec is resources.CONTROL:
                continue
            access, arn = resources.TABLE_ACCESS[spec.logical_id], table_arn(spec.logical_id)
            assert _may(statements, READS, arn) == access.reads(name), f"{name} reads {spec.logical_id}"
            assert _may(statements, WRITES, arn) == access.writes(name), f"{name} writes {spec.logical_id}"
            for index in spec.indexes:
                assert _may(statements, ("dynamodb:Query",), f"{arn}/index/{index.name}") == access.reads(
                    name
                )
    files = table_arn(resources.FILES.logical_id)
    assert not any(Request(a, files).allowed_by(roles["worker"]) for a in READS + WRITES)  # no file records
    for spec in resources.TABLES:
        if spec is not resources.CONTROL:
            assert not _may(roles["webhooks"], ("dynamodb:GetItem",), table_arn(spec.logical_id))


def test_each_role_touches_only_its_key_prefixes_of_the_bucket(synth: Synth, roles: dict[str, Any]) -> None:
    bucket = bucket_arn(resources.DATA_BUCKET.logical_id)
    declared = tuple(resources.DATA_PREFIXES)
    for name, statements in roles.items():
        for prefix, access in resources.DATA_PREFIXES.items():
            key = f"{bucket}/{prefix}{ANY_TEXT}"
            assert _may(statements, ("s3:GetObject",), key) == access.reads(name), f"{name} reads {prefix}"
            assert _may(statements, ("s3:PutObject",), key) == access.writes(name), f"{name} writes {prefix}"
            assert _may(statements, ("s3:DeleteObject",), key) == access.deletes(name), (
                f"{name} deletes {prefix}"
            )
        # nothing outside the declared prefixes, nor the bucket's every object
        assert not _may(statements, ("s3:GetObject",), f"{bucket}/elsewhere/{ANY_TEXT}")
        object_resources = {
            r
            for s in statements
            if any(str(a).startswith("s3:") for a in as_list(s["Action"]))
            for r in s["Resource"]
        }
        assert all(
            r == bucket or r.startswith(tuple(f"{bucket}/{p}" for p in declared)) for r in object_resources
        )
        # ... and list it only under the prefixes it touches, never the whole bucket
        assert not Request("s3:ListBucket", bucket).allowed_by(statements)
        for prefix, access in resources.DATA_PREFIXES.items():
            listing = Request("s3:ListBucket", bucket, prefix=f"{prefix}{ANY_TEXT}")
            assert listing.allowed_by(statements) == (name in ("api", "lifecycle") and access.touches(name))
        assert not Request("s3:ListBucket", bucket, prefix=f"elsewhere/{ANY_TEXT}").allowed_by(statements)
    assert not any(
        _may(roles["worker"], ("s3:GetObject",), f"{bucket}/{p}{ANY_TEXT}") for p in ("files/", "inputs/")
    )
    assert not _may(roles["webhooks"], ("s3:GetObject",), f"{bucket}/bodies/{ANY_TEXT}")


def test_no_function_reads_secrets_when_no_route_names_one(synth: Synth, functions: dict[str, Any]) -> None:
    for function in functions.values():
        assert not {a for a in synth.actions(function) if a.startswith("secretsmanager:")}


def test_the_functions_that_call_upstreams_read_exactly_the_upstream_key_secrets_the_config_names(
    tmp_path: Path,
) -> None:
    """The worker and the interactive function read every route's key; the lifecycle only the
    keys of routes whose provider's batch service runs batches (its provider step); no other."""
    config = json.loads((REPO_ROOT / "config" / "models.local.json").read_text())
    routes = [spec["route"] if "route" in spec else spec["routes"][-1] for spec in config["models"].values()]
    routes[0]["api_key_secret"] = "batchgw/openai"  # sim-chat's last route: every route's key is read
    routes[1]["api_key_secret"] = "arn:aws:secretsmanager:eu-west-1:123456789012:secret:batchgw/claude-AbCdEf"
    path = tmp_path / "models.json"
    path.write_text(json.dumps(config))

    synth = synthesize(tmp_path / "cdk.out", modelsConfig=str(path))

    functions = synth.stack.functions
    for caller in (functions.worker, functions.interactive):
        reads = [
            json.dumps(res)
            for action, res in synth.statements(caller)
            if action == "secretsmanager:GetSecretValue"
        ]
        assert len(reads) == 2
        assert any(":secret:batchgw/openai" in res for res in reads)
        assert any(res == json.dumps(routes[1]["api_key_secret"]) for res in reads)
    provider_step = [
        json.dumps(res)
        for action, res in synth.statements(functions.lifecycle)
        if action == "secretsmanager:GetSecretValue"
    ]
    assert routes[0].get("batch_api") and not routes[1].get("batch_api")
    assert len(provider_step) == 1 and ":secret:batchgw/openai" in provider_step[0]
    for other in (functions.api, functions.admin, functions.webhooks):
        assert not {a for a in synth.actions(other) if a.startswith("secretsmanager:")}


@pytest.mark.parametrize(
    "content",
    [
        '{"models": {"m": {"endpoints": ["/v1/nope"], "route": {"protocol": "openai", "base_url": "x"}}}}',
        "{not json",
        None,
    ],
    ids=["invalid-model", "not-json", "missing"],
)
def test_an_invalid_models_config_fails_the_synth(tmp_path: Path, content: str | None) -> None:
    path = tmp_path / "models.json"
    if content is not None:
        path.write_text(content)
    app = App(context={**SKIP_BUNDLING, "modelsConfig": str(path)}, outdir=str(tmp_path / "out"))
    with pytest.raises(ValueError, match="invalid models config"):
        BatchGwStack(app, "Invalid")
