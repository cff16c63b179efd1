"""Tenant-safe operations: a tenant sees its own figures only, global ones need an admin key;
keys expire, rotate with an overlap and revoke; /metrics can leave the API port."""

from __future__ import annotations

import socket
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import update

from api.metrics_server import start_metrics_server
from core.settings import Settings
from db.engine import session_scope
from db.keys import revoke_key, rotate_key
from db.models import ApiKey
from db.tenants import TenantCredentials, hash_key

pytestmark = pytest.mark.integration


def _stats(client: TestClient, who: TenantCredentials, query: str = "") -> Any:
    return client.get(f"/v1/stats?window_s=600{query}", headers=who.auth_headers)


def test_a_tenant_sees_only_its_own_jobs_and_no_service_figures(
    client: TestClient, make_tenant: Callable[..., TenantCredentials], admin: TenantCredentials
) -> None:
    alice, bob = make_tenant(), make_tenant()
    for who, count in ((alice, 2), (bob, 3)):
        for _ in range(count):
            assert (
                client.post("/v1/generations", json={"prompt": "p"}, headers=who.auth_headers).status_code
                == 202
            )
    mine = _stats(client, alice).json()
    assert mine["scope"] == "tenant"
    assert mine["jobs"] == {"starting": 2}  # bob's three are not counted, nor any other test's
    assert (mine["queues"], mine["pools"], mine["intervals"]) == ({}, {}, [])
    assert mine["pool_monitor"] is None and mine["decodes"] is None
    assert _stats(client, bob).json()["jobs"] == {"starting": 3}

    refused = _stats(client, alice, "&scope=global")
    assert refused.status_code == 403
    assert refused.headers["content-type"] == "application/problem+json"
    assert "admin" in refused.json()["detail"]

    everything = _stats(client, admin).json()
    assert everything["scope"] == "global"
    assert everything["jobs"]["starting"] >= 5 and set(everything["queues"]) >= {"admit", "cache_miss"}
    assert _stats(client, admin, "&scope=tenant").json()["jobs"] == {}  # the admin tenant's own: none


def test_an_expired_key_gets_401_saying_so(
    client: TestClient, tenant: TenantCredentials, api_settings: Settings
) -> None:
    assert client.get("/v1/generations", headers=tenant.auth_headers).status_code == 200
    with session_scope(api_settings) as session:
        session.execute(
            update(ApiKey)
            .where(ApiKey.key_hash == hash_key(tenant.api_key))
            .values(expires_at=datetime.now(UTC) - timedelta(seconds=1))
        )
    response = client.get("/v1/generations", headers=tenant.auth_headers)
    assert response.status_code == 401 and "expired" in response.json()["detail"]


def test_a_rotated_key_overlaps_then_the_old_one_stops(
    client: TestClient, tenant: TenantCredentials, api_settings: Settings
) -> None:
    assert tenant.key_id is not None
    with session_scope(api_settings) as session:
        issued = rotate_key(session, tenant.key_id, overlap=timedelta(hours=1))
    new = {"Authorization": f"Bearer {issued.key}"}
    assert client.get("/v1/generations", headers=new).status_code == 200
    assert client.get("/v1/generations", headers=tenant.auth_headers).status_code == 200  # overlap
    with session_scope(api_settings) as session:  # the overlap is over
        session.execute(update(ApiKey).where(ApiKey.id == tenant.key_id).values(expires_at=datetime.now(UTC)))
    assert client.get("/v1/generations", headers=tenant.auth_headers).status_code == 401
    with session_scope(api_settings) as session:
        assert revoke_key(session, issued.api_key.id)
    assert client.get("/v1/generations", headers=new).status_code == 401


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_metrics_can_have_a_port_of_their_own(
    make_client: Callable[..., TestClient], tenant: TenantCredentials, api_settings: Settings
) -> None:
    port = _free_port()
    client = make_client(metrics_port=port)
    assert client.get("/metrics").status_code == 404  # not on the API's port
    client.get("/v1/generations", headers=tenant.auth_headers)
    server = start_metrics_server(api_settings, port=port, address="127.0.0.1")
    try:
        scraped = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5)
        assert scraped.status_code == 200
        assert (
            'reprise_http_requests_total{method="GET",route="/v1/generations",status="200"}' in scraped.text
        )
        assert "reprise_pool_workers" in scraped.text
        assert httpx.get(f"http://127.0.0.1:{port}/v1/generations", timeout=5).status_code == 404
    finally:
        server.shutdown()
    assert make_client().get("/metrics").status_code == 200  # unset: on the API port as before


def test_unknown_key_ids_are_a_clear_error(api_settings: Settings) -> None:
    from core.errors import UnknownKey

    with session_scope(api_settings) as session, pytest.raises(UnknownKey, match="reprise keys list"):
        revoke_key(session, uuid.uuid4())


def test_a_cached_key_is_trusted_only_for_its_ttl(
    make_client: Callable[..., TestClient], tenant: TenantCredentials, api_settings: Settings
) -> None:
    client = make_client(auth_cache_s=0.5)
    assert client.get("/v1/generations", headers=tenant.auth_headers).status_code == 200
    assert tenant.key_id is not None
    with session_scope(api_settings) as session:
        revoke_key(session, tenant.key_id)
    assert client.get("/v1/generations", headers=tenant.auth_headers).status_code == 200  # still cached
    time.sleep(0.6)
    assert client.get("/v1/generations", headers=tenant.auth_headers).status_code == 401
