"""The limit per client address on requests without a valid key (api.rate_limit's address buckets,
api.auth.counted_caller) against the real Redis and Postgres: signed output downloads and repeated bad
keys past an address's burst get 429 with Retry-After, a bad key's lookup is not even made then, another
address is not affected, a valid key's requests take nothing from the bucket, health probes are never
limited; and /metrics on the API port behind REPRISE_METRICS_TOKEN."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import redis
from fastapi.testclient import TestClient
from pydantic import SecretStr
from sqlalchemy import Engine, event

from api.rate_limit import KEY_PREFIX, RateLimiter, address_bucket
from core.server_keys import output_link_key
from core.settings import Settings
from db.blobs.local import LocalBlobStore
from db.engine import engine_for
from db.tenants import TenantCredentials
from jobs.output_links import link_signature

pytestmark = pytest.mark.integration

A, B = "198.51.100.7", "198.51.100.8"  # documentation addresses (RFC 5737)
BAD_KEY = {"Authorization": "Bearer rp_not-a-key-anyone-was-given"}
PROBLEM = "application/problem+json"
Client = Callable[..., TestClient]


@pytest.fixture
def at(broker: redis.Redis) -> Iterator[Callable[[TestClient, str], TestClient]]:
    """A client of the same app whose requests come from `address`, its bucket emptied of earlier runs."""
    clients: list[TestClient] = []

    def build(client: TestClient, address: str) -> TestClient:
        broker.delete(f"{KEY_PREFIX}{address_bucket(address)}")
        clients.append(TestClient(client.app, client=(address, 50000), raise_server_exceptions=False))
        return clients[-1]

    yield build
    for client in clients:
        client.close()


def _link(
    client: TestClient, who: TenantCredentials, blobs: LocalBlobStore, set_job: Callable[..., None]
) -> str:
    """A signed link to a succeeded image job of `who` (a completed webhook's signed_output)."""
    created = client.post("/v1/generations", json={"prompt": "a fox"}, headers=who.auth_headers)
    assert created.status_code == 202, created.text
    job = created.json()["id"]
    blobs.put(f"jobs/{job}/image.png", b"\x89PNG\r\n\x1a\naddress")
    set_job(job, status="succeeded", image_keys={"png": f"jobs/{job}/image.png"})
    settings: Settings = client.app.state.reprise.settings  # type: ignore[attr-defined]
    expires = int((datetime.now(UTC) + timedelta(hours=1)).timestamp())
    signature = link_signature(output_link_key(settings), uuid.UUID(job), expires)
    return f"/v1/outputs/{job}?expires={expires}&signature={signature}"


def _with_statements(engine: Engine, call: Callable[[], Any]) -> tuple[Any, list[str]]:
    """What `call` answers, and the SQL statements the API sent Postgres meanwhile."""
    statements: list[str] = []

    def record(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        statements.append(statement)

    event.listen(engine, "before_cursor_execute", record)
    try:
        return call(), statements
    finally:
        event.remove(engine, "before_cursor_execute", record)


def _assert_rate_limited(response: Any, *, retry_after: set[str] | None = None) -> None:
    assert response.status_code == 429, response.text
    assert response.headers["content-type"] == PROBLEM
    assert response.json()["type"] == "urn:reprise:problem:rate-limited"
    assert "from this address without a valid key" in response.json()["detail"]
    if retry_after is not None:
        assert response.headers["retry-after"] in retry_after
    assert int(response.headers["retry-after"]) >= 1


def test_signed_downloads_past_an_addresss_burst_get_429_and_another_address_does_not(
    make_client: Client,
    at: Callable[[TestClient, str], TestClient],
    tenant: TenantCredentials,
    blob_store: LocalBlobStore,
    set_job: Callable[..., None],
) -> None:
    # Half a token a second: the test's own requests cannot refill one between those it expects refused.
    client = make_client(anonymous_rate_limit_per_s=0.5, anonymous_rate_limit_burst=3)
    link = _link(client, tenant, blob_store, set_job)
    first, second = at(client, A), at(client, B)
    assert [first.get(link).status_code for _ in range(3)] == [200, 200, 200]
    _assert_rate_limited(first.get(link), retry_after={"1", "2"})
    assert second.get(link).status_code == 200  # B's bucket is its own
    assert first.get("/healthz").status_code == 200 and first.get("/readyz").status_code == 200


def test_bad_keys_are_counted_and_past_the_burst_not_looked_up(
    make_client: Client, at: Callable[[TestClient, str], TestClient]
) -> None:
    client = make_client(anonymous_rate_limit_per_s=0.001, anonymous_rate_limit_burst=3)
    guesser, bystander = at(client, A), at(client, B)
    answers = [guesser.get("/v1/generations", headers=BAD_KEY) for _ in range(2)]
    answers.append(guesser.get("/v1/generations"))  # no key at all: a 401 as well
    assert [answer.status_code for answer in answers] == [401, 401, 401]
    engine = engine_for(client.app.state.reprise.settings.sqlalchemy_url)  # type: ignore[attr-defined]
    refused, asked = _with_statements(engine, lambda: guesser.get("/v1/generations", headers=BAD_KEY))
    _assert_rate_limited(refused)
    assert int(refused.headers["retry-after"]) >= 999  # a token every 1000 s
    assert asked == []  # refused before the key's lookup
    elsewhere, looked_up = _with_statements(engine, lambda: bystander.get("/v1/generations", headers=BAD_KEY))
    assert elsewhere.status_code == 401 and looked_up  # another address: its key looked up, and unknown


def test_a_valid_keys_requests_take_nothing_from_its_addresss_bucket(
    make_client: Client, at: Callable[[TestClient, str], TestClient], tenant: TenantCredentials
) -> None:
    client = make_client(anonymous_rate_limit_per_s=0.001, anonymous_rate_limit_burst=2)
    shared = at(client, A)  # a tenant's backend and a key guesser behind one address
    assert [shared.get("/v1/generations", headers=tenant.auth_headers).status_code for _ in range(5)] == [
        200
    ] * 5
    assert [shared.get("/v1/generations", headers=BAD_KEY).status_code for _ in range(3)] == [401, 401, 429]


def test_a_cached_key_passes_an_empty_address_bucket_an_uncached_one_waits(
    make_client: Client, at: Callable[[TestClient, str], TestClient], tenant: TenantCredentials
) -> None:
    cached = at(
        make_client(auth_cache_s=60.0, anonymous_rate_limit_per_s=0.001, anonymous_rate_limit_burst=1), A
    )
    assert cached.get("/v1/generations", headers=tenant.auth_headers).status_code == 200  # now cached
    assert cached.get("/v1/generations", headers=BAD_KEY).status_code == 401  # the one token
    assert cached.get("/v1/generations", headers=tenant.auth_headers).status_code == 200
    uncached = at(make_client(anonymous_rate_limit_per_s=0.001, anonymous_rate_limit_burst=1), B)
    assert uncached.get("/v1/generations", headers=BAD_KEY).status_code == 401
    # Its key would be looked up, and the address has nothing left to pay for a failed lookup with.
    _assert_rate_limited(uncached.get("/v1/generations", headers=tenant.auth_headers))


def test_metrics_with_a_token_answer_only_its_bearer(
    make_client: Client, at: Callable[[TestClient, str], TestClient]
) -> None:
    token = "metrics-token-of-the-scraper-0123456789"
    client = make_client(
        metrics_token=SecretStr(token), anonymous_rate_limit_per_s=0.001, anonymous_rate_limit_burst=2
    )
    scraper = at(client, A)
    missing = scraper.get("/metrics")
    assert missing.status_code == 401 and missing.headers["content-type"] == PROBLEM
    assert missing.headers["www-authenticate"] == 'Bearer realm="reprise"'
    wrong = scraper.get("/metrics", headers={"Authorization": "Bearer not-the-token"})
    assert wrong.status_code == 401 and 'error="invalid_token"' in wrong.headers["www-authenticate"]
    for _ in range(3):  # past the burst: a scrape with the token is not counted
        scraped = scraper.get("/metrics", headers={"Authorization": f"Bearer {token}"})
        assert scraped.status_code == 200 and "reprise_http_requests_total" in scraped.text
    _assert_rate_limited(scraper.get("/metrics"))  # the two failures spent the address's burst
    own_port = make_client(metrics_token=SecretStr(token), metrics_port=9999)
    assert own_port.get("/metrics", headers={"Authorization": f"Bearer {token}"}).status_code == 404


def test_metrics_without_a_token_are_public_and_counted(
    make_client: Client, at: Callable[[TestClient, str], TestClient]
) -> None:
    scraper = at(make_client(anonymous_rate_limit_per_s=0.001, anonymous_rate_limit_burst=2), A)
    assert [scraper.get("/metrics").status_code for _ in range(2)] == [200, 200]
    _assert_rate_limited(scraper.get("/metrics"))


def test_behind_a_trusted_proxy_the_forwarded_address_pays(
    make_client: Client, at: Callable[[TestClient, str], TestClient], broker: redis.Redis
) -> None:
    client = make_client(
        trusted_proxies=["203.0.113.0/24"], anonymous_rate_limit_per_s=0.001, anonymous_rate_limit_burst=1
    )
    proxy = at(client, "203.0.113.5")
    broker.delete(*(f"{KEY_PREFIX}{address_bucket(address)}" for address in (A, B)))  # earlier runs'
    forwarded = {**BAD_KEY, "X-Forwarded-For": f"{A}, 203.0.113.9"}
    assert proxy.get("/v1/generations", headers=forwarded).status_code == 401
    _assert_rate_limited(proxy.get("/v1/generations", headers=forwarded))
    assert proxy.get("/v1/generations", headers={**BAD_KEY, "X-Forwarded-For": B}).status_code == 401
    assert broker.exists(f"{KEY_PREFIX}{address_bucket('203.0.113.5')}") == 0  # the proxy pays nothing
    direct = at(make_client(anonymous_rate_limit_per_s=0.001, anonymous_rate_limit_burst=1), "192.0.2.1")
    spoofed = {**BAD_KEY, "X-Forwarded-For": "192.0.2.200"}  # no trusted proxy: the header is not read
    assert [direct.get("/v1/generations", headers=spoofed).status_code for _ in range(2)] == [401, 429]


def test_a_peek_takes_no_token(redis_url: str) -> None:
    client = redis.Redis.from_url(redis_url)
    limiter = RateLimiter(client, per_s=0.001, burst=1)
    bucket = address_bucket(f"peek-{uuid.uuid4()}")
    assert [limiter.peek(bucket).allowed for _ in range(3)] == [True] * 3
    assert limiter.take(bucket).allowed
    refused = limiter.peek(bucket)
    assert not refused.allowed and refused.retry_after >= 999
    client.close()
