"""schedules: agents started by cron or at a fixed interval, fired by tick(), and
what became of each firing

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-02 15:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "schedules",
        sa.Column("name", sa.Text(), primary_key=True),
        sa.Column("agent", sa.Text(), nullable=False),
        sa.Column("cron", sa.Text(), nullable=True),
        sa.Column("timezone", sa.Text(), nullable=False, server_default="UTC"),
        sa.Column("every_seconds", sa.Float(), nullable=True),
        sa.Column("payload", sa.JSON(), nullable=True),
        sa.Column("thread", sa.Text(), nullable=True),
        sa.Column("keys", sa.JSON(), nullable=True),
        sa.Column("overlap", sa.Text(), nullable=False, server_default="skip"),
        sa.Column("catchup_window_seconds", sa.Float(), nullable=False, server_default="300"),
        sa.Column("jitter_seconds", sa.Float(), nullable=False, server_default="0"),
        sa.Column("paused", sa.Boolean(), nullable=False, server_default=sa.false()),
        sa.Column("next_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("next_due_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            nullable=False,
            server_default=sa.text("now()"),
        ),
        sa.Column(
            "updated_at",
            sa.DateTime(timezone=True),
            nullable=False,
            server_default=sa.text("now()"),
        ),
        sa.CheckConstraint("(cron IS NULL) <> (every_seconds IS NULL)", name="schedules_one_spec"),
        sa.CheckConstraint(
            "overlap IN ('skip', 'buffer_one', 'allow_all', 'cancel_other')",
            name="schedules_overlap_valid",
        ),
    )
    op.create_index(
        "schedules_due_idx", "schedules", ["next_due_at"], postgresql_where=sa.text("NOT paused")
    )
    op.create_table(
        "schedule_firings",
        sa.Column(
            "schedule",
            sa.Text(),
            sa.ForeignKey("schedules.name", ondelete="CASCADE"),
            primary_key=True,
        ),
        sa.Column("scheduled_at", sa.DateTime(timezone=True), primary_key=True),
        sa.Column("outcome", sa.Text(), nullable=False),
        sa.Column(
            "run_id",
            sa.Uuid(as_uuid=False),
            sa.ForeignKey("runs.id", name="schedule_firings_run_id_fkey", ondelete="SET NULL"),
            nullable=True,
        ),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column(
            "fired_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.text("now()")
        ),
        sa.CheckConstraint(
            "outcome IN ('started', 'skipped', 'buffered', 'missed', 'triggered')",
            name="schedule_firings_outcome_valid",
        ),
    )
    op.create_index(
        "schedule_firings_buffered_idx",
        "schedule_firings",
        ["schedule"],
        postgresql_where=sa.text("outcome = 'buffered'"),
    )
    op.create_index(
        "schedule_firings_run_idx",
        "schedule_firings",
        ["run_id"],
        postgresql_where=sa.text("run_id IS NOT NULL"),
    )


def downgrade() -> None:
    op.drop_table("schedule_firings")
    op.drop_table("schedules")
