"""durable retries, retry history, forks, per-step history

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-30 09:10:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

_TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    # A run waiting to retry a failing model step: queued, not before retry_at.
    op.add_column("runs", sa.Column("retry_at", _TS))
    op.add_column(
        "runs", sa.Column("retry_attempts", sa.Integer(), server_default="0", nullable=False)
    )
    op.add_column("runs", sa.Column("retry_since", _TS))
    op.add_column("runs", sa.Column("retry_error", sa.Text()))
    # Steps added to the agent's budget (a retry's --extra-steps, a fork's prefix).
    op.add_column(
        "runs", sa.Column("extra_steps", sa.Integer(), server_default="0", nullable=False)
    )
    # A model that overrides the agent's (a fork onto another model).
    op.add_column("runs", sa.Column("model", sa.Text()))
    op.add_column(
        "runs",
        sa.Column(
            "forked_from",
            sa.Uuid(as_uuid=False),
            sa.ForeignKey("runs.id", name="runs_forked_from_fkey", ondelete="SET NULL"),
        ),
    )
    op.add_column("runs", sa.Column("forked_at_step", sa.Integer()))
    op.create_table(
        "run_attempts",
        sa.Column(
            "run_id",
            sa.Uuid(as_uuid=False),
            sa.ForeignKey("runs.id", ondelete="CASCADE"),
            primary_key=True,
        ),
        sa.Column("attempt", sa.Integer(), primary_key=True, autoincrement=False),
        sa.Column("status", sa.Text(), nullable=False),
        sa.Column("error_code", sa.Text()),
        sa.Column("error_message", sa.Text()),
        sa.Column("steps_used", sa.Integer(), nullable=False),
        sa.Column("input_tokens", sa.BigInteger(), nullable=False),
        sa.Column("output_tokens", sa.BigInteger(), nullable=False),
        sa.Column("started_at", _TS),
        sa.Column("finished_at", _TS),
        sa.Column("extra_steps", sa.Integer(), server_default="0", nullable=False),
        sa.Column("retried_at", _TS, server_default=sa.text("now()"), nullable=False),
    )
    # The step that wrote each message, so that a fork can take the history as
    # it stood after any step; rows written before this revision have none.
    op.add_column("messages", sa.Column("step_index", sa.Integer()))
    # The run's state as a step left it (a fork at that step starts from it).
    op.drop_constraint("steps_kind_valid", "steps", type_="check")
    op.create_check_constraint(
        "steps_kind_valid", "steps", "kind IN ('llm', 'tool', 'wait', 'state')"
    )


def downgrade() -> None:
    op.execute("DELETE FROM steps WHERE kind = 'state'")
    op.drop_constraint("steps_kind_valid", "steps", type_="check")
    op.create_check_constraint("steps_kind_valid", "steps", "kind IN ('llm', 'tool', 'wait')")
    op.drop_column("messages", "step_index")
    op.drop_table("run_attempts")
    for column in (
        "forked_at_step",
        "forked_from",
        "model",
        "extra_steps",
        "retry_error",
        "retry_since",
        "retry_attempts",
        "retry_at",
    ):
        op.drop_column("runs", column)
