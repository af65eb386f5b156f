"""Create the gateway's resources in a running moto, from ``batchgw.config.resources``.

``bootstrap(env)`` makes every table, queue (with its dead-letter queue) and bucket the
specs define, seeds the local API keys, creates the Lambda functions the workflow names
and the workflow's state machine from the shared ASL file. The names come from ``env``
(``local.env.stack_env``), so the processes that read the same variables find them.

A moto that restored a saved state (``local.state``) already has the tables, the bucket
and the webhook key: those are kept as they are, with what they hold, and the local keys
are seeded only into a control table created now (a restored one has them, or what an
admin made of them since: a revoked seeded key stays revoked).

``python -m local.bootstrap`` does the same against the moto named by the environment.
"""

from __future__ import annotations

import io
import json
import logging
import os
import zipfile
from collections.abc import Mapping
from typing import Any

import boto3
from batchgw.config import resources
from batchgw.config.resources import QueueSpec, TableSpec
from batchgw.config.settings import Settings
from batchgw.storage.accounts import account_items
from botocore.config import Config

from local.env import (
    LAMBDA_ROLE_NAME,
    REPO_ROOT,
    STATE_MACHINE_NAME,
    dead_letter_queue_name,
    function_name,
    queue_name,
    setup_logging,
)
from local.keys import local_accounts

log = logging.getLogger("local.bootstrap")

# 14 days, SQS's maximum, so nothing that failed disappears from the dead-letter queue.
DLQ_RETENTION_SECONDS = 1_209_600
LAMBDA_TIMEOUT_SECONDS = 900
_LAMBDA_TRUST = {
    "Version": "2012-10-17",
    "Statement": [
        {"Effect": "Allow", "Principal": {"Service": "lambda.amazonaws.com"}, "Action": "sts:AssumeRole"},
        {"Effect": "Allow", "Principal": {"Service": "states.amazonaws.com"}, "Action": "sts:AssumeRole"},
    ],
}


def _session(env: Mapping[str, str]) -> boto3.session.Session:
    return boto3.session.Session(
        region_name=env["AWS_DEFAULT_REGION"],
        aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"],
    )


def _client(service: str, env: Mapping[str, str], session: boto3.session.Session | None = None) -> Any:
    return (session or _session(env)).client(  # type: ignore[call-overload]
        service,
        endpoint_url=env["AWS_ENDPOINT_URL"],
        config=Config(retries={"mode": "standard", "max_attempts": 3}),
    )


def _schema(partition: resources.Key, sort: resources.Key | None) -> list[dict[str, str]]:
    out = [{"AttributeName": partition.name, "KeyType": "HASH"}]
    if sort:
        out.append({"AttributeName": sort.name, "KeyType": "RANGE"})
    return out


def _attributes(keys: list[resources.Key]) -> list[dict[str, str]]:
    return [{"AttributeName": k, "AttributeType": t} for k, t in {key.name: key.type for key in keys}.items()]


def _index(index: resources.Index) -> dict[str, Any]:
    return {
        "IndexName": index.name,
        "KeySchema": _schema(index.partition, index.sort),
        "Projection": {"ProjectionType": index.projection},
    }


def _index_keys(index: resources.Index) -> list[resources.Key]:
    return [index.partition, *([index.sort] if index.sort else [])]


def create_table(dynamodb: Any, spec: TableSpec, name: str) -> None:
    keys = [spec.partition, *([spec.sort] if spec.sort else [])]
    for index in spec.indexes:
        keys += _index_keys(index)
    request: dict[str, Any] = {
        "TableName": name,
        "BillingMode": "PAY_PER_REQUEST",
        "KeySchema": _schema(spec.partition, spec.sort),
        "AttributeDefinitions": _attributes(keys),
    }
    if spec.indexes:
        request["GlobalSecondaryIndexes"] = [_index(index) for index in spec.indexes]
    dynamodb.create_table(**request)
    if spec.ttl_attribute:
        dynamodb.update_time_to_live(
            TableName=name,
            TimeToLiveSpecification={"Enabled": True, "AttributeName": spec.ttl_attribute},
        )


def add_missing_indexes(dynamodb: Any, spec: TableSpec, name: str) -> None:
    """Give a restored table the indexes its spec gained since its state was saved (as a
    deploy adds them to the deployed table)."""
    found = dynamodb.describe_table(TableName=name)["Table"].get("GlobalSecondaryIndexes", [])
    have = {index["IndexName"] for index in found}
    for index in spec.indexes:
        if index.name not in have:
            dynamodb.update_table(
                TableName=name,
                AttributeDefinitions=_attributes(_index_keys(index)),
                GlobalSecondaryIndexUpdates=[{"Create": _index(index)}],
            )


WEBHOOK_KEY_DESCRIPTION = "batchgw webhook secrets"


def create_key(kms: Any) -> str:
    """The key that seals webhook secrets (the restored one, if there is one); returns its ARN."""
    for listed in kms.list_keys()["Keys"]:  # a few at most: moto's, in this stack alone
        metadata = kms.describe_key(KeyId=listed["KeyId"])["KeyMetadata"]
        if metadata.get("Description") == WEBHOOK_KEY_DESCRIPTION:
            return str(metadata["Arn"])
    return str(kms.create_key(Description=WEBHOOK_KEY_DESCRIPTION)["KeyMetadata"]["Arn"])


def create_queue(sqs: Any, spec: QueueSpec, visibility_seconds: int) -> str:
    """Create the queue and its dead-letter queue; returns the queue's URL."""
    fifo = {"FifoQueue": "true"} if spec.fifo else {}
    dlq_url = sqs.create_queue(
        QueueName=dead_letter_queue_name(spec),
        Attributes={**fifo, "MessageRetentionPeriod": str(DLQ_RETENTION_SECONDS)},
    )["QueueUrl"]
    attributes = sqs.get_queue_attributes(QueueUrl=dlq_url, AttributeNames=["QueueArn"])["Attributes"]
    dlq_arn = attributes["QueueArn"]
    redrive = {"deadLetterTargetArn": dlq_arn, "maxReceiveCount": str(spec.max_receive_count)}
    url: str = sqs.create_queue(
        QueueName=queue_name(spec),
        Attributes={
            **fifo,
            "VisibilityTimeout": str(visibility_seconds),
            "RedrivePolicy": json.dumps(redrive),
        },
    )["QueueUrl"]
    return url


def create_bucket(s3: Any, spec: resources.BucketSpec, name: str, *, exists: bool = False) -> None:
    """Create the bucket (unless it ``exists``, restored) and set its lifecycle rules."""
    if not exists:
        s3.create_bucket(Bucket=name)
    if spec.expire_prefixes:  # moto keeps the rules but never applies them
        s3.put_bucket_lifecycle_configuration(
            Bucket=name,
            LifecycleConfiguration={
                "Rules": [
                    {
                        "ID": f"expire-{prefix.strip('/')}",
                        "Filter": {"Prefix": prefix},
                        "Status": "Enabled",
                        "Expiration": {"Days": days},
                    }
                    for prefix, days in spec.expire_prefixes.items()
                ]
            },
        )


def seed_keys(env: Mapping[str, str], session: boto3.session.Session | None = None) -> None:
    """Store the local accounts (``local.keys``: the seeded users and their keys)."""
    dynamodb = (session or _session(env)).resource("dynamodb", endpoint_url=env["AWS_ENDPOINT_URL"])  # type: ignore[call-overload]
    table = dynamodb.Table(env[resources.CONTROL.env_var])
    for user, key in local_accounts():
        for item in account_items(user, [key]):
            table.put_item(Item=item)


def _dummy_zip() -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        # Never runs: the local stack's Lambda hook dispatches by function name.
        archive.writestr("index.py", "def handler(event, context):\n    return event\n")
    return buffer.getvalue()


def create_functions(iam: Any, lambda_: Any) -> dict[str, str]:
    """One function per workflow placeholder; returns placeholder -> function ARN."""
    role = iam.create_role(RoleName=LAMBDA_ROLE_NAME, AssumeRolePolicyDocument=json.dumps(_LAMBDA_TRUST))
    code = _dummy_zip()
    arns = {}
    for substitution in resources.WORKFLOW_SUBSTITUTIONS:
        created = lambda_.create_function(
            FunctionName=function_name(substitution),
            Runtime="python3.11",
            Role=role["Role"]["Arn"],
            Handler="index.handler",
            Code={"ZipFile": code},
            Timeout=LAMBDA_TIMEOUT_SECONDS,
            MemorySize=1024,
        )
        arns[substitution] = created["FunctionArn"]
    return arns


def create_state_machine(sfn: Any, substitutions: Mapping[str, str], role_arn: str) -> str:
    definition = (REPO_ROOT / resources.WORKFLOW_ASL).read_text()
    for placeholder, value in substitutions.items():
        definition = definition.replace("${" + placeholder + "}", value)
    arn: str = sfn.create_state_machine(
        name=STATE_MACHINE_NAME, definition=definition, roleArn=role_arn, type="STANDARD"
    )["stateMachineArn"]
    return arn


def bootstrap(env: Mapping[str, str]) -> dict[str, str]:
    """Create every resource in the moto at ``env["AWS_ENDPOINT_URL"]``.

    Returns the variables whose values moto chose (each queue's URL and the state
    machine's ARN); they equal the ones ``stack_env`` predicted, and a caller should
    still prefer these.
    """
    settings = Settings.from_env(env)
    # One session for every client: botocore reads its endpoint and service data once (a
    # session of its own per client read them again, about 0.1 s of CPU each).
    session = _session(env)
    dynamodb, sqs, s3 = (_client(service, env, session) for service in ("dynamodb", "sqs", "s3"))
    created: dict[str, str] = {}
    tables = set(dynamodb.list_tables()["TableNames"])  # a restored state's (one page: four)
    for table in resources.TABLES:
        if env[table.env_var] not in tables:
            create_table(dynamodb, table, env[table.env_var])
        else:
            add_missing_indexes(dynamodb, table, env[table.env_var])
    # Every queue feeds a function that runs no longer than the worker, so the worker's
    # visibility (six times its timeout, AWS's advice for event sources) fits them all.
    for queue in resources.QUEUES:
        # A test may shrink a queue's visibility (how soon a message whose handler died
        # comes back): BATCHGW_<QUEUE>_VISIBILITY_SECONDS.
        shrunk = env.get(f"BATCHGW_{queue.logical_id.upper()}_VISIBILITY_SECONDS")
        visibility = int(shrunk) if shrunk else (queue.visibility_seconds or settings.work_visibility_seconds)
        created[queue.env_var] = create_queue(sqs, queue, visibility)
    buckets = {b["Name"] for b in s3.list_buckets()["Buckets"]}
    for bucket in resources.BUCKETS:
        create_bucket(s3, bucket, env[bucket.env_var], exists=env[bucket.env_var] in buckets)
    if env[resources.CONTROL.env_var] not in tables:
        seed_keys(env, session)
    created[resources.WEBHOOK_KEY_ENV] = create_key(_client("kms", env, session))
    iam = _client("iam", env, session)
    arns = create_functions(iam, _client("lambda", env, session))
    role_arn = iam.get_role(RoleName=LAMBDA_ROLE_NAME)["Role"]["Arn"]
    created["BATCHGW_STATE_MACHINE_ARN"] = create_state_machine(
        _client("stepfunctions", env, session), arns, role_arn
    )
    log.info("bootstrapped", extra=created)
    return created


def main() -> None:
    setup_logging("bootstrap")
    for name, value in bootstrap(os.environ).items():
        print(f"{name}={value}")


if __name__ == "__main__":
    main()
