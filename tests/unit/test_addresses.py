"""The SSRF rules of webhook URLs: what a URL may name, and what its host may resolve to
(a fake resolver: a table of names and the addresses they give)."""

from __future__ import annotations

import pytest
from batchgw.domain.addresses import Refused, check_addresses, check_url

# name -> what it resolves to
RESOLVER = {
    "hooks.example.com": ["93.184.216.34"],
    "v6.example.com": ["2606:2800:220:1:248:1893:25c8:1946"],
    "both.example.com": ["93.184.216.34", "2606:2800:220:1:248:1893:25c8:1946"],
    "sneaky.example.com": ["93.184.216.34", "10.0.0.5"],  # one inside spoils it
    "internal.example.com": ["192.168.1.10"],
    "metadata.example.com": ["169.254.169.254"],
    "nothing.example.com": [],
}


def allowed(url: str) -> bool:
    try:
        target = check_url(url, allow_private=False)
        if target.literal is None:
            check_addresses(target.host, RESOLVER[target.host], allow_private=False)
    except Refused:
        return False
    return True


REFUSED_URLS = [
    "http://hooks.example.com/x",  # not https
    "ftp://hooks.example.com/x",
    "https:///nohost",
    "https://user:pass@hooks.example.com/",
    "https://127.0.0.1/",
    "https://127.1.2.3/",
    "https://10.1.2.3/",
    "https://172.16.0.1/",
    "https://172.31.255.255/",
    "https://192.168.0.1/",
    "https://169.254.169.254/latest/meta-data/",
    "https://169.254.170.2/v2/credentials",
    "https://169.254.1.1/",
    "https://100.64.0.1/",
    "https://100.127.255.254/",
    "https://0.0.0.0/",
    "https://224.0.0.1/",
    "https://239.255.255.250/",
    "https://240.0.0.1/",
    "https://255.255.255.255/",
    "https://192.0.2.1/",
    "https://198.51.100.7/",
    "https://203.0.113.9/",
    "https://198.18.0.1/",
    "https://192.0.0.8/",
    "https://[::1]/",
    "https://[::]/",
    "https://[fc00::1]/",
    "https://[fd12:3456::1]/",
    "https://[fe80::1]/",
    "https://[ff02::1]/",
    "https://[fd00:ec2::254]/",
    "https://[2001:db8::1]/",
    "https://[::ffff:127.0.0.1]/",  # IPv4-mapped
    "https://[::ffff:169.254.169.254]/",
    "https://[::127.0.0.1]/",  # IPv4-compatible
    "https://[::ffff:0:127.0.0.1]/",  # IPv4-translated: a SIIT translator reaches 127.0.0.1
    "https://[::ffff:0:a9fe:a9fe]/",  # ... and the metadata address
    "https://[64:ff9b::10.0.0.1]/",  # NAT64
    "https://[64:ff9b:1::a00:1]/",  # local-use NAT64
    "https://[2002:a00:1::1]/",  # 6to4 of 10.0.0.1
    "https://[2002:7f00:1::]/",  # 6to4 of 127.0.0.1
    "https://[2001:0:4136:e378:8000:63bf:3fff:fdd2]/",  # Teredo
    "https://2130706433/",  # 127.0.0.1 as one integer
    "https://0x7f000001/",  # ... in hex
    "https://017700000001/",  # ... in octal
    "https://0x7f.0.0.1/",
    "https://127.1/",  # the short form
    "https://10.0.1/",
    "https://internal.example.com/hook",
    "https://metadata.example.com/",
    "https://sneaky.example.com/",
    "https://nothing.example.com/",
]

ALLOWED_URLS = [
    "https://hooks.example.com/hook",
    "https://hooks.example.com:8443/hook?x=1",
    "https://HOOKS.example.com./hook",
    "https://v6.example.com/",
    "https://both.example.com/",
    "https://93.184.216.34/",
    "https://8.8.8.8/",
    "https://[2606:4700:4700::1111]/",
    "https://[2001:4860:4860::8888]/",
    "https://[64:ff9b::808:808]/",  # NAT64 of 8.8.8.8
]


@pytest.mark.parametrize("url", REFUSED_URLS)
def test_a_url_that_could_reach_inside_is_refused(url: str) -> None:
    assert not allowed(url)


@pytest.mark.parametrize("url", ALLOWED_URLS)
def test_a_public_https_url_is_allowed(url: str) -> None:
    assert allowed(url)


def test_the_table_covers_at_least_forty_cases() -> None:
    assert len(REFUSED_URLS) + len(ALLOWED_URLS) >= 40


def test_a_refusal_says_why() -> None:
    with pytest.raises(Refused, match="cloud metadata"):
        check_url("https://169.254.169.254/", allow_private=False)
    with pytest.raises(Refused, match="private address"):
        check_addresses("sneaky.example.com", RESOLVER["sneaky.example.com"], allow_private=False)


def test_private_targets_allowed_lift_the_address_rule_and_allow_http() -> None:
    target = check_url("http://127.0.0.1:9000/hook", allow_private=True)
    assert (target.host, target.port) == ("127.0.0.1", 9000)
    assert check_addresses("localhost", ["127.0.0.1"], allow_private=True)
    with pytest.raises(Refused):
        check_url("ftp://127.0.0.1/", allow_private=True)
