"""datasets of cases, versioned by content, and evaluations that replay a
dataset's cases and score them (runner/evals/, store/pg/evals.py)

Revision ID: 0022
Revises: 0021
Create Date: 2026-12-08 09:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0022"
down_revision = "0021"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "datasets",
        sa.Column("name", sa.Text(), primary_key=True),
        sa.Column("version", sa.Text(), primary_key=True),
        sa.Column(
            "created_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()
        ),
        sa.Column("created_by", sa.Text(), nullable=True),
        sa.Column("description", sa.Text(), nullable=True),
        sa.Column("query", JSONB(), nullable=True),
        sa.Column("case_count", sa.Integer(), nullable=False),
    )
    op.create_table(
        "dataset_cases",
        sa.Column("name", sa.Text(), primary_key=True),
        sa.Column("version", sa.Text(), primary_key=True),
        sa.Column("position", sa.Integer(), primary_key=True),
        sa.Column("data", sa.JSON(), nullable=False),
        sa.ForeignKeyConstraint(
            ["name", "version"],
            ["datasets.name", "datasets.version"],
            name="dataset_cases_dataset_fkey",
            ondelete="CASCADE",
        ),
    )
    op.create_table(
        "evaluations",
        sa.Column("id", sa.Text(), primary_key=True),
        sa.Column("dataset", sa.Text(), nullable=False),
        sa.Column("dataset_version", sa.Text(), nullable=False),
        sa.Column("agent", sa.Text(), nullable=False),
        sa.Column("label", sa.Text(), nullable=False),
        sa.Column("baseline", sa.Text(), nullable=True),
        sa.Column("status", sa.Text(), nullable=False),
        sa.Column(
            "created_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()
        ),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("created_by", sa.Text(), nullable=True),
        sa.Column("options", JSONB(), nullable=False),
        sa.Column("summary", JSONB(), nullable=True),
        sa.Column("case_count", sa.Integer(), nullable=False),
        sa.CheckConstraint(
            "status IN ('running', 'completed', 'cancelled')", name="evaluations_status_valid"
        ),
    )
    op.create_table(
        "evaluation_cases",
        sa.Column(
            "evaluation_id",
            sa.Text(),
            sa.ForeignKey("evaluations.id", ondelete="CASCADE"),
            primary_key=True,
        ),
        sa.Column("position", sa.Integer(), primary_key=True),
        sa.Column("status", sa.Text(), nullable=False),
        sa.Column("claimed_by", sa.Text(), nullable=True),
        sa.Column("claimed_until", sa.DateTime(timezone=True), nullable=True),
        sa.Column("attempts", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("result", sa.JSON(), nullable=True),
        sa.Column("scores", JSONB(), nullable=True),
        sa.Column("duration_ms", sa.Float(), nullable=True),
        sa.Column("cost_usd", sa.Float(), nullable=True),
        sa.Column("tokens", sa.BigInteger(), nullable=True),
        sa.CheckConstraint(
            "status IN ('pending', 'running', 'done')", name="evaluation_cases_status_valid"
        ),
    )
    op.create_index(
        "evaluation_cases_open_idx",
        "evaluation_cases",
        ["evaluation_id", "position"],
        postgresql_where=sa.text("status <> 'done'"),
    )


def downgrade() -> None:
    op.drop_index("evaluation_cases_open_idx", table_name="evaluation_cases")
    op.drop_table("evaluation_cases")
    op.drop_table("evaluations")
    op.drop_table("dataset_cases")
    op.drop_table("datasets")
