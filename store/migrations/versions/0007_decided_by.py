"""who decided an approval, the inbox's index, and approval events that say who

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-30 13:20:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
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
        'expires_at', to_jsonb(NEW.expires_at)));
    RETURN NULL;
END
$$
"""

_APPROVAL_FUNCTION_0006 = """
CREATE OR REPLACE FUNCTION runwright_approval_events() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO run_events (run_id, type, data)
    VALUES (NEW.run_id, 'approval', jsonb_build_object(
        'action', CASE WHEN NEW.decision IS NULL THEN 'requested' ELSE 'decided' END,
        'approval_id', NEW.approval_id, 'step_index', NEW.step_index,
        'tool_call_id', NEW.tool_call_id, 'tool_name', NEW.tool_name,
        'decision', NEW.decision, 'reason', NEW.reason,
        'expires_at', to_jsonb(NEW.expires_at)));
    RETURN NULL;
END
$$
"""


def upgrade() -> None:
    # Who decided: the host app's user, the console login, "link" for a token
    # link; NULL for the engine's own decisions (expiry, a cancel's withdrawal).
    op.add_column("approvals", sa.Column("decided_by", sa.Text()))
    # The approvals inbox: pending approvals, oldest first.
    op.create_index(
        "approvals_pending_created_idx",
        "approvals",
        ["created_at", "approval_id"],
        postgresql_where=sa.text("decision IS NULL"),
    )
    op.execute(_APPROVAL_FUNCTION)


def downgrade() -> None:
    op.execute(_APPROVAL_FUNCTION_0006)
    op.drop_index("approvals_pending_created_idx", table_name="approvals")
    op.drop_column("approvals", "decided_by")
