"""Wiring: the adapters every handler uses, built once per process from the settings.

Each adapter is built on its first use, its module imported then: a cold start loads only
the stores and the scheduling its requests touch (the api function's common requests never
load the worker's scheduling; ``docs/design/cold-start.md``). botocore is imported here, at
the handler's import: every request needs its DynamoDB client, so deferring it would only move
its import into the first request. An adapter may be replaced by
assigning it (tests do, before or after its first use).

Tests build ``Deps`` themselves (a fake clock, moto-backed clients) instead.

May import: ``scheduling``, ``live_config``, ``storage``, ``config``, ``domain``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from functools import cached_property, lru_cache
from typing import TYPE_CHECKING, Any

from batchgw.config.settings import Settings, get_settings
from batchgw.storage.aws import AwsClients, LazyClient, get_clients

if TYPE_CHECKING:
    from batchgw.config.catalog import Catalog
    from batchgw.domain.health import ModelHealth, RouteHealth, StoredResults
    from batchgw.live_config import LiveConfig
    from batchgw.scheduling.backpressure import Backpressure
    from batchgw.scheduling.pacing import CallPacer
    from batchgw.scheduling.room import SlotLedger
    from batchgw.scheduling.share import BatchShares
    from batchgw.scheduling.tuning import Tuning
    from batchgw.storage.accounts import AccountStore
    from batchgw.storage.adaptive import AdaptiveStore
    from batchgw.storage.audit import AuditLog
    from batchgw.storage.batches import BatchStore
    from batchgw.storage.blobs import BlobStore
    from batchgw.storage.control import ControlStore
    from batchgw.storage.dns import Resolver
    from batchgw.storage.files import FileStore
    from batchgw.storage.idempotency import IdempotencyStore
    from batchgw.storage.interactive import InteractiveLoadStore
    from batchgw.storage.provider import ProviderParts
    from batchgw.storage.queue import EventQueue, WorkQueue
    from batchgw.storage.ratelimit import RateLimiter
    from batchgw.storage.reqlog import RequestLog
    from batchgw.storage.requests import RequestStore
    from batchgw.storage.sessions import SessionStore
    from batchgw.storage.slots import SlotStore, UserSlotStore
    from batchgw.storage.spend import SpendStore
    from batchgw.storage.usage import UsageStore
    from batchgw.storage.webhooks import Sealer, WebhookStore
    from batchgw.storage.workflow import Workflow


class Deps:
    """This process's adapters. ``settings`` (the ones built from the environment) name the
    tables, queues and bucket; ``settings`` as a property is the live ones, with
    administrators' runtime overrides (refreshed by ``live.refresh``)."""

    def __init__(
        self,
        settings: Settings,
        catalog: Catalog,
        clock: Callable[[], float] = time.time,
        tuning: Tuning | None = None,
    ) -> None:
        self._base = settings
        self.catalog = catalog
        self.clock = clock
        if tuning is not None:
            self.tuning = tuning
        self._clients: AwsClients = get_clients()

    @property
    def settings(self) -> Settings:
        """The settings in force now (refreshed by ``live.refresh``)."""
        return self.live.settings

    @cached_property
    def tuning(self) -> Tuning:
        """Scheduling's timing and policy constants."""
        from batchgw.scheduling.tuning import TUNING

        return TUNING

    def _lazy(self, name: str) -> Any:
        """The S3, SQS or Step Functions client, made when first used (every request needs
        DynamoDB; few need the others)."""
        return LazyClient(lambda: getattr(self._clients, name))

    # --- live configuration and scheduling -------------------------------------------------

    @cached_property
    def live(self) -> LiveConfig:
        """The settings with administrators' runtime overrides, and model caps."""
        from batchgw.live_config import LiveConfig
        from batchgw.storage.runtime import RuntimeStore

        runtime = RuntimeStore(self._clients.dynamodb, self._base.control_table)
        return LiveConfig(self._base, runtime, self.catalog)

    @cached_property
    def shares(self) -> BatchShares:
        """Each model's batch share beside the interactive load."""
        from batchgw.scheduling.share import BatchShares

        return BatchShares(self.live, self.interactive, self.limits, self.clock, tuning=self.tuning)

    @cached_property
    def limits(self) -> AdaptiveStore:
        """Each model's adaptive limit, as the workers set it."""
        from batchgw.storage.adaptive import AdaptiveStore

        return AdaptiveStore(self._clients.dynamodb, self._base.control_table)

    @cached_property
    def ledger(self) -> SlotLedger:
        """Each model's slots as this process knows them: the room no chain holds (chains
        split), and which batches hold and wait for them (batches share a model)."""
        from batchgw.scheduling.room import SlotLedger

        return SlotLedger(self.shares, self.slots, self.clock, tuning=self.tuning)

    @cached_property
    def backpressure(self) -> Backpressure:
        """What batch answers say of each model's upstream."""
        from batchgw.scheduling.backpressure import Backpressure

        slots, clock = self.slots, self.clock

        def running(model: str) -> int:
            return slots.read(model).running(clock())

        return Backpressure(self.live, self.shares, self.limits, running, clock, tuning=self.tuning)

    @cached_property
    def pacer(self) -> CallPacer:
        """This process's upstream calls, started a few ms apart."""
        from batchgw.scheduling.pacing import CallPacer

        live = self.live
        return CallPacer(tuning=self.tuning, enabled=lambda: live.settings.batch_call_pacing)

    @cached_property
    def health(self) -> ModelHealth:
        """What this process knows of each model's failures and pauses."""
        from batchgw.domain.health import ModelHealth

        return ModelHealth()

    @cached_property
    def route_health(self) -> RouteHealth:
        """Routes this process found refusing connections."""
        from batchgw.domain.health import RouteHealth

        return RouteHealth()

    @cached_property
    def stored(self) -> StoredResults:
        """Bytes of responses each batch stored, as this process knows them."""
        from batchgw.domain.health import StoredResults

        return StoredResults()

    # --- stores ------------------------------------------------------------------------------

    @cached_property
    def interactive(self) -> InteractiveLoadStore:
        """The interactive load reports."""
        from batchgw.storage.interactive import InteractiveLoadStore

        return InteractiveLoadStore(self._clients.dynamodb, self._base.control_table)

    @cached_property
    def batches(self) -> BatchStore:
        from batchgw.storage.batches import BatchStore

        return BatchStore(self._clients.dynamodb, self._base.batches_table, self.usage, self.files)

    @cached_property
    def provider_parts(self) -> ProviderParts:
        """The parts of batches run on a provider's batch service."""
        from batchgw.storage.provider import ProviderParts

        return ProviderParts(self._clients.dynamodb, self._base.batches_table)

    @cached_property
    def requests(self) -> RequestStore:
        from batchgw.storage.requests import RequestStore

        return RequestStore(self._clients.dynamodb, self._base.requests_table, self._base.batches_table)

    @cached_property
    def slots(self) -> SlotStore:
        from batchgw.storage.slots import SlotStore

        return SlotStore(self._clients.dynamodb, self._base.control_table)

    @cached_property
    def blobs(self) -> BlobStore:
        from batchgw.storage.blobs import BlobStore, UrlSigning

        settings = self._base
        signing = UrlSigning(
            self._clients.session.get_credentials,
            margin_seconds=settings.batch_presign_margin_seconds,
            min_seconds=settings.batch_presign_min_seconds,
            unknown_seconds=settings.batch_presign_unknown_expiry_seconds,
        )
        return BlobStore(self._lazy("s3"), settings.data_bucket, signing)

    @cached_property
    def queue(self) -> WorkQueue:
        from batchgw.storage.queue import WorkQueue

        return WorkQueue(self._lazy("sqs"), self._base.work_queue_url, self._base.flex_queue_url)

    @cached_property
    def events(self) -> EventQueue:
        """Batch events for the webhook function."""
        from batchgw.storage.queue import EventQueue

        return EventQueue(self._lazy("sqs"), self._base.webhook_queue_url)

    @cached_property
    def workflow(self) -> Workflow:
        from batchgw.storage.workflow import Workflow

        return Workflow(self._lazy("sfn"), self._base.state_machine_arn)

    @cached_property
    def accounts(self) -> AccountStore:
        from batchgw.storage.accounts import AccountStore

        return AccountStore(self._clients.dynamodb, self._base.control_table)

    @cached_property
    def spend(self) -> SpendStore:
        from batchgw.storage.spend import SpendStore

        return SpendStore(self._clients.dynamodb, self._base.control_table)

    @cached_property
    def user_slots(self) -> UserSlotStore:
        from batchgw.storage.slots import UserSlotStore

        return UserSlotStore(self._clients.dynamodb, self._base.control_table)

    @cached_property
    def idempotency(self) -> IdempotencyStore:
        from batchgw.storage.idempotency import IdempotencyStore

        return IdempotencyStore(self._clients.dynamodb, self._base.control_table)

    @cached_property
    def files(self) -> FileStore:
        from batchgw.storage.files import FileStore

        return FileStore(self._clients.dynamodb, self._base.files_table, self.usage)

    @cached_property
    def control(self) -> ControlStore:
        from batchgw.storage.control import ControlStore

        return ControlStore(self._clients.dynamodb, self._base.control_table)

    @cached_property
    def usage(self) -> UsageStore:
        """What each user holds against their limits."""
        from batchgw.storage.usage import UsageStore

        return UsageStore(self._clients.dynamodb, self._base.control_table)

    @cached_property
    def rates(self) -> RateLimiter:
        """Each API key's request rate."""
        from batchgw.storage.ratelimit import RateLimiter

        return RateLimiter(self._clients.dynamodb, self._base.control_table)

    @cached_property
    def webhooks(self) -> WebhookStore:
        from batchgw.storage.webhooks import WebhookStore

        return WebhookStore(self._clients.dynamodb, self._base.control_table)

    @cached_property
    def sessions(self) -> SessionStore:
        from batchgw.storage.sessions import SessionStore

        return SessionStore(self._clients.dynamodb, self._base.control_table)

    @cached_property
    def audit(self) -> AuditLog:
        from batchgw.storage.audit import AuditLog

        return AuditLog(self._clients.dynamodb, self._base.control_table)

    @cached_property
    def reqlog(self) -> RequestLog:
        from batchgw.storage.reqlog import RequestLog

        return RequestLog(self._clients.dynamodb, self._base.control_table, self._base.requests_table)

    @cached_property
    def sealer(self) -> Sealer:
        """Webhook secrets at rest."""
        from batchgw.storage.sealer import KmsSealer

        return KmsSealer(self._clients, self._base.webhook_key_id)

    @cached_property
    def resolve(self) -> Resolver:
        """Names to addresses (a webhook's host)."""
        from batchgw.storage.dns import resolve

        return resolve


def build_deps(
    settings: Settings, catalog: Catalog, clock: Callable[[], float] = time.time, tuning: Tuning | None = None
) -> Deps:
    return Deps(settings, catalog, clock, tuning)


def get_deps() -> Deps:
    """This process's wiring, its runtime overrides read again when they are due."""
    deps = _process_deps()
    deps.live.refresh()
    return deps


@lru_cache(maxsize=1)
def _process_deps() -> Deps:
    from batchgw.config.catalog import get_catalog

    settings = get_settings()
    offset = settings.clock_offset_seconds
    clock = time.time if not offset else (lambda: time.time() + offset)
    return build_deps(settings, get_catalog(settings.models_config_path), clock)
