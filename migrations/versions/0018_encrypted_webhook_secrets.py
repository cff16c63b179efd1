"""Tenants' webhook secrets encrypted at rest (db.secret_box): every secret stored in clear before is
encrypted with the first of the server's keys (REPRISE_WEBHOOK_SECRET_KEYS, or the data directory's key);
the downgrade writes them back in clear. The column stays text; the ORM's column type encrypts and
decrypts from here on.

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-02
"""

from __future__ import annotations

from alembic import context, op
from sqlalchemy import text

from db.secret_box import opened, reencrypt_tenants

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None


def _keys() -> list[bytes]:
    """The keys `reprise migrate` passes (reprise.migrate.alembic_config), else this process's settings'."""
    keys = context.config.attributes.get("webhook_secret_keys")
    if keys is not None:
        return list(keys)
    from core.server_keys import webhook_secret_keys
    from core.settings import get_settings

    return webhook_secret_keys(get_settings())


def upgrade() -> None:
    reencrypt_tenants(op.get_bind(), _keys())


def downgrade() -> None:
    connection, keys = op.get_bind(), _keys()
    rows = connection.execute(text("SELECT id, webhook_secret, previous_webhook_secret FROM tenants")).all()
    for tenant_id, current, previous in rows:
        connection.execute(
            text(
                "UPDATE tenants SET webhook_secret = :current, previous_webhook_secret = :previous "
                "WHERE id = :id"
            ),
            {
                "id": tenant_id,
                "current": opened(current, keys),
                "previous": None if previous is None else opened(previous, keys),
            },
        )
