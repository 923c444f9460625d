"""initial schema

Revision ID: 0001
Revises:
Create Date: 2026-11-30 00:42:06.362415
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "runs",
        sa.Column("id", sa.Uuid(as_uuid=False), nullable=False),
        sa.Column("agent", sa.Text(), nullable=False),
        sa.Column("status", sa.Text(), nullable=False),
        sa.Column("trigger", postgresql.JSONB(astext_type=sa.Text()), nullable=False),
        sa.Column("trigger_id", sa.Text(), nullable=False),
        sa.Column("concurrency_key", sa.Text(), nullable=True),
        sa.Column("thread", sa.Text(), nullable=True),
        sa.Column("output", postgresql.JSONB(astext_type=sa.Text()), nullable=True),
        sa.Column("error_code", sa.Text(), nullable=True),
        sa.Column("error_message", sa.Text(), nullable=True),
        sa.Column("input_tokens", sa.BigInteger(), server_default="0", nullable=False),
        sa.Column("output_tokens", sa.BigInteger(), server_default="0", nullable=False),
        sa.Column("steps_used", sa.Integer(), server_default="0", nullable=False),
        sa.Column("state", postgresql.JSONB(astext_type=sa.Text()), nullable=True),
        sa.Column("claim_owner", sa.Text(), nullable=True),
        sa.Column("claim_expires_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("claim_epoch", sa.Integer(), server_default="0", nullable=False),
        sa.Column(
            "cancel_requested", sa.Boolean(), server_default=sa.text("false"), nullable=False
        ),
        sa.Column("enqueued_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.Column(
            "updated_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.CheckConstraint(
            "status IN ('queued', 'running', 'waiting', 'completed', 'failed', 'cancelled', 'interrupted')",
            name="runs_status_valid",
        ),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("agent", "trigger_id", name="runs_agent_trigger_id_key"),
    )
    op.create_index("runs_agent_idx", "runs", ["agent", "id"], unique=False)
    op.create_index(
        "runs_claimable_enqueued_idx",
        "runs",
        ["enqueued_at"],
        unique=False,
        postgresql_where=sa.text("status IN ('queued', 'interrupted')"),
    )
    op.create_index(
        "runs_key_holder_idx",
        "runs",
        ["concurrency_key"],
        unique=True,
        postgresql_where=sa.text(
            "concurrency_key IS NOT NULL AND status IN ('running', 'waiting', 'interrupted')"
        ),
    )
    op.create_index(
        "runs_key_queue_idx",
        "runs",
        ["concurrency_key", "id"],
        unique=False,
        postgresql_where=sa.text("concurrency_key IS NOT NULL AND status = 'queued'"),
    )
    op.create_index(
        "runs_running_claim_idx",
        "runs",
        ["claim_expires_at"],
        unique=False,
        postgresql_where=sa.text("status = 'running'"),
    )
    op.create_index(
        "runs_settled_finished_idx",
        "runs",
        ["finished_at"],
        unique=False,
        postgresql_where=sa.text("status IN ('completed', 'failed', 'cancelled')"),
    )
    op.create_index("runs_status_idx", "runs", ["status", "id"], unique=False)
    op.create_index(
        "runs_thread_idx",
        "runs",
        ["thread", "id"],
        unique=False,
        postgresql_where=sa.text("thread IS NOT NULL"),
    )
    op.create_table(
        "approvals",
        sa.Column("approval_id", sa.Uuid(as_uuid=False), nullable=False),
        sa.Column("run_id", sa.Uuid(as_uuid=False), nullable=False),
        sa.Column("step_index", sa.Integer(), nullable=False),
        sa.Column("tool_call_id", sa.Text(), nullable=False),
        sa.Column("tool_name", sa.Text(), nullable=False),
        sa.Column("input", postgresql.JSONB(astext_type=sa.Text()), nullable=True),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("on_expire", sa.Text(), nullable=False),
        sa.Column("token_id", sa.Text(), nullable=False),
        sa.Column("notified_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("next_notify_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("attempts", sa.Integer(), server_default="0", nullable=False),
        sa.Column("decision", sa.Text(), nullable=True),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("decided_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.CheckConstraint(
            "decision IS NULL OR decision IN ('approved', 'denied', 'withdrawn')",
            name="approvals_decision_valid",
        ),
        sa.CheckConstraint("on_expire IN ('deny', 'fail')", name="approvals_on_expire_valid"),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("approval_id"),
        sa.UniqueConstraint("run_id", "tool_call_id", name="approvals_run_call_key"),
    )
    op.create_index(
        "approvals_notify_due_idx",
        "approvals",
        ["next_notify_at"],
        unique=False,
        postgresql_where=sa.text("decision IS NULL AND notified_at IS NULL"),
    )
    op.create_index(
        "approvals_pending_expiry_idx",
        "approvals",
        ["expires_at"],
        unique=False,
        postgresql_where=sa.text("decision IS NULL"),
    )
    op.create_table(
        "checkpoints",
        sa.Column("run_id", sa.Uuid(as_uuid=False), nullable=False),
        sa.Column("step_index", sa.Integer(), nullable=False),
        sa.Column("message_count", sa.Integer(), nullable=False),
        sa.Column("finish_reason", sa.Text(), nullable=True),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("run_id"),
    )
    op.create_table(
        "effects",
        sa.Column("run_id", sa.Uuid(as_uuid=False), nullable=False),
        sa.Column("key", sa.Text(), nullable=False),
        sa.Column("tool", sa.Text(), nullable=False),
        sa.Column("input", postgresql.JSONB(astext_type=sa.Text()), nullable=True),
        sa.Column("status", sa.Text(), nullable=False),
        sa.Column("attempts", sa.Integer(), server_default="1", nullable=False),
        sa.Column("claim_epoch", sa.Integer(), nullable=False),
        sa.Column("output", postgresql.JSONB(astext_type=sa.Text()), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.CheckConstraint(
            "status IN ('started', 'completed', 'failed')", name="effects_status_valid"
        ),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("run_id", "key"),
    )
    op.create_table(
        "messages",
        sa.Column("run_id", sa.Uuid(as_uuid=False), nullable=False),
        sa.Column("seq", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("body", postgresql.JSONB(astext_type=sa.Text()), nullable=False),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("run_id", "seq"),
    )
    op.create_table(
        "steps",
        sa.Column("run_id", sa.Uuid(as_uuid=False), nullable=False),
        sa.Column("id", sa.BigInteger(), sa.Identity(always=False), nullable=False),
        sa.Column("kind", sa.Text(), nullable=False),
        sa.Column("index", sa.Integer(), nullable=False),
        sa.Column("name", sa.Text(), nullable=True),
        sa.Column("tool_call_id", sa.Text(), nullable=True),
        sa.Column("input", postgresql.JSONB(astext_type=sa.Text()), nullable=True),
        sa.Column("output", postgresql.JSONB(astext_type=sa.Text()), nullable=True),
        sa.Column("error", postgresql.JSONB(astext_type=sa.Text()), nullable=True),
        sa.Column("input_tokens", sa.BigInteger(), nullable=True),
        sa.Column("output_tokens", sa.BigInteger(), nullable=True),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.CheckConstraint("kind IN ('llm', 'tool', 'wait')", name="steps_kind_valid"),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("run_id", "id"),
    )
    op.create_index(
        "steps_llm_once_idx",
        "steps",
        ["run_id", "index"],
        unique=True,
        postgresql_where=sa.text("kind = 'llm'"),
    )
    op.create_index(
        "steps_tool_once_idx",
        "steps",
        ["run_id", "index", "tool_call_id"],
        unique=True,
        postgresql_where=sa.text("kind = 'tool'"),
    )
    op.create_index(
        "steps_wait_once_idx",
        "steps",
        ["run_id", "index"],
        unique=True,
        postgresql_where=sa.text("kind = 'wait'"),
    )


def downgrade() -> None:
    # Dropping a table drops its indexes and constraints with it.
    for table in ("steps", "messages", "effects", "checkpoints", "approvals", "runs"):
        op.drop_table(table)
