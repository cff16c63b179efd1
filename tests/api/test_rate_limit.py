"""The per-tenant request rate limit (api.rate_limit) against the real Redis: a token bucket per tenant,
shared by its keys and by every API process, 429 problem+json with Retry-After past it, refilled at the
configured rate; admin keys exempt; off at 0; an unreachable Redis limits nobody. Which routes it
guards: tests/api/test_authorization_matrix.py (its `throttled` column)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import pytest
import redis
from fastapi.testclient import TestClient

from api.rate_limit import KEY_PREFIX, RateLimiter, Verdict
from core.settings import Settings
from db.engine import session_scope
from db.tenants import TenantCredentials, issue_key

pytestmark = pytest.mark.integration


def _statuses(client: TestClient, who: TenantCredentials, count: int) -> list[int]:
    return [client.get("/v1/generations", headers=who.auth_headers).status_code for _ in range(count)]


def test_past_the_burst_a_tenant_gets_429_with_retry_after_until_a_token_is_back(
    make_client: Callable[..., TestClient], make_tenant: Callable[..., TenantCredentials]
) -> None:
    # At half a token a second the test's own requests, slow on a loaded machine, cannot refill a token
    # between the refusals it expects (two seconds each).
    client = make_client(rate_limit_per_s=0.5, rate_limit_burst=3)
    alice, bob = make_tenant(), make_tenant()
    assert _statuses(client, alice, 3) == [200, 200, 200]
    refused = client.get("/v1/generations", headers=alice.auth_headers)
    assert refused.status_code == 429
    assert refused.headers["content-type"] == "application/problem+json"
    assert refused.headers["retry-after"] in ("1", "2")  # two seconds a token, less what refilled, rounded up
    problem = refused.json()
    assert problem["type"] == "urn:reprise:problem:rate-limited"
    assert "0.5 requests per second" in problem["detail"] and "bursts of 3" in problem["detail"]
    assert _statuses(client, bob, 3) == [200, 200, 200]  # bob's bucket is his own
    time.sleep(2.1)  # one token back at 0.5/s
    assert _statuses(client, alice, 2) == [200, 429]


def test_a_create_is_counted_before_its_body_is_checked(
    make_client: Callable[..., TestClient], tenant: TenantCredentials
) -> None:
    client = make_client(rate_limit_per_s=0.001, rate_limit_burst=1)
    assert client.post("/v1/generations", json={"prompt": ""}, headers=tenant.auth_headers).status_code == 422
    refused = client.post("/v1/generations", json={"prompt": "a fox"}, headers=tenant.auth_headers)
    assert refused.status_code == 429 and int(refused.headers["retry-after"]) >= 999


def test_a_tenants_keys_and_api_processes_share_one_bucket(
    make_client: Callable[..., TestClient], tenant: TenantCredentials, api_settings: Settings
) -> None:
    first, second = (make_client(rate_limit_per_s=0.01, rate_limit_burst=4) for _ in range(2))
    with session_scope(api_settings) as session:
        again = issue_key(session=session, name=tenant.name)  # a second key of the same tenant
    assert _statuses(first, tenant, 2) == [200, 200]
    assert _statuses(second, again, 2) == [200, 200]
    assert first.get("/v1/generations", headers=again.auth_headers).status_code == 429
    assert second.get("/v1/generations", headers=tenant.auth_headers).status_code == 429


def test_admin_keys_are_not_limited_and_zero_turns_the_limit_off(
    make_client: Callable[..., TestClient],
    admin: TenantCredentials,
    tenant: TenantCredentials,
    broker: redis.Redis,
) -> None:
    limited = make_client(rate_limit_per_s=0.001, rate_limit_burst=1)
    assert _statuses(limited, admin, 5) == [200] * 5
    unlimited = make_client(rate_limit_per_s=0.0, rate_limit_burst=1)
    assert _statuses(unlimited, tenant, 5) == [200] * 5
    assert broker.exists(f"{KEY_PREFIX}{tenant.tenant_id}", f"{KEY_PREFIX}{admin.tenant_id}") == 0


def test_the_bucket_is_atomic_under_concurrent_takes(redis_url: str) -> None:
    client = redis.Redis.from_url(redis_url)
    limiter = RateLimiter(client, per_s=0.001, burst=20)
    tenant_id = uuid.uuid4()
    with ThreadPoolExecutor(max_workers=8) as pool:
        verdicts = list(pool.map(lambda _: limiter.take(tenant_id), range(60)))
    assert sum(v.allowed for v in verdicts) == 20
    refused = [v for v in verdicts if not v.allowed]
    assert all(v.retry_after >= 999 for v in refused)  # a token every 1000 s
    ttl_ms = client.pttl(f"{KEY_PREFIX}{tenant_id}")
    assert 0 < ttl_ms <= 20_000_000 + 1000  # the bucket lapses once it would be full again
    client.close()


def test_an_unreachable_redis_limits_nobody_and_is_not_asked_again_at_once() -> None:
    down = redis.Redis(host="127.0.0.1", port=1, socket_connect_timeout=0.2, socket_timeout=0.2)
    limiter = RateLimiter(down, per_s=0.001, burst=1)
    assert limiter.take(uuid.uuid4()) == Verdict(True)  # after redis-py's own retries
    started = time.monotonic()
    assert [limiter.take(uuid.uuid4()) for _ in range(20)] == [Verdict(True)] * 20
    assert time.monotonic() - started < 0.1  # not asked again for FAIL_OPEN_S


def test_the_default_lets_the_benchmarks_through() -> None:
    # `reprise bench streams` opens 200 event streams and 24 jobs at once with a tenant key; the chaos
    # load (500 submissions, 32 clients) and the live replays use admin keys, which are not limited.
    defaults = Settings.model_validate({})
    assert defaults.rate_limit_burst >= 200 + 24 and defaults.rate_limit_per_s >= 50
