"""The console's sign-in through the api function's handler (moto): an API key entered once
becomes an HttpOnly, SameSite=Strict session cookie; the API's routes take the cookie in
place of the key, a call that changes something only with the session's CSRF header; signing
out, or revoking the key, ends it on the server."""

from __future__ import annotations

import json
from typing import Any

import pytest
from batchgw.api import accounts, auth
from batchgw.deps import Deps
from batchgw.domain.principal import Principal

from functions.api import handler as api
from local.simulator import Simulator
from tests.integration.conftest import chat_request, make_deps
from tests.support import FakeClock, LambdaContext, http_event

pytestmark = pytest.mark.usefixtures("aws_env")

KEY = "sk-local-alice"


@pytest.fixture
def deps(sim: Simulator, monkeypatch: pytest.MonkeyPatch) -> Deps:
    made = make_deps(sim, FakeClock())
    monkeypatch.setattr(api, "get_deps", lambda: made)
    return made


def send(
    method: str,
    path: str,
    *,
    cookie: str | None = None,
    csrf: str | None = None,
    body: Any = None,
    key: str | None = None,
    host: str = "127.0.0.1:8080",
) -> dict[str, Any]:
    headers = {"host": host}
    if csrf is not None:
        headers["x-csrf-token"] = csrf
    event = http_event(method, path, key=key, body=body, headers=headers)
    event["headers"].pop("cookie", None)
    if cookie is not None:
        event["cookies"] = [f"{auth.SESSION_COOKIE}={cookie}", "other=1"]
    else:
        event.pop("cookies", None)
    return api.handler(event, LambdaContext())  # type: ignore[arg-type]


def sign_in(host: str = "127.0.0.1:8080") -> tuple[str, dict[str, Any], str]:
    answer = send("POST", "/console/session", body={"api_key": KEY}, host=host)
    assert answer["statusCode"] == 200, answer
    [set_cookie] = answer["cookies"]
    token = set_cookie.split(";")[0].split("=", 1)[1]
    return token, json.loads(answer["body"]), set_cookie


def test_signing_in_sets_an_httponly_strict_cookie_and_the_key_is_never_sent_back(deps: Deps) -> None:
    token, session, set_cookie = sign_in()
    assert "HttpOnly" in set_cookie and "SameSite=Strict" in set_cookie and "Path=/" in set_cookie
    assert "Secure" not in set_cookie  # served from this machine over plain HTTP
    assert (session["user_id"], session["key_id"], session["role"]) == (
        "user-alice",
        "key_local_alice",
        "internal",
    )
    assert KEY.startswith(session["key_prefix"]) and len(session["key_prefix"]) < len(KEY)
    assert KEY not in json.dumps(session) and KEY not in set_cookie and token not in json.dumps(session)
    assert "Secure" in sign_in(host="gateway.example.com")[2]
    again = send("GET", "/console/session", cookie=token)
    assert json.loads(again["body"])["csrf_token"] == session["csrf_token"]


def test_the_api_takes_the_session_cookie_and_a_change_needs_its_csrf_header(deps: Deps) -> None:
    token, session, _ = sign_in()
    listed = send("GET", "/v1/batches", cookie=token)
    assert listed["statusCode"] == 200 and json.loads(listed["body"])["data"] == []
    body = {"requests": [chat_request("q", "hi")]}
    refused = send("POST", "/v1/batches", cookie=token, body=body)
    assert refused["statusCode"] == 403
    assert json.loads(refused["body"])["error"]["code"] == "csrf_failed"
    for wrong_token in ("not-the-token", "żółw-ünïcode"):
        wrong = send("POST", "/v1/batches", cookie=token, body=body, csrf=wrong_token)
        assert wrong["statusCode"] == 403
    assert send("GET", "/v1/batches", cookie=token)["body"].count('"id"') == 0  # nothing was made
    created = send("POST", "/v1/batches", cookie=token, body=body, csrf=session["csrf_token"])
    assert created["statusCode"] == 200
    batch = json.loads(created["body"])
    assert deps.batches.get_record(batch["id"]).owner == "user-alice"  # as the key that signed in


def test_signing_out_or_revoking_the_key_ends_the_session_on_the_server(deps: Deps) -> None:
    token, session, _ = sign_in()
    assert send("DELETE", "/console/session", cookie=token)["statusCode"] == 403  # no CSRF header
    out = send("DELETE", "/console/session", cookie=token, csrf=session["csrf_token"])
    assert out["statusCode"] == 200 and "Max-Age=0" in out["cookies"][0]
    gone = send("GET", "/v1/batches", cookie=token)
    assert gone["statusCode"] == 401 and json.loads(gone["body"])["error"]["code"] == "session_expired"

    token, _, _ = sign_in()
    admin = Principal(user_id="user-admin", role="admin", key_id="key_local_admin")
    accounts.revoke_key(deps, admin, "key_local_alice")
    revoked = send("GET", "/v1/batches", cookie=token)
    assert revoked["statusCode"] == 401 and json.loads(revoked["body"])["error"]["code"] == "invalid_api_key"


def test_a_bad_key_or_body_signs_nobody_in(deps: Deps) -> None:
    bad = send("POST", "/console/session", body={"api_key": "sk-nope"})
    assert bad["statusCode"] == 401 and not bad.get("cookies")
    for body in (None, {}, {"api_key": 3}, {"api_key": KEY, "extra": 1}):
        answer = send("POST", "/console/session", body=body)
        assert answer["statusCode"] == 400 and json.loads(answer["body"])["error"]["param"] == "api_key"
    assert send("GET", "/console/session")["statusCode"] == 401
    assert send("GET", "/v1/batches", cookie="made-up")["statusCode"] == 401
