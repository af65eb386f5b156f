"""Wiring: the adapters every handler uses, built once per process from the settings.

Tests build ``Deps`` themselves (a fake clock, moto-backed clients) instead.

May import: ``scheduling``, ``live_config``, ``storage``, ``config``, ``domain``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache

from batchgw.config.catalog import Catalog, get_catalog
from batchgw.config.settings import Settings, get_settings
from batchgw.domain.health import ModelHealth, RouteHealth, StoredResults
from batchgw.live_config import LiveConfig
from batchgw.scheduling.backpressure import Backpressure
from batchgw.scheduling.pacing import CallPacer
from batchgw.scheduling.room import SlotLedger
from batchgw.scheduling.share import BatchShares
from batchgw.scheduling.tuning import TUNING, Tuning
from batchgw.storage.accounts import AccountStore
from batchgw.storage.adaptive import AdaptiveStore
from batchgw.storage.audit import AuditLog
from batchgw.storage.aws import LazyClient, get_clients
from batchgw.storage.batches import BatchStore
from batchgw.storage.blobs import BlobStore, UrlSigning
from batchgw.storage.control import ControlStore
from batchgw.storage.dns import Resolver, resolve
from batchgw.storage.files import FileStore
from batchgw.storage.idempotency import IdempotencyStore
from batchgw.storage.interactive import InteractiveLoadStore
from batchgw.storage.provider import ProviderParts
from batchgw.storage.queue import EventQueue, WorkQueue
from batchgw.storage.ratelimit import RateLimiter
from batchgw.storage.reqlog import RequestLog
from batchgw.storage.requests import RequestStore
from batchgw.storage.runtime import RuntimeStore
from batchgw.storage.sealer import KmsSealer
from batchgw.storage.sessions import SessionStore
from batchgw.storage.slots import SlotStore, UserSlotStore
from batchgw.storage.spend import SpendStore
from batchgw.storage.usage import UsageStore
from batchgw.storage.webhooks import Sealer, WebhookStore
from batchgw.storage.workflow import Workflow


@dataclass
class Deps:
    live: LiveConfig  # the settings with administrators' runtime overrides, and model caps
    shares: BatchShares  # each model's batch share beside the interactive load
    # Each model's slots as this process knows them: the room no chain holds (chains split),
    # and which batches hold and wait for them (batches share a model).
    ledger: SlotLedger
    backpressure: Backpressure  # what batch answers say of each model's upstream
    interactive: InteractiveLoadStore  # the interactive load reports
    catalog: Catalog
    batches: BatchStore
    provider_parts: ProviderParts  # the parts of batches run on a provider's batch service
    requests: RequestStore
    slots: SlotStore
    blobs: BlobStore
    queue: WorkQueue
    workflow: Workflow
    accounts: AccountStore
    spend: SpendStore
    user_slots: UserSlotStore
    idempotency: IdempotencyStore
    files: FileStore
    control: ControlStore
    usage: UsageStore  # what each user holds against their limits
    rates: RateLimiter  # each API key's request rate
    webhooks: WebhookStore
    sessions: SessionStore
    audit: AuditLog
    reqlog: RequestLog
    events: EventQueue  # batch events for the webhook function
    sealer: Sealer  # webhook secrets at rest
    resolve: Resolver  # names to addresses (a webhook's host)
    health: ModelHealth  # what this process knows of each model's failures and pauses
    route_health: RouteHealth  # routes this process found refusing connections
    stored: StoredResults  # bytes of responses each batch stored, as this process knows them
    pacer: CallPacer  # this process's upstream calls, started a few ms apart
    clock: Callable[[], float]
    tuning: Tuning = TUNING  # scheduling's timing and policy constants

    @property
    def settings(self) -> Settings:
        """The settings in force now (refreshed by ``live.refresh``)."""
        return self.live.settings


def build_deps(
    settings: Settings, catalog: Catalog, clock: Callable[[], float] = time.time, tuning: Tuning = TUNING
) -> Deps:
    clients = get_clients()
    # Every request needs DynamoDB; the other clients are made when first used.
    s3, sqs = LazyClient(lambda: clients.s3), LazyClient(lambda: clients.sqs)
    sfn = LazyClient(lambda: clients.sfn)
    usage = UsageStore(clients.dynamodb, settings.control_table)
    files = FileStore(clients.dynamodb, settings.files_table, usage)
    live = LiveConfig(settings, RuntimeStore(clients.dynamodb, settings.control_table), catalog)
    interactive = InteractiveLoadStore(clients.dynamodb, settings.control_table)
    limits = AdaptiveStore(clients.dynamodb, settings.control_table)
    shares = BatchShares(live, interactive, limits, clock, tuning=tuning)
    slots = SlotStore(clients.dynamodb, settings.control_table)

    def running(model: str) -> int:
        return slots.read(model).running(clock())

    return Deps(
        live=live,
        shares=shares,
        ledger=SlotLedger(shares, slots, clock, tuning=tuning),
        backpressure=Backpressure(live, shares, limits, running, clock, tuning=tuning),
        interactive=interactive,
        catalog=catalog,
        batches=BatchStore(clients.dynamodb, settings.batches_table, usage, files),
        provider_parts=ProviderParts(clients.dynamodb, settings.batches_table),
        requests=RequestStore(clients.dynamodb, settings.requests_table, settings.batches_table),
        slots=slots,
        blobs=BlobStore(
            s3,
            settings.data_bucket,
            UrlSigning(
                clients.session.get_credentials,
                margin_seconds=settings.batch_presign_margin_seconds,
                min_seconds=settings.batch_presign_min_seconds,
                unknown_seconds=settings.batch_presign_unknown_expiry_seconds,
            ),
        ),
        queue=WorkQueue(sqs, settings.work_queue_url),
        workflow=Workflow(sfn, settings.state_machine_arn),
        accounts=AccountStore(clients.dynamodb, settings.control_table),
        spend=SpendStore(clients.dynamodb, settings.control_table),
        user_slots=UserSlotStore(clients.dynamodb, settings.control_table),
        idempotency=IdempotencyStore(clients.dynamodb, settings.control_table),
        files=files,
        control=ControlStore(clients.dynamodb, settings.control_table),
        usage=usage,
        rates=RateLimiter(clients.dynamodb, settings.control_table),
        webhooks=WebhookStore(clients.dynamodb, settings.control_table),
        sessions=SessionStore(clients.dynamodb, settings.control_table),
        audit=AuditLog(clients.dynamodb, settings.control_table),
        reqlog=RequestLog(clients.dynamodb, settings.control_table),
        events=EventQueue(sqs, settings.webhook_queue_url),
        sealer=KmsSealer(clients, settings.webhook_key_id),
        resolve=resolve,
        health=ModelHealth(),
        route_health=RouteHealth(),
        stored=StoredResults(),
        pacer=CallPacer(tuning=tuning, enabled=lambda: live.settings.batch_call_pacing),
        clock=clock,
        tuning=tuning,
    )


def get_deps() -> Deps:
    """This process's wiring, its runtime overrides read again when they are due."""
    deps = _process_deps()
    deps.live.refresh()
    return deps


@lru_cache(maxsize=1)
def _process_deps() -> Deps:
    settings = get_settings()
    offset = settings.clock_offset_seconds
    clock = time.time if not offset else (lambda: time.time() + offset)
    return build_deps(settings, get_catalog(settings.models_config_path), clock)
