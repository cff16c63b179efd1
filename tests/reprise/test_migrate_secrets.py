"""The encrypted_webhook_secrets migration: the secrets it finds in clear come out encrypted under the
server's keys (a SELECT shows none of them) and still sign; its downgrade writes them back in clear."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import psycopg
import pytest
from sqlalchemy import text

from core.settings import Settings
from db.engine import engine_for, session_scope
from db.webhooks import signing_secrets
from reprise import migrate

SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
BEFORE = "0017"  # the revision before the migration


def _stored(settings: Settings, tenant_id: uuid.UUID) -> tuple[str, str | None]:
    with engine_for(settings.sqlalchemy_url).connect() as connection:
        row = connection.execute(
            text("SELECT webhook_secret, previous_webhook_secret FROM tenants WHERE id = :id"),
            {"id": tenant_id},
        ).one()
    return row[0], row[1]


@pytest.fixture
def scratch_settings(service_settings: Settings) -> Iterator[Settings]:
    name = f"reprise_seal_{os.getpid()}_{uuid.uuid4().hex[:6]}"
    admin = service_settings.sqlalchemy_url.replace("postgresql+psycopg://", "postgresql://", 1)
    admin = admin.rpartition("/")[0] + "/postgres"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    url = admin.rpartition("/")[0].replace("postgresql://", "postgresql+psycopg://", 1) + f"/{name}"
    yield service_settings.model_copy(update={"database_url": url, "text_embedding_dim": 16})
    engine_for(url).dispose()
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.mark.integration
def test_the_migration_encrypts_the_secrets_it_finds_in_clear(scratch_settings: Settings) -> None:
    migrate.upgrade(scratch_settings, BEFORE)
    tenant_id = uuid.uuid4()
    with engine_for(scratch_settings.sqlalchemy_url).begin() as connection:
        connection.execute(
            text(
                "INSERT INTO tenants (id, name, webhook_secret, previous_webhook_secret, shared_cache, "
                "inflight_limit) VALUES (:id, 'old', :secret, :previous, false, 64)"
            ),
            {"id": tenant_id, "secret": SECRET, "previous": "whsec_b2xkLXNlY3JldA=="},
        )
    migrate.upgrade(scratch_settings)
    current, previous = _stored(scratch_settings, tenant_id)
    assert SECRET not in current and previous is not None and "b2xkLXNlY3JldA" not in previous
    with session_scope(scratch_settings) as session:
        assert signing_secrets(session, tenant_id) == [SECRET]  # the previous one's overlap is unset
    migrate.downgrade(scratch_settings, BEFORE)
    assert _stored(scratch_settings, tenant_id) == (SECRET, "whsec_b2xkLXNlY3JldA==")
