"""Which IP addresses a webhook may reach (SSRF): only public unicast ones.

An address is public when Python's `is_global` says so and it lies in none of the blocks of IANA's IPv4
and IPv6 Special-Purpose Address Registries (RFC 6890 and its updates): the registries list blocks that
Python's tables (which differ between Python versions) leave global, such as 192.0.0.0/24, the
AS112 and AMT blocks, 6to4 and the NAT64 prefixes. IPv4 carried inside IPv6 is judged as the IPv4
address the packet ends at: an IPv4-mapped address (::ffff:a.b.c.d) and the NAT64 well-known prefix
(64:ff9b::/96, RFC 6052, which a DNS64 resolver on an IPv6-only network answers for every IPv4 host) are
public when their IPv4 address is. The other embeddings reach no address we could check: IPv4-compatible
(::a.b.c.d, deprecated by RFC 4291), 6to4 (2002::/16, deprecated by RFC 7526), Teredo (2001::/32) and
local-use NAT64 (64:ff9b:1::/48, RFC 8215) are refused whatever they carry. Pure.
"""

from __future__ import annotations

import ipaddress
from typing import Final

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

# IANA IPv4 Special-Purpose Address Registry, every block, with the RFC that assigns it.
SPECIAL_IPV4: Final = tuple(
    ipaddress.IPv4Network(block)
    for block in (
        "0.0.0.0/8",  # "this network", RFC 791
        "10.0.0.0/8",  # private, RFC 1918
        "100.64.0.0/10",  # shared address space (carrier-grade NAT), RFC 6598
        "127.0.0.0/8",  # loopback, RFC 1122
        "169.254.0.0/16",  # link-local (cloud metadata services), RFC 3927
        "172.16.0.0/12",  # private, RFC 1918
        "192.0.0.0/24",  # IETF protocol assignments (192.0.0.8 the IPv4 dummy address), RFC 6890, RFC 7600
        "192.0.2.0/24",  # documentation TEST-NET-1, RFC 5737
        "192.31.196.0/24",  # AS112-v4, RFC 7535
        "192.52.193.0/24",  # AMT, RFC 7450
        "192.88.99.0/24",  # deprecated 6to4 relay anycast, RFC 7526
        "192.168.0.0/16",  # private, RFC 1918
        "192.175.48.0/24",  # direct delegation AS112 service, RFC 7534
        "198.18.0.0/15",  # benchmarking, RFC 2544
        "198.51.100.0/24",  # documentation TEST-NET-2, RFC 5737
        "203.0.113.0/24",  # documentation TEST-NET-3, RFC 5737
        "224.0.0.0/4",  # multicast, RFC 5771
        "240.0.0.0/4",  # reserved, RFC 1112; 255.255.255.255 limited broadcast, RFC 919
    )
)

# IANA IPv6 Special-Purpose Address Registry, every block, with the RFC that assigns it.
SPECIAL_IPV6: Final = tuple(
    ipaddress.IPv6Network(block)
    for block in (
        "::/96",  # IPv4-compatible (deprecated), with :: unspecified and ::1 loopback, RFC 4291
        "::ffff:0:0:0/96",  # IPv4-translated (SIIT), RFC 2765
        "64:ff9b:1::/48",  # local-use IPv4/IPv6 translation, RFC 8215
        "100::/64",  # discard-only, RFC 6666
        "2001::/23",  # IETF protocol assignments: Teredo, benchmarking, ORCHID, RFC 2928
        "2001:db8::/32",  # documentation, RFC 3849
        "2002::/16",  # 6to4, RFC 3056, deprecated by RFC 7526
        "2620:4f:8000::/48",  # direct delegation AS112 service, RFC 7534
        "3fff::/20",  # documentation, RFC 9637
        "5f00::/16",  # segment routing SIDs, RFC 9602
        "fc00::/7",  # unique local, RFC 4193
        "fe80::/10",  # link-local, RFC 4291
        "fec0::/10",  # site-local (deprecated), RFC 3879
        "ff00::/8",  # multicast, RFC 4291
    )
)

NAT64_WELL_KNOWN: Final = ipaddress.IPv6Network("64:ff9b::/96")  # RFC 6052


def embedded_ipv4(address: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 one ends at, for the embeddings that name one: IPv4-mapped and NAT64's
    well-known prefix (the last 32 bits). None for any other address."""
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address in NAT64_WELL_KNOWN:
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return None


def is_public(address: IPAddress) -> bool:
    """Whether a webhook may connect to `address`: a global unicast address in no special-purpose block,
    an embedded IPv4 address judged as itself."""
    if isinstance(address, ipaddress.IPv6Address) and (carried := embedded_ipv4(address)) is not None:
        return is_public(carried)
    if isinstance(address, ipaddress.IPv4Address):
        special = any(address in block for block in SPECIAL_IPV4)
    else:
        special = any(address in block for block in SPECIAL_IPV6)
    return address.is_global and not address.is_multicast and not special
