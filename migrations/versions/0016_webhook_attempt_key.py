"""One row per webhook attempt, claimed before the request is sent: (message_id, attempt) unique.

A delivery worker inserts its attempt's row before it POSTs (workers.webhook_delivery), and the insert
of an attempt that another consumer claimed first finds the unique index and sends nothing: a second
send of one attempt is impossible. Rows that repeated a (message_id, attempt) before the index keep
their first (the lowest id).

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-02
"""

from __future__ import annotations

from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        "DELETE FROM webhook_deliveries AS later USING webhook_deliveries AS first "
        "WHERE later.message_id = first.message_id AND later.attempt = first.attempt "
        "AND later.id > first.id"
    )
    op.drop_index("ix_webhook_deliveries_message_attempt", table_name="webhook_deliveries")
    op.create_index(
        "ix_webhook_deliveries_message_attempt",
        "webhook_deliveries",
        ["message_id", "attempt"],
        unique=True,
    )


def downgrade() -> None:
    op.drop_index("ix_webhook_deliveries_message_attempt", table_name="webhook_deliveries")
    op.create_index("ix_webhook_deliveries_message_attempt", "webhook_deliveries", ["message_id", "attempt"])
