"""child runs: a run started by a parent run's tool call (Agent.as_tool)

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-02 02:10:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


# The run-event function as this revision leaves it (store/events.py then): a
# child run's start and settle are events of its parent too. Frozen here, as
# every migration's SQL is.
_RUN_EVENTS = """CREATE OR REPLACE FUNCTION runwright_run_events() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'UPDATE' AND NEW.claim_epoch > OLD.claim_epoch THEN
        INSERT INTO run_events (run_id, type, data)
        VALUES (NEW.id, 'execution', jsonb_build_object(
            'epoch', NEW.claim_epoch, 'owner', NEW.claim_owner,
            'takeover', OLD.status = 'running'));
    END IF;
    IF TG_OP = 'INSERT' OR NEW.status IS DISTINCT FROM OLD.status THEN
        INSERT INTO run_events (run_id, type, data)
        VALUES (NEW.id, 'status', jsonb_strip_nulls(jsonb_build_object(
            'status', NEW.status, 'error_code', NEW.error_code,
            'retry_at', to_jsonb(NEW.retry_at))));
    END IF;
    -- A child run's start and settle are events of its parent's too.
    IF NEW.parent_id IS NOT NULL AND (TG_OP = 'INSERT' OR (
            NEW.status IS DISTINCT FROM OLD.status AND NEW.status IN ('completed', 'failed', 'cancelled'))) THEN
        INSERT INTO run_events (run_id, type, data)
        VALUES (NEW.parent_id, 'child', jsonb_strip_nulls(jsonb_build_object(
            'action', CASE WHEN TG_OP = 'INSERT' THEN 'started' ELSE 'settled' END,
            'run_id', NEW.id, 'agent', NEW.agent, 'call_id', NEW.parent_call_id,
            'status', NEW.status, 'error_code', NEW.error_code)));
    END IF;
    RETURN NULL;
END
$$
"""

# As revision 0012 had it.
_RUN_EVENTS_BEFORE = """CREATE OR REPLACE FUNCTION runwright_run_events() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'UPDATE' AND NEW.claim_epoch > OLD.claim_epoch THEN
        INSERT INTO run_events (run_id, type, data)
        VALUES (NEW.id, 'execution', jsonb_build_object(
            'epoch', NEW.claim_epoch, 'owner', NEW.claim_owner,
            'takeover', OLD.status = 'running'));
    END IF;
    IF TG_OP = 'INSERT' OR NEW.status IS DISTINCT FROM OLD.status THEN
        INSERT INTO run_events (run_id, type, data)
        VALUES (NEW.id, 'status', jsonb_strip_nulls(jsonb_build_object(
            'status', NEW.status, 'error_code', NEW.error_code,
            'retry_at', to_jsonb(NEW.retry_at))));
    END IF;
    RETURN NULL;
END
$$
"""


def upgrade() -> None:
    # The run whose tool call started this one, and that call's id; a detached
    # child runs on when its parent is cancelled.
    op.add_column(
        "runs",
        sa.Column(
            "parent_id",
            sa.Uuid(as_uuid=False),
            sa.ForeignKey("runs.id", name="runs_parent_id_fkey", ondelete="SET NULL"),
            nullable=True,
        ),
    )
    op.add_column("runs", sa.Column("parent_call_id", sa.Text(), nullable=True))
    op.add_column(
        "runs", sa.Column("detached", sa.Boolean(), nullable=False, server_default=sa.false())
    )
    # The token and cost budgets of its ancestors that bound a child too: a list of
    # {"run", "max_tokens", "max_cost_usd"}, checked against their totals live.
    op.add_column("runs", sa.Column("budget_bounds", sa.JSON(), nullable=True))
    op.create_index(
        "runs_parent_idx",
        "runs",
        ["parent_id", "id"],
        postgresql_where=sa.text("parent_id IS NOT NULL"),
    )
    # A parent's feed has its children's start and settle (the 'child' events).
    op.drop_constraint("run_events_type_valid", "run_events", type_="check")
    op.create_check_constraint(
        "run_events_type_valid",
        "run_events",
        "type IN ('status', 'execution', 'approval', 'child')",
    )
    op.execute(_RUN_EVENTS)


def downgrade() -> None:
    op.execute(_RUN_EVENTS_BEFORE)
    op.execute("DELETE FROM run_events WHERE type = 'child'")
    op.drop_constraint("run_events_type_valid", "run_events", type_="check")
    op.create_check_constraint(
        "run_events_type_valid", "run_events", "type IN ('status', 'execution', 'approval')"
    )
    op.drop_index("runs_parent_idx", table_name="runs")
    op.drop_column("runs", "budget_bounds")
    op.drop_column("runs", "detached")
    op.drop_column("runs", "parent_call_id")
    op.drop_column("runs", "parent_id")
