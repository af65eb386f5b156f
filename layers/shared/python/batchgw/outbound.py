"""POSTs out of the gateway to addresses its users give: a batch event to a webhook,
signed (``domain.webhooks``), and reaching only the addresses the rules allow.

The webhook worker (``run.webhooks``) sends each batch's end through here, and the API sends
an endpoint's test event (``api.webhook_endpoints``) the same way.
"""

from __future__ import annotations

import asyncio
import errno
import functools
import json
import socket
import ssl
from dataclasses import dataclass
from typing import Any
from urllib.parse import urljoin, urlsplit, urlunsplit

import httpx

from batchgw.deps import Deps
from batchgw.domain.addresses import Refused, check_addresses, check_url
from batchgw.domain.webhooks import signature_header
from batchgw.observability import logger
from batchgw.storage.dns import Resolver
from batchgw.storage.webhooks import Webhook

MAX_REDIRECTS = 3
_REDIRECTS = frozenset({301, 302, 303, 307, 308})


@dataclass(frozen=True)
class Answer:
    status: int | None  # None: no answer (timed out, refused, unreachable)
    timed_out: bool = False
    retry_after: float | None = None
    # Why it was not delivered, in words its owner reads in the delivery lists (never an
    # exception's name: the log keeps that).
    error: str | None = None


def _timed_out(timeout: float) -> Answer:
    return Answer(None, timed_out=True, error=f"the receiver did not answer within {timeout:g} s")


def post_event(
    deps: Deps,
    hook: Webhook,
    event_id: str,
    event: dict[str, Any],
    *,
    transport: httpx.AsyncBaseTransport | None = None,
) -> Answer:
    """POST ``event`` to ``hook``, signed with its secret (and, during a rotation's overlap,
    its previous one too)."""
    now = deps.clock()
    keys = [deps.sealer.open(hook.secret, user_id=hook.user_id)]
    if hook.previous_secret is not None and (hook.previous_until or 0) > now:
        keys.append(deps.sealer.open(hook.previous_secret, user_id=hook.user_id))
    body = json.dumps(event, separators=(",", ":")).encode()
    stamp = int(now)
    headers = {
        "content-type": "application/json",
        "user-agent": "batchgw-webhooks/1",
        "webhook-id": event_id,
        "webhook-timestamp": str(stamp),
        "webhook-signature": signature_header(keys, event_id, stamp, body),
    }
    settings = deps.settings
    return safe_post(
        hook.url,
        headers,
        body,
        timeout=settings.batch_webhook_timeout_seconds,
        allow_private=settings.batch_webhook_allow_private_targets,
        resolve=deps.resolve,
        transport=transport,
    )


def safe_post(
    url: str,
    headers: dict[str, str],
    body: bytes,
    *,
    timeout: float,
    allow_private: bool,
    resolve: Resolver,
    transport: httpx.AsyncBaseTransport | None = None,
) -> Answer:
    """POST ``body`` to ``url``, reaching only addresses the rules allow: the host is resolved
    once per hop, every address checked, and the connection made to a checked address with
    TLS still verifying the name. Redirects are followed by hand (at most MAX_REDIRECTS, each
    re-checked, https kept).

    The whole exchange has ``timeout`` seconds, whatever the receiver does: the answer is
    judged on its status line and its body is never read (a receiver that trickles it, or
    sends gigabytes, holds nothing), and a receiver that stalls anywhere (connecting, reading
    the request, trickling its headers) is cut off at the deadline, its connection closed.
    """
    try:
        return asyncio.run(_post(url, headers, body, timeout, allow_private, resolve, transport))
    except TimeoutError:
        return _timed_out(timeout)


async def _post(
    url: str,
    headers: dict[str, str],
    body: bytes,
    timeout: float,
    allow_private: bool,
    resolve: Resolver,
    transport: httpx.AsyncBaseTransport | None,
) -> Answer:
    client = httpx.AsyncClient(transport=transport, trust_env=False, verify=_tls())
    async with client as http, asyncio.timeout(timeout):  # the receiver's time, not ours
        for _ in range(MAX_REDIRECTS + 1):
            try:
                target = check_url(url, allow_private=allow_private)
                addresses = (
                    [target.literal]
                    if target.literal is not None
                    else check_addresses(
                        target.host, resolve(target.host, target.port), allow_private=allow_private
                    )
                )
            except Refused as exc:  # its words say why (``domain.addresses``)
                return Answer(None, error=f"not sent, the address is refused: {exc}")
            address = addresses[0]
            parts = urlsplit(target.url)
            literal = f"[{address}]" if address.version == 6 else str(address)
            pinned = urlunsplit(
                (target.scheme, f"{literal}:{target.port}", parts.path or "/", parts.query, "")
            )
            host_header = target.host if parts.port is None else f"{target.host}:{target.port}"
            request = http.build_request(
                "POST",
                pinned,
                content=body,
                headers={**headers, "host": host_header},
                timeout=httpx.Timeout(timeout),
                extensions={"sni_hostname": target.host} if target.scheme == "https" else {},
            )
            try:
                response = await http.send(request, stream=True, follow_redirects=False)
            except httpx.TimeoutException:
                return _timed_out(timeout)
            except httpx.HTTPError as exc:
                logger.warning(
                    "webhook not answered",
                    extra={"host": target.host, "error": f"{type(exc).__name__}: {exc}"[:300]},
                )
                return Answer(None, error=unanswered(exc))
            await response.aclose()  # judged on its status line: the body is not read
            location = response.headers.get("location")
            if response.status_code in _REDIRECTS and location:
                url = urljoin(target.url, location)
                if target.scheme == "https" and not url.lower().startswith("https://"):
                    return Answer(
                        response.status_code, error="a redirect left https for a plain http address"
                    )
                continue
            return Answer(response.status_code, retry_after=_retry_after(response.headers.get("retry-after")))
    return Answer(None, error=f"the receiver redirected more than {MAX_REDIRECTS} times")


def unanswered(exc: BaseException) -> str:
    """Why a POST got no answer, in words: what the exception (or one it was raised from)
    says happened, never its name."""
    seen: BaseException | None = exc
    for _ in range(8):  # httpx raises from httpcore, which raises from the socket's error
        if seen is None:
            break
        if isinstance(seen, ssl.SSLCertVerificationError):
            return "the receiver's TLS certificate could not be verified"
        if isinstance(seen, ssl.SSLError):
            return "the TLS handshake with the receiver failed"
        if isinstance(seen, ConnectionRefusedError) or getattr(seen, "errno", None) == errno.ECONNREFUSED:
            return "the connection was refused"
        if isinstance(seen, ConnectionResetError):
            return "the receiver closed the connection before answering"
        if isinstance(seen, socket.gaierror):
            return "the receiver's address could not be found"
        seen = seen.__cause__ or seen.__context__
    if isinstance(exc, httpx.ConnectError):
        return "the receiver could not be reached"
    if isinstance(exc, httpx.RemoteProtocolError):
        return "the receiver's answer was not valid HTTP, or it closed the connection before answering"
    if isinstance(exc, httpx.ReadError):
        return "the connection broke while waiting for the receiver's answer"
    if isinstance(exc, httpx.WriteError):
        return "the connection broke while sending the event"
    return "the event could not be sent: the connection failed"


@functools.cache
def _tls() -> ssl.SSLContext:
    """The TLS settings every delivery verifies with, built once. Loading the CA bundle takes
    tens of milliseconds (150 ms once on a busy machine), and every delivery used to pay it
    inside the receiver's timeout."""
    return httpx.create_ssl_context()


def _retry_after(value: str | None) -> float | None:
    try:
        seconds = float(value) if value is not None else None
    except ValueError:
        return None
    return seconds if seconds is not None and 0 <= seconds <= 86400 else None
