"""The webhook transport reaches only checked addresses: it connects to the address it
checked (with the name kept for TLS), re-checks every redirect, and refuses a name that
resolves inside at connect time even if it was public when saved (fake resolver, mock HTTP)."""

from __future__ import annotations

import httpx
from batchgw.outbound import Answer, safe_post

PUBLIC = "93.184.216.34"


def client(answer: httpx.Response | None = None, seen: list[httpx.Request] | None = None) -> httpx.Client:
    def handle(request: httpx.Request) -> httpx.Response:
        if seen is not None:
            seen.append(request)
        if request.url.host == PUBLIC and request.url.path == "/redirect-inside":
            return httpx.Response(302, headers={"location": "https://169.254.169.254/latest/meta-data/"})
        if request.url.host == PUBLIC and request.url.path == "/redirect-http":
            return httpx.Response(302, headers={"location": "http://hooks.example.com/x"})
        if request.url.host == PUBLIC and request.url.path == "/redirect-ok":
            return httpx.Response(307, headers={"location": "/final"})
        if request.url.host == PUBLIC and request.url.path == "/loop":
            return httpx.Response(302, headers={"location": "/loop"})
        return answer or httpx.Response(200)

    return httpx.Client(transport=httpx.MockTransport(handle))


def post(http: httpx.Client, url: str, resolve: dict[str, list[str]] | None = None) -> Answer:
    names = resolve or {"hooks.example.com": [PUBLIC]}
    return safe_post(
        http,
        url,
        {"webhook-id": "evt_1"},
        b"{}",
        timeout=5,
        allow_private=False,
        resolve=lambda h, p: names.get(h, []),
    )


def test_it_connects_to_the_checked_address_keeping_the_name_for_tls() -> None:
    seen: list[httpx.Request] = []
    answer = post(client(seen=seen), "https://hooks.example.com:8443/hook?a=1")
    assert answer.status == 200
    (request,) = seen
    assert (request.url.host, request.url.port, request.url.path, request.url.query) == (
        PUBLIC,
        8443,
        "/hook",
        b"a=1",
    )
    assert request.headers["host"] == "hooks.example.com:8443"
    assert request.extensions["sni_hostname"] == "hooks.example.com"


def test_a_name_that_resolves_inside_at_connect_time_is_refused() -> None:
    seen: list[httpx.Request] = []
    answer = post(client(seen=seen), "https://hooks.example.com/", {"hooks.example.com": ["10.0.0.7"]})
    assert answer.status is None and "refused" in answer.error and seen == []


def test_every_redirect_is_checked_again() -> None:
    inside = post(client(), "https://hooks.example.com/redirect-inside")
    assert inside.status is None and "metadata" in inside.error
    downgraded = post(client(), "https://hooks.example.com/redirect-http")
    assert downgraded.status == 302 and "left https" in downgraded.error
    followed = post(client(), "https://hooks.example.com/redirect-ok")
    assert followed.status == 200
    looping = post(client(), "https://hooks.example.com/loop")
    assert looping.status is None and "redirects" in looping.error


def test_retry_after_and_timeouts_are_reported() -> None:
    slow = httpx.Client(
        transport=httpx.MockTransport(lambda r: (_ for _ in ()).throw(httpx.ReadTimeout("slow")))
    )
    assert post(slow, "https://hooks.example.com/").timed_out
    busy = post(client(httpx.Response(503, headers={"retry-after": "120"})), "https://hooks.example.com/")
    assert (busy.status, busy.retry_after) == (503, 120.0)
