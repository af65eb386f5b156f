"""The AWS price table ``bench.cost`` uses: list prices in one region on one date.

Every price here is AWS's public list price for **us-east-1 on 2026-12-01**, pay as you go
(DynamoDB both on demand and provisioned), without the free tier, Savings Plans or reserved
capacity, each with its unit and where it
comes from. Changing a price means changing this file (and its date); nothing else in
``bench/`` hard-codes one.
"""

from __future__ import annotations

from dataclasses import dataclass

PRICES_DATE = "2026-12-01"
PRICES_REGION = "us-east-1"
PRICES_NOTE = (
    f"AWS list prices, {PRICES_REGION}, {PRICES_DATE}; pay as you go, no free tier, no Savings Plans or"
    " reserved capacity"
)


@dataclass(frozen=True)
class Price:
    usd: float  # per ``per`` units
    per: float
    unit: str
    source: str

    @property
    def each(self) -> float:
        """USD for one unit."""
        return self.usd / self.per


# DynamoDB on-demand (since the price cut of 1 Nov 2024). Capacity rules (developer guide,
# "DynamoDB read and write operations"): a write costs 1 WRU per KB (rounded up) of the larger
# of the item's size before and after it, 2 in a transaction (ConditionCheck included); each GSI
# the write changes costs WRU by the projected item's size (2 writes when the index key
# changes); a delete costs by the deleted item's size. A strongly consistent read costs 1 RRU per
# 4 KB, eventually consistent half, transactional 2; a Query costs by the total size it reads,
# rounded up once; BatchGetItem rounds each item.
DYNAMODB_WRITE_UNIT = Price(
    0.625, 1e6, "write request unit", "aws.amazon.com/dynamodb/pricing/on-demand (Standard table class)"
)
DYNAMODB_READ_UNIT = Price(
    0.125, 1e6, "read request unit", "aws.amazon.com/dynamodb/pricing/on-demand (Standard table class)"
)
# DynamoDB provisioned capacity (the same page, "Provisioned"): a unit-hour of capacity, billed
# whether used or not. One write capacity unit serves one write unit a second (transactions
# and item sizes count as on demand); ``bench.cost_model.provisioned_prices`` turns an hour into
# the price of a unit used at a given utilization.
DYNAMODB_WRITE_CAPACITY_HOUR = Price(
    0.00065,
    1,
    "write capacity unit-hour",
    "aws.amazon.com/dynamodb/pricing/provisioned (Standard table class)",
)
DYNAMODB_READ_CAPACITY_HOUR = Price(
    0.00013,
    1,
    "read capacity unit-hour",
    "aws.amazon.com/dynamodb/pricing/provisioned (Standard table class)",
)
# CloudWatch alarms: target tracking makes its own (standard resolution, per alarm-month).
CLOUDWATCH_ALARM_MONTH = Price(0.10, 1, "alarm-month", "aws.amazon.com/cloudwatch/pricing")
HOURS_PER_MONTH = 730
DYNAMODB_WRITE_UNIT_BYTES = 1024
DYNAMODB_READ_UNIT_BYTES = 4096

# S3 Standard requests (aws.amazon.com/s3/pricing, "Requests & data retrievals").
S3_WRITE_REQUEST = Price(0.005, 1000, "PUT, COPY, POST or LIST request", "aws.amazon.com/s3/pricing")
S3_READ_REQUEST = Price(0.0004, 1000, "GET, HEAD or other request", "aws.amazon.com/s3/pricing")
# DELETE and lifecycle expirations are free.

# SQS: every API action is a request; each 64 KB chunk of a payload is billed as one request.
SQS_STANDARD_REQUEST = Price(0.40, 1e6, "standard queue request (64 KB chunk)", "aws.amazon.com/sqs/pricing")
SQS_FIFO_REQUEST = Price(0.50, 1e6, "FIFO queue request (64 KB chunk)", "aws.amazon.com/sqs/pricing")
SQS_CHUNK_BYTES = 64 * 1024

# Step Functions Standard workflows: per state transition; API calls (StartExecution,
# SendTaskSuccess...) are not billed.
SFN_STANDARD_TRANSITION = Price(
    0.025, 1000, "Standard workflow state transition", "aws.amazon.com/step-functions/pricing"
)

# Lambda on arm64 (Graviton), first pricing tier (the first 7.5 billion GB-s a month).
LAMBDA_ARM_GB_SECOND = Price(0.0000133334, 1, "GB-second (arm64)", "aws.amazon.com/lambda/pricing")
LAMBDA_REQUEST = Price(0.20, 1e6, "invocation", "aws.amazon.com/lambda/pricing")

# API Gateway HTTP API, first 300 million a month; each 512 KB of a request is one request.
APIGW_HTTP_REQUEST = Price(1.00, 1e6, "HTTP API request (512 KB chunk)", "aws.amazon.com/api-gateway/pricing")
APIGW_CHUNK_BYTES = 512 * 1024

# CloudWatch Logs ingestion (Standard log class); EMF metrics arrive as log lines.
LOGS_INGESTED_GB = Price(0.50, 1, "GB of logs ingested", "aws.amazon.com/cloudwatch/pricing")

# X-Ray: traces recorded; Lambda's active tracing samples with the default rule.
XRAY_TRACE = Price(5.00, 1e6, "trace recorded", "aws.amazon.com/xray/pricing")
XRAY_RESERVOIR_PER_SECOND = 1.0  # the default sampling rule: the first request each second...
XRAY_FIXED_RATE = 0.05  # ...and 5% of the rest

KMS_REQUEST = Price(0.03, 10_000, "KMS API request (symmetric)", "aws.amazon.com/kms/pricing")
SECRETS_REQUEST = Price(0.05, 10_000, "Secrets Manager API call", "aws.amazon.com/secrets-manager/pricing")
