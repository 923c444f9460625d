"""effects whose outcome is unknown, until a person resolves them; who cancelled a run

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-01 18:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # 'unknown': a later execution found the effect started by one that died.
    op.drop_constraint("effects_status_valid", "effects", type_="check")
    op.create_check_constraint(
        "effects_status_valid", "effects", "status IN ('started', 'completed', 'failed', 'unknown')"
    )
    # What a person (or the effect's reconcile callable) said happened.
    op.add_column("effects", sa.Column("resolved_outcome", sa.Text(), nullable=True))
    op.add_column("effects", sa.Column("resolved_by", sa.Text(), nullable=True))
    op.add_column("effects", sa.Column("resolved_note", sa.Text(), nullable=True))
    op.add_column("effects", sa.Column("resolved_at", sa.DateTime(timezone=True), nullable=True))
    op.create_check_constraint(
        "effects_resolved_outcome_valid",
        "effects",
        "resolved_outcome IS NULL OR resolved_outcome IN ('done', 'not_done')",
    )
    # Set while the run has an unknown effect nobody resolved.
    op.add_column(
        "runs",
        sa.Column("needs_attention", sa.Boolean(), nullable=False, server_default=sa.false()),
    )
    # Who asked for the run's cancel (the first to ask), as decisions record who.
    op.add_column("runs", sa.Column("cancelled_by", sa.Text(), nullable=True))
    op.create_index(
        "runs_needs_attention_idx",
        "runs",
        ["created_at"],
        postgresql_where=sa.text("needs_attention"),
    )


def downgrade() -> None:
    op.drop_index("runs_needs_attention_idx", table_name="runs")
    op.drop_column("runs", "cancelled_by")
    op.drop_column("runs", "needs_attention")
    op.drop_constraint("effects_resolved_outcome_valid", "effects", type_="check")
    for column in ("resolved_at", "resolved_note", "resolved_by", "resolved_outcome"):
        op.drop_column("effects", column)
    op.execute("UPDATE effects SET status = 'started' WHERE status = 'unknown'")
    op.drop_constraint("effects_status_valid", "effects", type_="check")
    op.create_check_constraint(
        "effects_status_valid", "effects", "status IN ('started', 'completed', 'failed')"
    )
