"""Claims and the fenced writes of a running run: the claim, the step's journal
write (``record_llm_step``), the step's commit (``commit_step``), end,
deferrals and the effect journal.

The step's journal write and its commit are single statements, data-modifying
CTE chains whose first link is the fence, so a step costs two round trips and
two commits however long the run's history is. They are the statements
prepared on every connection. Every other fenced write locks the run row
through the fence first.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from store.db import Tx, dumps
from store.errors import ConstraintViolation, InvalidTransition, LeaseLostError
from store.models import (
    Decision,
    Effect,
    EffectStatus,
    Ended,
    Fence,
    Interruption,
    NewApproval,
    Outcome,
    RequestKind,
    RetryWait,
    Run,
    RunError,
    RunStatus,
    StepCommit,
    StepRecord,
)
from store.models import EffectBegin as EffectBegin  # moved: plain data of the journal port
from store.pg.base import (
    PgBase,
    fence_params,
    outcome_params,
)
from store.rows import effect_from_row, run_from_row
from store.rules import (
    check_checkpoint,
    check_end,
    commit_outcome,
    commit_waits,
    crashed_error,
    retry_outcome,
    unpriced_call,
    with_state_step,
)
from store.sealing import Sealing
from store.statements import Statement
from store.validate import check_run_id

# The takeover limit (``:max``, RUNWRIGHT_MAX_TAKEOVERS; NULL: none): a takeover
# of a run with ``takeovers`` takeovers since its last progress is refused once
# it would be the ``max``-th, and the run ends ``failed/crashed`` instead
# (LAPSED_RUN, which writes the limit as CLAIM does, and END_CRASHED). Only
# a takeover counts (a claim from ``running`` whose claim expired): its previous
# execution died without ending. A claim from ``interrupted`` does not, since
# that execution drained cleanly; nor does one from ``queued``. Progress (the
# step's journal write, its commit) resets the count, so a long run that is
# taken over now and then but moves on each time is never stopped.
#
# Claimable: a claimable status, or running with an expired claim (a takeover)
# within the takeover limit; a queued run waiting to retry a model step only
# from its retry_at on; a queued run of a key only as the key's oldest queued
# run, by arrival (the order the database took them in, whatever the clocks of
# the servers that minted their ids); the key's one holder is enforced by
# runs_key_holder_idx.
CLAIM = Statement(
    "claim",
    """
    UPDATE runs AS r
       SET status = 'running',
           claim_owner = CAST(:owner AS text),
           claim_expires_at = COALESCE(CAST(:now AS timestamptz), now())
               + make_interval(secs => CAST(:ttl AS float8)),
           claim_epoch = r.claim_epoch + 1,
           takeovers = r.takeovers + CASE WHEN r.status = 'running' THEN 1 ELSE 0 END,
           -- A reservation an execution that died left (the shared budget's admission).
           reserved_tokens = 0,
           parked_key = NULL,
           started_at = COALESCE(r.started_at, now()),
           updated_at = now()
     WHERE r.id = CAST(:run_id AS uuid)
       AND (r.retry_at IS NULL OR r.retry_at <= COALESCE(CAST(:now AS timestamptz), now())
            OR r.status <> 'queued')
       AND (r.status IN ('queued', 'interrupted')
            OR (r.status = 'running'
                AND r.claim_expires_at < COALESCE(CAST(:now AS timestamptz), now())
                AND (CAST(:max AS int) IS NULL OR r.takeovers + 1 < CAST(:max AS int))))
       AND (r.concurrency_key IS NULL OR r.status <> 'queued' OR NOT EXISTS (
              SELECT 1 FROM runs AS o
               WHERE o.concurrency_key = r.concurrency_key
                 AND o.status = 'queued' AND o.arrival < r.arrival))
    RETURNING r.*
    """,
)

# The takeover the claim refused for the takeover limit, locked so that it
# ends once.
LAPSED_RUN = Statement(
    "lapsed_run",
    """
    SELECT r.claim_epoch, r.takeovers FROM runs AS r
     WHERE r.id = CAST(:run_id AS uuid) AND r.status = 'running'
       AND r.claim_expires_at < COALESCE(CAST(:now AS timestamptz), now())
       AND NOT (CAST(:max AS int) IS NULL OR r.takeovers + 1 < CAST(:max AS int))
       FOR UPDATE
    """,
)

END_CRASHED = Statement(
    "end_crashed",
    """
    UPDATE runs SET
        status = COALESCE(CAST(:o_status AS text), status),
        claim_owner = CASE WHEN CAST(:o_status AS text) IS NULL THEN claim_owner END,
        claim_expires_at = CASE WHEN CAST(:o_status AS text) IS NULL
                                THEN claim_expires_at END,
        finished_at = CASE WHEN CAST(:o_ended AS bool) THEN now() ELSE finished_at END,
        output = CASE WHEN CAST(:o_ended AS bool) THEN CAST(:o_output AS json)
                      ELSE output END,
        error_code = CASE WHEN CAST(:o_ended AS bool) THEN CAST(:o_code AS text)
                          ELSE error_code END,
        error_message = CASE WHEN CAST(:o_ended AS bool) THEN CAST(:o_message AS text)
                             ELSE error_message END,
        enqueued_at = CASE WHEN CAST(:o_requeue AS bool)
                           THEN COALESCE(CAST(:o_requeue_at AS timestamptz), now())
                           ELSE enqueued_at END,
        interrupted_reason = CASE WHEN CAST(:o_status AS text) IS NULL
                                  THEN interrupted_reason
                                  ELSE CAST(:o_interruption AS text) END,
        interrupted_by = CASE WHEN CAST(:o_status AS text) IS NULL THEN interrupted_by
                              WHEN CAST(:o_interruption AS text) IS NOT NULL
                              THEN claim_owner END,
        reserved_tokens = CASE WHEN CAST(:o_status AS text) IS NULL THEN reserved_tokens
                               ELSE 0 END,
        updated_at = now(),
        takeovers = CAST(:takeovers AS int)
     WHERE id = CAST(:run_id AS uuid)
    """,
)

RENEW = Statement(
    "renew",
    """
    UPDATE runs
       SET claim_expires_at = COALESCE(CAST(:now AS timestamptz), now())
                              + make_interval(secs => CAST(:ttl AS float8))
     WHERE id = CAST(:run_id AS uuid) AND claim_owner = CAST(:owner AS text)
       AND claim_epoch = CAST(:epoch AS int) AND status = 'running'
    RETURNING cancel_requested
    """,
)

LOCK_FENCED = Statement(
    "lock_fenced",
    """
    SELECT id FROM runs
     WHERE id = CAST(:run_id AS uuid) AND claim_owner = CAST(:owner AS text)
       AND claim_epoch = CAST(:epoch AS int) AND status = 'running'
       FOR UPDATE
    """,
)

FENCED = Statement(
    "fenced",
    """
    SELECT id FROM runs
     WHERE id = CAST(:run_id AS uuid) AND claim_owner = CAST(:owner AS text)
       AND claim_epoch = CAST(:epoch AS int) AND status = 'running'
    """,
)


# The step's journal write: the llm step row and the usage it cost, added only
# if the row is new (and, for a child run, to its ancestors' totals too).
RECORD_LLM_STEP = Statement(
    "runwright_record_llm_step",
    """
    WITH f AS (
        SELECT id, ancestors FROM runs
         WHERE id = CAST(:run_id AS uuid) AND claim_owner = CAST(:owner AS text)
           AND claim_epoch = CAST(:epoch AS int) AND status = 'running'
           FOR UPDATE
    ), ins AS (
        INSERT INTO steps (run_id, kind, index, name, input, output, error,
                           input_tokens, output_tokens, cost_usd, started_at, finished_at)
        SELECT f.id, 'llm', CAST(:index AS int), CAST(:name AS text), CAST(:input AS json),
               CAST(:output AS json), CAST(:error AS json), CAST(:input_tokens AS bigint),
               CAST(:output_tokens AS bigint), CAST(:cost_usd AS float8),
               CAST(:started_at AS timestamptz), CAST(:finished_at AS timestamptz)
          FROM f
        ON CONFLICT (run_id, index) WHERE kind = 'llm' DO NOTHING
        RETURNING run_id
    ), upd AS (
        UPDATE runs SET input_tokens = runs.input_tokens + CAST(:input_tokens AS bigint),
                        output_tokens = runs.output_tokens + CAST(:output_tokens AS bigint),
                        cost_usd = runs.cost_usd + COALESCE(CAST(:cost_usd AS float8), 0),
                        cost_unpriced = runs.cost_unpriced OR CAST(:unpriced AS bool),
                        usage_estimated = runs.usage_estimated
                                          OR CAST(:usage_estimated AS bool),
                        steps_used = GREATEST(runs.steps_used, CAST(:index AS int)),
                        takeovers = 0, retry_attempts = 0, retry_at = NULL, retry_since = NULL,
                        retry_error = NULL,
                        updated_at = now()
          FROM ins WHERE runs.id = ins.run_id
        RETURNING runs.id
    )
    SELECT (SELECT count(*) FROM f) AS fenced, (SELECT count(*) FROM upd) AS applied
    """,
    prepare=True,
)

# The journal write of a child run (runner/core/children.py): the step's usage is
# added to every ancestor's totals as well, by the ids the child's row lists
# (``runs.ancestors``, whatever the tree's depth), in the same statement, so a
# budget shared down the tree is read from one row; and the tokens the call
# reserved from it are given back.
RECORD_LLM_STEP_CHILD = Statement(
    "record_llm_step_child",
    """
    WITH f AS (
        SELECT id, ancestors FROM runs
         WHERE id = CAST(:run_id AS uuid) AND claim_owner = CAST(:owner AS text)
           AND claim_epoch = CAST(:epoch AS int) AND status = 'running'
           FOR UPDATE
    ), ins AS (
        INSERT INTO steps (run_id, kind, index, name, input, output, error,
                           input_tokens, output_tokens, cost_usd, started_at, finished_at)
        SELECT f.id, 'llm', CAST(:index AS int), CAST(:name AS text), CAST(:input AS json),
               CAST(:output AS json), CAST(:error AS json), CAST(:input_tokens AS bigint),
               CAST(:output_tokens AS bigint), CAST(:cost_usd AS float8),
               CAST(:started_at AS timestamptz), CAST(:finished_at AS timestamptz)
          FROM f
        ON CONFLICT (run_id, index) WHERE kind = 'llm' DO NOTHING
        RETURNING run_id
    ), upd AS (
        UPDATE runs SET input_tokens = runs.input_tokens + CAST(:input_tokens AS bigint),
                        output_tokens = runs.output_tokens + CAST(:output_tokens AS bigint),
                        cost_usd = runs.cost_usd + COALESCE(CAST(:cost_usd AS float8), 0),
                        cost_unpriced = runs.cost_unpriced OR CAST(:unpriced AS bool),
                        usage_estimated = runs.usage_estimated
                                          OR CAST(:usage_estimated AS bool),
                        steps_used = GREATEST(runs.steps_used, CAST(:index AS int)),
                        reserved_tokens = 0,
                        takeovers = 0, retry_attempts = 0, retry_at = NULL, retry_since = NULL,
                        retry_error = NULL,
                        updated_at = now()
          FROM ins WHERE runs.id = ins.run_id
        RETURNING runs.id
    ), anc AS (
        UPDATE runs SET input_tokens = runs.input_tokens + CAST(:input_tokens AS bigint),
                        output_tokens = runs.output_tokens + CAST(:output_tokens AS bigint),
                        cost_usd = runs.cost_usd + COALESCE(CAST(:cost_usd AS float8), 0),
                        cost_unpriced = runs.cost_unpriced OR CAST(:unpriced AS bool),
                        usage_estimated = runs.usage_estimated OR CAST(:usage_estimated AS bool)
          FROM f WHERE runs.id = ANY(f.ancestors) AND EXISTS (SELECT 1 FROM upd)
        RETURNING runs.id
    )
    SELECT (SELECT count(*) FROM f) AS fenced, (SELECT count(*) FROM upd) AS applied
    """,
)

# The step's commit, one code path (``PgExecution.commit_step``): the fence locks
# the run's row. The checkpoint moves only as ``store.rules.check_checkpoint``
# allows (not below the stored step index, never from more messages than are
# stored); when it does not, the statement changes nothing, and the caller
# raises that rule's error (reading the stored checkpoint: refusals are rare).
# The run update (progress, state, outcome), tool steps, approvals and the wait
# step hang off the checkpoint, so each statement is a transaction of its own.
#
# Every step appends: the checkpoint moves from exactly ``base_count`` messages,
# so the new messages are plain inserts. A replace (an equal index from fewer
# messages than are stored) is the rare case: the append statement saves
# nothing, and the caller runs the replace statement, which writes over the
# messages from ``base_count`` on and drops those past the new count.
#
# One code path, four statements: a step that asks for approvals also writes
# them and its wait step (a plain step does not pay for those inserts); the
# appends are prepared, the rare replaces are not.
COMMIT_STEP = Statement(
    "runwright_commit_step",
    """
    WITH f AS (
        SELECT id FROM runs
         WHERE id = CAST(:run_id AS uuid) AND claim_owner = CAST(:owner AS text)
           AND claim_epoch = CAST(:epoch AS int) AND status = 'running'
           FOR UPDATE
    ), cp AS (
        -- The run's first checkpoint only from no messages; a stored one moves
        -- only if the rule holds, checked on the conflicting row itself.
        INSERT INTO checkpoints AS c (run_id, step_index, message_count, finish_reason,
                                      created_at)
        SELECT f.id, CAST(:step_index AS int), CAST(:message_count AS int),
               CAST(:finish_reason AS text), now()
          FROM f
         WHERE CAST(:base_count AS int) = 0
            OR EXISTS (SELECT 1 FROM checkpoints AS x WHERE x.run_id = f.id)
        ON CONFLICT (run_id) DO UPDATE
           SET step_index = EXCLUDED.step_index,
               message_count = EXCLUDED.message_count,
               finish_reason = EXCLUDED.finish_reason,
               created_at = EXCLUDED.created_at
         WHERE c.step_index <= EXCLUDED.step_index
           AND c.message_count = CAST(:base_count AS int)
        RETURNING c.run_id
    ), r AS (
        UPDATE runs SET
            takeovers = 0,
            state = CASE WHEN CAST(:state_changed AS bool) THEN CAST(:state AS json)
                         ELSE state END,
            status = COALESCE(CAST(:o_status AS text), status),
            claim_owner = CASE WHEN CAST(:o_status AS text) IS NULL THEN claim_owner END,
            claim_expires_at = CASE WHEN CAST(:o_status AS text) IS NULL
                                    THEN claim_expires_at END,
            finished_at = CASE WHEN CAST(:o_ended AS bool) THEN now() ELSE finished_at END,
            output = CASE WHEN CAST(:o_ended AS bool) THEN CAST(:o_output AS json)
                          ELSE output END,
            error_code = CASE WHEN CAST(:o_ended AS bool) THEN CAST(:o_code AS text)
                              ELSE error_code END,
            error_message = CASE WHEN CAST(:o_ended AS bool) THEN CAST(:o_message AS text)
                                 ELSE error_message END,
            enqueued_at = CASE WHEN CAST(:o_requeue AS bool)
                               THEN COALESCE(CAST(:o_requeue_at AS timestamptz), now())
                               ELSE enqueued_at END,
            interrupted_reason = CASE WHEN CAST(:o_status AS text) IS NULL
                                      THEN interrupted_reason
                                      ELSE CAST(:o_interruption AS text) END,
            interrupted_by = CASE WHEN CAST(:o_status AS text) IS NULL THEN interrupted_by
                                  WHEN CAST(:o_interruption AS text) IS NOT NULL
                                  THEN claim_owner END,
            reserved_tokens = CASE WHEN CAST(:o_status AS text) IS NULL THEN reserved_tokens
                                   ELSE 0 END,
            updated_at = now()
          FROM cp WHERE runs.id = cp.run_id
        RETURNING 1
    ), m AS (
        INSERT INTO messages AS x (run_id, seq, body, step_index)
        SELECT cp.run_id, CAST(:base_count AS int) + m.ord - 1, m.body, CAST(:step_index AS int)
          FROM cp,
               json_array_elements(CAST(:messages AS json)) WITH ORDINALITY AS m(body, ord)
        RETURNING 1
    ), s AS (
        INSERT INTO steps (run_id, kind, index, name, tool_call_id, input, output, error,
                           started_at, finished_at)
        SELECT cp.run_id, s.kind, s.index, s.name, s.tool_call_id, s.input, s.output, s.error,
               s.started_at, s.finished_at
          FROM cp, json_to_recordset(CAST(:steps AS json)) AS s(
               kind text, index int, name text, tool_call_id text, input json, output json,
               error json, started_at timestamptz, finished_at timestamptz)
        ON CONFLICT DO NOTHING
        RETURNING 1
    )
    SELECT (SELECT count(*) FROM f) AS fenced, (SELECT count(*) FROM cp) AS saved,
           (SELECT count(*) FROM m) + (SELECT count(*) FROM s) AS written
    """,
    prepare=True,
)
COMMIT_STEP_WAIT = Statement(
    "runwright_commit_step_wait",
    """
    WITH f AS (
        SELECT id FROM runs
         WHERE id = CAST(:run_id AS uuid) AND claim_owner = CAST(:owner AS text)
           AND claim_epoch = CAST(:epoch AS int) AND status = 'running'
           FOR UPDATE
    ), cp AS (
        -- The run's first checkpoint only from no messages; a stored one moves
        -- only if the rule holds, checked on the conflicting row itself.
        INSERT INTO checkpoints AS c (run_id, step_index, message_count, finish_reason,
                                      created_at)
        SELECT f.id, CAST(:step_index AS int), CAST(:message_count AS int),
               CAST(:finish_reason AS text), now()
          FROM f
         WHERE CAST(:base_count AS int) = 0
            OR EXISTS (SELECT 1 FROM checkpoints AS x WHERE x.run_id = f.id)
        ON CONFLICT (run_id) DO UPDATE
           SET step_index = EXCLUDED.step_index,
               message_count = EXCLUDED.message_count,
               finish_reason = EXCLUDED.finish_reason,
               created_at = EXCLUDED.created_at
         WHERE c.step_index <= EXCLUDED.step_index
           AND c.message_count = CAST(:base_count AS int)
        RETURNING c.run_id
    ), r AS (
        UPDATE runs SET
            takeovers = 0,
            state = CASE WHEN CAST(:state_changed AS bool) THEN CAST(:state AS json)
                         ELSE state END,
            status = COALESCE(CAST(:o_status AS text), status),
            claim_owner = CASE WHEN CAST(:o_status AS text) IS NULL THEN claim_owner END,
            claim_expires_at = CASE WHEN CAST(:o_status AS text) IS NULL
                                    THEN claim_expires_at END,
            finished_at = CASE WHEN CAST(:o_ended AS bool) THEN now() ELSE finished_at END,
            output = CASE WHEN CAST(:o_ended AS bool) THEN CAST(:o_output AS json)
                          ELSE output END,
            error_code = CASE WHEN CAST(:o_ended AS bool) THEN CAST(:o_code AS text)
                              ELSE error_code END,
            error_message = CASE WHEN CAST(:o_ended AS bool) THEN CAST(:o_message AS text)
                                 ELSE error_message END,
            enqueued_at = CASE WHEN CAST(:o_requeue AS bool)
                               THEN COALESCE(CAST(:o_requeue_at AS timestamptz), now())
                               ELSE enqueued_at END,
            interrupted_reason = CASE WHEN CAST(:o_status AS text) IS NULL
                                      THEN interrupted_reason
                                      ELSE CAST(:o_interruption AS text) END,
            interrupted_by = CASE WHEN CAST(:o_status AS text) IS NULL THEN interrupted_by
                                  WHEN CAST(:o_interruption AS text) IS NOT NULL
                                  THEN claim_owner END,
            reserved_tokens = CASE WHEN CAST(:o_status AS text) IS NULL THEN reserved_tokens
                                   ELSE 0 END,
            updated_at = now()
          FROM cp WHERE runs.id = cp.run_id
        RETURNING 1
    ), m AS (
        INSERT INTO messages AS x (run_id, seq, body, step_index)
        SELECT cp.run_id, CAST(:base_count AS int) + m.ord - 1, m.body, CAST(:step_index AS int)
          FROM cp,
               json_array_elements(CAST(:messages AS json)) WITH ORDINALITY AS m(body, ord)
        RETURNING 1
    ), s AS (
        INSERT INTO steps (run_id, kind, index, name, tool_call_id, input, output, error,
                           started_at, finished_at)
        SELECT cp.run_id, s.kind, s.index, s.name, s.tool_call_id, s.input, s.output, s.error,
               s.started_at, s.finished_at
          FROM cp, json_to_recordset(CAST(:steps AS json)) AS s(
               kind text, index int, name text, tool_call_id text, input json, output json,
               error json, started_at timestamptz, finished_at timestamptz)
        ON CONFLICT DO NOTHING
        RETURNING 1
    ), a AS (
        INSERT INTO approvals (approval_id, run_id, step_index, tool_call_id, tool_name, input,
                               expires_at, on_expire, token_id, next_notify_at, kind, schema,
                               on_deny, decision, decided_at, decided_by, standing_from,
                               version, tool_kind, addressed_to)
        SELECT a.approval_id, cp.run_id, CAST(:step_index AS int), a.tool_call_id, a.tool_name,
               a.input, a.expires_at, a.on_expire, a.token_id, a.next_notify_at, a.kind,
               a.schema, a.on_deny, a.decision,
               CASE WHEN a.decision IS NULL THEN NULL ELSE now() END, a.decided_by,
               a.standing_from, a.version, a.tool_kind, a.addressed_to
          FROM cp, json_to_recordset(CAST(:approvals AS json)) AS a(
               approval_id uuid, tool_call_id text, tool_name text, input json,
               expires_at timestamptz, on_expire text, token_id text, next_notify_at timestamptz,
               kind text, schema json, on_deny text, decision text, decided_by text,
               standing_from uuid, version text, tool_kind text, addressed_to text)
        ON CONFLICT DO NOTHING
        RETURNING 1
    ), w AS (
        INSERT INTO steps (run_id, kind, index, name, input, started_at)
        SELECT cp.run_id, 'wait', CAST(:step_index AS int), CAST(:wait_name AS text),
               CAST(:wait_input AS json), now()
          FROM cp WHERE CAST(:wait_input AS json) IS NOT NULL
        ON CONFLICT DO NOTHING
        RETURNING 1
    )
    SELECT (SELECT count(*) FROM f) AS fenced, (SELECT count(*) FROM cp) AS saved,
           (SELECT count(*) FROM m) + (SELECT count(*) FROM s)
           + (SELECT count(*) FROM a) + (SELECT count(*) FROM w) AS written
    """,
    prepare=True,
)
COMMIT_STEP_REPLACE = Statement(
    "commit_step_replace",
    """
    WITH f AS (
        SELECT id FROM runs
         WHERE id = CAST(:run_id AS uuid) AND claim_owner = CAST(:owner AS text)
           AND claim_epoch = CAST(:epoch AS int) AND status = 'running'
           FOR UPDATE
    ), cp AS (
        -- The run's first checkpoint only from no messages; a stored one moves
        -- only if the rule holds, checked on the conflicting row itself.
        INSERT INTO checkpoints AS c (run_id, step_index, message_count, finish_reason,
                                      created_at)
        SELECT f.id, CAST(:step_index AS int), CAST(:message_count AS int),
               CAST(:finish_reason AS text), now()
          FROM f
         WHERE CAST(:base_count AS int) = 0
            OR EXISTS (SELECT 1 FROM checkpoints AS x WHERE x.run_id = f.id)
        ON CONFLICT (run_id) DO UPDATE
           SET step_index = EXCLUDED.step_index,
               message_count = EXCLUDED.message_count,
               finish_reason = EXCLUDED.finish_reason,
               created_at = EXCLUDED.created_at
         WHERE c.step_index <= EXCLUDED.step_index
           AND c.message_count >= CAST(:base_count AS int)
        RETURNING c.run_id
    ), gone AS (
        -- Messages past the new count (a replace that shortens); parameters,
        -- not a join with cp, so that the generic plan always uses the key.
        DELETE FROM messages
         WHERE run_id = CAST(:run_id AS uuid) AND seq >= CAST(:message_count AS int)
           AND EXISTS (SELECT 1 FROM cp)
        RETURNING 1
    ), r AS (
        UPDATE runs SET
            takeovers = 0,
            state = CASE WHEN CAST(:state_changed AS bool) THEN CAST(:state AS json)
                         ELSE state END,
            status = COALESCE(CAST(:o_status AS text), status),
            claim_owner = CASE WHEN CAST(:o_status AS text) IS NULL THEN claim_owner END,
            claim_expires_at = CASE WHEN CAST(:o_status AS text) IS NULL
                                    THEN claim_expires_at END,
            finished_at = CASE WHEN CAST(:o_ended AS bool) THEN now() ELSE finished_at END,
            output = CASE WHEN CAST(:o_ended AS bool) THEN CAST(:o_output AS json)
                          ELSE output END,
            error_code = CASE WHEN CAST(:o_ended AS bool) THEN CAST(:o_code AS text)
                              ELSE error_code END,
            error_message = CASE WHEN CAST(:o_ended AS bool) THEN CAST(:o_message AS text)
                                 ELSE error_message END,
            enqueued_at = CASE WHEN CAST(:o_requeue AS bool)
                               THEN COALESCE(CAST(:o_requeue_at AS timestamptz), now())
                               ELSE enqueued_at END,
            interrupted_reason = CASE WHEN CAST(:o_status AS text) IS NULL
                                      THEN interrupted_reason
                                      ELSE CAST(:o_interruption AS text) END,
            interrupted_by = CASE WHEN CAST(:o_status AS text) IS NULL THEN interrupted_by
                                  WHEN CAST(:o_interruption AS text) IS NOT NULL
                                  THEN claim_owner END,
            reserved_tokens = CASE WHEN CAST(:o_status AS text) IS NULL THEN reserved_tokens
                                   ELSE 0 END,
            updated_at = now()
          FROM cp WHERE runs.id = cp.run_id
        RETURNING 1
    ), m AS (
        INSERT INTO messages AS x (run_id, seq, body, step_index)
        SELECT cp.run_id, CAST(:base_count AS int) + m.ord - 1, m.body, CAST(:step_index AS int)
          FROM cp,
               json_array_elements(CAST(:messages AS json)) WITH ORDINALITY AS m(body, ord)
        ON CONFLICT (run_id, seq) DO UPDATE SET body = EXCLUDED.body,
            step_index = EXCLUDED.step_index
        RETURNING 1
    ), s AS (
        INSERT INTO steps (run_id, kind, index, name, tool_call_id, input, output, error,
                           started_at, finished_at)
        SELECT cp.run_id, s.kind, s.index, s.name, s.tool_call_id, s.input, s.output, s.error,
               s.started_at, s.finished_at
          FROM cp, json_to_recordset(CAST(:steps AS json)) AS s(
               kind text, index int, name text, tool_call_id text, input json, output json,
               error json, started_at timestamptz, finished_at timestamptz)
        ON CONFLICT DO NOTHING
        RETURNING 1
    )
    SELECT (SELECT count(*) FROM f) AS fenced, (SELECT count(*) FROM cp) AS saved,
           (SELECT count(*) FROM gone) +
           (SELECT count(*) FROM m) + (SELECT count(*) FROM s) AS written
    """,
)
COMMIT_STEP_REPLACE_WAIT = Statement(
    "commit_step_replace_wait",
    """
    WITH f AS (
        SELECT id FROM runs
         WHERE id = CAST(:run_id AS uuid) AND claim_owner = CAST(:owner AS text)
           AND claim_epoch = CAST(:epoch AS int) AND status = 'running'
           FOR UPDATE
    ), cp AS (
        -- The run's first checkpoint only from no messages; a stored one moves
        -- only if the rule holds, checked on the conflicting row itself.
        INSERT INTO checkpoints AS c (run_id, step_index, message_count, finish_reason,
                                      created_at)
        SELECT f.id, CAST(:step_index AS int), CAST(:message_count AS int),
               CAST(:finish_reason AS text), now()
          FROM f
         WHERE CAST(:base_count AS int) = 0
            OR EXISTS (SELECT 1 FROM checkpoints AS x WHERE x.run_id = f.id)
        ON CONFLICT (run_id) DO UPDATE
           SET step_index = EXCLUDED.step_index,
               message_count = EXCLUDED.message_count,
               finish_reason = EXCLUDED.finish_reason,
               created_at = EXCLUDED.created_at
         WHERE c.step_index <= EXCLUDED.step_index
           AND c.message_count >= CAST(:base_count AS int)
        RETURNING c.run_id
    ), gone AS (
        -- Messages past the new count (a replace that shortens); parameters,
        -- not a join with cp, so that the generic plan always uses the key.
        DELETE FROM messages
         WHERE run_id = CAST(:run_id AS uuid) AND seq >= CAST(:message_count AS int)
           AND EXISTS (SELECT 1 FROM cp)
        RETURNING 1
    ), r AS (
        UPDATE runs SET
            takeovers = 0,
            state = CASE WHEN CAST(:state_changed AS bool) THEN CAST(:state AS json)
                         ELSE state END,
            status = COALESCE(CAST(:o_status AS text), status),
            claim_owner = CASE WHEN CAST(:o_status AS text) IS NULL THEN claim_owner END,
            claim_expires_at = CASE WHEN CAST(:o_status AS text) IS NULL
                                    THEN claim_expires_at END,
            finished_at = CASE WHEN CAST(:o_ended AS bool) THEN now() ELSE finished_at END,
            output = CASE WHEN CAST(:o_ended AS bool) THEN CAST(:o_output AS json)
                          ELSE output END,
            error_code = CASE WHEN CAST(:o_ended AS bool) THEN CAST(:o_code AS text)
                              ELSE error_code END,
            error_message = CASE WHEN CAST(:o_ended AS bool) THEN CAST(:o_message AS text)
                                 ELSE error_message END,
            enqueued_at = CASE WHEN CAST(:o_requeue AS bool)
                               THEN COALESCE(CAST(:o_requeue_at AS timestamptz), now())
                               ELSE enqueued_at END,
            interrupted_reason = CASE WHEN CAST(:o_status AS text) IS NULL
                                      THEN interrupted_reason
                                      ELSE CAST(:o_interruption AS text) END,
            interrupted_by = CASE WHEN CAST(:o_status AS text) IS NULL THEN interrupted_by
                                  WHEN CAST(:o_interruption AS text) IS NOT NULL
                                  THEN claim_owner END,
            reserved_tokens = CASE WHEN CAST(:o_status AS text) IS NULL THEN reserved_tokens
                                   ELSE 0 END,
            updated_at = now()
          FROM cp WHERE runs.id = cp.run_id
        RETURNING 1
    ), m AS (
        INSERT INTO messages AS x (run_id, seq, body, step_index)
        SELECT cp.run_id, CAST(:base_count AS int) + m.ord - 1, m.body, CAST(:step_index AS int)
          FROM cp,
               json_array_elements(CAST(:messages AS json)) WITH ORDINALITY AS m(body, ord)
        ON CONFLICT (run_id, seq) DO UPDATE SET body = EXCLUDED.body,
            step_index = EXCLUDED.step_index
        RETURNING 1
    ), s AS (
        INSERT INTO steps (run_id, kind, index, name, tool_call_id, input, output, error,
                           started_at, finished_at)
        SELECT cp.run_id, s.kind, s.index, s.name, s.tool_call_id, s.input, s.output, s.error,
               s.started_at, s.finished_at
          FROM cp, json_to_recordset(CAST(:steps AS json)) AS s(
               kind text, index int, name text, tool_call_id text, input json, output json,
               error json, started_at timestamptz, finished_at timestamptz)
        ON CONFLICT DO NOTHING
        RETURNING 1
    ), a AS (
        INSERT INTO approvals (approval_id, run_id, step_index, tool_call_id, tool_name, input,
                               expires_at, on_expire, token_id, next_notify_at, kind, schema,
                               on_deny, decision, decided_at, decided_by, standing_from,
                               version, tool_kind, addressed_to)
        SELECT a.approval_id, cp.run_id, CAST(:step_index AS int), a.tool_call_id, a.tool_name,
               a.input, a.expires_at, a.on_expire, a.token_id, a.next_notify_at, a.kind,
               a.schema, a.on_deny, a.decision,
               CASE WHEN a.decision IS NULL THEN NULL ELSE now() END, a.decided_by,
               a.standing_from, a.version, a.tool_kind, a.addressed_to
          FROM cp, json_to_recordset(CAST(:approvals AS json)) AS a(
               approval_id uuid, tool_call_id text, tool_name text, input json,
               expires_at timestamptz, on_expire text, token_id text, next_notify_at timestamptz,
               kind text, schema json, on_deny text, decision text, decided_by text,
               standing_from uuid, version text, tool_kind text, addressed_to text)
        ON CONFLICT DO NOTHING
        RETURNING 1
    ), w AS (
        INSERT INTO steps (run_id, kind, index, name, input, started_at)
        SELECT cp.run_id, 'wait', CAST(:step_index AS int), CAST(:wait_name AS text),
               CAST(:wait_input AS json), now()
          FROM cp WHERE CAST(:wait_input AS json) IS NOT NULL
        ON CONFLICT DO NOTHING
        RETURNING 1
    )
    SELECT (SELECT count(*) FROM f) AS fenced, (SELECT count(*) FROM cp) AS saved,
           (SELECT count(*) FROM gone) +
           (SELECT count(*) FROM m) + (SELECT count(*) FROM s)
           + (SELECT count(*) FROM a) + (SELECT count(*) FROM w) AS written
    """,
)

# A model step that failed transiently goes back to the queue, not claimable
# before retry_at (the outcome's not-before, which is also its enqueued_at, so
# tick() re-enqueues it RUNWRIGHT_REENQUEUE_SECONDS after that time if its
# delayed message is lost).
DEFER_RETRY = Statement(
    "defer_retry",
    """
    UPDATE runs SET
        status = COALESCE(CAST(:o_status AS text), status),
        claim_owner = CASE WHEN CAST(:o_status AS text) IS NULL THEN claim_owner END,
        claim_expires_at = CASE WHEN CAST(:o_status AS text) IS NULL
                                THEN claim_expires_at END,
        finished_at = CASE WHEN CAST(:o_ended AS bool) THEN now() ELSE finished_at END,
        output = CASE WHEN CAST(:o_ended AS bool) THEN CAST(:o_output AS json)
                      ELSE output END,
        error_code = CASE WHEN CAST(:o_ended AS bool) THEN CAST(:o_code AS text)
                          ELSE error_code END,
        error_message = CASE WHEN CAST(:o_ended AS bool) THEN CAST(:o_message AS text)
                             ELSE error_message END,
        enqueued_at = CASE WHEN CAST(:o_requeue AS bool)
                           THEN COALESCE(CAST(:o_requeue_at AS timestamptz), now())
                           ELSE enqueued_at END,
        interrupted_reason = CASE WHEN CAST(:o_status AS text) IS NULL
                                  THEN interrupted_reason
                                  ELSE CAST(:o_interruption AS text) END,
        interrupted_by = CASE WHEN CAST(:o_status AS text) IS NULL THEN interrupted_by
                              WHEN CAST(:o_interruption AS text) IS NOT NULL
                              THEN claim_owner END,
        reserved_tokens = CASE WHEN CAST(:o_status AS text) IS NULL THEN reserved_tokens
                               ELSE 0 END,
        updated_at = now(),
        retry_at = CAST(:o_requeue_at AS timestamptz),
        retry_attempts = CAST(:attempts AS int),
        retry_since = CAST(:since AS timestamptz),
        retry_error = CAST(:error AS text)
     WHERE id = CAST(:run_id AS uuid) AND claim_owner = CAST(:owner AS text)
       AND claim_epoch = CAST(:epoch AS int) AND status = 'running'
    RETURNING id
    """,
)

END_RUN = Statement(
    "end_run",
    """
    UPDATE runs SET
        status = COALESCE(CAST(:o_status AS text), status),
        claim_owner = CASE WHEN CAST(:o_status AS text) IS NULL THEN claim_owner END,
        claim_expires_at = CASE WHEN CAST(:o_status AS text) IS NULL
                                THEN claim_expires_at END,
        finished_at = CASE WHEN CAST(:o_ended AS bool) THEN now() ELSE finished_at END,
        output = CASE WHEN CAST(:o_ended AS bool) THEN CAST(:o_output AS json)
                      ELSE output END,
        error_code = CASE WHEN CAST(:o_ended AS bool) THEN CAST(:o_code AS text)
                          ELSE error_code END,
        error_message = CASE WHEN CAST(:o_ended AS bool) THEN CAST(:o_message AS text)
                             ELSE error_message END,
        enqueued_at = CASE WHEN CAST(:o_requeue AS bool)
                           THEN COALESCE(CAST(:o_requeue_at AS timestamptz), now())
                           ELSE enqueued_at END,
        interrupted_reason = CASE WHEN CAST(:o_status AS text) IS NULL
                                  THEN interrupted_reason
                                  ELSE CAST(:o_interruption AS text) END,
        interrupted_by = CASE WHEN CAST(:o_status AS text) IS NULL THEN interrupted_by
                              WHEN CAST(:o_interruption AS text) IS NOT NULL
                              THEN claim_owner END,
        reserved_tokens = CASE WHEN CAST(:o_status AS text) IS NULL THEN reserved_tokens
                               ELSE 0 END,
        updated_at = now()
     WHERE id = CAST(:run_id AS uuid) AND claim_owner = CAST(:owner AS text)
       AND claim_epoch = CAST(:epoch AS int) AND status = 'running'
    RETURNING id
    """,
)

# A run whose agent this process does not know, given back within the grace.
DEFER = Statement(
    "defer",
    """
    UPDATE runs SET
        status = COALESCE(CAST(:o_status AS text), status),
        claim_owner = CASE WHEN CAST(:o_status AS text) IS NULL THEN claim_owner END,
        claim_expires_at = CASE WHEN CAST(:o_status AS text) IS NULL
                                THEN claim_expires_at END,
        finished_at = CASE WHEN CAST(:o_ended AS bool) THEN now() ELSE finished_at END,
        output = CASE WHEN CAST(:o_ended AS bool) THEN CAST(:o_output AS json)
                      ELSE output END,
        error_code = CASE WHEN CAST(:o_ended AS bool) THEN CAST(:o_code AS text)
                          ELSE error_code END,
        error_message = CASE WHEN CAST(:o_ended AS bool) THEN CAST(:o_message AS text)
                             ELSE error_message END,
        enqueued_at = CASE WHEN CAST(:o_requeue AS bool)
                           THEN COALESCE(CAST(:o_requeue_at AS timestamptz), now())
                           ELSE enqueued_at END,
        interrupted_reason = CASE WHEN CAST(:o_status AS text) IS NULL
                                  THEN interrupted_reason
                                  ELSE CAST(:o_interruption AS text) END,
        interrupted_by = CASE WHEN CAST(:o_status AS text) IS NULL THEN interrupted_by
                              WHEN CAST(:o_interruption AS text) IS NOT NULL
                              THEN claim_owner END,
        reserved_tokens = CASE WHEN CAST(:o_status AS text) IS NULL THEN reserved_tokens
                               ELSE 0 END,
        updated_at = now(),
        agent_missing_since = COALESCE(agent_missing_since, now())
     WHERE id = CAST(:run_id AS uuid) AND claim_owner = CAST(:owner AS text)
       AND claim_epoch = CAST(:epoch AS int) AND status = 'running'
       AND (agent_missing_since IS NULL
            OR agent_missing_since > now() - make_interval(secs => CAST(:grace AS float8)))
    RETURNING id
    """,
)

BEGIN_EFFECT = Statement(
    "begin_effect",
    """
    INSERT INTO effects (run_id, key, tool, input, status, claim_epoch, started_at, version)
    VALUES (CAST(:run_id AS uuid), CAST(:key AS text), CAST(:tool AS text),
            CAST(:input AS json), 'started', CAST(:epoch AS int), now(),
            CAST(:version AS text))
    ON CONFLICT DO NOTHING
    RETURNING *
    """,
)

RERUN_EFFECT = Statement(
    "rerun_effect",
    """
    UPDATE effects SET attempts = attempts + 1, claim_epoch = CAST(:epoch AS int),
                       started_at = now()
     WHERE run_id = CAST(:run_id AS uuid) AND key = CAST(:key AS text)
    RETURNING *
    """,
)

FINISH_EFFECT = Statement(
    "finish_effect",
    """
    UPDATE effects SET status = CAST(:status AS text), output = CAST(:output AS json),
                       error = CAST(:error AS text), finished_at = now()
     WHERE run_id = CAST(:run_id AS uuid) AND key = CAST(:key AS text)
    RETURNING *
    """,
)

# A started effect whose call never went out (its server could not be reached,
# or refused the credentials): the row goes, so the step's next execution
# makes the call afresh rather than finding an outcome it must call unknown.
# Only this epoch's own first attempt: a retry's earlier attempts may have run.
WITHDRAW_EFFECT = Statement(
    "withdraw_effect",
    """
    DELETE FROM effects
     WHERE run_id = CAST(:run_id AS uuid) AND key = CAST(:key AS text)
       AND status = 'started' AND claim_epoch = CAST(:epoch AS int) AND attempts = 1
    RETURNING key
    """,
)

EFFECT_FOR_KEY = Statement(
    "effect_for_key",
    "SELECT * FROM effects WHERE run_id = CAST(:run_id AS uuid) AND key = CAST(:key AS text)",
)

CHECKPOINT_AT = Statement(
    "checkpoint_at",
    "SELECT step_index, message_count FROM checkpoints WHERE run_id = CAST(:run_id AS uuid)",
)


def lost_lease(fence: Fence) -> LeaseLostError:
    return LeaseLostError(f"run {fence.run_id} is no longer claimed by this execution")


def _approval_json(a: NewApproval, sealing: Sealing) -> dict[str, Any]:
    granted = a.granted
    return {
        "approval_id": a.approval_id,
        "tool_call_id": a.tool_call_id,
        "tool_name": a.tool_name,
        "input": sealing.seal(a.input, "approvals", "input", a.approval_id),
        "expires_at": a.expires_at,
        "on_expire": a.on_expire,
        "token_id": a.token_id,
        "next_notify_at": a.next_notify_at if granted is None else None,
        "kind": a.kind.value,
        "schema": a.schema,
        "on_deny": a.on_deny.value,
        # A call a standing approval decides is recorded decided, by its grant.
        "decision": None if granted is None else Decision.APPROVED.value,
        "decided_by": None if granted is None else granted.granted_by,
        "standing_from": None if granted is None else granted.approval_id,
        "version": a.version,
        "tool_kind": a.tool_kind,
        "addressed_to": a.addressed_to,
    }


def _wait_name(asked: list[NewApproval]) -> str:
    """The wait step's name: ``approval``, or ``input`` when the step asks
    only questions."""
    if all(a.kind is RequestKind.INPUT for a in asked):
        return RequestKind.INPUT.value
    return RequestKind.APPROVAL.value


def _step_json(step: StepRecord) -> dict[str, Any]:
    return {
        "kind": step.kind.value,
        "index": step.index,
        "name": step.name,
        "tool_call_id": step.tool_call_id,
        "input": step.input,
        "output": step.output,
        "error": step.error,
        "started_at": step.started_at,
        "finished_at": step.finished_at,
    }


class PgExecution(PgBase):
    # ---------------------------------------------------------------- claims

    def claim_run(
        self,
        run_id: str,
        owner: str,
        ttl_seconds: float,
        *,
        max_takeovers: int | None = None,
        now: datetime | None = None,
    ) -> Run | Ended | None:
        """Claim the run for ``owner`` for ``ttl_seconds``, measured from
        ``now`` (None: Postgres's clock, as in production; runner/core/clock.py)."""
        run_id = check_run_id(run_id)
        params = {
            "run_id": run_id,
            "owner": owner,
            "ttl": ttl_seconds,
            "max": max_takeovers,
            "now": now,
        }
        try:
            row = self.db.first(CLAIM, params)
        except ConstraintViolation as exc:
            if exc.constraint == "runs_key_holder_idx":
                return None  # another run holds the concurrency key
            raise
        if row is not None:
            self._committed(run_id)
            return run_from_row(row, sealing=self.sealing)
        if max_takeovers is not None and self._end_crashed(run_id, max_takeovers, now):
            self._committed(run_id)
            return self._after_end(run_id, Outcome(RunStatus.FAILED))
        with self.db.tx() as tx:
            self._require_run(tx, run_id)
        return None

    def _end_crashed(self, run_id: str, max_takeovers: int, now: datetime | None) -> bool:
        """The takeover the claim refused for the takeover limit (``CLAIM``):
        end the run failed/crashed, once."""
        with self.db.tx() as tx:
            row = tx.first(LAPSED_RUN, {"run_id": run_id, "max": max_takeovers, "now": now})
            if row is None:
                return False
            error = crashed_error(row["claim_epoch"], max_takeovers)
            tx.execute(
                END_CRASHED,
                {
                    "run_id": run_id,
                    "takeovers": row["takeovers"] + 1,
                    **outcome_params(Outcome(RunStatus.FAILED, error=error), run_id),
                },
            )
            return True

    def renew(self, fence: Fence, ttl_seconds: float, *, now: datetime | None = None) -> bool:
        row = self.db.first(RENEW, {**fence_params(fence), "ttl": ttl_seconds, "now": now})
        if row is None:
            raise lost_lease(fence)
        return bool(row["cancel_requested"])

    # --------------------------------------------------------- fenced writes

    def _lock_fenced(self, tx: Tx, fence: Fence) -> None:
        if tx.first(LOCK_FENCED, fence_params(fence)) is None:
            raise lost_lease(fence)

    def record_llm_step(self, fence: Fence, step: StepRecord, *, rolls_up: bool = False) -> bool:
        """The step's journal write; ``rolls_up``: the run is a child, whose
        usage counts toward its ancestors' totals too."""
        usage = step.usage
        sealed = self.sealing.step(_step_json(step), fence.run_id)
        params = {
            **fence_params(fence),
            "index": step.index,
            "name": step.name,
            "input": dumps(sealed["input"]),
            "output": dumps(sealed["output"]),
            "error": dumps(sealed["error"]),
            "input_tokens": usage.input_tokens if usage else 0,
            "output_tokens": usage.output_tokens if usage else 0,
            "usage_estimated": bool(usage and usage.estimated),
            "cost_usd": step.cost_usd,
            "unpriced": unpriced_call(usage, step.cost_usd),
            "started_at": step.started_at,
            "finished_at": step.finished_at,
        }
        row = self.db.first(RECORD_LLM_STEP_CHILD if rolls_up else RECORD_LLM_STEP, params)
        assert row is not None  # the statement always returns its counts
        if not row["fenced"]:
            raise lost_lease(fence)
        if not row["applied"]:
            return False
        self._committed(fence.run_id)
        return True

    def commit_step(self, fence: Fence, commit: StepCommit) -> Ended | None:
        outcome = commit_outcome(commit)
        run_id = fence.run_id
        approvals = [_approval_json(a, self.sealing) for a in commit.approvals]
        waits = commit_waits(commit)
        asked = [a for a in commit.approvals if a.pending]
        wait_input: dict[str, Any] = {"approval_ids": [a.approval_id for a in asked]}
        if commit.child_calls:
            wait_input["child_calls"] = list(commit.child_calls)
        params: dict[str, Any] = {
            **fence_params(fence),
            **outcome_params(outcome, run_id, self.sealing),
            "step_index": commit.step_index,
            "base_count": commit.base_count,
            "message_count": commit.base_count + len(commit.new_messages),
            "finish_reason": commit.finish_reason,
            "messages": dumps(
                self.sealing.messages(commit.new_messages, run_id, commit.base_count)
            ),
            "steps": dumps(
                [self.sealing.step(_step_json(s), run_id) for s in with_state_step(commit)]
            ),
            "state_changed": commit.state_changed,
            "state": dumps(self.sealing.seal(commit.state, "runs", "state", run_id))
            if commit.state_changed
            else None,
            "approvals": dumps(approvals) if approvals else None,
            "wait_input": dumps(wait_input) if waits else None,
            "wait_name": _wait_name(asked) if asked else "children",
        }
        # The approvals (and the wait step) are written by the statement that
        # waits: a plain step does not pay for those inserts.
        writes_waits = waits or bool(commit.approvals)
        # Each statement is its own transaction, one round trip: one that does
        # not save the checkpoint changes nothing (everything hangs off it).
        statement = COMMIT_STEP_WAIT if writes_waits else COMMIT_STEP
        if not self._commit(fence, statement, params):
            # Not an append: raise the rule's error, or replace stored messages.
            stored = self.db.first(CHECKPOINT_AT, {"run_id": fence.run_id})
            at = None if stored is None else (stored["step_index"], stored["message_count"])
            check_checkpoint(fence.run_id, at, commit)
            replace = COMMIT_STEP_REPLACE_WAIT if writes_waits else COMMIT_STEP_REPLACE
            if not self._commit(fence, replace, params):
                raise AssertionError("the commit refused a checkpoint that the rule allows")
        self._committed(fence.run_id)
        return self._after_end(fence.run_id, outcome)

    def _commit(self, fence: Fence, statement: Statement, params: dict[str, Any]) -> bool:
        """Run one of the step's commit statements; whether it saved the checkpoint."""
        row = self.db.first(statement, params)
        assert row is not None  # the statement always returns its counts
        if not row["fenced"]:
            raise lost_lease(fence)
        return bool(row["saved"])

    def end(self, fence: Fence, outcome: Outcome) -> Ended:
        check_end(outcome)
        params = {**fence_params(fence), **outcome_params(outcome, fence.run_id, self.sealing)}
        if self.db.first(END_RUN, params) is None:
            raise lost_lease(fence)
        self._committed(fence.run_id)
        ended = self._after_end(fence.run_id, outcome)
        assert ended is not None
        return ended

    def defer_missing_agent(self, fence: Fence, grace_seconds: float) -> Run | None:
        params = {
            **fence_params(fence),
            **outcome_params(
                Outcome(RunStatus.INTERRUPTED, interruption=Interruption.AGENT_MISSING),
                fence.run_id,
            ),
            "grace": grace_seconds,
        }
        with self.db.tx() as tx:
            deferred = tx.first(DEFER, params)
            if deferred is None and tx.first(FENCED, fence_params(fence)) is None:
                raise lost_lease(fence)
        if deferred is None:
            return None
        self._committed(fence.run_id)
        return self.get_run(fence.run_id)

    # ---------------------------------------------------------------- effects

    def defer_retry(self, fence: Fence, wait: RetryWait, error: RunError | None = None) -> Ended:
        outcome = retry_outcome(wait, error)
        params = {
            **fence_params(fence),
            **outcome_params(outcome, fence.run_id, self.sealing),
            "attempts": wait.attempts,
            "since": wait.since,
            "error": wait.error,
        }
        if self.db.first(DEFER_RETRY, params) is None:
            raise lost_lease(fence)
        self._committed(fence.run_id)
        ended = self._after_end(fence.run_id, outcome)
        assert ended is not None
        return ended

    def begin_effect(
        self,
        fence: Fence,
        key: str,
        tool: str,
        input: object,
        *,
        rerun_started: bool,
        version: str | None = None,
    ) -> EffectBegin:
        """Journal the effect ``started`` under ``version`` (the agent's), if
        it may run. One found ``started`` by an earlier execution runs again
        only if ``rerun_started`` and it was started under the same version
        (an effect of another version's tools is of unknown outcome)."""
        params = {
            **fence_params(fence),
            "key": key,
            "tool": tool,
            "input": dumps(self.sealing.seal(input, "effects", "input", fence.run_id, key)),
            "version": version,
        }
        with self.db.tx() as tx:
            self._lock_fenced(tx, fence)
            row = tx.first(BEGIN_EFFECT, params)
            if row is not None:
                return EffectBegin(effect_from_row(row, sealing=self.sealing), execute=True)
            found = tx.first(EFFECT_FOR_KEY, params)
            assert found is not None  # the insert conflicted on this key
            existing = effect_from_row(found, sealing=self.sealing)
            if existing.status is EffectStatus.STARTED and existing.epoch == fence.epoch:
                return EffectBegin(existing, execute=True)  # our own retried write
            same_version = existing.version is None or existing.version == version
            if existing.status is EffectStatus.STARTED and rerun_started and same_version:
                row = tx.first(RERUN_EFFECT, params)
                assert row is not None
                return EffectBegin(effect_from_row(row, sealing=self.sealing), execute=True)
            return EffectBegin(existing, execute=False)

    def withdraw_effect(self, fence: Fence, key: str) -> bool:
        """Take back ``key``'s start: its call never went out. False when the
        row is not this epoch's first, unfinished attempt (then it stays)."""
        with self.db.tx() as tx:
            self._lock_fenced(tx, fence)
            return tx.first(WITHDRAW_EFFECT, {**fence_params(fence), "key": key}) is not None

    def finish_effect(
        self, fence: Fence, key: str, *, output: object = None, error: str | None = None
    ) -> Effect:
        status = EffectStatus.FAILED if error is not None else EffectStatus.COMPLETED
        params = {
            **fence_params(fence),
            "key": key,
            "status": status.value,
            "output": None
            if output is None
            else dumps(self.sealing.seal(output, "effects", "output", fence.run_id, key)),
            "error": error,
        }
        with self.db.tx() as tx:
            self._lock_fenced(tx, fence)
            row = tx.first(FINISH_EFFECT, params)
        if row is None:
            raise InvalidTransition(f"effect {key!r} was never started")
        return effect_from_row(row, sealing=self.sealing)
