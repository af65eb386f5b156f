"""Which addresses a webhook may reach: public ones only (the SSRF rules).

Pure: a URL and the addresses its host resolved to go in, a reason to refuse (or None)
comes out. The caller resolves once, checks every address here, and connects to a checked
address (``run.webhooks``); the same rules apply when a URL is saved and on every redirect.

``ipaddress``'s ``is_global`` alone is not enough: it passes IPv4-mapped, IPv4-translated,
NAT64, 6to4 and Teredo forms that wrap a private IPv4, and it knows nothing of the cloud metadata
addresses. Every IPv6 form that carries an IPv4 is unwrapped and that IPv4 checked too.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from urllib.parse import SplitResult, urlsplit

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

# Networks no webhook may reach, with why (checked before ``is_global``, to name the reason).
_FORBIDDEN: tuple[tuple[str, str], ...] = (
    ("169.254.169.254/32", "a cloud metadata address"),
    ("169.254.170.2/32", "a cloud metadata address"),
    ("fd00:ec2::254/128", "a cloud metadata address"),
    ("0.0.0.0/8", "an unspecified or 'this network' address"),
    ("10.0.0.0/8", "a private address"),
    ("100.64.0.0/10", "a carrier-grade NAT address"),
    ("127.0.0.0/8", "a loopback address"),
    ("169.254.0.0/16", "a link-local address"),
    ("172.16.0.0/12", "a private address"),
    ("192.0.0.0/24", "an IETF protocol assignment"),
    ("192.0.2.0/24", "a documentation address"),
    ("192.88.99.0/24", "a 6to4 relay anycast address"),
    ("192.168.0.0/16", "a private address"),
    ("198.18.0.0/15", "a benchmarking address"),
    ("198.51.100.0/24", "a documentation address"),
    ("203.0.113.0/24", "a documentation address"),
    ("224.0.0.0/4", "a multicast address"),
    ("240.0.0.0/4", "a reserved address"),
    ("255.255.255.255/32", "the broadcast address"),
    ("::/128", "the unspecified address"),
    ("::1/128", "a loopback address"),
    ("fc00::/7", "a unique-local address"),
    ("fe80::/10", "a link-local address"),
    ("fec0::/10", "a site-local address"),
    ("ff00::/8", "a multicast address"),
    ("100::/64", "a discard-only address"),
    ("2001:db8::/32", "a documentation address"),
    ("2001::/23", "an IETF protocol assignment"),
)
_NETWORKS = tuple((ipaddress.ip_network(net), why) for net, why in _FORBIDDEN)
_NAT64 = (ipaddress.ip_network("64:ff9b::/96"), ipaddress.ip_network("64:ff9b:1::/48"))
_SIX_TO_FOUR = ipaddress.ip_network("2002::/16")
_COMPATIBLE = ipaddress.ip_network("::/96")  # the deprecated IPv4-compatible form ::a.b.c.d
# The IPv4-translated form ::ffff:0:a.b.c.d (RFC 2765): a SIIT translator turns it into a.b.c.d.
_TRANSLATED = ipaddress.ip_network("::ffff:0:0:0/96")
_INTEGER_HOST = re.compile(r"^(0x[0-9a-f]+|[0-9]+)(\.(0x[0-9a-f]+|[0-9]+)){0,3}$", re.IGNORECASE)


def forbidden(address: IPAddress) -> str | None:
    """Why a webhook may not reach ``address`` (None: it may)."""
    for wrapped in _wrapped_ipv4(address):
        reason = forbidden(wrapped)
        if reason is not None:
            return f"{reason} (inside {address})"
    for network, why in _NETWORKS:
        if address.version == network.version and address in network:
            return why
    if not address.is_global:
        return "not a public address"
    return None


def _wrapped_ipv4(address: IPAddress) -> list[ipaddress.IPv4Address]:
    """The IPv4 addresses an IPv6 address carries: mapped, translated, compatible, NAT64,
    6to4, Teredo."""
    if not isinstance(address, ipaddress.IPv6Address):
        return []
    found = []
    if address.ipv4_mapped is not None:
        found.append(address.ipv4_mapped)
    if address.sixtofour is not None:
        found.append(address.sixtofour)
    if address.teredo is not None:
        found.extend(address.teredo)  # (server, client)
    embedded = (*_NAT64, _TRANSLATED)
    if any(address in net for net in embedded) or (address in _COMPATIBLE and int(address) > 1):
        found.append(ipaddress.IPv4Address(int(address) & 0xFFFFFFFF))
    return found


@dataclass(frozen=True)
class Target:
    """A webhook URL that passed the rules that need no DNS: its host and port."""

    url: str
    scheme: str
    host: str  # lower case, without IPv6 brackets
    port: int
    literal: IPAddress | None  # the host, when it is an IP address


class Refused(ValueError):
    """A webhook URL or address the rules refuse; the message says why."""


def check_url(url: str, *, allow_private: bool) -> Target:
    """The rules a URL must pass before anything is resolved: https (http only with private
    targets allowed), a host that is a name or an IP written the standard way (integer, octal
    and hex forms are refused), no credentials, and a literal address that is public."""
    if not isinstance(url, str) or len(url) > 2048:
        raise Refused("the URL must be a string of at most 2048 characters")
    try:
        parts: SplitResult = urlsplit(url.strip())
        port = parts.port
    except ValueError as exc:
        raise Refused(f"the URL cannot be read: {exc}") from None
    scheme = parts.scheme.lower()
    if scheme != "https" and not (allow_private and scheme == "http"):
        raise Refused("the URL must use https")
    host = (parts.hostname or "").rstrip(".").lower()
    if not host:
        raise Refused("the URL has no host")
    if parts.username is not None or parts.password is not None:
        raise Refused("the URL may not carry credentials")
    literal = _literal(host)
    if literal is None and _INTEGER_HOST.match(host):
        raise Refused(f"the host {host!r} is an address written as integers; write it the standard way")
    if literal is not None and not allow_private:
        reason = forbidden(literal)
        if reason is not None:
            raise Refused(f"the host {host} is {reason}")
    return Target(url, scheme, host, port or (443 if scheme == "https" else 80), literal)


def _literal(host: str) -> IPAddress | None:
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        return None


def check_addresses(host: str, addresses: list[str], *, allow_private: bool) -> list[IPAddress]:
    """Every address ``host`` resolved to, each allowed; Refused when none was found or any
    one is forbidden (a name that points anywhere inside is refused as a whole)."""
    if not addresses:
        raise Refused(f"the host {host} does not resolve")
    checked = []
    for text in addresses:
        address = ipaddress.ip_address(text.split("%", 1)[0])
        reason = None if allow_private else forbidden(address)
        if reason is not None:
            raise Refused(f"the host {host} resolves to {reason}")
        checked.append(address)
    return checked
