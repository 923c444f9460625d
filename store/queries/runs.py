"""Reading and creating runs, their steps, checkpoints and effects."""

from __future__ import annotations

from store.queries import Statement
from store.status import SETTLED, RunStatus, lit, status_in

_LLM = "'llm'"

CREATE_RUN = Statement(
    "create_run",
    f"""
    INSERT INTO runs (id, agent, status, trigger, trigger_id, concurrency_key, thread,
                      trace_context, enqueued_at)
    VALUES (CAST(:id AS uuid), CAST(:agent AS text), {lit(RunStatus.QUEUED)},
            CAST(:trigger AS json), CAST(:trigger_id AS text), CAST(:key AS text),
            CAST(:thread AS text), CAST(:trace_context AS json), now())
    ON CONFLICT ON CONSTRAINT runs_agent_trigger_id_key DO NOTHING
    RETURNING *
    """,
)

RUN_BY_TRIGGER = Statement(
    "run_by_trigger",
    "SELECT * FROM runs"
    " WHERE agent = CAST(:agent AS text) AND trigger_id = CAST(:trigger_id AS text)",
)

# A run with its first pending wait, if it is waiting.
_RUN_WITH_WAIT = f"""
    SELECT r.*, w.approval_id AS w_approval_id, w.tool_name AS w_tool_name,
           w.input AS w_input, w.expires_at AS w_expires_at, w.token_id AS w_token_id,
           w.notified_at AS w_notified_at
      FROM runs AS r
      LEFT JOIN LATERAL (
           SELECT a.approval_id, a.tool_name, a.input, a.expires_at, a.token_id, a.notified_at
             FROM approvals AS a
            WHERE a.run_id = r.id AND a.decision IS NULL
              AND r.status = {lit(RunStatus.WAITING)}
            ORDER BY a.created_at, a.approval_id
            LIMIT 1) AS w ON true
"""

GET_RUN = Statement("get_run", _RUN_WITH_WAIT + " WHERE r.id = CAST(:id AS uuid)")
RUNS_BY_IDS = Statement("runs_by_ids", _RUN_WITH_WAIT + " WHERE r.id = ANY(CAST(:ids AS uuid[]))")

# Filters that are NULL match everything; on a plain statement the planner
# folds them away, so the status and agent indexes still serve.
LIST_RUNS = Statement(
    "list_runs",
    _RUN_WITH_WAIT
    + """
     WHERE (CAST(:status AS text) IS NULL OR r.status = CAST(:status AS text))
       AND (CAST(:agent AS text) IS NULL OR r.agent = CAST(:agent AS text))
       AND (CAST(:thread AS text) IS NULL OR r.thread = CAST(:thread AS text))
       AND (CAST(:before AS uuid) IS NULL OR r.id < CAST(:before AS uuid))
       AND (CAST(:since AS timestamptz) IS NULL OR r.created_at >= CAST(:since AS timestamptz))
       AND (CAST(:until AS timestamptz) IS NULL OR r.created_at < CAST(:until AS timestamptz))
     ORDER BY r.id DESC LIMIT CAST(:limit AS int)
    """,
)

RUN_EXISTS = Statement("run_exists", "SELECT 1 AS found FROM runs WHERE id = CAST(:id AS uuid)")

STEPS = Statement(
    "steps", "SELECT * FROM steps WHERE run_id = CAST(:run_id AS uuid) ORDER BY index, id"
)

LLM_STEP = Statement(
    "llm_step",
    "SELECT * FROM steps WHERE run_id = CAST(:run_id AS uuid)"
    f" AND index = CAST(:index AS int) AND kind = {_LLM}",
)

CHECKPOINT = Statement(
    "checkpoint",
    """
    SELECT c.step_index, c.message_count, c.finish_reason, c.created_at,
           COALESCE((SELECT jsonb_agg(m.body ORDER BY m.seq) FROM messages AS m
                      WHERE m.run_id = c.run_id AND m.seq < c.message_count), '[]') AS messages
      FROM checkpoints AS c WHERE c.run_id = CAST(:run_id AS uuid)
    """,
)

CHECKPOINT_MESSAGES_BY_RUN_IDS = Statement(
    "checkpoint_messages_by_run_ids",
    """
    SELECT c.run_id,
           COALESCE((SELECT jsonb_agg(m.body ORDER BY m.seq) FROM messages AS m
                      WHERE m.run_id = c.run_id AND m.seq < c.message_count), '[]') AS messages
      FROM checkpoints AS c WHERE c.run_id = ANY(CAST(:ids AS uuid[]))
    """,
)

# An execution's start: the checkpoint with its messages, and the next step's
# llm row if a process journaled it (W1) but died before its W2, in one trip.
START_POINT = Statement(
    "start_point",
    f"""
    SELECT c.step_index, c.message_count, c.finish_reason, c.created_at,
           COALESCE((SELECT jsonb_agg(m.body ORDER BY m.seq) FROM messages AS m
                      WHERE m.run_id = r.id AND m.seq < c.message_count), '[]') AS messages,
           s.*
      FROM (SELECT CAST(:run_id AS uuid) AS id) AS r
      LEFT JOIN checkpoints AS c ON c.run_id = r.id
      LEFT JOIN steps AS s ON s.run_id = r.id AND s.kind = {_LLM}
                          AND s.index = COALESCE(c.step_index, 0) + 1
    """,
)

EFFECT = Statement(
    "effect",
    "SELECT * FROM effects WHERE run_id = CAST(:run_id AS uuid) AND key = CAST(:key AS text)",
)

THREAD_START = Statement(
    "thread_start",
    f"""
    SELECT id, state FROM runs
     WHERE thread = CAST(:thread AS text) AND id < CAST(:before AS uuid) AND {status_in(SETTLED)}
     ORDER BY id DESC LIMIT 1
    """,
)

RUN_COUNTS = Statement(
    "run_counts",
    """
    SELECT status, count(*) AS runs FROM runs
     WHERE CAST(:agent AS text) IS NULL OR agent = CAST(:agent AS text)
     GROUP BY status
    """,
)
