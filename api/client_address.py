"""Which address a request comes from, for the buckets of requests without a valid key (api.rate_limit).

The socket's peer, unless it is one of REPRISE_TRUSTED_PROXIES: then X-Forwarded-For is read from its
right end, where the nearest proxy appended the address it saw, past every trusted proxy, to the first
address no trusted proxy vouches for. Entries to the left of it were written by the client itself and
are never believed (MDN, X-Forwarded-For, "Selecting an IP address")."""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence
from functools import lru_cache

from starlette.requests import HTTPConnection

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
UNKNOWN = "unknown"  # no peer (an ASGI server that does not say): one shared bucket


@lru_cache(maxsize=8)
def proxy_networks(proxies: tuple[str, ...]) -> tuple[Network, ...]:
    return tuple(ipaddress.ip_network(proxy, strict=False) for proxy in proxies)


def _trusted(address: str, networks: Sequence[Network]) -> bool:
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return False
    return any(ip in network for network in networks)


def client_address(connection: HTTPConnection, trusted_proxies: Sequence[str]) -> str:
    """The client's address: the peer, or behind trusted proxies, the nearest address they did not add."""
    peer = connection.client.host if connection.client is not None else UNKNOWN
    networks = proxy_networks(tuple(trusted_proxies))
    if not networks or not _trusted(peer, networks):
        return peer
    forwarded = [
        part.strip() for value in connection.headers.getlist("x-forwarded-for") for part in value.split(",")
    ]
    address = peer
    for hop in reversed([part for part in forwarded if part]):
        address = hop
        if not _trusted(hop, networks):
            break
    return address
