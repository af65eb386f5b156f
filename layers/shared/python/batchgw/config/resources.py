"""The one definition of every table, queue and bucket.

The CDK stack (``infra/``) and the local stack (``local/``) both build their resources
from these specs, so the two cannot drift. Names here are logical; the deployed names
reach the functions through the settings (``BATCHGW_*_TABLE`` and friends).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

KeyType = Literal["S", "N", "B"]


@dataclass(frozen=True)
class Key:
    name: str
    type: KeyType = "S"


@dataclass(frozen=True)
class Index:
    name: str
    partition: Key
    sort: Key | None = None


@dataclass(frozen=True)
class TableSpec:
    logical_id: str
    settings_field: str  # the Settings field (and env var) that carries the deployed name
    env_var: str
    partition: Key
    sort: Key | None = None
    indexes: tuple[Index, ...] = ()
    ttl_attribute: str | None = None


@dataclass(frozen=True)
class QueueSpec:
    logical_id: str
    env_var: str
    max_receive_count: int  # deliveries before a message moves to the dead-letter queue
    fifo: bool = False
    # How long a received message stays invisible unless its handler says otherwise (None:
    # six worker timeouts, AWS's advice for a function's event source).
    visibility_seconds: int | None = None
    # Messages per invocation of its function (Lambda's event source mapping, the local poller).
    batch_size: int = 10


@dataclass(frozen=True)
class BucketSpec:
    logical_id: str
    env_var: str
    expire_prefixes: dict[str, int] = field(default_factory=dict)


# Batches: one record per batch (sk = "meta") and its counter shards (sk = "ctr#<k>").
# The owner index lists a user's batches newest first.
BATCHES = TableSpec(
    logical_id="Batches",
    settings_field="batches_table",
    env_var="BATCHGW_BATCHES_TABLE",
    partition=Key("pk"),
    sort=Key("sk"),
    indexes=(Index("by_owner", Key("owner"), Key("created_key")),),
    ttl_attribute="ttl",
)

# Requests: one item per request of a batch, keyed by the batch and the request's index.
REQUESTS = TableSpec(
    logical_id="Requests",
    settings_field="requests_table",
    env_var="BATCHGW_REQUESTS_TABLE",
    partition=Key("pk"),
    sort=Key("idx", "N"),
    ttl_attribute="ttl",
)

# Control: API keys (hashed), per-model slot leases, idempotency records, counters.
CONTROL = TableSpec(
    logical_id="Control",
    settings_field="control_table",
    env_var="BATCHGW_CONTROL_TABLE",
    partition=Key("pk"),
    sort=Key("sk"),
    ttl_attribute="ttl",
)

# Files: uploaded batch inputs and result files, one item each; the owner index lists a
# user's files newest first.
FILES = TableSpec(
    logical_id="Files",
    settings_field="files_table",
    env_var="BATCHGW_FILES_TABLE",
    partition=Key("pk"),
    indexes=(Index("by_owner", Key("owner"), Key("created_key")),),
    ttl_attribute="ttl",
)

TABLES = (BATCHES, REQUESTS, CONTROL, FILES)

# Work: chain messages for the worker (see batchgw.domain.chains). Its depth follows the
# number of running chains, never the number of requests.
WORK_QUEUE = QueueSpec(logical_id="Work", env_var="BATCHGW_WORK_QUEUE_URL", max_receive_count=10)

# Webhooks: batch events (FIFO, one message group per user: one user's events go out one
# at a time, in order). A delivery waits by keeping its message invisible, so a message is
# received once per attempt and once per suspension of its endpoint: the DLQ takes it only
# after days of an endpoint that answers nothing.
WEBHOOK_QUEUE = QueueSpec(
    logical_id="Webhooks",
    env_var="BATCHGW_WEBHOOK_QUEUE_URL",
    max_receive_count=100,
    fifo=True,
    visibility_seconds=120,
    batch_size=1,  # an event that waits holds back only its own user's later ones
)

QUEUES = (WORK_QUEUE, WEBHOOK_QUEUE)

# The data bucket's lifecycle rules (S3 applies them on AWS; the local stack applies the same
# rules itself): an abandoned upload's parts (``uploads/``) and an abandoned presigned
# upload (``incoming/``) go after a day (an upload must complete within an hour); a file
# (``files/``) goes a day after it can no longer be read (input files are kept
# BATCH_FILE_RETENTION_DAYS, 30; result files are deleted with their batch before then).
DATA_BUCKET = BucketSpec(
    logical_id="Data",
    env_var="BATCHGW_DATA_BUCKET",
    expire_prefixes={"uploads/": 1, "incoming/": 1, "files/": 31},
)
BUCKETS = (DATA_BUCKET,)

# The KMS key that seals webhook signing secrets at rest (``storage.sealer``): the api
# encrypts a new secret, the webhook function decrypts it to sign.
WEBHOOK_KEY_ENV = "BATCHGW_WEBHOOK_KEY_ID"

# The workflow: one Standard execution per batch, from this ASL file (relative to the
# repository root). CDK and the local stack substitute the same placeholders.
WORKFLOW_ASL = "infra/workflow/batch.asl.json"
WORKFLOW_SUBSTITUTIONS = ("LifecycleFunctionArn",)
