"""Tenant-safe operations: admin keys, key expiry, webhook secret rotation with overlap.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-23
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("api_keys", sa.Column("is_admin", sa.Boolean, nullable=False, server_default=sa.false()))
    op.add_column("api_keys", sa.Column("expires_at", sa.DateTime(timezone=True), nullable=True))
    # The secret a rotation replaced, still signed with until previous_webhook_secret_until.
    op.add_column("tenants", sa.Column("previous_webhook_secret", sa.Text, nullable=True))
    op.add_column(
        "tenants", sa.Column("previous_webhook_secret_until", sa.DateTime(timezone=True), nullable=True)
    )


def downgrade() -> None:
    op.drop_column("tenants", "previous_webhook_secret_until")
    op.drop_column("tenants", "previous_webhook_secret")
    op.drop_column("api_keys", "expires_at")
    op.drop_column("api_keys", "is_admin")
