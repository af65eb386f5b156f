"""Every time in every answer is an integer of Unix seconds (issue 50: webhook deliveries
answered ``created_at`` in milliseconds beside ``delivered_at`` in seconds).

The main routes are called through the api and admin handlers (moto, the real stores), with
records of every kind made first (inline and file batches, a failed one, files, an upload, a
webhook and a delivery record as the webhook function writes it, an endpoint), and every
field that names a time (``*_at``, ``created``, ``expires``, ``*_until``...) anywhere in an
answer is checked: an integer between 2020 and 2100 as seconds, so milliseconds fail.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from batchgw.deps import Deps
from batchgw.domain.webhooks import EventMessage
from batchgw.run import lifecycle
from batchgw.run.webhooks import deliver

from functions.admin import handler as admin
from functions.api import handler as api
from local.simulator import Simulator
from tests.integration.conftest import make_deps
from tests.support import FakeClock, LambdaContext, http_event

pytestmark = pytest.mark.usefixtures("aws_env")
ALICE, ADMIN = "sk-local-alice", "sk-local-admin"
YEAR_2020, YEAR_2100 = 1_577_836_800, 4_102_444_800
# Names of fields that hold a time (besides every ``*_at``).
TIME_NAMES = frozenset({"created", "expires", "suspended_until", "previous_until", "until"})
BOUNDARY = "xYzBoUnDaRy"
# The local seed (local/keys.py) makes its accounts with no creation time: 0, on these routes.
SEEDED_ROUTES = frozenset({"/v1/me", "/admin/users", "/admin/users/user-alice/keys"})
CHAT = "/v1/chat/completions"


@pytest.fixture
def deps(sim: Simulator, monkeypatch: pytest.MonkeyPatch) -> Deps:
    built = make_deps(sim, FakeClock())
    built.resolve = lambda host, port: {"hooks.example.com": ["93.184.216.34"]}.get(host, [])
    monkeypatch.setattr(api, "get_deps", lambda: built)
    monkeypatch.setattr(admin, "get_deps", lambda: built)
    return built


def call(method: str, path: str, key: str = ALICE, body: Any = None, **event: Any) -> Any:
    function = admin if path.startswith("/admin/") else api
    answer = function.handler(http_event(method, path, key=key, body=body, **event), LambdaContext())  # type: ignore[arg-type]
    assert int(answer["statusCode"]) < 300, (method, path, answer.get("body"))
    return json.loads(answer.get("body") or "null")


def upload(data: bytes) -> dict[str, Any]:
    body = (
        (
            f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="purpose"\r\n\r\nbatch\r\n'
            f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="file"; filename="in.jsonl"\r\n'
            "Content-Type: application/jsonl\r\n\r\n"
        )
        + data.decode()
        + f"\r\n--{BOUNDARY}--\r\n"
    )
    made: dict[str, Any] = call(
        "POST", "/v1/files", body=body, headers={"content-type": f"multipart/form-data; boundary={BOUNDARY}"}
    )
    return made


def line(custom_id: str, model: str = "sim-chat", **fields: Any) -> str:
    body = {"model": model, "messages": [{"role": "user", "content": "hi"}], **fields}
    return json.dumps({"custom_id": custom_id, "method": "POST", "url": CHAT, "body": body})


def times(answer: Any, where: str = "") -> Iterator[tuple[str, Any]]:
    """Every (path, value) of a field that names a time, anywhere in ``answer``."""
    if isinstance(answer, dict):
        for name, value in answer.items():
            path = f"{where}.{name}"
            if isinstance(name, str) and (name.endswith("_at") or name in TIME_NAMES):
                yield path, value
            yield from times(value, path)
    elif isinstance(answer, list):
        for index, value in enumerate(answer):
            yield from times(value, f"{where}[{index}]")


def test_a_milliseconds_value_is_caught_by_the_walk() -> None:
    found = dict(times({"data": [{"created_at": 1_800_000_000_123, "x": {"expires": None}}]}))
    assert found == {".data[0].created_at": 1_800_000_000_123, ".data[0].x.expires": None}
    assert not _in_seconds(1_800_000_000_123) and _in_seconds(1_800_000_000)


def _in_seconds(value: Any) -> bool:
    return type(value) is int and YEAR_2020 <= value <= YEAR_2100


def test_every_time_in_the_main_answers_is_integer_unix_seconds(deps: Deps) -> None:
    # Records of every kind the answers show.
    inline = call("POST", "/v1/batches", body={"endpoint": CHAT, "requests": [json.loads(line("a"))]})
    good = upload((line("a") + "\n").encode())
    bad = upload((line("a") + "\n" + line("a") + "\n").encode())
    failed = call(
        "POST", "/v1/batches", body={"input_file_id": bad["id"], "endpoint": CHAT, "completion_window": "24h"}
    )
    lifecycle.prepare(deps, failed["id"])
    from_file = call(
        "POST",
        "/v1/batches",
        body={"input_file_id": good["id"], "endpoint": CHAT, "completion_window": "24h"},
    )
    lifecycle.prepare(deps, from_file["id"])
    made_upload = call(
        "POST",
        "/v1/uploads",
        body={"filename": "x.jsonl", "purpose": "batch", "bytes": 10, "mime_type": "text/jsonl"},
    )
    # A delivery record as the webhook function writes it (milliseconds in the message).
    deliver(deps, EventMessage.of_batch(failed["id"], "user-alice", "failed", int(deps.clock() * 1000)))
    endpoint = call(
        "POST",
        "/v1/webhook_endpoints",
        body={"url": "https://hooks.example.com/e", "event_types": ["batch.completed"], "name": "ops"},
    )

    user = call(
        "POST", "/admin/users", key=ADMIN, body={"name": "Carol", "email": "c@example.com", "role": "pro"}
    )
    user_key = call("POST", f"/admin/users/{user['id']}/keys", key=ADMIN, body={})

    answers: dict[str, Any] = {
        "user made": user,
        "key made": user_key,
        "create inline": inline,
        "create from file": from_file,
        "upload a file": good,
        "create an upload": made_upload,
        "endpoint made": endpoint,
    }
    for path, key, query in [
        ("/v1/batches", ALICE, ""),
        (f"/v1/batches/{inline['id']}", ALICE, ""),
        (f"/v1/batches/{failed['id']}", ALICE, ""),
        (f"/v1/batches/{from_file['id']}", ALICE, ""),
        ("/v1/files", ALICE, ""),
        (f"/v1/files/{good['id']}", ALICE, ""),
        ("/v1/batch_webhook", ALICE, ""),
        ("/v1/batch_webhook/events", ALICE, ""),
        ("/v1/webhook_endpoints", ALICE, ""),
        (f"/v1/webhook_endpoints/{endpoint['id']}", ALICE, ""),
        ("/v1/me", ALICE, ""),
        ("/console/api/batches", ALICE, ""),
        (f"/console/api/batches/{failed['id']}", ALICE, ""),
        ("/user/batch-capabilities", ALICE, ""),
        ("/admin/batch/summary", ADMIN, ""),
        ("/admin/batch/jobs", ADMIN, ""),
        ("/admin/requests", ADMIN, ""),
        ("/admin/audit", ADMIN, "user=user-alice"),
        ("/admin/users", ADMIN, ""),
        ("/admin/users/user-alice/keys", ADMIN, ""),
        ("/admin/console/batches", ADMIN, ""),
        ("/admin/batch/models", ADMIN, ""),
    ]:
        answers[path] = call("GET", path, key=key, query=query)

    (delivery,) = answers["/v1/batch_webhook/events"]["data"]
    assert delivery["created_at"] == int(deps.clock())
    wrong = {
        f"{route}{path}": value
        for route, answer in answers.items()
        for path, value in times(answer)
        if value is not None and not _in_seconds(value) and not (value == 0 and route in SEEDED_ROUTES)
    }
    assert wrong == {}
    seen = {path.rsplit(".", 1)[-1] for answer in answers.values() for path, _ in times(answer)}
    assert {"created_at", "expires_at", "failed_at", "updated_at"} <= seen  # the walk found them


def test_a_stored_delivery_keeps_milliseconds_and_reads_back_in_seconds(deps: Deps) -> None:
    made_ms = int(deps.clock() * 1000) + 789
    deliver(deps, EventMessage.of_batch("batch_" + "0" * 32, "user-alice", "completed", made_ms))
    (stored,) = deps.webhooks.deliveries("user-alice")
    assert (stored.created_ms, stored.created_at) == (made_ms, made_ms // 1000)
    (shown,) = call("GET", "/v1/batch_webhook/events")["data"]
    assert shown["created_at"] == made_ms // 1000
