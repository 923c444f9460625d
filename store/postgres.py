"""The Postgres store: run semantics on top of ``store/db.py``.

Hot-path writes (W1, the common W2) are single statements: a data-modifying
CTE chain whose first link is the fence. A step therefore costs two round
trips plus two commits, however long the run's history is.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Any

import sqlalchemy as sa
import sqlalchemy.exc
from sqlalchemy.dialects.postgresql import insert as pg_insert

from store import schema as t
from store.base import (
    CancelResult,
    DecisionResult,
    EffectBegin,
    StartPoint,
    ThreadStart,
    check_approval_id,
    check_decidable,
    check_payload,
    check_run_id,
    crashed_error,
    takeover_crashes,
)
from store.config import DEFAULT_MAX_PAYLOAD_BYTES
from store.db import Prepared, db_errors, dumps, is_unique_violation, raw_cursor, shared_engine
from store.errors import (
    ApprovalNotFound,
    CheckpointConflict,
    InvalidTransition,
    LeaseLostError,
    RunNotFound,
)
from store.models import (
    KEY_HOLDING,
    Approval,
    Checkpoint,
    Claim,
    Decision,
    DueNotification,
    Effect,
    EffectStatus,
    Fence,
    Message,
    NewRun,
    Outcome,
    Run,
    RunError,
    RunStatus,
    Settled,
    Step,
    StepCommit,
    StepKind,
    StepRecord,
)
from store.rows import approval_from_row, effect_from_row, run_from_row, step_from_row

_NOW = "COALESCE(CAST(:now AS timestamptz), now())"
_FENCE = "id = :run_id AND claim_owner = :owner AND claim_epoch = :epoch AND status = 'running'"

_CLAIM = sa.text(
    """
    UPDATE runs AS r
       SET status = 'running',
           claim_owner = :owner,
           claim_expires_at = now() + make_interval(secs => :ttl),
           claim_epoch = r.claim_epoch + 1,
           takeovers = r.takeovers + CASE WHEN r.status = 'running' THEN 1 ELSE 0 END,
           started_at = COALESCE(r.started_at, now()),
           updated_at = now()
     WHERE r.id = :run_id
       AND (r.status IN ('queued', 'interrupted')
            OR (r.status = 'running' AND r.claim_expires_at < now()
                AND (CAST(:max AS int) IS NULL OR r.takeovers + 1 < CAST(:max AS int))))
       AND (r.concurrency_key IS NULL OR r.status <> 'queued' OR NOT EXISTS (
              SELECT 1 FROM runs AS o
               WHERE o.concurrency_key = r.concurrency_key
                 AND o.status = 'queued' AND o.id < r.id))
    RETURNING r.*
    """
)

_RENEW = sa.text(
    f"""
    UPDATE runs SET claim_expires_at = now() + make_interval(secs => :ttl)
     WHERE {_FENCE}
    RETURNING cancel_requested
    """
)

_PFENCE = (
    "id = CAST(:run_id AS uuid) AND claim_owner = CAST(:owner AS text)"
    " AND claim_epoch = CAST(:epoch AS int) AND status = 'running'"
)

# W1: the llm step row and the usage it cost, added only if the row is new.
_W1 = Prepared(
    "runwright_w1",
    f"""
    WITH f AS (
        SELECT id FROM runs WHERE {_PFENCE} FOR UPDATE
    ), ins AS (
        INSERT INTO steps (run_id, kind, index, name, input, output, error,
                           input_tokens, output_tokens, started_at, finished_at)
        SELECT f.id, 'llm', CAST(:index AS int), CAST(:name AS text), CAST(:input AS jsonb),
               CAST(:output AS jsonb), CAST(:error AS jsonb), CAST(:input_tokens AS bigint),
               CAST(:output_tokens AS bigint), CAST(:started_at AS timestamptz),
               CAST(:finished_at AS timestamptz)
          FROM f
        ON CONFLICT (run_id, index) WHERE kind = 'llm' DO NOTHING
        RETURNING run_id
    ), upd AS (
        UPDATE runs SET input_tokens = runs.input_tokens + CAST(:input_tokens AS bigint),
                        output_tokens = runs.output_tokens + CAST(:output_tokens AS bigint),
                        steps_used = GREATEST(runs.steps_used, CAST(:index AS int)),
                        takeovers = 0,
                        updated_at = now()
          FROM ins WHERE runs.id = ins.run_id
        RETURNING runs.id
    )
    SELECT (SELECT count(*) FROM f) AS fenced, (SELECT count(*) FROM upd) AS applied
    """,
)

_TOOL_STEPS_FROM_JSON = sa.text(
    """
    INSERT INTO steps (run_id, kind, index, name, tool_call_id, input, output, error,
                       started_at, finished_at)
    SELECT CAST(:run_id AS uuid), s.kind, s.index, s.name, s.tool_call_id, s.input, s.output,
           s.error, s.started_at, s.finished_at
      FROM jsonb_to_recordset(CAST(:steps AS jsonb)) AS s(
           kind text, index int, name text, tool_call_id text, input jsonb, output jsonb,
           error jsonb, started_at timestamptz, finished_at timestamptz)
    ON CONFLICT DO NOTHING
    """
)

_MESSAGES_FROM_JSON = sa.text(
    """
    INSERT INTO messages (run_id, seq, body)
    SELECT CAST(:run_id AS uuid), :base_count + m.ord - 1, m.body
      FROM jsonb_array_elements(CAST(:messages AS jsonb)) WITH ORDINALITY AS m(body, ord)
    """
)

# The common W2 in one statement: the run update (state, outcome) is the fence;
# the checkpoint row only moves forward from exactly ``base_count`` messages
# (or is the run's first); messages and tool steps hang off the checkpoint.
_W2 = Prepared(
    "runwright_w2",
    f"""
    WITH f AS (
        UPDATE runs SET
            updated_at = now(),
            takeovers = 0,
            state = CASE WHEN CAST(:state_changed AS bool) THEN CAST(:state AS jsonb)
                         ELSE state END,
            status = COALESCE(CAST(:o_status AS text), status),
            claim_owner = CASE WHEN CAST(:o_status AS text) IS NULL THEN claim_owner END,
            claim_expires_at = CASE WHEN CAST(:o_status AS text) IS NULL
                                    THEN claim_expires_at END,
            finished_at = CASE WHEN CAST(:o_settled AS bool) THEN now() ELSE finished_at END,
            output = CASE WHEN CAST(:o_settled AS bool) THEN CAST(:o_output AS jsonb)
                          ELSE output END,
            error_code = CASE WHEN CAST(:o_settled AS bool) THEN CAST(:o_code AS text)
                              ELSE error_code END,
            error_message = CASE WHEN CAST(:o_settled AS bool) THEN CAST(:o_message AS text)
                                 ELSE error_message END,
            enqueued_at = CASE WHEN CAST(:o_status AS text) = 'interrupted' THEN now()
                               ELSE enqueued_at END
         WHERE {_PFENCE}
        RETURNING id
    ), cp AS (
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
         WHERE c.step_index < EXCLUDED.step_index
           AND c.message_count = CAST(:base_count AS int)
        RETURNING c.run_id
    ), m AS (
        INSERT INTO messages (run_id, seq, body)
        SELECT cp.run_id, CAST(:base_count AS int) + m.ord - 1, m.body
          FROM cp,
               jsonb_array_elements(CAST(:messages AS jsonb)) WITH ORDINALITY AS m(body, ord)
        RETURNING 1
    ), s AS (
        INSERT INTO steps (run_id, kind, index, name, tool_call_id, input, output, error,
                           started_at, finished_at)
        SELECT cp.run_id, s.kind, s.index, s.name, s.tool_call_id, s.input, s.output, s.error,
               s.started_at, s.finished_at
          FROM cp, jsonb_to_recordset(CAST(:steps AS jsonb)) AS s(
               kind text, index int, name text, tool_call_id text, input jsonb, output jsonb,
               error jsonb, started_at timestamptz, finished_at timestamptz)
        ON CONFLICT DO NOTHING
        RETURNING 1
    )
    SELECT (SELECT count(*) FROM f) AS fenced, (SELECT count(*) FROM cp) AS saved,
           (SELECT count(*) FROM m) AS appended, (SELECT count(*) FROM s) AS stepped
    """,
)

# An execution's start: the checkpoint with its messages, and whether the next
# step's W1 is already journaled (a process died between W1 and W2), in one trip.
_START_POINT = sa.text(
    """
    SELECT c.step_index, c.message_count, c.finish_reason, c.created_at,
           COALESCE((SELECT jsonb_agg(m.body ORDER BY m.seq) FROM messages AS m
                      WHERE m.run_id = r.id AND m.seq < c.message_count), '[]') AS messages,
           EXISTS (SELECT 1 FROM steps AS s
                    WHERE s.run_id = r.id AND s.kind = 'llm'
                      AND s.index = COALESCE(c.step_index, 0) + 1) AS journaled
      FROM (SELECT CAST(:run_id AS uuid) AS id) AS r
      LEFT JOIN checkpoints AS c ON c.run_id = r.id
    """
)

_RUN_WITH_WAIT = """
    SELECT r.*, w.approval_id AS w_approval_id, w.tool_name AS w_tool_name,
           w.input AS w_input, w.expires_at AS w_expires_at, w.token_id AS w_token_id,
           w.notified_at AS w_notified_at
      FROM runs AS r
      LEFT JOIN LATERAL (
           SELECT a.approval_id, a.tool_name, a.input, a.expires_at, a.token_id, a.notified_at
             FROM approvals AS a
            WHERE a.run_id = r.id AND a.decision IS NULL AND r.status = 'waiting'
            ORDER BY a.created_at, a.approval_id
            LIMIT 1) AS w ON true
"""


def _fence_params(fence: Fence) -> dict[str, Any]:
    return {"run_id": fence.run_id, "owner": fence.owner, "epoch": fence.epoch}


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


def _outcome_values(outcome: Outcome) -> dict[str, Any]:
    """Column values for moving a running run to ``outcome.status``."""
    values: dict[str, Any] = {
        "status": outcome.status.value,
        "claim_owner": None,
        "claim_expires_at": None,
        "updated_at": sa.func.now(),
    }
    if outcome.status.settled:
        values["finished_at"] = sa.func.now()
        values["output"] = outcome.output
        values["error_code"] = outcome.error.code if outcome.error else None
        values["error_message"] = outcome.error.message if outcome.error else None
    if outcome.status is RunStatus.INTERRUPTED:
        values["enqueued_at"] = sa.func.now()
    return values


class PostgresStore:
    """The production store."""

    def __init__(
        self, engine: sa.Engine, *, max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES
    ) -> None:
        self.engine = engine
        self.max_payload_bytes = max_payload_bytes

    @classmethod
    def from_url(cls, url: str, **kwargs: Any) -> PostgresStore:
        return cls(shared_engine(url), **kwargs)

    def close(self) -> None:
        self.engine.dispose()

    @contextmanager
    def _tx(self) -> Iterator[sa.Connection]:
        with db_errors(), self.engine.begin() as conn:
            yield conn

    @contextmanager
    def _read(self) -> Iterator[sa.Connection]:
        with db_errors(), self.engine.connect() as conn:
            yield conn

    # ------------------------------------------------------------------ runs

    def create_run(self, new: NewRun) -> tuple[Run, bool]:
        check_payload(new, self.max_payload_bytes)
        stmt = (
            pg_insert(t.runs)
            .values(
                id=new.id,
                agent=new.agent,
                status=RunStatus.QUEUED.value,
                trigger=new.trigger.model_dump(mode="json"),
                trigger_id=new.trigger.id,
                concurrency_key=new.concurrency_key,
                thread=new.thread,
                enqueued_at=sa.func.now(),
            )
            .on_conflict_do_nothing(constraint="runs_agent_trigger_id_key")
            .returning(t.runs)
        )
        with self._tx() as conn:
            row = conn.execute(stmt).first()
            if row is not None:
                return run_from_row(row), True
            existing = conn.execute(
                sa.select(t.runs).where(
                    t.runs.c.agent == new.agent, t.runs.c.trigger_id == new.trigger.id
                )
            ).one()
            return run_from_row(existing), False

    def get_run(self, run_id: str) -> Run:
        run_id = check_run_id(run_id)
        with self._read() as conn:
            return self._get_run(conn, run_id)

    def _get_run(self, conn: sa.Connection, run_id: str) -> Run:
        row = conn.execute(sa.text(_RUN_WITH_WAIT + " WHERE r.id = :id"), {"id": run_id}).first()
        if row is None:
            raise RunNotFound(f"no run with id {run_id!r}")
        return run_from_row(row)

    def list_runs(
        self,
        *,
        status: RunStatus | None = None,
        agent: str | None = None,
        thread: str | None = None,
        limit: int = 50,
    ) -> list[Run]:
        clauses: list[str] = []
        params: dict[str, Any] = {"limit": limit}
        for column, value in (("status", status), ("agent", agent), ("thread", thread)):
            if value is not None:
                clauses.append(f"r.{column} = :{column}")
                params[column] = value.value if isinstance(value, RunStatus) else value
        where = f" WHERE {' AND '.join(clauses)}" if clauses else ""
        sql = _RUN_WITH_WAIT + where + " ORDER BY r.id DESC LIMIT :limit"
        with self._read() as conn:
            return [run_from_row(row) for row in conn.execute(sa.text(sql), params)]

    def steps(self, run_id: str) -> list[Step]:
        run_id = check_run_id(run_id)
        with self._read() as conn:
            self._require_run(conn, run_id)
            rows = conn.execute(
                sa.select(t.steps)
                .where(t.steps.c.run_id == run_id)
                .order_by(t.steps.c.index, t.steps.c.id)
            )
            return [step_from_row(row) for row in rows]

    def llm_step(self, run_id: str, index: int) -> Step | None:
        with self._read() as conn:
            row = conn.execute(
                sa.select(t.steps).where(
                    t.steps.c.run_id == run_id,
                    t.steps.c.index == index,
                    t.steps.c.kind == StepKind.LLM.value,
                )
            ).first()
            return None if row is None else step_from_row(row)

    def checkpoint(self, run_id: str) -> Checkpoint | None:
        run_id = check_run_id(run_id)
        with self._read() as conn:
            self._require_run(conn, run_id)
            return self._checkpoint(conn, run_id)

    def _checkpoint(self, conn: sa.Connection, run_id: str) -> Checkpoint | None:
        row = conn.execute(sa.select(t.checkpoints).where(t.checkpoints.c.run_id == run_id)).first()
        if row is None:
            return None
        bodies = conn.execute(
            sa.select(t.messages.c.body)
            .where(t.messages.c.run_id == run_id, t.messages.c.seq < row.message_count)
            .order_by(t.messages.c.seq)
        ).scalars()
        return Checkpoint(
            run_id=run_id,
            step_index=row.step_index,
            messages=list(bodies),
            created_at=row.created_at,
            finish_reason=row.finish_reason,
        )

    def effect(self, run_id: str, key: str) -> Effect | None:
        with self._read() as conn:
            row = conn.execute(
                sa.select(t.effects).where(t.effects.c.run_id == run_id, t.effects.c.key == key)
            ).first()
            return None if row is None else effect_from_row(row)

    def thread_start(self, thread: str, before_run_id: str) -> ThreadStart | None:
        with self._read() as conn:
            row = conn.execute(
                sa.text(
                    "SELECT id, state FROM runs WHERE thread = :thread AND id < :before"
                    " AND status IN ('completed', 'failed', 'cancelled')"
                    " ORDER BY id DESC LIMIT 1"
                ),
                {"thread": thread, "before": before_run_id},
            ).first()
            if row is None:
                return None
            checkpoint = self._checkpoint(conn, str(row.id))
            messages = checkpoint.messages if checkpoint else []
            return ThreadStart(run_id=str(row.id), messages=messages, state=row.state)

    def _require_run(self, conn: sa.Connection, run_id: str) -> None:
        found = conn.execute(
            sa.select(sa.literal(1)).select_from(t.runs).where(t.runs.c.id == run_id)
        ).first()
        if found is None:
            raise RunNotFound(f"no run with id {run_id!r}")

    # ---------------------------------------------------------------- claims

    def claim(
        self, run_id: str, owner: str, ttl_seconds: float, *, max_takeovers: int | None = None
    ) -> Claim | None:
        run = self.claim_run(run_id, owner, ttl_seconds, max_takeovers=max_takeovers)
        return run.claim if isinstance(run, Run) else None

    def claim_run(
        self, run_id: str, owner: str, ttl_seconds: float, *, max_takeovers: int | None = None
    ) -> Run | Settled | None:
        run_id = check_run_id(run_id)
        params = {"run_id": run_id, "owner": owner, "ttl": ttl_seconds, "max": max_takeovers}
        try:
            with self._tx() as conn:
                row = conn.execute(_CLAIM, params).first()
        except sqlalchemy.exc.IntegrityError as exc:
            if is_unique_violation(exc, "runs_key_holder_idx"):
                return None  # another run holds the concurrency key
            raise
        if row is not None:
            return run_from_row(row)
        if max_takeovers is not None and self._settle_crashed(run_id, max_takeovers):
            return self._after_settle(run_id, Outcome(RunStatus.FAILED))
        with self._read() as conn:
            self._require_run(conn, run_id)
        return None

    def _settle_crashed(self, run_id: str, max_takeovers: int) -> bool:
        """The takeover the claim refused: settle the run failed/crashed, once."""
        with self._tx() as conn:
            row = conn.execute(
                sa.text(
                    "SELECT claim_epoch, takeovers FROM runs WHERE id = :id"
                    " AND status = 'running' AND claim_expires_at < now() FOR UPDATE"
                ),
                {"id": run_id},
            ).first()
            if row is None or not takeover_crashes(row.takeovers, max_takeovers):
                return False
            error = crashed_error(row.claim_epoch, max_takeovers)
            conn.execute(
                sa.update(t.runs)
                .where(t.runs.c.id == run_id)
                .values(
                    **_outcome_values(Outcome(RunStatus.FAILED, error=error)),
                    takeovers=row.takeovers + 1,
                )
            )
            return True

    def start_point(self, run_id: str) -> StartPoint:
        with self._read() as conn:
            row = conn.execute(_START_POINT, {"run_id": run_id}).one()
        checkpoint = None
        if row.step_index is not None:
            checkpoint = Checkpoint(
                run_id=run_id,
                step_index=row.step_index,
                messages=row.messages,
                created_at=row.created_at,
                finish_reason=row.finish_reason,
            )
        journaled = None
        if row.journaled:
            journaled = self.llm_step(run_id, (row.step_index or 0) + 1)
        return StartPoint(checkpoint=checkpoint, journaled=journaled)

    def renew(self, fence: Fence, ttl_seconds: float) -> bool:
        with self._tx() as conn:
            row = conn.execute(_RENEW, {**_fence_params(fence), "ttl": ttl_seconds}).first()
        if row is None:
            raise LeaseLostError(f"run {fence.run_id} is no longer claimed by this execution")
        return bool(row.cancel_requested)

    # --------------------------------------------------------- fenced writes

    def _lock_fenced(self, conn: sa.Connection, fence: Fence) -> Any:
        row = conn.execute(
            sa.text(f"SELECT * FROM runs WHERE {_FENCE} FOR UPDATE"), _fence_params(fence)
        ).first()
        if row is None:
            raise LeaseLostError(f"run {fence.run_id} is no longer claimed by this execution")
        return row

    def record_llm_step(self, fence: Fence, step: StepRecord) -> bool:
        usage = step.usage
        params = {
            **_fence_params(fence),
            "index": step.index,
            "name": step.name,
            "input": dumps(step.input),
            "output": dumps(step.output),
            "error": dumps(step.error),
            "input_tokens": usage.input_tokens if usage else 0,
            "output_tokens": usage.output_tokens if usage else 0,
            "started_at": step.started_at,
            "finished_at": step.finished_at,
        }
        with raw_cursor(self.engine) as cursor:
            cursor.execute(_W1.execute_sql, _W1.args(params))
            fenced, applied = cursor.fetchone()
            cursor.connection.commit()
        if not fenced:
            raise LeaseLostError(f"run {fence.run_id} is no longer claimed by this execution")
        return bool(applied)

    def commit_step(self, fence: Fence, commit: StepCommit) -> Settled | None:
        if not commit.approvals and self._commit_step_fast(fence, commit):
            return self._after_settle(fence.run_id, commit.outcome)
        with self._tx() as conn:
            self._lock_fenced(conn, fence)
            self._write_checkpoint(conn, fence.run_id, commit)
            if commit.tool_steps:
                conn.execute(
                    _TOOL_STEPS_FROM_JSON,
                    {
                        "run_id": fence.run_id,
                        "steps": dumps([_step_json(s) for s in commit.tool_steps]),
                    },
                )
            values: dict[str, Any] = {"updated_at": sa.func.now(), "takeovers": 0}
            if commit.state_changed:
                values["state"] = commit.state
            outcome = commit.outcome
            if commit.approvals:
                self._insert_approvals(conn, fence.run_id, commit)
                outcome = Outcome(RunStatus.WAITING)
            if outcome is not None:
                values.update(_outcome_values(outcome))
            conn.execute(sa.update(t.runs).where(t.runs.c.id == fence.run_id).values(**values))
        return self._after_settle(fence.run_id, outcome)

    def _commit_step_fast(self, fence: Fence, commit: StepCommit) -> bool:
        """The common W2 in one prepared statement. False when the checkpoint
        does not simply extend the stored one; the caller then takes the
        general path, which replaces or refuses."""
        outcome = commit.outcome
        settled = outcome is not None and outcome.status.settled
        error = outcome.error if outcome is not None else None
        params: dict[str, Any] = {
            **_fence_params(fence),
            "step_index": commit.step_index,
            "base_count": commit.base_count,
            "message_count": commit.base_count + len(commit.new_messages),
            "finish_reason": commit.finish_reason,
            "messages": dumps(commit.new_messages),
            "steps": dumps([_step_json(s) for s in commit.tool_steps]),
            "state_changed": commit.state_changed,
            "state": dumps(commit.state) if commit.state_changed else None,
            "o_status": outcome.status.value if outcome is not None else None,
            "o_settled": settled,
            "o_output": dumps(outcome.output) if settled and outcome is not None else None,
            "o_code": error.code if error else None,
            "o_message": error.message if error else None,
        }
        with raw_cursor(self.engine) as cursor:
            cursor.execute(_W2.execute_sql, _W2.args(params))
            fenced, saved, _, _ = cursor.fetchone()
            if not fenced or not saved:
                cursor.connection.rollback()
                if not fenced:
                    raise LeaseLostError(
                        f"run {fence.run_id} is no longer claimed by this execution"
                    )
                return False
            cursor.connection.commit()
        return True

    def _write_checkpoint(self, conn: sa.Connection, run_id: str, commit: StepCommit) -> None:
        current = conn.execute(
            sa.select(t.checkpoints.c.step_index, t.checkpoints.c.message_count)
            .where(t.checkpoints.c.run_id == run_id)
            .with_for_update()
        ).first()
        stored_index = current.step_index if current else 0
        stored_count = current.message_count if current else 0
        if current is not None and commit.step_index < stored_index:
            raise CheckpointConflict(
                f"run {run_id} already has a checkpoint at step {stored_index}; "
                f"refusing step {commit.step_index}"
            )
        if commit.base_count > stored_count:
            raise CheckpointConflict(
                f"run {run_id} has {stored_count} messages; cannot extend from {commit.base_count}"
            )
        if commit.base_count < stored_count:
            conn.execute(
                sa.delete(t.messages).where(
                    t.messages.c.run_id == run_id, t.messages.c.seq >= commit.base_count
                )
            )
        if commit.new_messages:
            conn.execute(
                _MESSAGES_FROM_JSON,
                {
                    "run_id": run_id,
                    "base_count": commit.base_count,
                    "messages": dumps(commit.new_messages),
                },
            )
        values = {
            "step_index": commit.step_index,
            "message_count": commit.base_count + len(commit.new_messages),
            "finish_reason": commit.finish_reason,
            "created_at": sa.func.now(),
        }
        conn.execute(
            pg_insert(t.checkpoints)
            .values(run_id=run_id, **values)
            .on_conflict_do_update(index_elements=["run_id"], set_=values)
        )

    def _insert_approvals(self, conn: sa.Connection, run_id: str, commit: StepCommit) -> None:
        conn.execute(
            pg_insert(t.approvals)
            .values(
                [
                    {
                        "approval_id": a.approval_id,
                        "run_id": run_id,
                        "step_index": commit.step_index,
                        "tool_call_id": a.tool_call_id,
                        "tool_name": a.tool_name,
                        "input": a.input,
                        "expires_at": a.expires_at,
                        "on_expire": a.on_expire,
                        "token_id": a.token_id,
                        "next_notify_at": a.next_notify_at,
                    }
                    for a in commit.approvals
                ]
            )
            .on_conflict_do_nothing()
        )
        conn.execute(
            pg_insert(t.steps)
            .values(
                run_id=run_id,
                kind=StepKind.WAIT.value,
                index=commit.step_index,
                name="approval",
                input={"approval_ids": [a.approval_id for a in commit.approvals]},
                started_at=sa.func.now(),
            )
            .on_conflict_do_nothing()
        )

    def settle(self, fence: Fence, outcome: Outcome) -> Settled:
        if outcome.status in (RunStatus.RUNNING, RunStatus.QUEUED):
            raise InvalidTransition(f"a running run cannot settle as {outcome.status.value}")
        with self._tx() as conn:
            result = conn.execute(
                sa.update(t.runs)
                .where(
                    t.runs.c.id == fence.run_id,
                    t.runs.c.claim_owner == fence.owner,
                    t.runs.c.claim_epoch == fence.epoch,
                    t.runs.c.status == RunStatus.RUNNING.value,
                )
                .values(**_outcome_values(outcome))
                .returning(t.runs.c.id)
            ).first()
        if result is None:
            raise LeaseLostError(f"run {fence.run_id} is no longer claimed by this execution")
        settled = self._after_settle(fence.run_id, outcome)
        assert settled is not None
        return settled

    def defer_missing_agent(self, fence: Fence, grace_seconds: float) -> Run | None:
        fenced = sa.and_(
            t.runs.c.id == fence.run_id,
            t.runs.c.claim_owner == fence.owner,
            t.runs.c.claim_epoch == fence.epoch,
            t.runs.c.status == RunStatus.RUNNING.value,
        )
        missing_since = t.runs.c.agent_missing_since
        within_grace = sa.or_(
            missing_since.is_(None),
            missing_since > sa.func.now() - sa.func.make_interval(0, 0, 0, 0, 0, 0, grace_seconds),
        )
        with self._tx() as conn:
            deferred = conn.execute(
                sa.update(t.runs)
                .where(fenced, within_grace)
                .values(
                    **_outcome_values(Outcome(RunStatus.INTERRUPTED)),
                    agent_missing_since=sa.func.coalesce(missing_since, sa.func.now()),
                )
                .returning(t.runs.c.id)
            ).first()
            if (
                deferred is None
                and conn.execute(sa.select(t.runs.c.id).where(fenced)).first() is None
            ):
                raise LeaseLostError(f"run {fence.run_id} is no longer claimed by this execution")
        return None if deferred is None else self.get_run(fence.run_id)

    def _after_settle(self, run_id: str, outcome: Outcome | None) -> Settled | None:
        if outcome is None:
            return None
        run = self.get_run(run_id)
        next_id = None
        if run.concurrency_key and run.status not in KEY_HOLDING:
            next_id = self.next_in_key(run.concurrency_key)
        return Settled(run=run, next_in_key=next_id)

    def begin_effect(
        self, fence: Fence, key: str, tool: str, input: object, *, rerun_started: bool
    ) -> EffectBegin:
        with self._tx() as conn:
            self._lock_fenced(conn, fence)
            row = conn.execute(
                pg_insert(t.effects)
                .values(
                    run_id=fence.run_id,
                    key=key,
                    tool=tool,
                    input=input,
                    status=EffectStatus.STARTED.value,
                    claim_epoch=fence.epoch,
                    started_at=sa.func.now(),
                )
                .on_conflict_do_nothing()
                .returning(t.effects)
            ).first()
            if row is not None:
                return EffectBegin(effect_from_row(row), execute=True)
            existing = effect_from_row(
                conn.execute(
                    sa.select(t.effects).where(
                        t.effects.c.run_id == fence.run_id, t.effects.c.key == key
                    )
                ).one()
            )
            if existing.status is EffectStatus.STARTED and existing.epoch == fence.epoch:
                return EffectBegin(existing, execute=True)  # our own retried write
            if existing.status is EffectStatus.STARTED and rerun_started:
                row = conn.execute(
                    sa.update(t.effects)
                    .where(t.effects.c.run_id == fence.run_id, t.effects.c.key == key)
                    .values(
                        attempts=t.effects.c.attempts + 1,
                        claim_epoch=fence.epoch,
                        started_at=sa.func.now(),
                    )
                    .returning(t.effects)
                ).one()
                return EffectBegin(effect_from_row(row), execute=True)
            return EffectBegin(existing, execute=False)

    def finish_effect(
        self, fence: Fence, key: str, *, output: object = None, error: str | None = None
    ) -> Effect:
        status = EffectStatus.FAILED if error is not None else EffectStatus.COMPLETED
        with self._tx() as conn:
            self._lock_fenced(conn, fence)
            row = conn.execute(
                sa.update(t.effects)
                .where(t.effects.c.run_id == fence.run_id, t.effects.c.key == key)
                .values(
                    status=status.value,
                    output=sa.null() if output is None else output,
                    error=error,
                    finished_at=sa.func.now(),
                )
                .returning(t.effects)
            ).first()
        if row is None:
            raise InvalidTransition(f"effect {key!r} was never started")
        return effect_from_row(row)

    # ------------------------------------------------------- other processes

    def request_cancel(self, run_id: str) -> CancelResult:
        run_id = check_run_id(run_id)
        with self._tx() as conn:
            row = conn.execute(
                sa.update(t.runs)
                .where(
                    t.runs.c.id == run_id,
                    t.runs.c.status.in_(["queued", "waiting", "interrupted"]),
                )
                .values(
                    status=RunStatus.CANCELLED.value,
                    cancel_requested=True,
                    claim_owner=None,
                    claim_expires_at=None,
                    finished_at=sa.func.now(),
                    updated_at=sa.func.now(),
                    error_code="cancelled",
                    error_message="cancelled on request",
                )
                .returning(t.runs.c.id)
            ).first()
            if row is not None:
                self._withdraw_approvals(conn, run_id)
                action = "cancelled"
            else:
                requested = conn.execute(
                    sa.update(t.runs)
                    .where(t.runs.c.id == run_id, t.runs.c.status == RunStatus.RUNNING.value)
                    .values(cancel_requested=True, updated_at=sa.func.now())
                    .returning(t.runs.c.id)
                ).first()
                action = "requested" if requested is not None else "settled"
            run = self._get_run(conn, run_id)
        next_id = None
        if action == "cancelled" and run.concurrency_key:
            next_id = self.next_in_key(run.concurrency_key)
        return CancelResult(run=run, action=action, next_in_key=next_id)

    def _withdraw_approvals(self, conn: sa.Connection, run_id: str) -> None:
        conn.execute(
            sa.update(t.approvals)
            .where(t.approvals.c.run_id == run_id, t.approvals.c.decision.is_(None))
            .values(decision=Decision.WITHDRAWN.value, decided_at=sa.func.now())
        )

    def approvals(self, run_id: str) -> list[Approval]:
        run_id = check_run_id(run_id)
        with self._read() as conn:
            rows = conn.execute(
                sa.select(t.approvals)
                .where(t.approvals.c.run_id == run_id)
                .order_by(t.approvals.c.created_at, t.approvals.c.approval_id)
            )
            return [approval_from_row(row) for row in rows]

    def get_approval(self, approval_id: str) -> Approval:
        with self._read() as conn:
            row = self._approval_row(conn, approval_id, lock=False)
            return approval_from_row(row)

    def _approval_row(self, conn: sa.Connection, approval_id: str, *, lock: bool) -> Any:
        approval_id = check_approval_id(approval_id)
        stmt = sa.select(t.approvals).where(t.approvals.c.approval_id == approval_id)
        row = conn.execute(stmt.with_for_update() if lock else stmt).first()
        if row is None:
            raise ApprovalNotFound(f"no approval with id {approval_id!r}")
        return row

    def decide(
        self,
        approval_id: str,
        decision: Decision,
        reason: str | None,
        response: Message,
        *,
        allow_expired: bool = False,
        now: datetime | None = None,
    ) -> DecisionResult:
        with self._tx() as conn:
            # Locks are taken in one order everywhere: the run row, then its
            # approvals (request_cancel, fail_waiting and W2 do the same). An
            # approval's run never changes, so reading it unlocked first is safe.
            run_id = approval_from_row(self._approval_row(conn, approval_id, lock=False)).run_id
            run_row = conn.execute(
                sa.text(f"SELECT status, {_NOW} AS now FROM runs WHERE id = :id FOR UPDATE"),
                {"id": run_id, "now": now},
            ).one()
            approval = approval_from_row(self._approval_row(conn, approval_id, lock=True))
            check_decidable(approval, RunStatus(run_row.status), run_row.now, allow_expired)
            conn.execute(
                sa.update(t.approvals)
                .where(t.approvals.c.approval_id == approval_id)
                .values(decision=decision.value, reason=reason, decided_at=run_row.now)
            )
            cp = conn.execute(
                sa.select(t.checkpoints).where(t.checkpoints.c.run_id == approval.run_id)
            ).one()
            self._write_checkpoint(
                conn,
                approval.run_id,
                StepCommit(
                    step_index=cp.step_index,
                    base_count=cp.message_count,
                    new_messages=[response],
                    finish_reason=cp.finish_reason,
                ),
            )
            pending = conn.execute(
                sa.select(sa.func.count())
                .select_from(t.approvals)
                .where(t.approvals.c.run_id == approval.run_id, t.approvals.c.decision.is_(None))
            ).scalar_one()
            if pending == 0:
                conn.execute(
                    sa.update(t.steps)
                    .where(
                        t.steps.c.run_id == approval.run_id,
                        t.steps.c.kind == StepKind.WAIT.value,
                        t.steps.c.index == approval.step_index,
                    )
                    .values(finished_at=run_row.now, output={"resumed": True})
                )
                conn.execute(
                    sa.update(t.runs)
                    .where(t.runs.c.id == approval.run_id)
                    .values(
                        status=RunStatus.QUEUED.value,
                        enqueued_at=run_row.now,
                        updated_at=sa.func.now(),
                    )
                )
            decided = approval_from_row(self._approval_row(conn, approval_id, lock=False))
            run = self._get_run(conn, approval.run_id)
        return DecisionResult(approval=decided, run=run, resumed=pending == 0)

    def fail_waiting(self, run_id: str, error: RunError) -> Settled:
        with self._tx() as conn:
            row = conn.execute(
                sa.update(t.runs)
                .where(t.runs.c.id == run_id, t.runs.c.status == RunStatus.WAITING.value)
                .values(
                    status=RunStatus.FAILED.value,
                    error_code=error.code,
                    error_message=error.message,
                    finished_at=sa.func.now(),
                    updated_at=sa.func.now(),
                )
                .returning(t.runs.c.id)
            ).first()
            if row is None:
                status = self._get_run(conn, run_id).status
                raise InvalidTransition(f"run {run_id} is {status.value}, not waiting")
            self._withdraw_approvals(conn, run_id)
        settled = self._after_settle(run_id, Outcome(RunStatus.FAILED, error=error))
        assert settled is not None
        return settled

    def record_notification(
        self, approval_id: str, *, accepted: bool, retry_at: datetime | None
    ) -> None:
        values: dict[str, Any] = {"attempts": t.approvals.c.attempts + 1}
        if accepted:
            values["notified_at"] = sa.func.now()
        else:
            values["next_notify_at"] = retry_at
        with self._tx() as conn:
            conn.execute(
                sa.update(t.approvals)
                .where(t.approvals.c.approval_id == approval_id)
                .values(**values)
            )

    def mark_notified(self, approval_ids: list[str]) -> None:
        if not approval_ids:
            return
        with self._tx() as conn:
            conn.execute(
                sa.update(t.approvals)
                .where(t.approvals.c.approval_id.in_(approval_ids))
                .values(notified_at=sa.func.now())
            )

    # ------------------------------------------------------------------ tick

    def claim_due_notifications(
        self, limit: int, backoff_base: float, backoff_cap: float, now: datetime | None = None
    ) -> list[DueNotification]:
        sql = f"""
            UPDATE approvals AS a
               SET attempts = a.attempts + 1,
                   next_notify_at = {_NOW} + make_interval(
                       secs => LEAST(:cap, :base * power(2, a.attempts)))
              FROM runs AS r
             WHERE a.approval_id IN (
                   SELECT approval_id FROM approvals
                    WHERE decision IS NULL AND notified_at IS NULL
                      AND next_notify_at <= {_NOW}
                    ORDER BY next_notify_at
                    LIMIT :limit
                    FOR UPDATE SKIP LOCKED)
               AND r.id = a.run_id AND r.status = 'waiting'
            RETURNING a.*, r.agent
        """
        with self._tx() as conn:
            rows = conn.execute(
                sa.text(sql),
                {"limit": limit, "base": backoff_base, "cap": backoff_cap, "now": now},
            ).all()
        return [DueNotification(approval_from_row(row), row.agent) for row in rows]

    def expired_approvals(self, limit: int, now: datetime | None = None) -> list[Approval]:
        sql = f"""
            SELECT a.* FROM approvals AS a JOIN runs AS r ON r.id = a.run_id
             WHERE a.decision IS NULL AND a.expires_at <= {_NOW} AND r.status = 'waiting'
             ORDER BY a.expires_at
             LIMIT :limit
        """
        with self._read() as conn:
            rows = conn.execute(sa.text(sql), {"limit": limit, "now": now})
            return [approval_from_row(row) for row in rows]

    def lapsed_claims(
        self, limit: int, reenqueue_seconds: float, now: datetime | None = None
    ) -> list[str]:
        sql = f"""
            SELECT id FROM runs
             WHERE status = 'running' AND claim_expires_at < {_NOW}
               AND (enqueued_at IS NULL OR enqueued_at < claim_expires_at
                    OR enqueued_at < {_NOW} - make_interval(secs => :reenqueue))
             ORDER BY claim_expires_at
             LIMIT :limit
        """
        with self._read() as conn:
            rows = conn.execute(
                sa.text(sql), {"limit": limit, "reenqueue": reenqueue_seconds, "now": now}
            )
            return [str(row.id) for row in rows]

    def stale_claimable(
        self, limit: int, older_than_seconds: float, now: datetime | None = None
    ) -> list[str]:
        sql = f"""
            UPDATE runs SET enqueued_at = {_NOW}
             WHERE id IN (
                   SELECT id FROM runs
                    WHERE status IN ('queued', 'interrupted')
                      AND enqueued_at < {_NOW} - make_interval(secs => :older)
                      AND (status = 'interrupted' OR concurrency_key IS NULL)
                    ORDER BY enqueued_at
                    LIMIT :limit
                    FOR UPDATE SKIP LOCKED)
            RETURNING id
        """
        with self._tx() as conn:
            rows = conn.execute(
                sa.text(sql), {"limit": limit, "older": older_than_seconds, "now": now}
            )
            return [str(row.id) for row in rows]

    def free_key_heads(
        self, limit: int, older_than_seconds: float, now: datetime | None = None
    ) -> list[str]:
        sql = f"""
            WITH heads AS (
                SELECT DISTINCT ON (concurrency_key) id, concurrency_key, enqueued_at
                  FROM runs
                 WHERE status = 'queued' AND concurrency_key IS NOT NULL
                 ORDER BY concurrency_key, id
            )
            UPDATE runs SET enqueued_at = {_NOW}
             WHERE id IN (
                   SELECT h.id FROM heads AS h
                    WHERE h.enqueued_at < {_NOW} - make_interval(secs => :older)
                      AND NOT EXISTS (
                          SELECT 1 FROM runs AS x
                           WHERE x.concurrency_key = h.concurrency_key
                             AND x.status IN ('running', 'waiting', 'interrupted'))
                    LIMIT :limit)
            RETURNING id
        """
        with self._tx() as conn:
            rows = conn.execute(
                sa.text(sql), {"limit": limit, "older": older_than_seconds, "now": now}
            )
            return [str(row.id) for row in rows]

    def next_in_key(self, key: str) -> str | None:
        with self._read() as conn:
            holder = conn.execute(
                sa.text(
                    "SELECT 1 FROM runs WHERE concurrency_key = :key"
                    " AND status IN ('running', 'waiting', 'interrupted')"
                ),
                {"key": key},
            ).first()
            if holder is not None:
                return None
            row = conn.execute(
                sa.text(
                    "SELECT id FROM runs WHERE concurrency_key = :key AND status = 'queued'"
                    " ORDER BY id LIMIT 1"
                ),
                {"key": key},
            ).first()
            return None if row is None else str(row.id)

    def mark_enqueued(self, run_ids: list[str]) -> None:
        if not run_ids:
            return
        with self._tx() as conn:
            conn.execute(
                sa.update(t.runs).where(t.runs.c.id.in_(run_ids)).values(enqueued_at=sa.func.now())
            )

    def prune(self, older_than: datetime, batch: int = 500) -> int:
        total = 0
        sql = sa.text(
            """
            DELETE FROM runs WHERE id IN (
                SELECT id FROM runs
                 WHERE status IN ('completed', 'failed', 'cancelled') AND finished_at < :cutoff
                 LIMIT :batch)
            """
        )
        while True:
            with self._tx() as conn:
                deleted = conn.execute(sql, {"cutoff": older_than, "batch": batch}).rowcount
            total += deleted
            if deleted < batch:
                return total
