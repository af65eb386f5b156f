"""A user's batch webhook through the api handler (moto, KMS included; a fake resolver):
the secret shown once and stored sealed, rotation, the role needed to set one up, the
address rules when the URL is saved, deletion with the user."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from batchgw.deps import Deps
from batchgw.domain.webhooks import EventMessage
from batchgw.run.webhooks import deliver
from batchgw.storage.aws import get_clients

from functions.admin import handler as admin
from functions.api import handler as api
from local.simulator import Simulator
from tests.integration.conftest import make_deps
from tests.support import FakeClock, LambdaContext, http_event

pytestmark = pytest.mark.usefixtures("aws_env")
ADMIN, ALICE, FREE = "sk-local-admin", "sk-local-alice", "sk-local-free"
NAMES = {"hooks.example.com": ["93.184.216.34"], "inside.example.com": ["10.1.2.3"]}


@pytest.fixture
def deps(sim: Simulator, monkeypatch: pytest.MonkeyPatch) -> Deps:
    built = make_deps(sim, FakeClock())
    looked_up: list[str] = []

    def resolve(host: str, port: int) -> list[str]:
        looked_up.append(host)
        return NAMES.get(host, [])

    built.resolve = resolve
    monkeypatch.setattr(api, "get_deps", lambda: built)
    monkeypatch.setattr(admin, "get_deps", lambda: built)
    built.looked_up = looked_up  # type: ignore[attr-defined]
    return built


def call(method: str, path: str, key: str = ALICE, body: Any = None) -> tuple[int, Any]:
    function = admin if path.startswith("/admin/") else api  # as the HTTP API routes
    response = function.handler(http_event(method, path, key=key, body=body), LambdaContext())  # type: ignore[arg-type]
    return int(response["statusCode"]), json.loads(response.get("body") or "null")


def test_the_secret_is_shown_once_and_stored_sealed(deps: Deps) -> None:
    status, made = call("PUT", "/v1/batch_webhook", body={"url": "https://hooks.example.com/batch"})
    assert status == 200 and made["secret"].startswith("whsec_") and made["enabled"] is True
    status, shown = call("GET", "/v1/batch_webhook")
    assert status == 200 and "secret" not in shown and shown["url"] == "https://hooks.example.com/batch"
    stored = deps.webhooks.get("user-alice")
    assert stored is not None and made["secret"].encode() not in stored.secret
    assert deps.sealer.open(stored.secret, user_id="user-alice") == made["secret"]
    with pytest.raises(Exception, match="decrypt"):  # bound to its owner
        deps.sealer.open(stored.secret, user_id="user-bob")
    status, again = call("PUT", "/v1/batch_webhook", body={"url": "https://hooks.example.com/v2"})
    assert status == 200 and "secret" not in again and again["url"].endswith("/v2")


def test_rotating_makes_a_new_secret_and_keeps_the_old_one_signing_for_an_overlap(deps: Deps) -> None:
    first = call("PUT", "/v1/batch_webhook", body={"url": "https://hooks.example.com/"})[1]["secret"]
    status, rotated = call(
        "PUT", "/v1/batch_webhook", body={"url": "https://hooks.example.com/", "rotate_secret": True}
    )
    assert status == 200 and rotated["secret"] != first
    stored = deps.webhooks.get("user-alice")
    assert stored is not None and stored.previous_secret is not None
    assert deps.sealer.open(stored.previous_secret, user_id="user-alice") == first
    assert stored.previous_until is not None and stored.previous_until > deps.clock()


@pytest.mark.parametrize(
    "url",
    [
        "https://inside.example.com/hook",
        "https://169.254.169.254/latest",
        "http://hooks.example.com/hook",
        "https://nowhere.example.com/",
        "https://0x7f000001/",
    ],
)
def test_a_url_that_could_reach_inside_is_400_and_nothing_is_stored(deps: Deps, url: str) -> None:
    status, error = call("PUT", "/v1/batch_webhook", body={"url": url})
    assert status == 400 and error["error"]["code"] == "invalid_webhook_url"
    assert deps.webhooks.get("user-alice") is None


def test_below_the_minimum_role_put_is_403_before_anything_is_resolved(deps: Deps) -> None:
    status, _ = call("PUT", "/v1/batch_webhook", key=FREE, body={"url": "https://hooks.example.com/"})
    assert status == 403 and deps.webhooks.get("user-free") is None
    assert deps.looked_up == []  # type: ignore[attr-defined]


def test_a_lowered_role_may_still_read_and_delete_its_webhook(deps: Deps) -> None:
    assert call("PUT", "/v1/batch_webhook", body={"url": "https://hooks.example.com/"})[0] == 200
    assert call("PATCH", "/admin/users/user-alice", key=ADMIN, body={"role": "free"})[0] == 200
    assert call("PUT", "/v1/batch_webhook", body={"url": "https://hooks.example.com/x"})[0] == 403
    assert call("GET", "/v1/batch_webhook")[0] == 200
    assert call("GET", "/v1/batch_webhook/events")[1]["data"] == []
    assert call("DELETE", "/v1/batch_webhook") == (200, {"object": "batch_webhook.deleted", "deleted": True})
    assert call("GET", "/v1/batch_webhook")[0] == 404


@pytest.mark.parametrize(
    "body",
    [
        None,
        {},
        {"url": 5},
        {"url": "https://hooks.example.com/", "x": 1},
        {"url": "https://a", "rotate_secret": "y"},
    ],
)
def test_a_bad_body_is_400(deps: Deps, body: Any) -> None:
    assert call("PUT", "/v1/batch_webhook", body=body)[0] == 400


def test_batch_disabled_hides_the_webhook_routes(deps: Deps) -> None:
    assert call("PATCH", "/admin/config/BATCH_ENABLED", key=ADMIN, body={"value": False})[0] == 200
    for method in ("GET", "DELETE"):
        assert call(method, "/v1/batch_webhook")[0] == 404
    assert call("PUT", "/v1/batch_webhook", body={"url": "https://hooks.example.com/"})[0] == 404


def test_deleting_a_user_deletes_their_webhook(deps: Deps) -> None:
    assert call("PUT", "/v1/batch_webhook", body={"url": "https://hooks.example.com/"})[0] == 200
    assert call("DELETE", "/admin/users/user-alice", key=ADMIN)[0] == 200
    assert deps.webhooks.get("user-alice") is None


# --- the OpenAI SDK's webhook endpoints, onto the same webhook -----------------------------------

ENDPOINT = {"url": "https://hooks.example.com/batch", "name": "ops", "event_types": ["batch.failed"]}


def test_an_endpoint_is_the_users_one_webhook_whichever_api_made_it(deps: Deps) -> None:
    status, made = call("POST", "/v1/webhook_endpoints", body=ENDPOINT)
    assert status == 200 and made["id"].startswith("we_") and made["signing_secret"].startswith("whsec_")
    assert made["signing_secret_hint"].endswith(made["signing_secret"][-4:])
    assert call("POST", "/v1/webhook_endpoints", body=ENDPOINT)[0] == 409  # one per user
    # Saved again through the spec's route, it keeps its id, name and event types.
    assert call("PUT", "/v1/batch_webhook", body={"url": "https://hooks.example.com/v2"})[0] == 200
    status, shown = call("GET", f"/v1/webhook_endpoints/{made['id']}")
    assert status == 200 and "signing_secret" not in shown
    assert (shown["url"], shown["name"], shown["event_types"]) == (
        "https://hooks.example.com/v2",
        "ops",
        ["batch.failed"],
    )
    # One made through the spec's route is an endpoint too, of every event type sent.
    assert call("DELETE", f"/v1/webhook_endpoints/{made['id']}")[1]["deleted"] is True
    call("PUT", "/v1/batch_webhook", body={"url": "https://hooks.example.com/v3"})
    status, listed = call("GET", "/v1/webhook_endpoints")
    assert status == 200 and len(listed["data"]) == 1 and listed["has_more"] is False
    assert listed["data"][0]["event_types"] == [
        "batch.completed",
        "batch.failed",
        "batch.expired",
        "batch.cancelled",
        "response.completed",
        "response.failed",
        "response.cancelled",
        "response.incomplete",
    ]


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({**ENDPOINT, "event_types": ["response.in_progress"]}, "event_types"),
        ({**ENDPOINT, "event_types": []}, "event_types"),
        ({**ENDPOINT, "name": ""}, "name"),
        ({"url": ENDPOINT["url"], "name": "x"}, "event_types"),
        ({**ENDPOINT, "url": "https://inside.example.com/hook"}, "url"),
        ({**ENDPOINT, "secret": "mine"}, "secret"),
    ],
)
def test_a_bad_endpoint_is_400_naming_its_field_and_nothing_is_stored(
    deps: Deps, body: dict[str, Any], param: str
) -> None:
    status, answer = call("POST", "/v1/webhook_endpoints", body=body)
    assert status == 400 and answer["error"]["param"] == param, answer
    assert deps.webhooks.get("user-alice") is None


def test_below_the_minimum_role_an_endpoint_is_read_and_deleted_not_made_or_changed(deps: Deps) -> None:
    assert call("POST", "/v1/webhook_endpoints", FREE, ENDPOINT)[0] == 403
    status, made = call("POST", "/v1/webhook_endpoints", ALICE, ENDPOINT)
    assert status == 200
    call("PATCH", "/admin/users/user-alice", ADMIN, {"role": "free"})
    endpoint = f"/v1/webhook_endpoints/{made['id']}"
    assert call("POST", endpoint, ALICE, {"name": "new"})[0] == 403
    assert call("POST", f"{endpoint}/rotate_secret", ALICE, {})[0] == 403
    assert call("POST", f"{endpoint}/test", ALICE, {"event_type": "batch.failed"})[0] == 403
    assert call("GET", endpoint, ALICE)[0] == 200
    assert call("DELETE", endpoint, ALICE)[0] == 200


def test_another_id_is_404_and_a_rotation_without_overlap_drops_the_old_secret(deps: Deps) -> None:
    _, made = call("POST", "/v1/webhook_endpoints", body=ENDPOINT)
    assert call("GET", "/v1/webhook_endpoints/we_nope")[0] == 404
    status, kept = call(
        "POST",
        f"/v1/webhook_endpoints/{made['id']}/rotate_secret",
        body={"keep_old_secret_active_for_24_hours": True},
    )
    assert status == 200 and deps.webhooks.get("user-alice").previous_secret is not None  # type: ignore[union-attr]
    status, dropped = call("POST", f"/v1/webhook_endpoints/{made['id']}/rotate_secret")
    stored = deps.webhooks.get("user-alice")
    assert status == 200 and stored is not None and stored.previous_secret is None
    assert (
        deps.sealer.open(stored.secret, user_id="user-alice")
        == dropped["signing_secret"]
        != kept["signing_secret"]
    )


@contextmanager
def webhook_function(deps: Deps) -> Iterator[list[EventMessage]]:
    """The webhook function, polling its queue in a thread as Lambda's poller would: every
    event it took, in order."""
    taken: list[EventMessage] = []
    stop = threading.Event()
    sqs = get_clients().sqs

    def poll() -> None:
        while not stop.is_set():
            got = sqs.receive_message(
                QueueUrl=deps.settings.webhook_queue_url, MaxNumberOfMessages=1, WaitTimeSeconds=0
            )
            for message in got.get("Messages", []):
                event = EventMessage.decode(message["Body"])
                taken.append(event)
                deliver(deps, event)
                sqs.delete_message(
                    QueueUrl=deps.settings.webhook_queue_url, ReceiptHandle=message["ReceiptHandle"]
                )
            stop.wait(0.05)

    thread = threading.Thread(target=poll, daemon=True)
    thread.start()
    try:
        yield taken
    finally:
        stop.set()
        thread.join()


def test_a_test_event_goes_through_the_webhook_function_and_no_answer_is_a_clear_400(deps: Deps) -> None:
    """The api may seal a secret, never open one: the test event is queued for the webhook
    function, which signs and sends it; the api waits for what the endpoint answered."""
    _, made = call("POST", "/v1/webhook_endpoints", body=ENDPOINT)
    NAMES["hooks.example.com"] = []  # the name no longer resolves
    try:
        with webhook_function(deps) as taken:
            status, answer = call(
                "POST", f"/v1/webhook_endpoints/{made['id']}/test", body={"event_type": "batch.failed"}
            )
    finally:
        NAMES["hooks.example.com"] = ["93.184.216.34"]
    assert status == 400 and answer["error"]["code"] == "webhook_test_failed", answer
    assert "refused" in answer["error"]["message"]
    (event,) = taken
    assert event.test and event.type == "batch.failed" and event.batch_id == "batch_test"
    assert deps.webhooks.get("user-alice").timeouts_in_row == 0  # type: ignore[union-attr]  # health untouched
    status, answer = call(
        "POST", f"/v1/webhook_endpoints/{made['id']}/test", body={"event_type": "eval.run.failed"}
    )
    assert status == 400 and answer["error"]["param"] == "event_type"
