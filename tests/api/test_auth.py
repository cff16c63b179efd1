"""Bearer API keys: 401 problem with WWW-Authenticate when missing or wrong; the CLI issues keys."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select, update
from typer.testing import CliRunner

from core.settings import Settings, get_settings
from db.engine import session_scope
from db.models import ApiKey, Tenant
from db.tenants import TenantCredentials, hash_key
from jobs.webhooks import secret_key
from reprise.commands.keys import keys_app

pytestmark = pytest.mark.integration


@pytest.mark.parametrize(
    ("headers", "challenge"),
    [
        ({}, 'Bearer realm="reprise"'),
        ({"Authorization": "Basic dXNlcjpwYXNz"}, 'Bearer realm="reprise"'),
        ({"Authorization": "Bearer "}, 'Bearer realm="reprise"'),
        ({"Authorization": "Bearer rp_not-a-real-key"}, 'Bearer realm="reprise", error="invalid_token"'),
    ],
)
@pytest.mark.parametrize(
    ("method", "path"), [("GET", "/v1/generations"), ("POST", "/v1/generations"), ("GET", "/v1/stats")]
)
def test_missing_or_unknown_keys_get_401(
    client: TestClient, headers: dict[str, str], challenge: str, method: str, path: str
) -> None:
    response = client.request(method, path, headers=headers, json={"prompt": "x"})
    assert response.status_code == 401
    assert response.headers["www-authenticate"] == challenge
    assert response.headers["content-type"] == "application/problem+json"
    assert response.json()["type"] == "urn:reprise:problem:unauthorized"


def test_a_revoked_key_gets_401(
    client: TestClient, tenant: TenantCredentials, api_settings: Settings
) -> None:
    assert client.get("/v1/generations", headers=tenant.auth_headers).status_code == 200
    with session_scope(api_settings) as session:
        session.execute(
            update(ApiKey)
            .where(ApiKey.key_hash == hash_key(tenant.api_key))
            .values(revoked_at=ApiKey.created_at)
        )
    assert client.get("/v1/generations", headers=tenant.auth_headers).status_code == 401


@pytest.fixture
def cli_env(api_settings: Settings, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The CLI reads settings from the environment: point it at the test database."""
    monkeypatch.setenv("REPRISE_DATABASE_URL", api_settings.sqlalchemy_url)
    get_settings.cache_clear()
    yield
    get_settings.cache_clear()


@pytest.mark.usefixtures("cli_env")
def test_keys_create_issues_a_working_key_and_stores_only_its_hash(
    client: TestClient, api_settings: Settings
) -> None:
    result = CliRunner().invoke(keys_app, ["create", "--tenant", "acme-cli", "--shared-cache", "--json"])
    assert result.exit_code == 0, result.output
    issued = json.loads(result.stdout)
    assert issued["shared_cache"] is True and len(secret_key(issued["webhook_secret"])) == 32
    auth = {"Authorization": f"Bearer {issued['api_key']}"}
    assert client.get("/v1/generations", headers=auth).status_code == 200

    again = CliRunner().invoke(keys_app, ["create", "--tenant", "acme-cli"])
    assert again.exit_code == 0 and issued["webhook_secret"] in again.stdout  # same tenant, same secret
    with session_scope(api_settings) as session:
        tenant = session.scalars(select(Tenant).where(Tenant.name == "acme-cli")).one()
        hashes = set(session.scalars(select(ApiKey.key_hash).where(ApiKey.tenant_id == tenant.id)))
        assert tenant.shared_cache  # not turned off by a later create without the flag
    assert len(hashes) == 2 and hash_key(issued["api_key"]) in hashes
    assert issued["api_key"] not in hashes
