"""Retrying a settled run and forking a run's history (``store/recovery.py``
holds their rules). Both are rare, deliberate acts of a person, so their
statements are not prepared."""

from __future__ import annotations

from store.queries import Statement
from store.status import RunStatus, lit

_STATE = "'state'"
_LLM = "'llm'"

# ------------------------------------------------------------------- retry

# The run row first, as every writer of another process takes it (the lock
# order of store/queries/approvals.py); ``now`` is the transaction's clock.
LOCK_FOR_RETRY = Statement(
    "lock_for_retry",
    "SELECT *, now() AS now FROM runs WHERE id = CAST(:run_id AS uuid) FOR UPDATE",
)

ATTEMPT_COUNT = Statement(
    "attempt_count",
    "SELECT count(*) AS n FROM run_attempts WHERE run_id = CAST(:run_id AS uuid)",
)

ADD_ATTEMPT = Statement(
    "add_attempt",
    """
    INSERT INTO run_attempts (run_id, attempt, status, error_code, error_message, steps_used,
                              input_tokens, output_tokens, started_at, finished_at,
                              extra_steps, retried_at)
    VALUES (CAST(:run_id AS uuid), CAST(:attempt AS int), CAST(:status AS text),
            CAST(:error_code AS text), CAST(:error_message AS text), CAST(:steps_used AS int),
            CAST(:input_tokens AS bigint), CAST(:output_tokens AS bigint),
            CAST(:started_at AS timestamptz), CAST(:finished_at AS timestamptz),
            CAST(:extra_steps AS int), CAST(:retried_at AS timestamptz))
    """,
)

# The approvals of the checkpoint's step that a retry opens again: those a
# settle withdrew (or left undecided), so that the run, which re-pauses on the
# history's unanswered request, waits for them again. Each keeps its id, so the
# history's request and any link still name it; its lifetime starts afresh
# from now, and it is notified again (if the agent has a notifier, which
# next_notify_at says).
REOPEN_APPROVALS = Statement(
    "reopen_approvals",
    """
    UPDATE approvals AS a
       SET decision = NULL, reason = NULL, decided_at = NULL, decided_by = NULL,
           expires_at = now() + (a.expires_at - a.created_at), created_at = now(),
           notified_at = NULL, attempts = 0,
           next_notify_at = CASE WHEN a.next_notify_at IS NULL THEN NULL ELSE now() END
      FROM checkpoints AS c
     WHERE a.run_id = CAST(:run_id AS uuid) AND c.run_id = a.run_id
       AND a.step_index = c.step_index
       AND (a.decision IS NULL OR a.decision = CAST(:withdrawn AS text))
    """,
)

# Back to the queue from the checkpoint: the last outcome cleared (the attempt
# keeps it), the cancel request, the takeover count, the agent-missing grace and
# any retry wait reset, the start time cleared so that the next claim stamps
# this attempt's start, and the budget widened. The claim was released when
# the run settled.
REQUEUE = Statement(
    "requeue",
    f"""
    UPDATE runs
       SET status = {lit(RunStatus.QUEUED)},
           output = NULL, error_code = NULL, error_message = NULL,
           started_at = NULL, finished_at = NULL,
           cancel_requested = false,
           takeovers = 0,
           agent_missing_since = NULL,
           retry_attempts = 0, retry_at = NULL, retry_since = NULL, retry_error = NULL,
           extra_steps = extra_steps + CAST(:extra_steps AS int),
           enqueued_at = now(),
           updated_at = now()
     WHERE id = CAST(:run_id AS uuid)
    """,
)

ATTEMPTS = Statement(
    "attempts",
    "SELECT * FROM run_attempts WHERE run_id = CAST(:run_id AS uuid) ORDER BY attempt",
)

# -------------------------------------------------------------------- fork

# The original's row, in SHARE mode: every writer of a run's checkpoint,
# messages and steps updates or locks that row in the same transaction, so none
# can commit until the fork does. Taken before the reads below, which therefore
# see the history as the last such writer committed it.
LOCK_FOR_FORK = Statement(
    "lock_for_fork",
    "SELECT id FROM runs WHERE id = CAST(:run_id AS uuid) FOR SHARE",
)

FORK_SOURCE = Statement(
    "fork_source",
    """
    SELECT r.*, c.step_index AS cp_step, c.message_count AS cp_count,
           c.finish_reason AS cp_finish
      FROM runs AS r LEFT JOIN checkpoints AS c ON c.run_id = r.id
     WHERE r.id = CAST(:run_id AS uuid)
    """,
)

FORK_HISTORY = Statement(
    "fork_history",
    """
    SELECT step_index, body FROM messages
     WHERE run_id = CAST(:run_id AS uuid) AND seq < CAST(:count AS int)
     ORDER BY seq
    """,
)

# The state the run had after step :at (the newest state step up to it).
FORK_STATE = Statement(
    "fork_state",
    f"""
    SELECT output FROM steps
     WHERE run_id = CAST(:run_id AS uuid) AND kind = {_STATE} AND index <= CAST(:at AS int)
     ORDER BY id DESC LIMIT 1
    """,
)

# The effects the run journaled after step :at that may have taken place
# (completed, or started with an unknown outcome; a failed one did nothing to
# repeat), with the step whose model call asked for them: the llm step whose
# message holds the call id of the effect's key (``{run_id}:{call_id}``, unique
# within the run). W1 journals that step before any of its effects starts,
# so this finds an effect whose step's W2 never committed, too.
FORK_EFFECTS = Statement(
    "fork_effects",
    f"""
    SELECT e.tool, s.index AS step_index, e.status
      FROM steps AS s
     CROSS JOIN LATERAL jsonb_array_elements(
           CASE WHEN jsonb_typeof(s.output -> 'message' -> 'tool_calls') = 'array'
                THEN s.output -> 'message' -> 'tool_calls' ELSE '[]'::jsonb END) AS c(call)
      JOIN effects AS e
        ON e.run_id = s.run_id AND e.key = s.run_id::text || ':' || (c.call ->> 'id')
     WHERE s.run_id = CAST(:run_id AS uuid) AND s.kind = {_LLM} AND s.index > CAST(:at AS int)
       AND e.status <> CAST(:failed_effect AS text)
     ORDER BY s.index, e.started_at, e.key
    """,
)

# A run that already has the fork's id, or its trigger id for its agent.
EXISTING_RUN = Statement(
    "existing_run",
    """
    SELECT * FROM runs
     WHERE id = CAST(:id AS uuid)
        OR (agent = CAST(:agent AS text) AND trigger_id = CAST(:trigger_id AS text))
     ORDER BY id = CAST(:id AS uuid) DESC
     LIMIT 1
    """,
)

CREATE_FORK = Statement(
    "create_fork",
    f"""
    INSERT INTO runs (id, agent, status, trigger, trigger_id, concurrency_key, thread,
                      trace_context, enqueued_at, state, steps_used, extra_steps, model,
                      forked_from, forked_at_step)
    VALUES (CAST(:id AS uuid), CAST(:agent AS text), {lit(RunStatus.QUEUED)},
            CAST(:trigger AS json), CAST(:trigger_id AS text), CAST(:key AS text),
            CAST(:thread AS text), CAST(:trace_context AS json), now(), CAST(:state AS jsonb),
            CAST(:at AS int), CAST(:at AS int), CAST(:model AS text), CAST(:run_id AS uuid),
            CAST(:at AS int))
    ON CONFLICT DO NOTHING
    RETURNING *
    """,
)

# The fork's history: the original's first :count messages (exactly, step
# numbers included), its state steps up to :at, and a checkpoint at :at.
COPY_HISTORY = Statement(
    "copy_history",
    f"""
    WITH m AS (
        INSERT INTO messages (run_id, seq, body, step_index)
        SELECT CAST(:new_id AS uuid), seq, body, step_index FROM messages
         WHERE run_id = CAST(:run_id AS uuid) AND seq < CAST(:count AS int)
    ), s AS (
        INSERT INTO steps (run_id, kind, index, name, tool_call_id, input, output, error,
                           input_tokens, output_tokens, started_at, finished_at)
        SELECT CAST(:new_id AS uuid), kind, index, name, tool_call_id, input, output, error,
               input_tokens, output_tokens, started_at, finished_at
          FROM steps
         WHERE run_id = CAST(:run_id AS uuid) AND kind = {_STATE} AND index <= CAST(:at AS int)
         ORDER BY id
    )
    INSERT INTO checkpoints (run_id, step_index, message_count, finish_reason)
    VALUES (CAST(:new_id AS uuid), CAST(:at AS int), CAST(:count AS int),
            CAST(:finish_reason AS text))
    """,
)
