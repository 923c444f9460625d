"""data protection, first part: the audit log of people's actions on runs'
data (hash-chained), and a run's erasure (its payloads removed, its skeleton
kept)

Revision ID: 0020
Revises: 0019
Create Date: 2026-12-07 03:15:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "audit",
        sa.Column("id", sa.BigInteger(), sa.Identity(always=True), primary_key=True),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()),
        sa.Column("actor", sa.Text(), nullable=False),
        sa.Column("source", sa.Text(), nullable=True),
        sa.Column("action", sa.Text(), nullable=False),
        sa.Column("run_id", sa.Uuid(as_uuid=False), nullable=True),
        sa.Column("detail", JSONB(), nullable=True),
        sa.Column("prev_hash", sa.Text(), nullable=False),
        sa.Column("hash", sa.Text(), nullable=False),
        sa.UniqueConstraint("hash", name="audit_hash_key"),
    )
    op.create_index(
        "audit_run_idx", "audit", ["run_id", "id"], postgresql_where=sa.text("run_id IS NOT NULL")
    )
    # The runs there are were never erased.
    op.add_column("runs", sa.Column("erased_at", sa.DateTime(timezone=True), nullable=True))
    op.add_column("runs", sa.Column("erased_by", sa.Text(), nullable=True))


def downgrade() -> None:
    op.drop_column("runs", "erased_by")
    op.drop_column("runs", "erased_at")
    op.drop_index("audit_run_idx", table_name="audit")
    op.drop_table("audit")
