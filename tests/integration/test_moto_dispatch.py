"""The local moto server finds each request's handler as moto does, without listing moto's
package per host or a response class's methods per request (``install_cheap_dispatch``)."""

from __future__ import annotations

from typing import Any

import pytest
from moto import backends
from moto.core import responses as core_responses
from moto.dynamodb.responses import DynamoHandler
from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app
from moto.s3.responses import S3Response
from moto.sqs.responses import SQSResponse
from moto.stepfunctions.responses import StepFunctionResponse

from local import moto_server

HOSTS = (
    None,
    "moto_api",
    "dynamodb",
    "dynamodb.us-east-1.amazonaws.com",
    "sqs.us-east-1.amazonaws.com",
    "s3.amazonaws.com",
    "bucket.s3.us-east-1.amazonaws.com",
    "states.us-east-1.amazonaws.com",
    "lambda.us-east-1.amazonaws.com",
    "nothing.example.org",
)
CLASSES = (DynamoHandler, SQSResponse, S3Response, StepFunctionResponse)


@pytest.fixture
def installed(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """moto's answers are read first; the patch is undone after the test. Counts moto's
    listings of its package."""
    monkeypatch.setattr(
        DomainDispatcherApplication, "get_backend_for_host", DomainDispatcherApplication.get_backend_for_host
    )
    monkeypatch.setattr(core_responses, "method_names_from_class", core_responses.method_names_from_class)
    listings = {"package": 0}
    list_modules = backends.list_of_moto_modules

    def counted() -> Any:
        listings["package"] += 1
        return list_modules()

    monkeypatch.setattr(backends, "list_of_moto_modules", counted)
    return listings


def test_each_hosts_backend_is_motos_own_answer_found_once(installed: dict[str, int]) -> None:
    motos = DomainDispatcherApplication(create_backend_app)
    expected = {host: motos.get_backend_for_host(host) for host in HOSTS}
    assert installed["package"] > 0  # moto lists its package on each lookup

    moto_server.install_cheap_dispatch()
    app = DomainDispatcherApplication(create_backend_app)
    first = {host: app.get_backend_for_host(host) for host in HOSTS}
    listed = installed["package"]
    again = {host: app.get_backend_for_host(host) for host in HOSTS}

    assert first == again == expected
    assert expected["dynamodb.us-east-1.amazonaws.com"] == "dynamodb"
    assert installed["package"] == listed  # the second round listed nothing


def test_a_response_classs_actions_are_motos_own_listed_once(installed: dict[str, int]) -> None:
    expected = {cls: core_responses.method_names_from_class(cls) for cls in CLASSES}

    moto_server.install_cheap_dispatch()

    for cls in CLASSES:
        kept = core_responses.method_names_from_class(cls)
        assert kept == expected[cls]
        assert core_responses.method_names_from_class(cls) is kept
    assert "transact_write_items" in expected[DynamoHandler]
