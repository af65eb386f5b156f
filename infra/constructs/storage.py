"""DynamoDB tables and the data bucket, built from the specs in ``batchgw.config.resources``."""

from __future__ import annotations

from aws_cdk import Duration, RemovalPolicy
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from batchgw.config import resources
from constructs import Construct

from infra.capacity import TableCapacity
from infra.constructs import acknowledge

_ATTRIBUTE_TYPES = {
    "S": dynamodb.AttributeType.STRING,
    "N": dynamodb.AttributeType.NUMBER,
    "B": dynamodb.AttributeType.BINARY,
}

# Uploads in parts (presigned or through /v1/uploads) that are never completed.
_ABORT_INCOMPLETE_UPLOADS = Duration.days(1)
# Server access logs of the data buckets (every request, presigned URLs' included), kept this long.
_ACCESS_LOG_RETENTION = Duration.days(90)
# S3 delivers access logs under a bucket policy; the ACL CDK would otherwise set is disabled by
# BUCKET_OWNER_ENFORCED.
_ACCESS_LOGS_USE_BUCKET_POLICY = "@aws-cdk/aws-s3:serverAccessLogsUseBucketPolicy"


def _attribute(key: resources.Key) -> dynamodb.Attribute:
    return dynamodb.Attribute(name=key.name, type=_ATTRIBUTE_TYPES[key.type])


class Storage(Construct):
    """Every table in ``resources.TABLES`` and every bucket in ``resources.BUCKETS``.

    Tables and buckets hold users' batches and results, so they are retained when the
    stack is deleted. Each bucket's server access logs go to ``access_logs``. The tables
    pay for throughput as ``capacity`` says (``infra.capacity``).
    """

    def __init__(self, scope: Construct, construct_id: str, *, capacity: TableCapacity | None = None) -> None:
        super().__init__(scope, construct_id)
        self.capacity = capacity or TableCapacity()
        self.node.set_context(_ACCESS_LOGS_USE_BUCKET_POLICY, True)
        self.tables: dict[str, dynamodb.Table] = {
            spec.logical_id: self._table(spec) for spec in resources.TABLES
        }
        self.access_logs = s3.Bucket(
            self,
            "AccessLogs",
            encryption=s3.BucketEncryption.S3_MANAGED,  # the only encryption log delivery supports
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            enforce_ssl=True,
            object_ownership=s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
            lifecycle_rules=[s3.LifecycleRule(id="expire-logs", expiration=_ACCESS_LOG_RETENTION)],
            removal_policy=RemovalPolicy.RETAIN,
        )
        acknowledge(
            self.access_logs,
            {
                "AwsSolutions-S1": (
                    "this bucket receives the other buckets' server access logs; logging its own "
                    "accesses would need yet another bucket, and only S3's log delivery writes here"
                )
            },
        )
        self.buckets: dict[str, s3.Bucket] = {
            spec.logical_id: self._bucket(spec) for spec in resources.BUCKETS
        }
        # Seals webhook signing secrets (``batchgw.storage.sealer``); retained with the table
        # that holds what it sealed.
        self.webhook_key = kms.Key(
            self,
            "WebhookSecrets",
            description="batchgw: webhook signing secrets",
            enable_key_rotation=True,
            removal_policy=RemovalPolicy.RETAIN,
        )

    @property
    def environment(self) -> dict[str, str]:
        """The deployed names, under the variables the settings read them from."""
        env = {spec.env_var: self.tables[spec.logical_id].table_name for spec in resources.TABLES}
        env.update({spec.env_var: self.buckets[spec.logical_id].bucket_name for spec in resources.BUCKETS})
        env[resources.WEBHOOK_KEY_ENV] = self.webhook_key.key_arn
        return env

    def _table(self, spec: resources.TableSpec) -> dynamodb.Table:
        table = dynamodb.Table(
            self,
            spec.logical_id,
            partition_key=_attribute(spec.partition),
            sort_key=_attribute(spec.sort) if spec.sort else None,
            billing_mode=(
                dynamodb.BillingMode.PROVISIONED
                if self.capacity.provisioned
                else dynamodb.BillingMode.PAY_PER_REQUEST
            ),
            read_capacity=self._initial(self.capacity.read_units),
            write_capacity=self._initial(self.capacity.write_units),
            # encrypted at rest under an AWS-owned key: no KMS requests on the per-item path
            encryption=dynamodb.TableEncryption.DEFAULT,
            point_in_time_recovery_specification=dynamodb.PointInTimeRecoverySpecification(
                point_in_time_recovery_enabled=True
            ),
            time_to_live_attribute=spec.ttl_attribute,
            removal_policy=RemovalPolicy.RETAIN,
        )
        for index in spec.indexes:
            table.add_global_secondary_index(
                index_name=index.name,
                partition_key=_attribute(index.partition),
                sort_key=_attribute(index.sort) if index.sort else None,
                projection_type=dynamodb.ProjectionType(index.projection),
                read_capacity=self._initial(self.capacity.read_units),
                write_capacity=self._initial(self.capacity.write_units),
            )
        if self.capacity.provisioned:
            self._auto_scale(table, spec)
        return table

    def _initial(self, units: tuple[int, int]) -> int | None:
        """A provisioned table's (or index's) capacity when created: its minimum."""
        return units[0] if self.capacity.provisioned else None

    def _auto_scale(self, table: dynamodb.Table, spec: resources.TableSpec) -> None:
        """Target tracking on the table's and each index's reads and writes."""
        target = self.capacity.target_utilization
        (min_reads, max_reads), (min_writes, max_writes) = self.capacity.read_units, self.capacity.write_units
        table.auto_scale_read_capacity(min_capacity=min_reads, max_capacity=max_reads).scale_on_utilization(
            target_utilization_percent=target
        )
        table.auto_scale_write_capacity(
            min_capacity=min_writes, max_capacity=max_writes
        ).scale_on_utilization(target_utilization_percent=target)
        for index in spec.indexes:
            table.auto_scale_global_secondary_index_read_capacity(
                index.name, min_capacity=min_reads, max_capacity=max_reads
            ).scale_on_utilization(target_utilization_percent=target)
            table.auto_scale_global_secondary_index_write_capacity(
                index.name, min_capacity=min_writes, max_capacity=max_writes
            ).scale_on_utilization(target_utilization_percent=target)

    def _bucket(self, spec: resources.BucketSpec) -> s3.Bucket:
        rules = [
            s3.LifecycleRule(
                id="abort-incomplete-uploads",
                abort_incomplete_multipart_upload_after=_ABORT_INCOMPLETE_UPLOADS,
            )
        ]
        rules += [
            s3.LifecycleRule(id=f"expire-{prefix.strip('/')}", prefix=prefix, expiration=Duration.days(days))
            for prefix, days in spec.expire_prefixes.items()
        ]
        return s3.Bucket(
            self,
            spec.logical_id,
            encryption=s3.BucketEncryption.S3_MANAGED,
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            enforce_ssl=True,
            object_ownership=s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
            lifecycle_rules=rules,
            removal_policy=RemovalPolicy.RETAIN,
            server_access_logs_bucket=self.access_logs,
            server_access_logs_prefix=f"{spec.logical_id.lower()}/",
        )
