"""why an execution gave its run back (a drain, a worker without the agent), and which
owner; a mark that a model step of the run had no price; approval events that say when

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-01 20:30:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


_APPROVAL_FUNCTION = """
CREATE OR REPLACE FUNCTION runwright_approval_events() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO run_events (run_id, type, data)
    VALUES (NEW.run_id, 'approval', jsonb_build_object(
        'action', CASE WHEN NEW.decision IS NULL THEN 'requested' ELSE 'decided' END,
        'approval_id', NEW.approval_id, 'step_index', NEW.step_index,
        'tool_call_id', NEW.tool_call_id, 'tool_name', NEW.tool_name,
        'decision', NEW.decision, 'reason', NEW.reason, 'decided_by', NEW.decided_by,
        'decided_at', to_jsonb(NEW.decided_at), 'expires_at', to_jsonb(NEW.expires_at)));
    RETURN NULL;
END
$$
"""

_APPROVAL_FUNCTION_0007 = """
CREATE OR REPLACE FUNCTION runwright_approval_events() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO run_events (run_id, type, data)
    VALUES (NEW.run_id, 'approval', jsonb_build_object(
        'action', CASE WHEN NEW.decision IS NULL THEN 'requested' ELSE 'decided' END,
        'approval_id', NEW.approval_id, 'step_index', NEW.step_index,
        'tool_call_id', NEW.tool_call_id, 'tool_name', NEW.tool_name,
        'decision', NEW.decision, 'reason', NEW.reason, 'decided_by', NEW.decided_by,
        'expires_at', to_jsonb(NEW.expires_at)));
    RETURN NULL;
END
$$
"""


def upgrade() -> None:
    # When it was decided: an expiry is told from a denial by it
    # (runner/core/approvals/expiry.py), on the console's live timeline too.
    op.execute(_APPROVAL_FUNCTION)
    # store/models.Interruption; set by the write that interrupts the run,
    # cleared by the next outcome (store/pg/base.OUTCOME_SET).
    op.add_column("runs", sa.Column("interrupted_reason", sa.Text(), nullable=True))
    op.add_column("runs", sa.Column("interrupted_by", sa.Text(), nullable=True))
    op.create_check_constraint(
        "runs_interrupted_reason_valid",
        "runs",
        "interrupted_reason IS NULL OR interrupted_reason IN ('drain', 'agent_missing')",
    )
    # store/rules.unpriced_call, set as each model step is recorded; the runs
    # recorded before it read their steps once.
    op.add_column(
        "runs",
        sa.Column("cost_unpriced", sa.Boolean(), nullable=False, server_default=sa.false()),
    )
    op.execute(
        "UPDATE runs SET cost_unpriced = true WHERE EXISTS (SELECT 1 FROM steps s "
        "WHERE s.run_id = runs.id AND s.kind = 'llm' AND s.cost_usd IS NULL "
        "AND s.input_tokens IS NOT NULL)"
    )


def downgrade() -> None:
    op.execute(_APPROVAL_FUNCTION_0007)
    op.drop_column("runs", "cost_unpriced")
    op.drop_constraint("runs_interrupted_reason_valid", "runs", type_="check")
    op.drop_column("runs", "interrupted_by")
    op.drop_column("runs", "interrupted_reason")
