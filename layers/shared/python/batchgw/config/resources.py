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
    # ALL copies every attribute into the index; KEYS_ONLY only the table's and the index's keys
    projection: Literal["ALL", "KEYS_ONLY"] = "ALL"


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

# Requests: one item per request of a batch, keyed by the batch and the request's index,
# and beside them each batch's attempt log (storage.reqlog.attempts_pk). The request log
# index lists the attempt log's entries across batches, newest first (storage.reqlog): only
# those entries have its keys, so a claim or an end of a request writes its item alone.
REQUESTS = TableSpec(
    logical_id="Requests",
    settings_field="requests_table",
    env_var="BATCHGW_REQUESTS_TABLE",
    partition=Key("pk"),
    sort=Key("idx", "N"),
    indexes=(Index("request_log", Key("rlk"), Key("rls")),),
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
# Worker invocations in flight at once (the work queue's event source mapping's maximum
# concurrency), whatever the queue's depth. The per-model caps are lease slots in DynamoDB;
# this bounds the whole gateway. The CDK stack and the local stack's pollers both read it.
WORKER_MAX_CONCURRENCY = 50

# Flex: the work messages of flex requests (``service_tier: "flex"``, ids ``flex_…``), whose
# callers wait on the line. The worker takes them through an event source mapping of their
# own, one message an invocation, so a flex request never waits for an environment behind
# the invocations batch chains hold (waiting in place for room, running beside their splits).
FLEX_QUEUE = QueueSpec(
    logical_id="Flex", env_var="BATCHGW_FLEX_QUEUE_URL", max_receive_count=10, batch_size=1
)
# Worker invocations in flight at once on the flex queue: flex requests waiting for a batch
# slot or running, at once, beside the work queue's WORKER_MAX_CONCURRENCY.
FLEX_MAX_CONCURRENCY = 20

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

QUEUES = (WORK_QUEUE, FLEX_QUEUE, WEBHOOK_QUEUE)

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


# --- who may touch what -----------------------------------------------------------------------
#
# Each Lambda function's role is built from these declarations (``infra/constructs/functions.py``)
# and nothing else, so a grant is a line here. ``tests/infra`` proves the roles from the
# synthesized template, and the e2e run proves every call the functions made is allowed
# (``tests/e2e/test_aws_permissions.py``): together they pin each role to what its code uses.

# The Lambda functions, by the name of their folder in ``functions/`` (the local stack names
# them ``batchgw-<name>``). ``admin`` serves the HTTP API's ``/admin/...`` routes: it alone
# writes accounts, keys and runtime settings, so the internet-facing ``api`` cannot.
# ``interactive`` serves the reference interactive path (``INTERACTIVE_PATHS``): it alone,
# with the worker, holds the upstream keys.
API = "api"
ADMIN = "admin"
WORKER = "worker"
LIFECYCLE = "lifecycle"
WEBHOOKS = "webhooks"
INTERACTIVE = "interactive"
FUNCTIONS = (API, ADMIN, WORKER, LIFECYCLE, WEBHOOKS, INTERACTIVE)


@dataclass(frozen=True)
class Access:
    """Which functions read a piece of storage, which write it (and may read and delete it
    too), and which may only delete in it."""

    read: frozenset[str] = frozenset()
    write: frozenset[str] = frozenset()
    delete: frozenset[str] = frozenset()

    def reads(self, function: str) -> bool:
        return function in self.read or function in self.write

    def writes(self, function: str) -> bool:
        return function in self.write

    def deletes(self, function: str) -> bool:
        return function in self.write or function in self.delete

    def touches(self, function: str) -> bool:
        return self.reads(function) or self.deletes(function)


def access(
    *, read: tuple[str, ...] = (), write: tuple[str, ...] = (), delete: tuple[str, ...] = ()
) -> Access:
    unknown = set(read + write + delete) - set(FUNCTIONS)
    if unknown:
        raise ValueError(f"unknown functions {sorted(unknown)}")
    return Access(frozenset(read), frozenset(write), frozenset(delete))


# The tables whose items any of their users may touch (the control table is shared out by
# partition below).
TABLE_ACCESS: dict[str, Access] = {
    # the admin lists every user's batches and deletes a deleted user's; the interactive
    # function stores a background response (a batch of one request: ``batchgw.deferred``)
    BATCHES.logical_id: access(read=(ADMIN,), write=(API, ADMIN, WORKER, LIFECYCLE, INTERACTIVE)),
    # the api pages results; the admin reads a batch's attempts; the interactive function
    # reads a background response's request as it answers its create, and a flex request's
    # while it waits (ending it unstarted when no slot freed up: ``batchgw.deferred.flex``)
    REQUESTS.logical_id: access(read=(API, ADMIN), write=(WORKER, LIFECYCLE, INTERACTIVE)),
    # the admin deletes a deleted user's files; the lifecycle stores result files
    FILES.logical_id: access(write=(API, ADMIN, LIFECYCLE)),
}

# The control table's partitions, by the IAM pattern of their partition key (``StringLike`` on
# ``dynamodb:LeadingKeys``: ``*`` is any text). The storage module that owns each is named.
_ALL = FUNCTIONS
CONTROL_PARTITIONS: dict[str, Access] = {
    # storage.accounts: a user's profile and keys, the registry, the two key lookups (the
    # lifecycle reads an owner's quotas for a provider-run batch's most cost)
    "user#*": access(read=(API, WORKER, INTERACTIVE, LIFECYCLE), write=(ADMIN,)),
    "users": access(write=(ADMIN,)),
    "key#*": access(read=(API, INTERACTIVE), write=(ADMIN,)),
    "keyid#*": access(write=(ADMIN,)),
    # storage.runtime: administrators' overrides, read by every process
    "runtime": access(read=tuple(f for f in _ALL if f != ADMIN), write=(ADMIN,)),
    # storage.idempotency: the api claims keys; a batch's end or deletion keeps them
    "idem#*": access(write=(API, ADMIN, LIFECYCLE, INTERACTIVE)),
    # storage.interactive: interactive load reports, read by the worker to give way (and by
    # the api for a model's batch share, in a batch's estimate: ``scheduling.forecast``); the
    # interactive function's requests in flight are reports of their own (the lifecycle reads
    # them too, for a file batch's estimate once its file is read)
    "interactive": access(read=(WORKER, API, LIFECYCLE), write=(ADMIN, INTERACTIVE)),
    # storage.adaptive: each model's adaptive limit, kept by the workers from what they see
    "adaptive": access(read=(ADMIN, API, LIFECYCLE, INTERACTIVE), write=(WORKER,)),
    # storage.slots: model and per-user concurrency leases, shown to administrators; the api
    # rewrites a batch's tag on its models' maps when its priority or complete_by changes
    "slots#*": access(read=(ADMIN, LIFECYCLE, INTERACTIVE), write=(WORKER, API)),
    # (a user's slot map also holds their interactive requests' reservations, and the
    # provider-run batches' they were accepted, written by the api's create and, for a file
    # batch, by the lifecycle's first provider step)
    "uslots#*": access(write=(WORKER, INTERACTIVE, API, LIFECYCLE)),
    # (the interactive function's create of a background response, ``batchgw.deferred``,
    # does what the api's create of a batch does: its idempotency key, its usage, its
    # estimate's reads of the adaptive limits and slot maps, its input in the bucket)
    # storage.spend: charged in the attempt's own transaction (an interactive request's on
    # its own; the lost attempts of a request the reconciler ends, in its end), read for
    # quotas and /v1/me
    "spend#*": access(read=(API,), write=(WORKER, INTERACTIVE, LIFECYCLE)),
    # storage.webhooks: a user's endpoint and its delivery log (a batch's end records its
    # event's delivery, due now, before it queues it: ``run.ending.announce``)
    "webhook#*": access(read=(LIFECYCLE,), write=(API, ADMIN, WEBHOOKS)),
    "whevents#*": access(read=(API,), write=(ADMIN, WEBHOOKS, LIFECYCLE)),
    # storage.control: uploads in parts, hourly upload counters, a result file's parts
    "upload#*": access(write=(API,)),
    "uploads#*": access(write=(API,)),
    "parts#*": access(write=(LIFECYCLE,)),
    # storage.ratelimit: each key's request rate, taken by whichever function the key calls;
    # storage.usage: per-user counters of unfinished work and stored bytes (the admin deletes
    # a deleted user's batches and files)
    "rate#*": access(write=(API, ADMIN, INTERACTIVE)),
    # storage.sessions: the console's sign-ins, made, read and ended by the api; read by the
    # admin function too, for the Admin Batches tab's calls to /admin/...
    "session#*": access(read=(ADMIN,), write=(API,)),
    "usage#*": access(write=(API, ADMIN, LIFECYCLE, INTERACTIVE)),
    # storage.audit: administrators' reads of a user's content, recorded as they read (the
    # admin's Prompts; the api's file content and batch results read by an administrator)
    "audit#*": access(write=(ADMIN, API)),
    # storage.reqlog: the interactive calls (a batch's are its attempt log's, listed through
    # the requests table's index), and every call's counts per hour (the lifecycle's provider
    # step counts a provider-run batch's lines); the api reads a model's recent batch calls
    # for its pace (``scheduling.forecast``), as the lifecycle does for a file batch once read
    "rlog#*": access(read=(ADMIN, API, LIFECYCLE), write=(INTERACTIVE,)),
    "rmetrics#*": access(read=(ADMIN,), write=(WORKER, INTERACTIVE, LIFECYCLE)),
}

# The data bucket's key prefixes (``storage.blobs``, ``domain.files``). Presigned URLs act with
# the role of the function that signs them (the api's).
DATA_PREFIXES: dict[str, Access] = {
    # a batch's requests as sent (and its copy of an input file), read back for its results
    # (and by the admin's Prompts)
    "inputs/": access(read=(ADMIN,), write=(API, LIFECYCLE, INTERACTIVE)),
    # request and response bodies too large for their item; a batch whose start failed is
    # cleaned up by the api
    "bodies/": access(read=(API, ADMIN, INTERACTIVE), write=(WORKER, LIFECYCLE), delete=(API, INTERACTIVE)),
    # result pages and a batch's output.jsonl
    "exports/": access(write=(API, LIFECYCLE)),
    # files: uploaded inputs and result files; a deleted user's are deleted by the admin
    "files/": access(write=(API, LIFECYCLE), delete=(ADMIN,)),
    # presigned uploads waiting to be completed, and parts of uploads (/v1/uploads)
    "incoming/": access(write=(API,)),
    "uploads/": access(write=(API,)),
}

# The HTTP API sends every path under this prefix to the admin function (``/admin/{proxy+}``),
# a POST to one of the interactive paths to the interactive function, the rest to the api
# function; the local adapter dispatches the same way.
ADMIN_PATH_PREFIX = "/admin/"
INTERACTIVE_PATHS = ("/v1/chat/completions", "/v1/embeddings", "/v1/responses", "/v1/messages")
