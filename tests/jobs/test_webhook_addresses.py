"""Webhook SSRF: IPv4 embedded in IPv6 and every IANA special-purpose block is refused, whether the URL
names the address or a host name resolves to it; public addresses, embedded ones included, pass."""

from __future__ import annotations

import ipaddress

import pytest

from core.errors import InvalidInput
from jobs.webhook_addresses import SPECIAL_IPV4, SPECIAL_IPV6, is_public
from jobs.webhooks import check_webhook_url

# The forms that passed the filter before (as Python's is_global read them), and what each one reaches.
EMBEDDED_AND_SPECIAL = [
    "64:ff9b::7f00:1",  # NAT64 well-known prefix carrying 127.0.0.1
    "64:ff9b::a00:1",  # NAT64 carrying 10.0.0.1
    "64:ff9b:1::7f00:1",  # local-use NAT64
    "2002:7f00:1::",  # 6to4 of 127.0.0.1
    "2002:808:808::1",  # 6to4, even of a public address: deprecated, its relay unknown
    "::7f00:1",  # IPv4-compatible 127.0.0.1
    "::808:808",  # IPv4-compatible, even of a public address
    "::ffff:7f00:1",  # IPv4-mapped 127.0.0.1
    "::ffff:0:a9fe:a9fe",  # IPv4-translated 169.254.169.254
    "2001:0:4136:e378:8000:63bf:3fff:fdd2",  # Teredo
    "192.0.0.8",  # IPv4 dummy address
    "192.0.0.9",  # 192.0.0.0/24, IETF protocol assignments
    "100.64.0.1",  # shared address space
    "198.18.0.1",  # benchmarking
    "198.19.255.255",
    "240.0.0.1",  # reserved
    "255.255.255.255",
    "224.0.0.1",  # multicast
    "ff02::1",
    "192.0.2.1",  # documentation
    "198.51.100.7",
    "203.0.113.7",
    "2001:db8::1",
    "3fff::1",
    "192.88.99.1",  # 6to4 relay anycast
    "192.31.196.1",  # AS112
    "192.52.193.1",  # AMT
    "192.175.48.1",
    "2620:4f:8000::1",
    "5f00::1",
    "100::1",
    "fec0::1",
]
PUBLIC = ["93.184.216.34", "8.8.8.8", "2606:4700:4700::1111", "64:ff9b::808:808", "::ffff:808:808"]


def literal_url(address: str) -> str:
    return f"http://[{address}]/hook" if ":" in address else f"http://{address}/hook"


def nowhere(host: str, port: int) -> list[str]:
    raise AssertionError("a literal address is not resolved")


@pytest.mark.parametrize("address", EMBEDDED_AND_SPECIAL)
def test_each_embedded_and_special_purpose_literal_is_refused(address: str) -> None:
    assert not is_public(ipaddress.ip_address(address))
    with pytest.raises(InvalidInput, match="no public unicast address") as refused:
        check_webhook_url(literal_url(address), allow_hosts=[], resolve=nowhere)
    assert refused.value.field == "webhook"


@pytest.mark.parametrize("address", EMBEDDED_AND_SPECIAL)
def test_a_name_resolving_to_one_is_refused(address: str) -> None:
    def answers(host: str, port: int) -> list[str]:
        return ["93.184.216.34", address]  # one such address among public ones is enough

    with pytest.raises(InvalidInput, match="no public unicast address"):
        check_webhook_url("https://hooks.example.com/x", allow_hosts=[], resolve=answers)


@pytest.mark.parametrize("address", PUBLIC)
def test_public_addresses_pass_embedded_ones_too(address: str) -> None:
    assert check_webhook_url(literal_url(address), allow_hosts=[], resolve=nowhere).addresses == (
        str(ipaddress.ip_address(address)),
    )


def test_every_special_purpose_block_is_refused_at_both_ends() -> None:
    blocks: list[ipaddress.IPv4Network | ipaddress.IPv6Network] = [*SPECIAL_IPV4, *SPECIAL_IPV6]
    for block in blocks:
        for address in (block.network_address, block.broadcast_address):
            assert not is_public(address), address


def test_the_allow_list_still_admits_an_embedded_form_it_names() -> None:
    target = check_webhook_url(
        "http://[64:ff9b::7f00:1]:9000/", allow_hosts=["64:ff9b::/96"], resolve=nowhere
    )
    assert target.addresses == ("64:ff9b::7f00:1",)
