"""Webhook secrets at rest: what the tenants table holds is ciphertext under the server's keys (a SELECT,
as a dump reads it, shows no secret), the code that signs still gets the secret, keys rotate (the new key
first, re-encrypt, drop the old), and migration 0017 encrypts the rows it finds in clear."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import timedelta

import pytest
from sqlalchemy import text
from typer.testing import CliRunner

from core.errors import SettingsError
from core.server_keys import fernet_key
from core.settings import Settings, get_settings
from db import secret_box
from db.engine import engine_for, session_scope
from db.keys import rotate_webhook_secret
from db.secret_box import opened, resealed, seal, use_keys
from db.tenants import create_tenant
from db.webhooks import signing_secrets
from jobs.webhooks import signature_headers, verify
from reprise.cli import app
from tests.conftest import fresh_database

OLD_TEXT, NEW_TEXT = "an-old-key-of-32-characters-or-more", "a-new-key-of-32-characters-or-more"
OLD, NEW = fernet_key(OLD_TEXT.encode()), fernet_key(NEW_TEXT.encode())
SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"


@pytest.fixture
def process_keys() -> Iterator[None]:
    """This process's keys for the test (the old one), those it had again afterwards."""
    before = secret_box.process_keys()
    use_keys([OLD])
    yield
    use_keys(before)


def test_a_sealed_secret_opens_with_any_of_the_keys_and_no_other() -> None:
    stored = seal(SECRET, [OLD])
    assert (
        stored.startswith("fernet:") and SECRET not in stored and SECRET.removeprefix("whsec_") not in stored
    )
    assert seal(SECRET, [OLD]) != stored  # a fresh IV each time: equal secrets do not show as equal
    assert opened(stored, [NEW, OLD]) == SECRET
    with pytest.raises(SettingsError, match="REPRISE_WEBHOOK_SECRET_KEYS"):
        opened(stored, [NEW])
    assert opened(SECRET, [NEW]) == SECRET  # a value from before encryption reads as it is


def test_rotation_reseals_under_the_first_key() -> None:
    rotated = resealed(seal(SECRET, [OLD]), [NEW, OLD])
    assert opened(rotated, [NEW]) == SECRET  # the old key can go
    assert opened(resealed(SECRET, [NEW]), [NEW]) == SECRET  # a clear value is sealed


def _stored(settings: Settings, tenant_id: uuid.UUID) -> tuple[str, str | None]:
    with engine_for(settings.sqlalchemy_url).connect() as connection:
        row = connection.execute(
            text("SELECT webhook_secret, previous_webhook_secret FROM tenants WHERE id = :id"),
            {"id": tenant_id},
        ).one()
    return row[0], row[1]


@pytest.mark.integration
def test_the_table_holds_no_secret_and_deliveries_still_verify(db_settings: Settings) -> None:
    """Under this process's own keys (the settings'), as every other test of the session reads them."""
    with session_scope(db_settings) as session:
        tenant = create_tenant(session=session, name=f"sealed-{uuid.uuid4().hex[:8]}")
        tenant_id, first = tenant.id, tenant.webhook_secret
        rotated = rotate_webhook_secret(session, tenant=tenant.name, overlap=timedelta(hours=1))
    current, previous = _stored(db_settings, tenant_id)
    assert previous is not None
    for secret in (first, rotated.secret):
        assert secret.startswith("whsec_")
        for column in (current, previous):
            assert secret not in column and secret.removeprefix("whsec_") not in column
    assert current.startswith("fernet:") and previous.startswith("fernet:")
    with session_scope(db_settings) as session:
        secrets = signing_secrets(session, tenant_id)
    assert secrets == [rotated.secret, first]
    body = b'{"type":"generation.completed"}'
    headers = signature_headers(secrets, msg_id="msg_1", timestamp=1_700_000_000, body=body)
    for secret in (rotated.secret, first):  # a receiver holding either secret verifies
        verify(secret, headers, body, now=1_700_000_000)


@pytest.mark.integration
def test_a_key_rotation_reencrypts_every_row(
    service_settings: Settings, process_keys: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a database of its own: every tenant of it is re-encrypted, under keys no other test uses."""
    with fresh_database(service_settings) as db_settings:
        _rotate_keys(db_settings, monkeypatch)


def test_a_secret_under_a_key_left_out_is_refused_with_the_fix() -> None:
    with pytest.raises(SettingsError, match="REPRISE_WEBHOOK_SECRET_KEYS"):
        resealed(seal(SECRET, [OLD]), [NEW])  # the old key dropped before `reprise keys reencrypt`


def _rotate_keys(db_settings: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    with session_scope(db_settings) as session:
        tenant = create_tenant(session=session, name=f"rotated-{uuid.uuid4().hex[:8]}")
        tenant_id, secret = tenant.id, tenant.webhook_secret
    # Step 1: the new key first, the old one after it; step 2: `reprise keys reencrypt`.
    monkeypatch.setenv("REPRISE_DATABASE_URL", db_settings.sqlalchemy_url)
    monkeypatch.setenv("REPRISE_WEBHOOK_SECRET_KEYS", f"{NEW_TEXT},{OLD_TEXT}")
    get_settings.cache_clear()
    try:
        done = CliRunner().invoke(app, ["keys", "reencrypt"])
    finally:
        get_settings.cache_clear()
    assert done.exit_code == 0 and "with the first of 2 keys" in done.output, done.output
    use_keys([NEW])  # step 3: the old key removed
    with session_scope(db_settings) as session:
        assert signing_secrets(session, tenant_id) == [secret]
    assert opened(_stored(db_settings, tenant_id)[0], [NEW]) == secret
