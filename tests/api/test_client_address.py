"""Whose bucket a request without a valid key fills (api.client_address): the socket's peer, unless the
peer is a trusted proxy; then X-Forwarded-For read from the right, past the trusted proxies, never the
entries a client wrote itself. And REPRISE_TRUSTED_PROXIES refuses what is not an address or a CIDR."""

from __future__ import annotations

import pytest
from pydantic import ValidationError
from starlette.requests import Request

from api.client_address import UNKNOWN, client_address
from core.settings import Settings

PROXIES = ["10.0.0.0/8", "2001:db8:1::1"]


def _request(peer: str | None, *forwarded: str) -> Request:
    headers = [(b"x-forwarded-for", value.encode()) for value in forwarded]
    scope = {"type": "http", "headers": headers, "client": (peer, 443) if peer is not None else None}
    return Request(scope)


@pytest.mark.parametrize(
    ("peer", "forwarded", "expected"),
    [
        ("198.51.100.7", ("192.0.2.1",), "198.51.100.7"),  # not a proxy: its header is not read
        ("10.1.2.3", (), "10.1.2.3"),  # a proxy that forwarded nothing
        ("10.1.2.3", ("192.0.2.1",), "192.0.2.1"),
        ("10.1.2.3", ("203.0.113.66, 192.0.2.1, 10.9.9.9",), "192.0.2.1"),  # the left entry is the client's
        ("10.1.2.3", ("203.0.113.66", "192.0.2.1"), "192.0.2.1"),  # repeated headers are one list
        ("10.1.2.3", ("10.4.4.4, 10.5.5.5",), "10.4.4.4"),  # every hop a proxy: the farthest
        ("2001:db8:1::1", ("2001:db8:2::7",), "2001:db8:2::7"),
        ("10.1.2.3", ("not-an-address, 192.0.2.1",), "192.0.2.1"),
        ("10.1.2.3", ("192.0.2.1, garbage",), "garbage"),  # a proxy's own garbage: still one bucket
        (None, ("192.0.2.1",), UNKNOWN),
    ],
)
def test_the_client_address(peer: str | None, forwarded: tuple[str, ...], expected: str) -> None:
    assert client_address(_request(peer, *forwarded), PROXIES) == expected


def test_without_trusted_proxies_the_header_is_never_read() -> None:
    assert client_address(_request("10.1.2.3", "192.0.2.1"), []) == "10.1.2.3"


def test_trusted_proxies_are_addresses_or_cidrs() -> None:
    parsed = Settings.model_validate({"trusted_proxies": "10.0.0.0/8, 127.0.0.1,::1"})
    assert parsed.trusted_proxies == ["10.0.0.0/8", "127.0.0.1", "::1"]
    with pytest.raises(ValidationError, match="not an IP address or CIDR"):
        Settings.model_validate({"trusted_proxies": "proxy.internal"})
