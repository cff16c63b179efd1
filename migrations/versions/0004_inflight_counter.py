"""A tenant's in-flight job count, kept by a trigger.

The API used to lock the tenant's row, count its unfinished jobs and insert, so a tenant's submissions
ran one at a time. Now inserting a job bumps tenants.inflight in the same transaction (the row lock is
held only from the insert to the commit), and the API compares the count it just made with the limit.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-23
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

ACTIVE = "('starting', 'processing')"

FUNCTION = f"""
CREATE OR REPLACE FUNCTION reprise_count_inflight() RETURNS trigger AS $$
BEGIN
  IF TG_OP = 'INSERT' THEN
    IF NEW.status IN {ACTIVE} THEN
      UPDATE tenants SET inflight = inflight + 1 WHERE id = NEW.tenant_id;
    END IF;
  ELSIF TG_OP = 'UPDATE' THEN
    IF (OLD.status IN {ACTIVE}) AND NOT (NEW.status IN {ACTIVE}) THEN
      UPDATE tenants SET inflight = inflight - 1 WHERE id = NEW.tenant_id;
    ELSIF NOT (OLD.status IN {ACTIVE}) AND (NEW.status IN {ACTIVE}) THEN
      UPDATE tenants SET inflight = inflight + 1 WHERE id = NEW.tenant_id;
    END IF;
  ELSIF TG_OP = 'DELETE' THEN
    IF OLD.status IN {ACTIVE} THEN
      UPDATE tenants SET inflight = inflight - 1 WHERE id = OLD.tenant_id;
    END IF;
  END IF;
  RETURN NULL;
END
$$ LANGUAGE plpgsql;
"""


def upgrade() -> None:
    op.add_column("tenants", sa.Column("inflight", sa.Integer, nullable=False, server_default="0"))
    op.execute(
        f"UPDATE tenants SET inflight = (SELECT count(*) FROM jobs WHERE jobs.tenant_id = tenants.id "
        f"AND jobs.status IN {ACTIVE})"
    )
    op.execute(FUNCTION)
    op.execute(
        "CREATE TRIGGER jobs_count_inflight AFTER INSERT OR DELETE OR UPDATE OF status ON jobs "
        "FOR EACH ROW EXECUTE FUNCTION reprise_count_inflight()"
    )


def downgrade() -> None:
    op.execute("DROP TRIGGER IF EXISTS jobs_count_inflight ON jobs")
    op.execute("DROP FUNCTION IF EXISTS reprise_count_inflight()")
    op.drop_column("tenants", "inflight")
