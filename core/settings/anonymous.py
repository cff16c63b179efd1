"""Anonymous requests: those without a valid key (signed output downloads, failed authentications,
/metrics on the API port). Each client address has a token bucket of its own (api.rate_limit), the same
mechanism as a tenant's, so that a client that holds no key cannot spend the database's time without
bound; and the proxies trusted to say, in X-Forwarded-For, which address a request comes from."""

from __future__ import annotations

import ipaddress
from typing import Annotated, Any

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, NoDecode


class AnonymousSettings(BaseSettings):
    """Anonymous requests: the limit per client address on requests that carry no valid key.

    Counted: each signed output download (`/v1/outputs/...`), each 401 answer (a missing, unknown,
    expired or revoked key: an address out of tokens is refused before its key is looked up), and each
    /metrics on the API port without REPRISE_METRICS_TOKEN. A valid key's requests count against its
    tenant instead; /healthz and /readyz are never limited (orchestrators probe them).
    """

    anonymous_rate_limit_per_s: float = Field(
        20.0,
        ge=0,
        description="Requests without a valid key that one client address may make per second, over all "
        "API processes (a token bucket in Redis); past it: 429 `rate-limited` with Retry-After. A webhook "
        "receiver fetches each output's signed link once, so it asks at the rate outputs complete: one GPU "
        "completes 1 to 17 lab images a second (docs/results/gpu.md) and fewer of a real model, so 20 keeps "
        "up with a GPU's worth; a key-guessing address costs Postgres at most 20 lookups a second. 0: no "
        "limit.",
    )
    anonymous_rate_limit_burst: int = Field(
        200,
        ge=1,
        description="Requests without a valid key one address may make at once above "
        "REPRISE_ANONYMOUS_RATE_LIMIT_PER_S: the bucket's size (10 s of the default rate: a browser "
        "opening a page of signed thumbnails, or a receiver catching up after 10 s away, is not refused).",
    )
    trusted_proxies: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="IPs or CIDRs of the reverse proxies in front of the API (e.g. 10.0.0.0/8): a request "
        "from one of them is counted against the last address in X-Forwarded-For that is not a trusted "
        "proxy. Default: none, X-Forwarded-For is ignored and the peer is the client (a header anyone can "
        "write must not choose whose bucket pays; `reprise api`'s uvicorn itself takes a loopback peer's "
        "X-Forwarded-For, its FORWARDED_ALLOW_IPS). Comma list.",
    )

    @field_validator("trusted_proxies", mode="before")
    @classmethod
    def _parse_trusted_proxies(cls, value: Any) -> Any:
        if isinstance(value, str):
            return [part.strip() for part in value.split(",") if part.strip()]
        return value

    @field_validator("trusted_proxies")
    @classmethod
    def _check_trusted_proxies(cls, value: list[str]) -> list[str]:
        for part in value:
            try:
                ipaddress.ip_network(part, strict=False)
            except ValueError:
                raise ValueError(
                    f"{part!r} is not an IP address or CIDR, e.g. 10.0.0.0/8,127.0.0.1"
                ) from None
        return value
