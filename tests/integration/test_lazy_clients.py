"""A process makes an AWS client only when it first uses that service (a cold start that
serves a status poll never pays for S3's client)."""

from __future__ import annotations

from typing import Any

import pytest
from batchgw.deps import build_deps
from batchgw.storage import aws
from batchgw.storage.aws import LazyClient

from local.simulator import Simulator
from tests.integration.conftest import make_deps
from tests.support import FakeClock

pytestmark = pytest.mark.usefixtures("aws_env")


def test_a_lazy_client_is_made_on_its_first_use_and_once() -> None:
    made: list[int] = []

    class Client:
        def ping(self) -> str:
            return "pong"

    def make() -> Any:
        made.append(1)
        return Client()

    client = LazyClient(make)
    assert made == []
    assert client.ping() == "pong" and client.ping() == "pong"
    assert made == [1]


def test_the_wiring_makes_the_s3_sqs_and_step_functions_clients_only_when_used(sim: Simulator) -> None:
    prepared = make_deps(sim, FakeClock())  # creates the tables, queues and bucket
    aws.reset_clients()
    deps = build_deps(prepared.settings, prepared.catalog, FakeClock())
    made = vars(aws.get_clients())
    assert not {"dynamodb", "s3", "sqs", "sfn"} & set(made)  # nothing is made before it is used

    assert deps.batches.get_record("batch_nobody") is None
    deps.queue, deps.workflow  # noqa: B018 (built: their adapters, not yet their clients)
    assert "dynamodb" in made and not {"s3", "sqs", "sfn"} & set(made)

    deps.blobs.put("files/probe", b"x")

    assert "s3" in made and not {"sqs", "sfn"} & set(made)
