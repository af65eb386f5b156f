"""``GET /user/batch-capabilities`` through the api function's handler (moto): what the
console shows of Batch for the caller, by the spec's rules."""

from __future__ import annotations

import json
from typing import Any

import pytest
from batchgw.deps import Deps
from batchgw.domain.errors import StorageError
from batchgw.storage import aws
from botocore.exceptions import ClientError

from functions.api import handler as api
from local.simulator import Simulator
from tests.integration.conftest import chat_request, make_deps
from tests.support import FakeClock, LambdaContext, http_event

pytestmark = pytest.mark.usefixtures("aws_env")


def ask(deps: Deps, monkeypatch: pytest.MonkeyPatch, key: str) -> tuple[int, dict[str, Any]]:
    monkeypatch.setattr(api, "get_deps", lambda: deps)
    answer = api.handler(http_event("GET", "/user/batch-capabilities", key=key), LambdaContext())  # type: ignore[arg-type]
    return int(answer["statusCode"]), json.loads(answer["body"])


def test_the_entry_shows_for_a_role_that_may_submit_or_a_user_with_batches_and_not_otherwise(
    sim: Simulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    deps = make_deps(sim, FakeClock())
    status, alice = ask(deps, monkeypatch, "sk-local-alice")
    assert status == 200
    assert alice == {
        "object": "user.batch_capabilities",
        "status": "enabled",
        "min_role": "internal",
        "role_may_submit": True,
        "has_history": False,
        "show_entry": True,
    }
    _, free = ask(deps, monkeypatch, "sk-local-free")
    assert (free["role_may_submit"], free["has_history"], free["show_entry"]) == (False, False, False)

    created = api.handler(
        http_event("POST", "/v1/batches", body={"requests": [chat_request("q", "hi")]}),
        LambdaContext(),  # type: ignore[arg-type]
    )
    assert created["statusCode"] == 200
    assert ask(deps, monkeypatch, "sk-local-alice")[1]["has_history"] is True
    assert (
        ask(
            deps,
            monkeypatch,
            "sk-local-alice",
        )[1]["show_entry"]
        is True
    )
    assert ask(deps, monkeypatch, "sk-local-bob")[1]["has_history"] is False  # only your own count


def test_with_batch_disabled_it_answers_that_and_no_entry_while_every_batch_route_is_404(
    sim: Simulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    deps = make_deps(sim, FakeClock(), BATCH_ENABLED="false")
    status, body = ask(deps, monkeypatch, "sk-local-alice")
    assert status == 200
    assert (body["status"], body["has_history"], body["show_entry"]) == ("disabled", None, False)
    status, _ = ask(deps, monkeypatch, "sk-nope")
    assert status == 401


def test_when_only_the_history_check_fails_has_history_is_null_and_the_link_stays(
    sim: Simulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    deps = make_deps(sim, FakeClock())

    def refuse(*_: Any, **__: Any) -> Any:
        raise StorageError("the batches table cannot be read")

    monkeypatch.setattr(deps.batches, "list_for_owner", refuse)
    status, free = ask(deps, monkeypatch, "sk-local-free")  # below BATCH_MIN_ROLE: only history shows it
    assert status == 200
    assert free == {
        "object": "user.batch_capabilities",
        "status": "enabled",
        "min_role": "internal",
        "role_may_submit": False,
        "has_history": None,
        "show_entry": True,
    }
    monkeypatch.undo()

    def refuse_webhook(*_: Any, **__: Any) -> Any:
        raise ClientError({"Error": {"Code": "InternalServerError", "Message": "no"}}, "GetItem")

    monkeypatch.setattr(deps.webhooks, "get", refuse_webhook)
    _, free = ask(deps, monkeypatch, "sk-local-free")
    assert (free["status"], free["has_history"], free["show_entry"]) == ("enabled", None, True)


def test_while_the_batch_store_is_not_ready_batch_is_unavailable_and_the_link_stays_hidden(
    sim: Simulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    deps = make_deps(sim, FakeClock())
    aws.get_clients().dynamodb.delete_table(TableName=deps.settings.batches_table)
    status, body = ask(deps, monkeypatch, "sk-local-alice")
    assert status == 200
    assert (body["status"], body["role_may_submit"], body["has_history"], body["show_entry"]) == (
        "unavailable",
        True,
        None,
        False,
    )
