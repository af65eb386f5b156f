"""Wiring: the adapters every handler uses, built once per process from the settings.

Tests build ``Deps`` themselves (a fake clock, moto-backed clients) instead.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache

from batchgw.aws import get_clients
from batchgw.blobs import BlobStore
from batchgw.catalog import Catalog, get_catalog
from batchgw.health import ModelHealth, StoredResults
from batchgw.settings import Settings, get_settings
from batchgw.store import ControlStore, FileStore, ItemStore, JobStore, KeyStore, SlotStore
from batchgw.work import WorkQueue
from batchgw.workflow import Workflow


@dataclass
class Deps:
    settings: Settings
    catalog: Catalog
    jobs: JobStore
    items: ItemStore
    slots: SlotStore
    blobs: BlobStore
    queue: WorkQueue
    workflow: Workflow
    keys: KeyStore
    files: FileStore
    control: ControlStore
    health: ModelHealth
    stored: StoredResults
    clock: Callable[[], float]


def build_deps(settings: Settings, catalog: Catalog, clock: Callable[[], float] = time.time) -> Deps:
    clients = get_clients()
    return Deps(
        settings=settings,
        catalog=catalog,
        jobs=JobStore(clients.dynamodb, settings.jobs_table),
        items=ItemStore(clients.dynamodb, settings.items_table, settings.jobs_table),
        slots=SlotStore(clients.dynamodb, settings.control_table),
        blobs=BlobStore(clients.s3, settings.data_bucket),
        queue=WorkQueue(clients.sqs, settings.work_queue_url),
        workflow=Workflow(clients.sfn, settings.state_machine_arn),
        keys=KeyStore(clients.dynamodb, settings.control_table),
        files=FileStore(clients.dynamodb, settings.files_table),
        control=ControlStore(clients.dynamodb, settings.control_table),
        health=ModelHealth(settings.batch_model_pause_after_failures, settings.batch_model_pause_seconds),
        stored=StoredResults(),
        clock=clock,
    )


@lru_cache(maxsize=1)
def get_deps() -> Deps:
    settings = get_settings()
    return build_deps(settings, get_catalog(settings.models_config_path))
