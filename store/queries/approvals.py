"""Cancel, approvals and their decisions: the writes of processes other than
the run's owner. Locks are taken in one order everywhere: the run row, then
its approvals (W2 does the same)."""

from __future__ import annotations

from store.queries import Statement
from store.queries.fragments import NOW, OUTCOME_SET
from store.status import RunStatus, lit

LOCK_RUN = Statement(
    "lock_run",
    f"SELECT status, concurrency_key, {NOW} AS now FROM runs"
    " WHERE id = CAST(:run_id AS uuid) FOR UPDATE",
)

SETTLE_BY_ID = Statement(
    "settle_by_id",
    f"UPDATE runs SET {OUTCOME_SET}, cancel_requested = cancel_requested"
    " OR CAST(:cancel AS bool) WHERE id = CAST(:run_id AS uuid)",
)

REQUEST_CANCEL = Statement(
    "request_cancel",
    "UPDATE runs SET cancel_requested = true, updated_at = now() WHERE id = CAST(:run_id AS uuid)",
)

WITHDRAW = Statement(
    "withdraw",
    """
    UPDATE approvals SET decision = CAST(:withdrawn AS text), decided_at = now()
     WHERE run_id = CAST(:run_id AS uuid) AND decision IS NULL
    """,
)

RUN_APPROVALS = Statement(
    "run_approvals",
    "SELECT * FROM approvals WHERE run_id = CAST(:run_id AS uuid) ORDER BY created_at, approval_id",
)

APPROVALS_BY_RUN_IDS = Statement(
    "approvals_by_run_ids",
    "SELECT * FROM approvals WHERE run_id = ANY(CAST(:ids AS uuid[]))"
    " ORDER BY created_at, approval_id",
)

APPROVAL = Statement(
    "approval", "SELECT * FROM approvals WHERE approval_id = CAST(:approval_id AS uuid)"
)

LOCK_APPROVAL = Statement(
    "lock_approval",
    "SELECT * FROM approvals WHERE approval_id = CAST(:approval_id AS uuid) FOR UPDATE",
)

DECIDE = Statement(
    "decide",
    """
    UPDATE approvals SET decision = CAST(:decision AS text), reason = CAST(:reason AS text),
                         decided_at = CAST(:at AS timestamptz), decided_by = CAST(:by AS text)
     WHERE approval_id = CAST(:approval_id AS uuid)
    RETURNING *
    """,
)

LOCK_CHECKPOINT = Statement(
    "lock_checkpoint",
    "SELECT step_index, message_count, finish_reason FROM checkpoints"
    " WHERE run_id = CAST(:run_id AS uuid) FOR UPDATE",
)

# A decision's response appended to the checkpoint at the same step index.
APPEND_MESSAGE = Statement(
    "append_message",
    """
    WITH m AS (
        INSERT INTO messages (run_id, seq, body, step_index)
        VALUES (CAST(:run_id AS uuid), CAST(:seq AS int), CAST(:body AS jsonb),
                CAST(:step_index AS int))
        ON CONFLICT (run_id, seq) DO UPDATE
           SET body = EXCLUDED.body, step_index = EXCLUDED.step_index
    ), gone AS (
        DELETE FROM messages
         WHERE run_id = CAST(:run_id AS uuid) AND seq > CAST(:seq AS int)
    )
    UPDATE checkpoints SET message_count = CAST(:seq AS int) + 1, created_at = now()
     WHERE run_id = CAST(:run_id AS uuid)
    """,
)

PENDING = Statement(
    "pending",
    "SELECT count(*) AS pending FROM approvals"
    " WHERE run_id = CAST(:run_id AS uuid) AND decision IS NULL",
)

FINISH_WAIT = Statement(
    "finish_wait",
    """
    UPDATE steps SET finished_at = CAST(:at AS timestamptz), output = CAST(:output AS jsonb)
     WHERE run_id = CAST(:run_id AS uuid) AND kind = 'wait' AND index = CAST(:index AS int)
    """,
)

# The last decision queues the run again (not an outcome: the run was not running).
RESUME = Statement(
    "resume",
    """
    UPDATE runs SET status = CAST(:status AS text), enqueued_at = CAST(:at AS timestamptz),
                    updated_at = now()
     WHERE id = CAST(:run_id AS uuid)
    """,
)

RECORD_NOTIFICATION = Statement(
    "record_notification",
    """
    UPDATE approvals
       SET attempts = attempts + 1,
           notified_at = CASE WHEN CAST(:accepted AS bool) THEN now() ELSE notified_at END,
           next_notify_at = CASE WHEN CAST(:accepted AS bool) THEN next_notify_at
                                 ELSE CAST(:retry_at AS timestamptz) END
     WHERE approval_id = CAST(:approval_id AS uuid)
    RETURNING approval_id
    """,
)

MARK_NOTIFIED = Statement(
    "mark_notified",
    "UPDATE approvals SET notified_at = now()"
    " WHERE approval_id = ANY(CAST(:approval_ids AS uuid[]))",
)

# The approvals inbox: what waits for a person, oldest first (a run that is
# not waiting any more has nobody to ask).
PENDING_APPROVALS = Statement(
    "pending_approvals",
    f"""
    SELECT a.* FROM approvals AS a JOIN runs AS r ON r.id = a.run_id
     WHERE a.decision IS NULL AND r.status = {lit(RunStatus.WAITING)}
       AND (CAST(:agent AS text) IS NULL OR r.agent = CAST(:agent AS text))
     ORDER BY a.created_at, a.approval_id LIMIT CAST(:limit AS int)
    """,
)
