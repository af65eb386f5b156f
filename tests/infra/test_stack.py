"""The synthesized CloudFormation template of BatchGwStack, offline (bundling skipped); cfn-lint
also on the template the CDK CLI bundles (``tests/infra/bundled.py``)."""

from __future__ import annotations

import os

os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")

import json
import subprocess
import sys
from collections.abc import Sequence
from importlib.metadata import version
from pathlib import Path
from typing import Any

import pytest
from aws_cdk import App, BundlingOptions
from aws_cdk import aws_lambda as lambda_
from batchgw.config import resources
from batchgw.config.settings import Settings
from batchgw.run.ending import StillRunning
from batchgw.run.prepare_lease import PrepareBusy

from infra.app import SKIP_BUNDLING, bundling_enabled
from infra.capacity import TableCapacity
from infra.constructs import REPO_ROOT
from infra.constructs import layers as layers_module
from infra.constructs.functions import WORKER_TIMEOUT_SECONDS
from infra.constructs.layers import (
    LAMBDA_LOCK,
    MODELS_CONFIG_PATH,
    PIP_PLATFORM,
    PYTHON_VERSION,
    LocalCodeBundling,
    LocalPipBundling,
    locked_requirements,
)
from infra.stack import BatchGwStack
from tests.infra.synth import Synth, as_list, synthesize

# cfn-lint checks left out, each with its reason.
CFN_LINT_IGNORED = [
    "W3005",  # CDK adds a DependsOn on a function's role that its Role GetAtt already implies
]


# --- storage ---------------------------------------------------------------------------


def _key_schema(partition: resources.Key, sort: resources.Key | None) -> list[dict[str, str]]:
    schema = [{"AttributeName": partition.name, "KeyType": "HASH"}]
    if sort:
        schema.append({"AttributeName": sort.name, "KeyType": "RANGE"})
    return schema


def test_every_table_in_resources_exists_with_its_keys_indexes_and_ttl(synth: Synth) -> None:
    assert len(synth.template.find_resources("AWS::DynamoDB::Table")) == len(resources.TABLES)
    for spec in resources.TABLES:
        props = synth.props(synth.stack.storage.tables[spec.logical_id])

        assert props["KeySchema"] == _key_schema(spec.partition, spec.sort)
        keys = [spec.partition, spec.sort] + [k for i in spec.indexes for k in (i.partition, i.sort)]
        assert {(a["AttributeName"], a["AttributeType"]) for a in props["AttributeDefinitions"]} == {
            (key.name, key.type) for key in keys if key
        }
        indexes = {index["IndexName"]: index for index in props.get("GlobalSecondaryIndexes", [])}
        assert set(indexes) == {index.name for index in spec.indexes}
        for index in spec.indexes:
            assert indexes[index.name]["KeySchema"] == _key_schema(index.partition, index.sort)
            assert indexes[index.name]["Projection"] == {"ProjectionType": index.projection}
        if spec.ttl_attribute:
            assert props["TimeToLiveSpecification"] == {"AttributeName": spec.ttl_attribute, "Enabled": True}
        else:
            assert "TimeToLiveSpecification" not in props


def test_tables_bill_per_request_keep_point_in_time_recovery_and_survive_stack_deletion(synth: Synth) -> None:
    for table in synth.stack.storage.tables.values():
        resource = synth.resources[synth.id(table)]
        assert resource["Properties"]["BillingMode"] == "PAY_PER_REQUEST"
        assert resource["Properties"]["PointInTimeRecoverySpecification"] == {
            "PointInTimeRecoveryEnabled": True
        }
        assert resource["DeletionPolicy"] == "Retain"


def test_tables_bill_per_request_with_no_capacity_to_scale_unless_the_operator_provisions(
    synth: Synth,
) -> None:
    assert not synth.template.find_resources("AWS::ApplicationAutoScaling::ScalableTarget")
    for table in synth.stack.storage.tables.values():
        props = synth.props(table)
        assert "ProvisionedThroughput" not in props
        assert all("ProvisionedThroughput" not in index for index in props.get("GlobalSecondaryIndexes", []))


def _scaling(synth: Synth) -> dict[tuple[str, str], dict[str, Any]]:
    """Each scalable target by (its resource id's table or index, its dimension), with its
    policy's target tracking configuration under "policy"."""
    found: dict[tuple[str, str], dict[str, Any]] = {}
    policies = synth.template.find_resources("AWS::ApplicationAutoScaling::ScalingPolicy")
    for logical_id, target in synth.template.find_resources(
        "AWS::ApplicationAutoScaling::ScalableTarget"
    ).items():
        props = target["Properties"]
        assert props["ServiceNamespace"] == "dynamodb"
        parts = props["ResourceId"]["Fn::Join"][1]  # "table/", {"Ref": table}[, "/index/<name>"]
        table_id = next(part["Ref"] for part in parts if isinstance(part, dict))
        index = "".join(part for part in parts[2:] if isinstance(part, str)).removeprefix("/index/")
        (policy,) = [
            p["Properties"]["TargetTrackingScalingPolicyConfiguration"]
            for p in policies.values()
            if p["Properties"].get("ScalingTargetId") == {"Ref": logical_id}
        ]
        found[(f"{table_id}/{index}" if index else table_id, props["ScalableDimension"])] = {
            **props,
            "policy": policy,
        }
    return found


def test_provisioned_tables_and_indexes_scale_reads_and_writes_to_the_target_between_the_bounds(
    tmp_path: Path,
) -> None:
    capacity = {
        "mode": "provisioned",
        "targetUtilization": 80,
        "writeUnits": [50, 2000],
        "readUnits": [10, 500],
    }
    provisioned = synthesize(tmp_path, tableCapacity=json.dumps(capacity))
    scaling = _scaling(provisioned)
    expected = set()
    for spec in resources.TABLES:
        table_id = provisioned.id(provisioned.stack.storage.tables[spec.logical_id])
        props = provisioned.resources[table_id]["Properties"]
        assert props.get("BillingMode", "PROVISIONED") == "PROVISIONED"  # CloudFormation's default
        assert props["ProvisionedThroughput"] == {"ReadCapacityUnits": 10, "WriteCapacityUnits": 50}
        for index in props.get("GlobalSecondaryIndexes", []):
            assert index["ProvisionedThroughput"] == {"ReadCapacityUnits": 10, "WriteCapacityUnits": 50}
        for name in ["", *(f"/{index.name}" for index in spec.indexes)]:
            kind = "index" if name else "table"
            expected |= {
                (f"{table_id}{name}", f"dynamodb:{kind}:ReadCapacityUnits"),
                (f"{table_id}{name}", f"dynamodb:{kind}:WriteCapacityUnits"),
            }
    assert set(scaling) == expected
    for (_, dimension), target in scaling.items():
        bounds = (10, 500) if "Read" in dimension else (50, 2000)
        assert (target["MinCapacity"], target["MaxCapacity"]) == bounds
        assert target["policy"]["TargetValue"] == 80
        metric = (
            "DynamoDBReadCapacityUtilization" if "Read" in dimension else "DynamoDBWriteCapacityUtilization"
        )
        assert target["policy"]["PredefinedMetricSpecification"] == {"PredefinedMetricType": metric}


def test_a_table_capacity_mode_alone_takes_the_defaults() -> None:
    assert TableCapacity.from_context(None) == TableCapacity() == TableCapacity.from_context("on-demand")
    provisioned = TableCapacity.from_context("provisioned")
    assert provisioned.provisioned and provisioned.target_utilization == 70
    assert provisioned.write_units == provisioned.read_units == (5, 4000)
    assert TableCapacity.from_context({"mode": "provisioned", "readUnits": [1, 1]}).read_units == (1, 1)


@pytest.mark.parametrize(
    "value",
    [
        "reserved",
        '{"mode": "provisioned", "targetUtilization": 95}',
        '{"writeUnits": [10, 5]}',
        '{"spare": 1}',
        "{x",
    ],
    ids=["unknown-mode", "target-above-90", "minimum-above-maximum", "unknown-field", "not-json"],
)
def test_an_invalid_table_capacity_fails_the_synth(tmp_path: Path, value: str) -> None:
    app = App(context={**SKIP_BUNDLING, "tableCapacity": value}, outdir=str(tmp_path / "out"))
    with pytest.raises(ValueError, match="invalid tableCapacity"):
        BatchGwStack(app, "Invalid")


def test_data_bucket_blocks_public_access_is_encrypted_and_refuses_plain_http(synth: Synth) -> None:
    for spec in resources.BUCKETS:
        bucket = synth.stack.storage.buckets[spec.logical_id]
        props = synth.props(bucket)
        assert props["PublicAccessBlockConfiguration"] == {
            "BlockPublicAcls": True,
            "BlockPublicPolicy": True,
            "IgnorePublicAcls": True,
            "RestrictPublicBuckets": True,
        }
        encryption = props["BucketEncryption"]["ServerSideEncryptionConfiguration"]
        assert encryption[0]["ServerSideEncryptionByDefault"]["SSEAlgorithm"] in {"AES256", "aws:kms"}

        policies = [
            r["Properties"]["PolicyDocument"]["Statement"]
            for r in synth.template.find_resources("AWS::S3::BucketPolicy").values()
            if r["Properties"]["Bucket"] == {"Ref": synth.id(bucket)}
        ]
        assert any(
            s["Effect"] == "Deny" and s["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}
            for statements in policies
            for s in statements
        )


# --- queues ----------------------------------------------------------------------------


def test_each_queue_has_a_dead_letter_queue_with_the_specs_max_receive_count(synth: Synth) -> None:
    for spec in resources.QUEUES:
        props = synth.props(synth.stack.queues.queues[spec.logical_id])
        dlq = synth.stack.queues.dead_letter_queues[spec.logical_id]
        assert props["RedrivePolicy"] == {
            "deadLetterTargetArn": {"Fn::GetAtt": [synth.id(dlq), "Arn"]},
            "maxReceiveCount": spec.max_receive_count,
        }
        assert props.get("FifoQueue", False) == spec.fifo
        assert synth.props(dlq).get("FifoQueue", False) == spec.fifo


def test_queue_visibility_is_at_least_six_timeouts_of_the_function_it_feeds(
    synth: Synth, functions: dict[str, Any]
) -> None:
    worker_timeout = synth.props(functions["worker"])["Timeout"]
    assert worker_timeout == WORKER_TIMEOUT_SECONDS == 900
    assert synth.props(synth.stack.queues.work)["VisibilityTimeout"] >= 6 * worker_timeout
    assert synth.props(synth.stack.queues.flex)["VisibilityTimeout"] >= 6 * worker_timeout
    webhook_timeout = synth.props(synth.stack.functions.webhooks)["Timeout"]
    assert synth.props(synth.stack.queues.webhooks)["VisibilityTimeout"] >= 4 * webhook_timeout


def test_the_webhook_function_takes_one_event_at_a_time_from_the_fifo_queue(synth: Synth) -> None:
    queue = synth.props(synth.stack.queues.webhooks)
    assert queue["FifoQueue"] is True
    mappings = [
        m["Properties"]
        for m in synth.template.find_resources("AWS::Lambda::EventSourceMapping").values()
        if m["Properties"]["FunctionName"] == {"Ref": synth.id(synth.stack.functions.webhooks)}
    ]
    assert len(mappings) == 1 and mappings[0]["BatchSize"] == 1
    assert mappings[0]["FunctionResponseTypes"] == ["ReportBatchItemFailures"]
    assert "kms:Decrypt" in synth.actions(synth.stack.functions.webhooks)
    assert "kms:Decrypt" not in synth.actions(synth.stack.functions.api)
    assert "kms:Encrypt" in synth.actions(synth.stack.functions.api)


def test_queues_and_dead_letter_queues_are_encrypted(synth: Synth) -> None:
    queues = synth.template.find_resources("AWS::SQS::Queue")
    assert len(queues) == 2 * len(resources.QUEUES)
    for queue in queues.values():
        assert queue["Properties"].get("SqsManagedSseEnabled") or queue["Properties"].get("KmsMasterKeyId")


def test_worker_consumes_the_work_queue_and_the_flex_queue_each_with_its_own_concurrency(
    synth: Synth, functions: dict[str, Any]
) -> None:
    mappings = {
        m["Properties"]["EventSourceArn"]["Fn::GetAtt"][0]: m["Properties"]
        for m in synth.template.find_resources("AWS::Lambda::EventSourceMapping").values()
        if m["Properties"]["FunctionName"] == {"Ref": synth.id(functions["worker"])}
    }
    work, flex = synth.id(synth.stack.queues.work), synth.id(synth.stack.queues.flex)
    assert set(mappings) == {work, flex}
    assert mappings[work]["BatchSize"] == 10
    assert mappings[work]["ScalingConfig"]["MaximumConcurrency"] == resources.WORKER_MAX_CONCURRENCY
    # A flex request's message is an invocation of its own, in environments batch chains never hold.
    assert mappings[flex]["BatchSize"] == 1
    assert mappings[flex]["ScalingConfig"]["MaximumConcurrency"] == resources.FLEX_MAX_CONCURRENCY
    for props in mappings.values():
        assert props["FunctionResponseTypes"] == ["ReportBatchItemFailures"]


# --- functions and layers --------------------------------------------------------------


def test_functions_run_python_on_arm64_with_their_handlers_and_timeouts(
    synth: Synth, functions: dict[str, Any]
) -> None:
    assert len(synth.template.find_resources("AWS::Lambda::Function")) == len(functions)
    for name, function in functions.items():
        props = synth.props(function)
        assert props["Runtime"] in {"python3.12", "python3.11"}
        assert props["Architectures"] == ["arm64"]
        assert props["Handler"] == "handler.handler"
        assert props["TracingConfig"] == {"Mode": "Active"}
        assert (synth.code_asset(function) / "__init__.py").exists(), f"{name}: code from functions/{name}"
    assert synth.props(functions["worker"])["Timeout"] == 900
    assert synth.props(functions["lifecycle"])["Timeout"] == 900
    assert synth.props(functions["api"])["Timeout"] < 30  # the HTTP API gives up at 30 s


def test_functions_share_the_code_dependencies_and_models_layers(
    synth: Synth, functions: dict[str, Any]
) -> None:
    layers = synth.stack.layers
    expected = {synth.id(layer) for layer in (layers.shared, layers.dependencies, layers.models)}
    assert set(synth.template.find_resources("AWS::Lambda::LayerVersion")) == expected
    for function in functions.values():
        assert {ref["Ref"] for ref in synth.props(function)["Layers"]} == expected


def test_shared_layer_ships_the_batchgw_package_in_the_layer_layout(synth: Synth) -> None:
    shared = synth.code_asset(synth.stack.layers.shared, key="Content")
    assert (shared / "python" / "batchgw" / "config" / "resources.py").is_file()
    assert not list(shared.rglob("__pycache__"))


def test_models_layer_ships_the_operators_config_where_the_functions_read_it(
    synth: Synth, functions: dict[str, Any]
) -> None:
    models = synth.code_asset(synth.stack.layers.models, key="Content")
    shipped = models / Path(MODELS_CONFIG_PATH).relative_to("/opt")
    assert shipped.read_bytes() == (REPO_ROOT / "config" / "models.local.json").read_bytes()
    for function in functions.values():
        assert (
            synth.props(function)["Environment"]["Variables"]["BATCHGW_MODELS_CONFIG"] == MODELS_CONFIG_PATH
        )


def test_dependencies_layer_installs_the_locked_runtime_packages_with_the_tests_boto3(synth: Synth) -> None:
    pins = locked_requirements()
    for package in ("pydantic", "httpx", "aws-lambda-powertools", "msgspec", "aws-xray-sdk"):
        assert package in pins
    for package in ("moto", "pytest", "aws-cdk-lib"):
        assert package not in pins  # development tools stay out
    # the versions the tests run, not whichever the Lambda runtime has this month
    assert pins["boto3"] == version("boto3") and pins["botocore"] == version("botocore")
    for name in ("pydantic", "httpx", "msgspec", "aws-lambda-powertools"):
        assert pins[name] == version(name)
    source = synth.code_asset(synth.stack.layers.dependencies, key="Content")
    assert (source / "requirements.txt").read_text() == LAMBDA_LOCK.read_text()


def test_local_bundling_pip_installs_lambda_platform_wheels_into_the_layer_python_dir(tmp_path: Path) -> None:
    commands: list[Sequence[str]] = []

    def run(command: Sequence[str]) -> int:
        commands.append(command)
        return 0

    bundler = LocalPipBundling(tmp_path / "requirements.txt", run=run)
    options = BundlingOptions(image=lambda_.Runtime.PYTHON_3_12.bundling_image)
    assert bundler.try_bundle(str(tmp_path / "out"), options)  # jsii passes both by position
    (command,) = commands
    assert command[:4] == [sys.executable, "-m", "pip", "install"]
    text = " ".join(command)
    assert f"--platform {PIP_PLATFORM}" in text and PIP_PLATFORM == "manylinux2014_aarch64"
    assert f"--python-version {PYTHON_VERSION}" in text
    assert "--only-binary=:all:" in text
    assert f"--target {tmp_path / 'out' / 'python'}" in text
    assert f"--requirement {tmp_path / 'requirements.txt'}" in text
    assert "--require-hashes" in command and "--no-deps" in command  # the lock, exactly


@pytest.mark.parametrize("runtime_python", [True, False])
def test_the_shared_layer_ships_bytecode_when_built_by_the_runtimes_python(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, runtime_python: bool
) -> None:
    source = tmp_path / "shared"
    (source / "python" / "pkg" / "__pycache__").mkdir(parents=True)
    (source / "python" / "pkg" / "__init__.py").write_text("VALUE = 1\n")
    (source / "python" / "pkg" / "__pycache__" / "stale.cpython-311.pyc").write_bytes(b"stale")
    monkeypatch.setattr(layers_module, "runs_runtime_python", lambda: runtime_python)
    image = lambda_.Runtime.PYTHON_3_12.bundling_image
    assert LocalCodeBundling(source).try_bundle(str(tmp_path / "out"), BundlingOptions(image=image))
    built = tmp_path / "out" / "python" / "pkg"
    assert (built / "__init__.py").read_text() == "VALUE = 1\n"
    compiled = sorted(path.name for path in (built / "__pycache__").glob("*.pyc")) if runtime_python else []
    assert compiled == ([f"__init__.{sys.implementation.cache_tag}.pyc"] if runtime_python else [])
    if runtime_python:  # trusted without the source's timestamp, which bundling does not keep
        flags = int.from_bytes((built / "__pycache__" / compiled[0]).read_bytes()[4:8], "little")
        assert flags == 0b01  # hash-based, unchecked
    else:
        assert not (built / "__pycache__").exists()  # nothing stale from the source tree either


def test_local_bundling_falls_back_to_docker_when_pip_fails(tmp_path: Path) -> None:
    options = BundlingOptions(image=lambda_.Runtime.PYTHON_3_12.bundling_image)
    assert not LocalPipBundling(tmp_path / "r.txt", run=lambda _: 1).try_bundle(str(tmp_path), options)

    def missing(_: Sequence[str]) -> int:
        raise FileNotFoundError("pip")

    assert not LocalPipBundling(tmp_path / "r.txt", run=missing).try_bundle(str(tmp_path), options)


def test_every_function_is_told_every_resource_name_and_the_workers_timeouts(
    synth: Synth, functions: dict[str, Any]
) -> None:
    storage, queues = synth.stack.storage, synth.stack.queues
    expected = {spec.env_var: {"Ref": synth.id(storage.tables[spec.logical_id])} for spec in resources.TABLES}
    expected |= {
        spec.env_var: {"Ref": synth.id(storage.buckets[spec.logical_id])} for spec in resources.BUCKETS
    }
    expected |= {spec.env_var: {"Ref": synth.id(queues.queues[spec.logical_id])} for spec in resources.QUEUES}
    aliases = {field.alias for field in Settings.model_fields.values()}
    for function in functions.values():
        env = synth.props(function)["Environment"]["Variables"]
        assert expected.items() <= env.items()
        assert "BATCHGW_STATE_MACHINE_ARN" in env
        assert env["POWERTOOLS_SERVICE_NAME"]
        assert int(env["BATCH_WORKER_TIMEOUT_SECONDS"]) == synth.props(functions["worker"])["Timeout"]
        assert 0 < float(env["BATCH_UPSTREAM_TIMEOUT_SECONDS"]) < int(env["BATCH_WORKER_TIMEOUT_SECONDS"])
        assert 0 < float(env["BATCH_LEASE_SECONDS"]) < int(env["BATCH_WORKER_TIMEOUT_SECONDS"])
        # a misspelt setting would be silently ignored by the functions
        assert {name for name in env if name.startswith("BATCH")} <= aliases


def test_functions_know_the_state_machine_arn_from_its_fixed_name(
    synth: Synth, functions: dict[str, Any]
) -> None:
    machine = synth.props(synth.stack.workflow.state_machine)
    for function in functions.values():
        arn = synth.props(function)["Environment"]["Variables"]["BATCHGW_STATE_MACHINE_ARN"]
        parts = arn["Fn::Join"][1]
        assert parts[-1] == f":stateMachine:{machine['StateMachineName']}"
        # built from pseudo parameters, never a reference to the machine (that is the cycle)
        assert {"Ref": synth.id(synth.stack.workflow.state_machine)} not in parts


# --- workflow --------------------------------------------------------------------------


def test_state_machine_runs_the_shared_asl_file_with_the_lifecycle_arn_substituted(
    synth: Synth, functions: dict[str, Any]
) -> None:
    props = synth.props(synth.stack.workflow.state_machine)
    assert props["StateMachineType"] == "STANDARD"
    assert set(resources.WORKFLOW_SUBSTITUTIONS) == {"LifecycleFunctionArn"}
    assert props["DefinitionSubstitutions"] == {
        "LifecycleFunctionArn": {"Fn::GetAtt": [synth.id(functions["lifecycle"]), "Arn"]}
    }
    definition = synth.asset_path(props["DefinitionS3Location"]["Key"].split(".")[0])
    assert definition.read_bytes() == (REPO_ROOT / resources.WORKFLOW_ASL).read_bytes()


def _most(setting: str) -> float:
    """The largest value ``setting`` may take (its field's ``le`` bound)."""
    bounds = [m.le for m in Settings.model_fields[setting].metadata if hasattr(m, "le")]
    assert bounds, f"{setting} has no upper bound"
    return float(bounds[0])


@pytest.mark.parametrize(
    ("state", "error", "outlasts"),
    [
        # A retried prepare waits out one that may still write: its whole life (the lifecycle
        # function's timeout), then its lease, as long as the settings allow.
        ("Prepare", PrepareBusy, WORKER_TIMEOUT_SECONDS + _most("batch_prepare_lease_seconds")),
        # A failing batch waits for its running requests: a worker's life, then the lease.
        (
            "FailBatch",
            StillRunning,
            _most("batch_worker_timeout_seconds") + _most("batch_lease_seconds"),
        ),
    ],
)
def test_a_step_that_must_wait_is_retried_for_longer_than_it_waits(
    state: str, error: type[Exception], outlasts: float
) -> None:
    workflow = json.loads((REPO_ROOT / resources.WORKFLOW_ASL).read_text())
    retriers = workflow["States"][state]["Retry"]
    names = [name for retrier in retriers for name in retrier["ErrorEquals"]]
    assert names.index(error.__name__) < names.index("States.ALL")  # matched before the catch-all
    retrier = next(r for r in retriers if error.__name__ in r["ErrorEquals"])
    assert retrier.get("BackoffRate", 2.0) == 1
    assert retrier["IntervalSeconds"] * retrier["MaxAttempts"] > outlasts


def test_state_machine_may_invoke_lifecycle_logs_and_traces(synth: Synth, functions: dict[str, Any]) -> None:
    workflow = synth.stack.workflow
    props = synth.props(workflow.state_machine)
    assert props["TracingConfiguration"] == {"Enabled": True}
    logging = props["LoggingConfiguration"]
    assert logging["Destinations"][0]["CloudWatchLogsLogGroup"]["LogGroupArn"] == {
        "Fn::GetAtt": [synth.id(workflow.log_group), "Arn"]
    }

    role = props["RoleArn"]["Fn::GetAtt"][0]
    invoked = [
        json.dumps(statement["Resource"])
        for policy in synth.template.find_resources("AWS::IAM::Policy").values()
        if {"Ref": role} in policy["Properties"]["Roles"]
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]
        if "lambda:InvokeFunction" in as_list(statement["Action"])
    ]
    assert invoked
    for resource in invoked:
        assert synth.id(functions["lifecycle"]) in resource
        assert synth.id(functions["worker"]) not in resource and synth.id(functions["api"]) not in resource


# --- api -------------------------------------------------------------------------------


def test_http_api_routes_admin_paths_to_admin_interactive_posts_to_interactive_and_the_rest_to_the_api(
    synth: Synth, functions: dict[str, Any]
) -> None:
    integrations = synth.template.find_resources("AWS::ApiGatewayV2::Integration")
    target = {}
    for integration_id, integration in integrations.items():
        assert integration["Properties"]["IntegrationType"] == "AWS_PROXY"
        assert integration["Properties"]["PayloadFormatVersion"] == "2.0"
        target[integration_id] = integration["Properties"]["IntegrationUri"]["Fn::GetAtt"][0]

    routes = synth.template.find_resources("AWS::ApiGatewayV2::Route").values()
    served = {
        route["Properties"]["RouteKey"]: target[route["Properties"]["Target"]["Fn::Join"][1][1]["Ref"]]
        for route in routes
    }
    assert served == {
        "ANY /": synth.id(functions["api"]),
        "ANY /{proxy+}": synth.id(functions["api"]),
        f"ANY {resources.ADMIN_PATH_PREFIX}{{proxy+}}": synth.id(functions["admin"]),
        **{f"POST {path}": synth.id(functions["interactive"]) for path in resources.INTERACTIVE_PATHS},
    }


def test_http_api_stage_logs_access_and_throttles(synth: Synth) -> None:
    props = synth.props(synth.stack.api.stage)
    assert props["StageName"] == "$default"
    assert props["AutoDeploy"] is True
    assert props["AccessLogSettings"]["DestinationArn"] == {
        "Fn::GetAtt": [synth.id(synth.stack.api.access_logs), "Arn"]
    }
    assert "$context.requestId" in props["AccessLogSettings"]["Format"]
    assert props["DefaultRouteSettings"]["ThrottlingRateLimit"] > 0
    assert props["DefaultRouteSettings"]["ThrottlingBurstLimit"] > 0


# --- observability ---------------------------------------------------------------------


def test_every_log_group_has_a_retention_and_every_function_its_own(
    synth: Synth, functions: dict[str, Any]
) -> None:
    groups = synth.template.find_resources("AWS::Logs::LogGroup")
    assert groups and all(group["Properties"].get("RetentionInDays") for group in groups.values())
    used = {synth.props(function)["LoggingConfig"]["LogGroup"]["Ref"] for function in functions.values()}
    assert len(used) == len(functions) and used <= set(groups)
    # the deprecated log-retention custom resource is not needed
    assert not synth.template.find_resources("Custom::LogRetention")


def _alarm_on(synth: Synth, metric: str, dimension: dict[str, Any], threshold: float = 0) -> dict[str, Any]:
    alarms = [
        alarm["Properties"]
        for alarm in synth.template.find_resources("AWS::CloudWatch::Alarm").values()
        if alarm["Properties"]["MetricName"] == metric and dimension in alarm["Properties"]["Dimensions"]
    ]
    assert len(alarms) == 1, f"one alarm on {metric} {dimension}"
    alarm = alarms[0]
    assert alarm["Threshold"] == threshold and alarm["ComparisonOperator"] == "GreaterThanThreshold"
    assert alarm["AlarmActions"] == [{"Ref": synth.id(synth.stack.observability.alarm_topic)}]
    return alarm


def test_alarms_fire_on_dead_letters_failed_executions_and_worker_errors(
    synth: Synth, functions: dict[str, Any]
) -> None:
    for dlq in synth.stack.queues.dead_letter_queues.values():
        queue_name = {"Name": "QueueName", "Value": {"Fn::GetAtt": [synth.id(dlq), "QueueName"]}}
        _alarm_on(synth, "ApproximateNumberOfMessagesVisible", queue_name)
    machine = {"Name": "StateMachineArn", "Value": {"Ref": synth.id(synth.stack.workflow.state_machine)}}
    _alarm_on(synth, "ExecutionsFailed", machine)
    _alarm_on(synth, "Errors", {"Name": "FunctionName", "Value": {"Ref": synth.id(functions["worker"])}})


def test_alarms_fire_on_an_old_work_message_and_a_model_waiting_for_capacity(synth: Synth) -> None:
    work = synth.stack.queues.work
    queue_name = {"Name": "QueueName", "Value": {"Fn::GetAtt": [synth.id(work), "QueueName"]}}
    alarm = _alarm_on(synth, "ApproximateAgeOfOldestMessage", queue_name, threshold=3600)
    assert alarm["EvaluationPeriods"] == 2
    # one alarm per model, on the dimensions the worker writes the metric with
    for model in synth.stack.layers.catalog.models:
        waiting = _alarm_on(synth, "ModelWaitingForCapacity", {"Name": "model", "Value": model})
        assert {"Name": "service", "Value": "batchgw"} in waiting["Dimensions"] and len(
            waiting["Dimensions"]
        ) == 2
        assert waiting["Namespace"] == "batchgw" and waiting["Statistic"] == "Maximum"
        assert (
            "BATCH_QUEUED_ALERT_HOURS" in waiting["AlarmDescription"] and model in waiting["AlarmDescription"]
        )
        assert waiting["TreatMissingData"] == "notBreaching"  # no unfinished batch: nothing to report


def test_dashboard_shows_api_worker_queues_and_workflow(synth: Synth) -> None:
    (dashboard,) = synth.template.find_resources("AWS::CloudWatch::Dashboard").values()
    body = json.dumps(dashboard["Properties"]["DashboardBody"])
    for metric in (
        "4xx",
        "5xx",
        "Errors",
        "Duration",
        "ApproximateAgeOfOldestMessage",
        "ApproximateNumberOfMessagesVisible",
        "ExecutionsFailed",
        # what the worker and the workflow write (EMF), per model and per final status
        "RequestsStarted",
        "RequestsSucceeded",
        "RequestsFailed",
        "RequestsRetried",
        "UpstreamLatency",
        "AnswerToNextCall",
        "QueueWait",
        "SlotsInUse",
        "ModelWaitingForCapacity",
        "BatchesEnded",
    ):
        assert metric in body


def test_dashboard_shows_requests_started_per_source_beside_the_per_model_graphs(synth: Synth) -> None:
    """Background and flex requests are told from batch requests: a graph searches the
    series the worker writes with only a ``source`` dimension; the per-model graph stays."""
    (dashboard,) = synth.template.find_resources("AWS::CloudWatch::Dashboard").values()
    _, parts = dashboard["Properties"]["DashboardBody"]["Fn::Join"]
    body = json.loads("".join(p if isinstance(p, str) else "x" for p in parts))  # an ARN: left out
    searches = {
        w["properties"].get("title"): [m[0].get("expression") for m in w["properties"].get("metrics", [])]
        for w in body["widgets"]
        if w["type"] == "metric" and isinstance(w["properties"]["metrics"][0][0], dict)  # expressions
    }
    per_source = searches["Requests started and retried per source (batch, background, flex)"]
    assert """SEARCH('{batchgw,service,source} MetricName="RequestsStarted"', 'Sum', 300)""" in per_source
    per_model = searches["Batch requests by outcome (per model)"]
    assert """SEARCH('{batchgw,model,service} MetricName="RequestsStarted"', 'Sum', 300)""" in per_model


# --- the template as a whole -----------------------------------------------------------


@pytest.mark.parametrize("bundling", ["skipped", "bundled by the cdk cli"])
def test_template_passes_cfn_lint(request: pytest.FixtureRequest, tmp_path: Path, bundling: str) -> None:
    if bundling == "skipped":
        template = tmp_path / "template.json"
        template.write_text(json.dumps(request.getfixturevalue("synth").template.to_json()))
    else:
        template = request.getfixturevalue("bundled").template_path
    cfn_lint = Path(sys.executable).parent / "cfn-lint"
    result = subprocess.run(
        [str(cfn_lint), "--ignore-checks", *CFN_LINT_IGNORED, "--", str(template)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_direct_synth_skips_bundling_unless_asked_and_the_cli_bundles() -> None:
    assert not bundling_enabled({})
    assert bundling_enabled({"BATCHGW_BUNDLE": "1"})
    assert bundling_enabled({"CDK_OUTDIR": "cdk.out"})
    assert not bundling_enabled({"CDK_OUTDIR": "cdk.out", "BATCHGW_BUNDLE": "0"})
