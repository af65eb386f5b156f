"""The webhook transport reaches only checked addresses: it connects to the address it
checked (with the name kept for TLS), re-checks every redirect, and refuses a name that
resolves inside at connect time even if it was public when saved (fake resolver, mock HTTP)."""

from __future__ import annotations

import re
import socket
import ssl
import threading

import httpx
import pytest
from batchgw.outbound import Answer, safe_post

PUBLIC = "93.184.216.34"


def client(
    answer: httpx.Response | None = None, seen: list[httpx.Request] | None = None
) -> httpx.MockTransport:
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

    return httpx.MockTransport(handle)


def post(
    transport: httpx.MockTransport,
    url: str,
    resolve: dict[str, list[str]] | None = None,
    timeout: float = 5,
) -> Answer:
    names = resolve or {"hooks.example.com": [PUBLIC]}
    return safe_post(
        url,
        {"webhook-id": "evt_1"},
        b"{}",
        timeout=timeout,
        allow_private=False,
        resolve=lambda h, p: names.get(h, []),
        transport=transport,
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
    assert looping.status is None and looping.error == "the receiver redirected more than 3 times"


def test_retry_after_and_timeouts_are_reported() -> None:
    slow = httpx.MockTransport(lambda r: (_ for _ in ()).throw(httpx.ReadTimeout("slow")))
    assert post(slow, "https://hooks.example.com/").timed_out
    busy = post(client(httpx.Response(503, headers={"retry-after": "120"})), "https://hooks.example.com/")
    assert (busy.status, busy.retry_after) == (503, 120.0)


def test_a_stalling_or_flooding_receiver_holds_a_delivery_no_longer_than_its_deadline() -> None:
    """Answering 200 then trickling the body, sending a huge body, or never finishing its
    headers: the exchange ends at its deadline, judged on the status line where there is one."""
    import asyncio
    import time

    class Trickle(httpx.AsyncByteStream):
        async def __aiter__(self):  # type: ignore[no-untyped-def]
            for _ in range(100):
                await asyncio.sleep(0.2)
                yield b"x"

    class Flood(httpx.AsyncByteStream):
        def __init__(self) -> None:
            self.sent = 0

        async def __aiter__(self):  # type: ignore[no-untyped-def]
            while self.sent < 64 * 1024 * 1024:
                self.sent += 1024 * 1024
                yield b"x" * (1024 * 1024)

    async def stalled(request: httpx.Request) -> httpx.Response:
        await asyncio.sleep(30)  # never answers within the deadline
        return httpx.Response(200)

    flood = Flood()
    for handler, status in (
        (lambda r: httpx.Response(200, stream=Trickle()), 200),
        (lambda r: httpx.Response(200, stream=flood), 200),
        (stalled, None),
    ):
        started = time.monotonic()
        answer = safe_post(
            "https://hooks.example.com/",
            {},
            b"{}",
            timeout=1,
            allow_private=False,
            resolve=lambda h, p: [PUBLIC],
            transport=httpx.MockTransport(handler),
        )
        # Well short of the 20 s of trickle or the 30 s stall, with room for a loaded machine
        # (the suite runs in two processes): the 1 s deadline ended it.
        assert time.monotonic() - started < 5
        assert answer.status == status and answer.timed_out is (status is None)
    assert flood.sent <= 1024 * 1024  # the huge answer's body was not read


def test_the_deadline_is_the_receivers_time_not_the_client_setup(monkeypatch: pytest.MonkeyPatch) -> None:
    """Building the HTTP client (loading the CA bundle: tens of milliseconds, more on a busy
    machine) happens before the receiver's clock starts."""
    import ssl
    import time

    from batchgw import outbound

    def slow_tls() -> ssl.SSLContext:
        time.sleep(1)  # past the deadline below
        return ssl.create_default_context()

    monkeypatch.setattr(outbound, "_tls", slow_tls)
    answer = post(client(), "https://hooks.example.com/", timeout=0.5)
    assert (answer.status, answer.timed_out) == (200, False)


# --- why a delivery failed, in words -------------------------------------------------------------

# What an exception's name looks like in a message (ConnectError, SSLCertVerificationError...).
EXCEPTION_NAME = re.compile(r"\b[A-Z][A-Za-z]*(?:Error|Exception|Timeout)\b")


def raised_from(exc: httpx.HTTPError, cause: BaseException | None) -> httpx.MockTransport:
    """A transport that fails as httpx does: its error raised from the socket's or TLS's."""

    def handle(request: httpx.Request) -> httpx.Response:
        raise exc from cause

    return httpx.MockTransport(handle)


@pytest.mark.parametrize(
    ("exc", "cause", "words"),
    [
        (
            httpx.ConnectError("[Errno 111] Connection refused"),
            ConnectionRefusedError(111, "refused"),
            "refused",
        ),
        (httpx.ConnectError("[SSL] bad"), ssl.SSLError(1, "[SSL: WRONG_VERSION_NUMBER]"), "TLS handshake"),
        (
            httpx.ConnectError("certificate verify failed"),
            ssl.SSLCertVerificationError(1, "certificate verify failed: self-signed"),
            "certificate could not be verified",
        ),
        (httpx.ReadError("reset"), ConnectionResetError(104, "reset by peer"), "closed the connection"),
        (
            httpx.RemoteProtocolError("Server disconnected without sending a response."),
            None,
            "not valid HTTP",
        ),
        (httpx.ReadError("EOF"), None, "the connection broke"),
        (httpx.WriteError("broken pipe"), None, "while sending"),
        (httpx.ConnectError("All connection attempts failed"), None, "could not be reached"),
        (httpx.UnsupportedProtocol("odd"), None, "could not be sent"),
    ],
)
def test_a_delivery_that_got_no_answer_says_why_in_words_never_the_exceptions_name(
    exc: httpx.HTTPError, cause: BaseException | None, words: str
) -> None:
    answer = post(raised_from(exc, cause), "https://hooks.example.com/")
    assert answer.status is None and answer.error is not None and words in answer.error
    assert not EXCEPTION_NAME.search(answer.error) and type(exc).__name__ not in answer.error, answer.error


def test_a_refused_connection_tls_failure_and_silence_read_in_words_on_real_sockets() -> None:
    """The same words from httpx's real stack on loopback (their causes are chained as the
    mocks above chain them): a closed port, a server that answers TLS's hello in plain HTTP,
    and one that never answers."""
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    closed.close()
    plain, silent = socket.socket(), socket.socket()
    for server in (plain, silent):
        server.bind(("127.0.0.1", 0))
        server.listen()

    def answer_plainly() -> None:
        conn, _ = plain.accept()
        with conn:
            conn.recv(1024)
            conn.sendall(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n")

    threading.Thread(target=answer_plainly, daemon=True).start()

    def send(url: str, timeout: float = 5) -> Answer:
        return safe_post(
            url, {}, b"{}", timeout=timeout, allow_private=True, resolve=lambda h, p: ["127.0.0.1"]
        )

    try:
        assert send(f"http://127.0.0.1:{port}/").error == "the connection was refused"
        tls = send(f"https://127.0.0.1:{plain.getsockname()[1]}/")
        assert tls.error == "the TLS handshake with the receiver failed"
        quiet = send(f"http://127.0.0.1:{silent.getsockname()[1]}/", timeout=0.5)
        assert quiet.timed_out and quiet.error == "the receiver did not answer within 0.5 s"
    finally:
        plain.close()
        silent.close()
