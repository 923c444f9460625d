"""flow control: a run's tenant and priority, and the limit a queued run is
parked on (its status events say which)

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-06 23:10:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None


# The run-event function as this revision leaves it (store/events.py then): a
# status event carries the limit a run is parked on. Frozen here, as every
# migration's SQL is.
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
            'retry_at', to_jsonb(NEW.retry_at), 'parked_on', NEW.parked_key)));
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

# As revision 0013 left it (0014 to 0017 kept it).
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


def upgrade() -> None:
    # The runs there are belong to no tenant and have the default priority.
    op.add_column("runs", sa.Column("tenant", sa.Text(), nullable=True))
    op.add_column(
        "runs", sa.Column("priority", sa.SmallInteger(), nullable=False, server_default="0")
    )
    op.create_check_constraint("runs_priority_valid", "runs", "priority BETWEEN 0 AND 9")
    # No run is parked yet: a run waiting to retry keeps its retry_at, unparked.
    op.add_column("runs", sa.Column("parked_key", sa.Text(), nullable=True))
    op.create_index(
        "runs_parked_idx",
        "runs",
        ["parked_key"],
        postgresql_where=sa.text("parked_key IS NOT NULL"),
    )
    op.execute(_RUN_EVENTS)
    # A schedule's runs take its priority; the schedules there are have the default.
    op.add_column(
        "schedules", sa.Column("priority", sa.SmallInteger(), nullable=False, server_default="0")
    )
    op.create_check_constraint("schedules_priority_valid", "schedules", "priority BETWEEN 0 AND 9")


def downgrade() -> None:
    # A parked run stays queued until its retry_at, as a run waiting to retry.
    op.drop_constraint("schedules_priority_valid", "schedules", type_="check")
    op.drop_column("schedules", "priority")
    op.execute(_RUN_EVENTS_BEFORE)
    op.drop_index("runs_parked_idx", table_name="runs")
    op.drop_column("runs", "parked_key")
    op.drop_constraint("runs_priority_valid", "runs", type_="check")
    op.drop_column("runs", "priority")
    op.drop_column("runs", "tenant")
