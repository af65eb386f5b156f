"""Every limit, duration and resource name the gateway reads, as one validated model.

Settings come from the environment (the spec's names, e.g. ``BATCH_MODEL_CONCURRENCY``)
and are validated once at cold start. Durations are plain seconds so that a test can
shrink any of them; the spec's hours/days settings accept fractions here.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from batchgw.domain.principal import ROLES

# A file sent in one multipart request (an upload's part, ``POST /v1/files``) comes wrapped in
# its framing: boundaries and the field's headers, its filename too (the OpenAI SDK's take 182
# bytes for a part). BATCH_MAX_BODY_MB limits the file's own bytes; its body may be this much more.
MULTIPART_FRAMING_BYTES = 64 * 1024
# The largest BATCH_MAX_BODY_MB Lambda can take. Its invoke payload (6,291,456 bytes) is the
# whole event: the body base64-encoded (4/3), plus the headers (API Gateway takes 10,240 bytes of
# request line and headers) and the event's own fields, 16 KiB allowed for both. That leaves
# (6,291,456 - 16,384) * 3/4 = 4,706,304 bytes of body: a file of 4,640,768 bytes (4.43 MiB) and
# its framing. ``tests/unit/test_settings.py`` builds that event and measures it.
PLATFORM_MAX_BODY_MB = 4.4
# Lambda's longest timeout: no worker or prepare lives longer, and no lease (a request's,
# prepare's) is longer. The workflow's retries that wait for running work outlast the two
# together (``tests/infra/test_stack.py`` holds them to it).
MAX_LIFE_SECONDS = 900
# What a worker invocation keeps beside its longest upstream call: the chain's margin to hand
# itself on (``run.chain``'s SEGMENT_MARGIN_SECONDS, 5 s), a claim, a slot and the record of
# the answer.
WORKER_SPARE_SECONDS = 10
# The webhook function's Lambda timeout (``infra``), and what a delivery leaves of it beside
# the receiver's deadline: reading the endpoint, signing, recording the attempt.
WEBHOOK_FUNCTION_SECONDS = 30
WEBHOOK_SPARE_SECONDS = 5
# The least request rate a key may be held to (0 aside: unlimited): below it a Retry-After
# would be hours, and the bucket's numbers would leave DynamoDB's range.
MIN_API_RATE_PER_KEY = 0.1


class Settings(BaseModel):
    """The gateway's settings. Field aliases are the environment variable names."""

    model_config = ConfigDict(populate_by_name=True, frozen=True)

    # --- the spec's settings -------------------------------------------------------
    batch_enabled: bool = Field(
        True,
        alias="BATCH_ENABLED",
        description=(
            "Serve batch inference. Off: every batch, file and upload route answers 404 and no queued "
            "request starts; stored batches are kept"
        ),
    )
    db_store_full_content: bool = Field(
        True,
        alias="DB_STORE_FULL_CONTENT",
        description=(
            "Administrators may read another user's stored requests and answers (GET "
            "/admin/batch/jobs/{batch_id}/requests, GET /v1/files/{file_id}/content, GET "
            "/v1/batches/{batch_id}/results and /output.jsonl, merged or not; each read audited); "
            "off: those routes answer 403 prompts_not_stored to an administrator reading another "
            "user's content (the owner still reads their own)"
        ),
    )
    batch_files_enabled: bool = Field(
        True,
        alias="BATCH_FILES_ENABLED",
        description=(
            "Batches may be made from uploaded input files. Off: such a create (API, console or a "
            "retry of a file batch) answers 400 batch_files_disabled; batches of direct requests run"
        ),
    )
    batch_min_role: str = Field(
        "internal",
        alias="BATCH_MIN_ROLE",
        description=(
            "Lowest role that may create batches and upload files (free, pro, internal, admin); a queued "
            "request waits while its owner's role is below it"
        ),
    )
    batch_model_concurrency: int = Field(
        64,
        ge=0,
        alias="BATCH_MODEL_CONCURRENCY",
        description=(
            "Batch requests a model runs at once across the deployment when it has no cap of its own; 0 "
            "pauses batch work on those models"
        ),
    )
    # Batch work gives way to interactive traffic on the same model (``domain.interactive``).
    batch_yield_to_interactive: bool = Field(
        True,
        alias="BATCH_YIELD_TO_INTERACTIVE",
        description=(
            "Interactive requests in flight on a model take batch slots from its cap. Off: batch work fills "
            "the cap whatever the interactive load, and BATCH_SHARED_INTERACTIVE_LOAD and "
            "BATCH_INTERACTIVE_RESERVE have no effect"
        ),
    )
    batch_shared_interactive_load: bool = Field(
        True,
        alias="BATCH_SHARED_INTERACTIVE_LOAD",
        description=(
            "Yield to the interactive requests every gateway process reports, not only this deployment's "
            "own. While the reports cannot be read, no new batch request starts; running ones continue. "
            "Applies only while BATCH_YIELD_TO_INTERACTIVE is on"
        ),
    )
    batch_adaptive_concurrency: bool = Field(
        True,
        alias="BATCH_ADAPTIVE_CONCURRENCY",
        description=(
            "Batch work on a model also gives way to its upstream's backpressure: 429s, 503s that are not "
            "model_queued and latency rising well above its unloaded latency shrink the model's batch share, "
            "which grows back while answers stay healthy, never above its cap less the interactive load. "
            "Off: only the cap and the interactive load count"
        ),
    )
    batch_adaptive_latency_factor: float = Field(
        3.0,
        ge=0,
        le=100,
        alias="BATCH_ADAPTIVE_LATENCY_FACTOR",
        description=(
            "With BATCH_ADAPTIVE_CONCURRENCY on: batch latency that stays past this many times the model's "
            "unloaded latency (and 500 ms more) shrinks its batch share; 0 turns the latency signal off"
        ),
    )
    batch_interactive_reserve: int = Field(
        0,
        ge=0,
        le=100_000,
        alias="BATCH_INTERACTIVE_RESERVE",
        description=(
            "Slots of every model's batch cap kept free for interactive requests, on top of those in "
            "flight. Applies only while BATCH_YIELD_TO_INTERACTIVE is on"
        ),
    )
    # Scheduling's knobs that matter on AWS (the rest are ``scheduling.tuning``'s constants).
    batch_yield_in_place_seconds: float = Field(
        30,
        ge=0,
        le=600,
        alias="BATCH_YIELD_IN_PLACE_SECONDS",
        description=(
            "How long in all a chain that yields to interactive traffic waits in place for room, its "
            "invocation billed, before it leaves by a message: each round reads its batch and notes it "
            "waiting; 0: it leaves after its first look"
        ),
    )
    batch_share_read_seconds: float = Field(
        0.25,
        gt=0,
        le=60,
        alias="BATCH_SHARE_READ_SECONDS",
        description=(
            "How old an execution environment's view of the interactive load may grow before its chains "
            "read it again (one Query per environment at most this often): lower yields sooner, reads more"
        ),
    )
    batch_call_pacing: bool = Field(
        True,
        alias="BATCH_CALL_PACING",
        description=(
            "Space the upstream call starts of one execution environment over half the recent call length, "
            "so requests started together do not all end together; off: each call starts at once"
        ),
    )
    batch_tenant_shares: bool = Field(
        False,
        alias="BATCH_TENANT_SHARES",
        description=(
            "Share each model's batch slots by user (max-min fair by weight) and, within a user's batches, "
            "by priority, then complete_by, then creation; off: an even share per batch, whoever made it"
        ),
    )
    batch_max_requests: int = Field(
        50_000, ge=1, alias="BATCH_MAX_REQUESTS", description="Requests one batch may hold"
    )
    # A request body (a create, a file upload, an upload's part). API Gateway and Lambda take
    # about 6 MB per request, a binary body base64-encoded in it: 4 MiB is what fits with
    # room to spare, not the spec's 32 MiB. Larger files go through the Uploads API in parts
    # or a presigned upload, up to BATCH_MAX_FILE_MB.
    batch_max_body_mb: float = Field(
        4,
        gt=0,
        alias="BATCH_MAX_BODY_MB",
        description="Largest request body (a create, an upload or an upload's part), in MiB",
    )
    batch_max_file_mb: float = Field(
        200,
        gt=0,
        alias="BATCH_MAX_FILE_MB",
        description="Largest input file uploaded in parts or presigned, in MiB",
    )
    batch_max_active_per_user: int = Field(
        10, ge=1, alias="BATCH_MAX_ACTIVE_PER_USER", description="Unfinished batches one user may have"
    )
    batch_completion_window_hours: float = Field(
        24,
        ge=0,
        le=168,
        alias="BATCH_COMPLETION_WINDOW_HOURS",
        description=(
            "Hours a new batch has before its unstarted requests expire, up to 168; 0: no limit. A batch "
            "keeps the value it was created with"
        ),
    )
    batch_retention_days: float = Field(
        7,
        gt=0,
        alias="BATCH_RETENTION_DAYS",
        description=(
            "Days a finished batch and its results are kept. A batch keeps the value it was created with"
        ),
    )
    batch_max_queued_requests_per_user: int = Field(
        100_000,
        ge=1,
        alias="BATCH_MAX_QUEUED_REQUESTS_PER_USER",
        description="Unfinished requests one user may have across all their batches",
    )
    batch_max_line_kb: int = Field(
        4096, ge=1, alias="BATCH_MAX_LINE_KB", description="Largest line of an input file, in KiB"
    )
    batch_max_result_kb: int = Field(
        4096,
        ge=1,
        alias="BATCH_MAX_RESULT_KB",
        description="Largest response one batch request may store, in KiB",
    )
    batch_max_results_mb_per_batch: float = Field(
        8192,
        ge=0,
        alias="BATCH_MAX_RESULTS_MB_PER_BATCH",
        description="Responses one batch may store in all, in MiB; 0 removes the limit",
    )
    batch_files_max_total_mb_per_user: float = Field(
        512,
        ge=0,
        alias="BATCH_FILES_MAX_TOTAL_MB_PER_USER",
        description="Uploaded input files one user may keep, in MiB",
    )
    batch_file_uploads_per_hour: int = Field(
        60,
        ge=0,
        alias="BATCH_FILE_UPLOADS_PER_HOUR",
        description="Input files one user may upload per hour, failed uploads included",
    )
    batch_file_retention_days: float = Field(
        30, gt=0, alias="BATCH_FILE_RETENTION_DAYS", description="Days an uploaded input file is kept"
    )
    # A presigned URL stops working when the credentials that signed it expire: it is signed
    # for at most their remaining life less this margin (read at cold start).
    batch_presign_margin_seconds: float = Field(
        60,
        ge=0,
        alias="BATCH_PRESIGN_MARGIN_SECONDS",
        description="Seconds a presigned URL ends before the credentials that signed it",
    )
    batch_presign_min_seconds: float = Field(
        60,
        ge=1,
        alias="BATCH_PRESIGN_MIN_SECONDS",
        description="Shortest presigned URL handed out; shorter-lived credentials answer 503",
    )
    batch_presign_unknown_expiry_seconds: int = Field(
        900,
        ge=60,
        le=604800,
        alias="BATCH_PRESIGN_UNKNOWN_EXPIRY_SECONDS",
        description=(
            "Longest presigned URL signed by temporary credentials whose expiry is not stated "
            "(Lambda's execution role)"
        ),
    )
    batch_anthropic_versions: str = Field(
        "2023-06-01,2026-10-21",
        alias="BATCH_ANTHROPIC_VERSIONS",
        description="anthropic-version values a new Messages batch may name, comma-separated",
    )
    # Batch requests one user of the role may have running at once, across every model and
    # every worker process (self-expiring lease slots); 0 removes the cap.
    batch_role_concurrency_free: int = Field(
        8,
        ge=0,
        alias="BATCH_ROLE_CONCURRENCY_FREE",
        description=(
            "Batch requests one free user may have running at once, across every model; 0 removes the cap"
        ),
    )
    batch_role_concurrency_pro: int = Field(
        16,
        ge=0,
        alias="BATCH_ROLE_CONCURRENCY_PRO",
        description=(
            "Batch requests one pro user may have running at once, across every model; 0 removes the cap"
        ),
    )
    batch_role_concurrency_internal: int = Field(
        64,
        ge=0,
        alias="BATCH_ROLE_CONCURRENCY_INTERNAL",
        description=(
            "Batch requests one internal user may have running at once, across every model; 0 removes the cap"
        ),
    )
    batch_role_concurrency_admin: int = Field(
        64,
        ge=0,
        alias="BATCH_ROLE_CONCURRENCY_ADMIN",
        description=(
            "Batch requests one admin may have running at once, across every model; 0 removes the cap"
        ),
    )

    # --- durations every rule reads (seconds) ----------------------------------------
    batch_retry_base_seconds: float = Field(
        5,
        gt=0,
        alias="BATCH_RETRY_BASE_SECONDS",
        description="First backoff of a retried request, in seconds (doubles per attempt)",
    )
    batch_retry_max_seconds: float = Field(
        900,
        gt=0,
        alias="BATCH_RETRY_MAX_SECONDS",
        description="Longest backoff of a retried request, in seconds",
    )
    # A request's lease: a dead worker's requests come back after about this long. A worker
    # renews the lease while its call runs, so it can be shorter than an upstream call.
    batch_lease_seconds: float = Field(
        180,
        gt=0,
        le=MAX_LIFE_SECONDS,
        alias="BATCH_LEASE_SECONDS",
        description=(
            "A running request's lease: a dead worker's requests are taken over about this long after it "
            "stopped"
        ),
    )
    batch_model_queued_default_seconds: float = Field(
        120,
        ge=0,
        alias="BATCH_MODEL_QUEUED_DEFAULT_SECONDS",
        description="How long a model answering model_queued without Retry-After is left alone",
    )
    batch_model_queued_pause_max_seconds: float = Field(
        900,
        ge=0,
        alias="BATCH_MODEL_QUEUED_PAUSE_MAX_SECONDS",
        description="The longest a model_queued answer pauses its model",
    )
    # A total deadline: connecting, sending and reading the whole answer (an upstream that
    # trickles bytes cannot hold a call past it); the request's lease is renewed meanwhile.
    batch_upstream_timeout_seconds: float = Field(
        600,
        gt=0,
        alias="BATCH_UPSTREAM_TIMEOUT_SECONDS",
        description="How long one upstream call may take in all, its whole answer read",
    )
    batch_upstream_secret_ttl_seconds: float = Field(
        300,
        ge=0,
        alias="BATCH_UPSTREAM_SECRET_TTL_SECONDS",
        description="How long a route's key read from Secrets Manager is used before it is read again",
    )
    # How often the workflow reconciles each unfinished batch while it waits (takes over
    # abandoned requests, re-sends lost work, settles counters): a batch ends within about
    # one lease plus this after its last request could have ended, whatever failed (a
    # stopping batch is looked at again once its running requests' leases run out).
    # A batch run on its provider's batch service is polled 1 s after its submit, then twice
    # as long each time, up to this (a day of polls stays within a workflow's history).
    batch_provider_poll_max_seconds: int = Field(
        120,
        ge=1,
        le=3600,
        alias="BATCH_PROVIDER_POLL_MAX_SECONDS",
        description="The longest wait between two polls of a provider-run batch",
    )
    # An operator's lower limit on the lines of one provider batch (None: the provider's).
    batch_provider_max_lines: int | None = Field(
        None,
        ge=1,
        alias="BATCH_PROVIDER_MAX_LINES",
        description="The most requests one provider batch takes (default: the provider's own limit)",
    )
    batch_reconcile_seconds: float = Field(
        300,
        ge=1,
        alias="BATCH_RECONCILE_SECONDS",
        description="How often the workflow reconciles each unfinished batch while it waits",
    )
    # How soon a batch paused by a quota, a key's budget or its owner's role is checked
    # again (a raised quota resumes it within this), and how long a request waits when only
    # the reservations of requests still running stand in its way.
    batch_quota_recheck_seconds: float = Field(
        3600,
        gt=0,
        alias="BATCH_QUOTA_RECHECK_SECONDS",
        description="How soon a batch paused by a quota, a budget or its owner's role is checked again",
    )
    batch_background_window_seconds: float = Field(
        3600,
        gt=0,
        alias="BATCH_BACKGROUND_WINDOW_SECONDS",
        description="How long a background response may wait and run before it ends incomplete",
    )
    batch_flex_wait_seconds: float = Field(
        20,
        gt=0,
        lt=29,
        alias="BATCH_FLEX_WAIT_SECONDS",
        description=(
            "How long a flex request (service_tier flex) waits for a batch slot before it answers 429; "
            "below API Gateway's 29 s"
        ),
    )
    batch_reservation_wait_seconds: float = Field(
        30,
        gt=0,
        alias="BATCH_RESERVATION_WAIT_SECONDS",
        description="How long a request waits when only running requests' reservations stand in its way",
    )
    # How long a worker process trusts what it read of a batch owner's account (key valid,
    # role, quotas): a revoked key or a lowered role is noticed within this.
    batch_owner_cache_seconds: float = Field(
        5,
        ge=0,
        alias="BATCH_OWNER_CACHE_SECONDS",
        description="How long a process trusts what it read of a key and its owner's account",
    )
    # The api's limits per caller (``api.auth``): a token bucket per key, and what a process
    # remembers of keys it was shown.
    batch_api_rate_per_key: float = Field(
        20,
        ge=0,
        alias="BATCH_API_RATE_PER_KEY",
        description=(
            "API requests per second one key may make, in bursts of up to twice that (429 rate_limited "
            "with Retry-After above it); 0: unlimited"
        ),
    )
    batch_auth_unknown_key_seconds: float = Field(
        300,
        ge=0,
        alias="BATCH_AUTH_UNKNOWN_KEY_SECONDS",
        description="How long a process remembers that a key it was shown does not exist",
    )
    batch_auth_cache_keys: int = Field(
        10_000,
        ge=1,
        alias="BATCH_AUTH_CACHE_KEYS",
        description="Keys a process remembers at most, of known and of unknown ones each",
    )

    # --- worker shape ---------------------------------------------------------------
    # How long a worker invocation may run (the Lambda timeout, at most Lambda's 15 minutes);
    # a chain of work stops claiming new requests when less than one upstream timeout is
    # left. The workflow's waits for running work are sized on this bound and the leases'.
    batch_worker_timeout_seconds: float = Field(
        900, gt=0, le=MAX_LIFE_SECONDS, alias="BATCH_WORKER_TIMEOUT_SECONDS"
    )
    # How long prepare's lease on a batch's writes lasts (renewed at half of it while it
    # writes): a retried prepare waits this long after one that died before it goes on, and
    # every write is sent with at least half of it left (``run.prepare_lease``).
    batch_prepare_lease_seconds: float = Field(
        60, gt=0, le=MAX_LIFE_SECONDS, alias="BATCH_PREPARE_LEASE_SECONDS"
    )
    # Counter shards per batch: spreads the per-result counter writes over several items.
    batch_counter_shards: int = Field(8, ge=1, le=64, alias="BATCH_COUNTER_SHARDS")
    # The parts a batch's result files are written in (S3 wants at least 5 MiB but for the
    # last; tests shrink it). Parts double in size every 1,000, within S3's 10,000.
    batch_result_part_bytes: int = Field(8 * 1024 * 1024, ge=1, alias="BATCH_RESULT_PART_BYTES")
    # Delay before a chain that found its model full asks again.
    batch_slot_wait_seconds: float = Field(
        2,
        ge=0,
        alias="BATCH_SLOT_WAIT_SECONDS",
        description="Delay before work that found its model full asks again",
    )

    # Retryable failures in a row on a model (timeouts and model_queued excluded) that
    # pause its batch work, and for how long.
    batch_model_pause_after_failures: int = Field(
        5,
        ge=1,
        alias="BATCH_MODEL_PAUSE_AFTER_FAILURES",
        description="Retryable failures in a row that pause a model's batch work",
    )
    batch_model_pause_seconds: float = Field(
        60,
        ge=0,
        alias="BATCH_MODEL_PAUSE_SECONDS",
        description="How long such a run of failures pauses the model",
    )
    # --- webhooks -------------------------------------------------------------------
    batch_webhook_retry_schedule_seconds: str = Field(
        "5,300,1800,7200,18000,36000,36000",
        alias="BATCH_WEBHOOK_RETRY_SCHEDULE_SECONDS",
        description="Delays before a webhook delivery's attempts 2 to 8, in seconds, comma-separated",
    )
    batch_webhook_timeout_seconds: float = Field(
        15,
        gt=0,
        alias="BATCH_WEBHOOK_TIMEOUT_SECONDS",
        description="How long a webhook receiver has to answer",
    )
    batch_webhook_suspend_seconds: float = Field(
        600,
        ge=0,
        alias="BATCH_WEBHOOK_SUSPEND_SECONDS",
        description=(
            "How long an endpoint that timed out three deliveries in a row gets none (doubling each time)"
        ),
    )
    batch_webhook_suspend_max_seconds: float = Field(
        3600,
        ge=0,
        alias="BATCH_WEBHOOK_SUSPEND_MAX_SECONDS",
        description="The longest such a suspension lasts",
    )
    batch_webhook_allow_private_targets: bool = Field(
        False,
        alias="BATCH_WEBHOOK_ALLOW_PRIVATE_TARGETS",
        description=(
            "Let webhooks reach private and loopback addresses (and http). For isolated test deployments only"
        ),
    )
    batch_route_circuit_seconds: float = Field(
        30,
        ge=0,
        alias="BATCH_ROUTE_CIRCUIT_SECONDS",
        description="How long a route that refused a connection is left alone (batch work fails over)",
    )
    batch_attempt_log_retention_days: float = Field(
        7,
        gt=0,
        alias="BATCH_ATTEMPT_LOG_RETENTION_DAYS",
        description="Days the request log keeps each attempt (GET /admin/batch/jobs/{batch_id}/attempts)",
    )
    # Read by the reconciler's capacity check (``run.reconcile``), which feeds the per-model alarm.
    batch_queued_alert_hours: float = Field(
        6,
        ge=0,
        alias="BATCH_QUEUED_ALERT_HOURS",
        description=(
            "Hours a model may have queued batch requests without serving one before it is reported "
            "as waiting for capacity; 0 turns the alert off"
        ),
    )

    # --- resources (set by CDK on AWS, by the local stack locally) ------------------
    batches_table: str = Field("batchgw-batches", alias="BATCHGW_BATCHES_TABLE")
    requests_table: str = Field("batchgw-requests", alias="BATCHGW_REQUESTS_TABLE")
    control_table: str = Field("batchgw-control", alias="BATCHGW_CONTROL_TABLE")
    files_table: str = Field("batchgw-files", alias="BATCHGW_FILES_TABLE")
    data_bucket: str = Field("batchgw-data", alias="BATCHGW_DATA_BUCKET")
    work_queue_url: str = Field("", alias="BATCHGW_WORK_QUEUE_URL")
    # Flex requests' work (``resources.FLEX_QUEUE``); empty: they go on the work queue.
    flex_queue_url: str = Field("", alias="BATCHGW_FLEX_QUEUE_URL")
    state_machine_arn: str = Field("", alias="BATCHGW_STATE_MACHINE_ARN")
    webhook_queue_url: str = Field("", alias="BATCHGW_WEBHOOK_QUEUE_URL")
    webhook_key_id: str = Field("", alias="BATCHGW_WEBHOOK_KEY_ID")  # the KMS key sealing webhook secrets
    models_config_path: str = Field("config/models.local.json", alias="BATCHGW_MODELS_CONFIG")
    # The local stack only: seconds added to the clock, so a test can start "now" just
    # before a UTC day or month ends (set from BATCHGW_FAKE_NOW by ``make run``).
    clock_offset_seconds: float = Field(0, alias="BATCHGW_CLOCK_OFFSET")
    # How old the runtime overrides a process uses may be (``batchgw.live_config``): a change
    # made through /admin/config reaches every process within about this long.
    runtime_refresh_seconds: float = Field(5, ge=0, alias="BATCHGW_RUNTIME_REFRESH_SECONDS")

    @field_validator("batch_max_body_mb")
    @classmethod
    def _fits_the_platform(cls, value: float) -> float:
        if value > PLATFORM_MAX_BODY_MB:
            raise ValueError(
                f"API Gateway and Lambda take about 6 MB per request (a binary body base64-encoded in "
                f"it): at most {PLATFORM_MAX_BODY_MB:g} MiB; larger files go through the Uploads API or "
                "a presigned upload (BATCH_MAX_FILE_MB)"
            )
        return value

    @field_validator("batch_webhook_retry_schedule_seconds")
    @classmethod
    def _a_schedule(cls, value: str) -> str:
        try:
            delays = [float(part) for part in value.split(",")]
        except ValueError:
            raise ValueError("must be seconds, comma-separated") from None
        if not 1 <= len(delays) <= 7 or any(not 0 <= d <= 43200 for d in delays):
            raise ValueError("must be 1 to 7 delays of 0 to 43200 seconds (SQS keeps a message 12 hours)")
        return value

    @property
    def webhook_retry_schedule(self) -> tuple[float, ...]:
        return tuple(float(part) for part in self.batch_webhook_retry_schedule_seconds.split(","))

    @field_validator("batch_api_rate_per_key")
    @classmethod
    def _a_usable_rate(cls, value: float) -> float:
        if 0 < value < MIN_API_RATE_PER_KEY:
            raise ValueError(
                f"must be 0 (unlimited) or at least {MIN_API_RATE_PER_KEY:g} requests per second"
            )
        return value

    @field_validator("batch_min_role")
    @classmethod
    def _known_role(cls, value: str) -> str:
        if value not in ROLES:
            raise ValueError(f"must be one of {', '.join(ROLES)}")
        return value

    # --- derived --------------------------------------------------------------------
    def role_concurrency(self, role: str) -> int:
        """Batch requests a user of ``role`` may run at once (0: no cap)."""
        return int(getattr(self, f"batch_role_concurrency_{role}", self.batch_role_concurrency_free))

    @property
    def max_body_bytes(self) -> int:
        return int(self.batch_max_body_mb * 1024 * 1024)

    @property
    def max_file_bytes(self) -> int:
        return int(self.batch_max_file_mb * 1024 * 1024)

    @property
    def max_result_bytes(self) -> int:
        return self.batch_max_result_kb * 1024

    @property
    def max_results_bytes_per_batch(self) -> int | None:
        """None when the operator removed the limit (0)."""
        mb = self.batch_max_results_mb_per_batch
        return None if mb == 0 else int(mb * 1024 * 1024)

    @property
    def completion_window_seconds(self) -> float | None:
        """None when the operator lifted the window (``BATCH_COMPLETION_WINDOW_HOURS=0``)."""
        hours = self.batch_completion_window_hours
        return None if hours == 0 else hours * 3600

    @property
    def retention_seconds(self) -> float:
        return self.batch_retention_days * 86400

    @property
    def anthropic_versions(self) -> tuple[str, ...]:
        return tuple(v.strip() for v in self.batch_anthropic_versions.split(",") if v.strip())

    @property
    def work_visibility_seconds(self) -> int:
        """SQS visibility of work messages: six times the worker timeout, as AWS advises."""
        return int(6 * self.batch_worker_timeout_seconds)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Settings:
        env = os.environ if environ is None else environ
        names = {field.alias for field in cls.model_fields.values() if field.alias}
        values: dict[str, Any] = {name: env[name] for name in names if name in env}
        try:
            return cls.model_validate(values)
        except ValidationError as exc:  # fail the cold start with a readable reason
            raise RuntimeError(f"invalid settings: {exc}") from exc


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """Settings for this process, read once (cold start)."""
    return Settings.from_env()
