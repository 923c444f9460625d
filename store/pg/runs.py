"""Runs and what they hold: creating a run, and the reads of a run, its steps,
checkpoint and events."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from store.db import Tx, dumps
from store.errors import InvalidInput, ThreadBusy
from store.events import RunEvent
from store.models import (
    Checkpoint,
    Effect,
    NewRun,
    Run,
    RunStatus,
    Step,
    ThreadSummary,
    TriggerEnvelope,
)
from store.models import ThreadStart as ThreadStart  # moved: plain data of the journal port
from store.pg.base import PgBase
from store.rows import effect_from_row, event_from_row, run_from_row, step_from_row
from store.sealing import Sealing
from store.statements import Statement
from store.validate import check_new_run, check_page_from, check_run_id, check_text

CREATE_RUN = Statement(
    "create_run",
    """
    INSERT INTO runs (id, agent, status, trigger, trigger_id, concurrency_key, thread,
                      trace_context, enqueued_at, tenant, priority)
    VALUES (CAST(:id AS uuid), CAST(:agent AS text), 'queued',
            CAST(:trigger AS json), CAST(:trigger_id AS text), CAST(:key AS text),
            CAST(:thread AS text), CAST(:trace_context AS json), now(),
            CAST(:tenant AS text), CAST(:priority AS smallint))
    ON CONFLICT ON CONSTRAINT runs_agent_trigger_id_key DO NOTHING
    RETURNING *
    """,
)

EFFECTS = Statement(
    "effects",
    "SELECT * FROM effects WHERE run_id = CAST(:run_id AS uuid) ORDER BY started_at, key",
)

RUN_BY_TRIGGER = Statement(
    "run_by_trigger",
    """
    SELECT * FROM runs
     WHERE agent = CAST(:agent AS text) AND trigger_id = CAST(:trigger_id AS text)
    """,
)

# Filters that are NULL match everything; on a plain statement the planner
# folds them away, so the status and agent indexes still serve.
LIST_RUNS = Statement(
    "list_runs",
    """
    SELECT r.*, w.approval_id AS w_approval_id, w.tool_name AS w_tool_name,
           w.input AS w_input, w.expires_at AS w_expires_at, w.token_id AS w_token_id,
           w.notified_at AS w_notified_at, w.kind AS w_kind
      FROM runs AS r
      LEFT JOIN LATERAL (
           SELECT a.approval_id, a.tool_name, a.input, a.expires_at, a.token_id, a.notified_at,
                  a.kind
             FROM approvals AS a
            WHERE a.run_id = r.id AND a.decision IS NULL
              AND r.status = 'waiting'
            ORDER BY a.created_at, a.approval_id
            LIMIT 1) AS w ON true
     WHERE (CAST(:status AS text) IS NULL OR r.status = CAST(:status AS text))
       AND (CAST(:agent AS text) IS NULL OR r.agent = CAST(:agent AS text))
       AND (CAST(:thread AS text) IS NULL OR r.thread = CAST(:thread AS text))
       AND (CAST(:before AS uuid) IS NULL OR r.id < CAST(:before AS uuid))
       AND (CAST(:since AS timestamptz) IS NULL OR r.created_at >= CAST(:since AS timestamptz))
       AND (CAST(:until AS timestamptz) IS NULL OR r.created_at < CAST(:until AS timestamptz))
       AND (NOT CAST(:attention AS bool) OR r.needs_attention)
     ORDER BY r.id DESC LIMIT CAST(:limit AS int)
    """,
)

STEPS = Statement(
    "steps", "SELECT * FROM steps WHERE run_id = CAST(:run_id AS uuid) ORDER BY index, id"
)

LLM_STEP = Statement(
    "llm_step",
    """
    SELECT * FROM steps
     WHERE run_id = CAST(:run_id AS uuid) AND index = CAST(:index AS int) AND kind = 'llm'
    """,
)

# The MCP tools the run's model was last offered (runner/core/mcp/listing.py): the
# latest llm step that recorded them.
# The run's last record of the MCP tools its model was offered; a fork with
# none of its own yet has its origin's, as it stood at the fork's step (and so
# on up a fork of a fork).
MCP_LISTING = Statement(
    "mcp_listing",
    """
    WITH RECURSIVE line (id, upto, depth) AS (
        SELECT CAST(:run_id AS uuid), CAST(NULL AS int), 0
        UNION ALL
        SELECT r.forked_from, r.forked_at_step, line.depth + 1
          FROM line JOIN runs AS r ON r.id = line.id
         WHERE r.forked_from IS NOT NULL AND line.depth < 32
    )
    SELECT s.input -> 'mcp_tools' AS tools
      FROM line JOIN steps AS s ON s.run_id = line.id
     WHERE s.kind = 'llm' AND (s.input -> 'mcp_tools') IS NOT NULL
       AND (line.upto IS NULL OR s.index <= line.upto)
     ORDER BY line.depth, s.index DESC, s.id DESC
     LIMIT 1
    """,
)

# An execution's start: the checkpoint with its messages, and the next step's
# llm row if a process journaled it (the step's journal write) but died before
# the step's commit, in one trip.
START_POINT = Statement(
    "start_point",
    """
    SELECT c.step_index, c.message_count, c.finish_reason, c.created_at,
           COALESCE((SELECT json_agg(m.body ORDER BY m.seq) FROM messages AS m
                      WHERE m.run_id = r.id AND m.seq < c.message_count), '[]') AS messages,
           s.*
      FROM (SELECT CAST(:run_id AS uuid) AS id) AS r
      LEFT JOIN checkpoints AS c ON c.run_id = r.id
      LEFT JOIN steps AS s ON s.run_id = r.id AND s.kind = 'llm'
                          AND s.index = COALESCE(c.step_index, 0) + 1
    """,
)

# The thread's latest ended run with a checkpoint before run :before, in the
# order the database took them (``arrival``: the order a thread's runs go in).
THREAD_START = Statement(
    "thread_start",
    """
    SELECT r.id, r.state, r.arrival FROM runs AS r
     WHERE r.thread = CAST(:thread AS text)
       AND r.arrival < (SELECT arrival FROM runs WHERE id = CAST(:before AS uuid))
       AND r.status IN ('completed', 'failed', 'cancelled')
       AND EXISTS (SELECT 1 FROM checkpoints AS c WHERE c.run_id = r.id)
     ORDER BY r.arrival DESC LIMIT 1
    """,
)

# The thread's runs that ended without a step between :after and run
# :before (a message cancelled while it queued): their triggers.
THREAD_SKIPPED = Statement(
    "thread_skipped",
    """
    SELECT r.id, r.trigger FROM runs AS r
     WHERE r.thread = CAST(:thread AS text)
       AND r.arrival > CAST(:after AS bigint)
       AND r.arrival < (SELECT arrival FROM runs WHERE id = CAST(:before AS uuid))
       AND r.status IN ('completed', 'failed', 'cancelled')
       AND NOT EXISTS (SELECT 1 FROM checkpoints AS c WHERE c.run_id = r.id)
     ORDER BY r.arrival
    """,
)

# One sender at a time on a thread (a transaction-scoped lock on its key).
THREAD_LOCK = Statement(
    "thread_lock", "SELECT pg_advisory_xact_lock(hashtextextended(CAST(:key AS text), 53))"
)

# The thread's runs not ended, oldest first.
THREAD_ACTIVE = Statement(
    "thread_active",
    """
    SELECT * FROM runs
     WHERE thread = CAST(:thread AS text)
       AND status IN ('queued', 'running', 'waiting', 'interrupted')
     ORDER BY arrival
    """,
)

# The thread's runs, oldest first.
THREAD_RUNS = Statement(
    "thread_runs",
    """
    SELECT * FROM runs WHERE thread = CAST(:thread AS text)
     ORDER BY arrival LIMIT CAST(:limit AS int)
    """,
)

# The threads with a run created since :since, the latest first: each with
# its latest run's agent and status, and how many runs it has had since.
THREADS = Statement(
    "threads",
    """
    SELECT DISTINCT ON (thread) thread, id, agent, status, created_at,
           count(*) OVER (PARTITION BY thread) AS runs
      FROM runs
     WHERE thread IS NOT NULL AND created_at >= CAST(:since AS timestamptz)
     ORDER BY thread, arrival DESC
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


# Step events are the steps rows; the others are run_events rows. Each branch
# walks its primary key (run_id, id) from the reader's last id.
EVENTS_AFTER = Statement(
    "runwright_events_after",
    """
    (SELECT id, 'step' AS type, CAST(NULL AS jsonb) AS data, started_at AS at, run_id, kind,
            index, name, tool_call_id, input, output, error, input_tokens, output_tokens,
            cost_usd, started_at, finished_at
       FROM steps WHERE run_id = CAST(:run_id AS uuid) AND id > CAST(:after AS bigint)
      ORDER BY id LIMIT CAST(:limit AS int))
    UNION ALL
    (SELECT id, type, data, at, run_id, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
            NULL, NULL, NULL
       FROM run_events WHERE run_id = CAST(:run_id AS uuid) AND id > CAST(:after AS bigint)
      ORDER BY id LIMIT CAST(:limit AS int))
    ORDER BY id LIMIT CAST(:limit AS int)
    """,
    prepare=True,
)


@dataclass(frozen=True)
class StartPoint:
    """Where an execution starts: the checkpoint, and the next step's llm row if
    a process journaled it (the step's journal write) but died before the step's commit."""

    checkpoint: Checkpoint | None
    journaled: Step | None


def new_run_params(new: NewRun, sealing: Sealing) -> dict[str, Any]:
    """A new run's columns as statement parameters (a start, a firing, a fork)."""
    return {
        "id": new.id,
        "agent": new.agent,
        "trigger": dumps(sealing.trigger(new.trigger.model_dump(mode="json"), new.id)),
        "trigger_id": new.trigger.id,
        "key": new.concurrency_key,
        "thread": new.thread,
        "trace_context": dumps(new.trace_context) if new.trace_context else None,
        "tenant": new.tenant,
        "priority": new.priority,
    }


def insert_run(tx: Tx, new: NewRun, sealing: Sealing) -> tuple[Run, bool]:
    """Create the run in ``tx`` (checked already: ``check_new_run``), or find
    the one its trigger id names for its agent; whether it was created. The
    one way a new run is written (a start, a schedule's firing)."""
    params = new_run_params(new, sealing)
    row = tx.first(CREATE_RUN, params)
    if row is None:
        existing = tx.first(RUN_BY_TRIGGER, params)
        assert existing is not None  # the conflict was on (agent, trigger_id)
        return run_from_row(existing, sealing=sealing), False
    return run_from_row(row, sealing=sealing), True


class PgRuns(PgBase):
    def run_by_trigger(self, agent: str, trigger_id: str) -> Run | None:
        """The run of ``agent`` whose trigger id is ``trigger_id``; None if none."""
        agent = check_text(agent, "agent", max_chars=512)
        trigger_id = check_text(trigger_id, "trigger id", max_chars=512)
        row = self.db.first(RUN_BY_TRIGGER, {"agent": agent, "trigger_id": trigger_id})
        return None if row is None else run_from_row(row, sealing=self.sealing)

    def create_run(self, new: NewRun) -> tuple[Run, bool]:
        check_new_run(new, self.max_payload_bytes)
        with self.db.tx() as tx:
            run, created = insert_run(tx, new, self.sealing)
        if created:
            self._committed(run.id)
        return run, created

    def list_runs(
        self,
        *,
        status: RunStatus | None = None,
        agent: str | None = None,
        thread: str | None = None,
        limit: int = 50,
        before: str | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
        needs_attention: bool = False,
        payloads: bool = True,
    ) -> list[Run]:
        """Newest first; ``needs_attention``: only runs with an effect of
        unknown outcome nobody resolved; without ``payloads``, the runs'
        trigger payloads, outputs and states are None, neither read nor
        decrypted (a list that shows none)."""
        params = {
            "attention": bool(needs_attention),
            "status": None if status is None else RunStatus(status).value,
            "agent": agent,
            "thread": thread,
            "limit": limit,
            "before": check_page_from(before),
            "since": since,
            "until": until,
        }
        rows = self.db.rows(LIST_RUNS, params)
        return [run_from_row(row, sealing=self.sealing, payloads=payloads) for row in rows]

    def run_counts(self, agent: str | None = None) -> dict[RunStatus, int]:
        rows = self.db.rows(RUN_COUNTS, {"agent": agent})
        return {RunStatus(row["status"]): int(row["runs"]) for row in rows}

    def steps(self, run_id: str) -> list[Step]:
        run_id = check_run_id(run_id)
        with self.db.tx() as tx:
            self._require_run(tx, run_id)
            return [
                step_from_row(row, sealing=self.sealing)
                for row in tx.rows(STEPS, {"run_id": run_id})
            ]

    def effects(self, run_id: str) -> list[Effect]:
        """The run's effect journal: one entry per effect call, oldest first."""
        run_id = check_run_id(run_id)
        with self.db.tx() as tx:
            self._require_run(tx, run_id)
            return [
                effect_from_row(row, sealing=self.sealing)
                for row in tx.rows(EFFECTS, {"run_id": run_id})
            ]

    def events(self, run_id: str, after: int | None = None, limit: int = 1000) -> list[RunEvent]:
        run_id = check_run_id(run_id)
        params = {"run_id": run_id, "after": after or 0, "limit": limit}
        events = [
            event_from_row(row, sealing=self.sealing) for row in self.db.rows(EVENTS_AFTER, params)
        ]
        if not events:
            with self.db.tx() as tx:
                self._require_run(tx, run_id)  # none yet, or no such run
        return events

    def mcp_listing(self, run_id: str) -> dict[str, Any] | None:
        """The MCP tools the run's model was last offered, as its step recorded
        them (runner/core/mcp/listing.py); a fork's origin's record at the fork's
        step while the fork has none of its own; None if no step did."""
        row = self.db.first(MCP_LISTING, {"run_id": check_run_id(run_id)})
        tools = None if row is None else row["tools"]
        return tools if isinstance(tools, dict) else None

    def llm_step(self, run_id: str, index: int) -> Step | None:
        row = self.db.first(LLM_STEP, {"run_id": run_id, "index": index})
        return None if row is None else step_from_row(row, sealing=self.sealing)

    def checkpoint(self, run_id: str) -> Checkpoint | None:
        run_id = check_run_id(run_id)
        with self.db.tx() as tx:
            self._require_run(tx, run_id)
            return self._checkpoint(tx, run_id)

    def start_point(self, run_id: str) -> StartPoint:
        row = self.db.first(START_POINT, {"run_id": run_id})
        assert row is not None  # the statement selects from a one-row VALUES
        checkpoint = None
        if row["step_index"] is not None:
            checkpoint = self._checkpoint_from_row(run_id, row)
        journaled = None if row["kind"] is None else step_from_row(row, sealing=self.sealing)
        return StartPoint(checkpoint=checkpoint, journaled=journaled)

    def thread_start(self, thread: str, before_run_id: str) -> ThreadStart | None:
        """Where run ``before_run_id`` of ``thread`` starts (:class:`ThreadStart`);
        None for the thread's first run."""
        with self.db.tx() as tx:
            params = {"thread": thread, "before": before_run_id}
            row = tx.first(THREAD_START, params)
            after = -1 if row is None else int(row["arrival"])
            skipped = tuple(
                TriggerEnvelope.model_validate(
                    self.sealing.trigger(r["trigger"], str(r["id"]), opening=True)
                )
                for r in tx.rows(THREAD_SKIPPED, {**params, "after": after})
            )
            if row is None:
                return ThreadStart(None, [], None, skipped) if skipped else None
            before = str(row["id"])
            checkpoint = self._checkpoint(tx, before)  # opened
            messages = checkpoint.messages if checkpoint else []
            state = self.sealing.open(row["state"], "runs", "state", before)
            effects = tuple(
                effect_from_row(r, sealing=self.sealing)
                for r in tx.rows(EFFECTS, {"run_id": before})
            )
            return ThreadStart(before, messages, state, skipped, effects)

    def start_on_thread(
        self,
        thread: str,
        make: Callable[[Sequence[Run]], NewRun],
        *,
        refuse_if_busy: bool = False,
    ) -> tuple[Run, bool, list[Run]]:
        """Create the run ``make`` gives, given the thread's runs not ended
        (oldest first), one sender at a time on ``thread``: the run (or the
        one its trigger id names), whether it was created, and those runs.
        With ``refuse_if_busy``, a thread with such a run refuses the message
        (:class:`ThreadBusy`) and nothing is written."""
        thread = check_text(thread, "thread", max_chars=512)
        with self.db.tx() as tx:
            tx.execute(THREAD_LOCK, {"key": f"thread:{thread}"})
            active = [
                run_from_row(r, sealing=self.sealing, payloads=False)
                for r in tx.rows(THREAD_ACTIVE, {"thread": thread})
            ]
            new = make(active)
            if new.thread != thread:
                raise InvalidInput(f"the run is not one of thread {thread!r}")
            check_new_run(new, self.max_payload_bytes)
            params = {"agent": new.agent, "trigger_id": new.trigger.id}
            existing = tx.first(RUN_BY_TRIGGER, params)
            if existing is not None:  # the same message again: its run, as it is
                return run_from_row(existing, sealing=self.sealing), False, []
            if refuse_if_busy and active:
                busy = active[0]
                raise ThreadBusy(
                    f"thread {thread!r} has run {busy.id} {busy.status.value}: its agent takes "
                    "no message until it ends (on_new_message='reject')"
                )
            run, created = insert_run(tx, new, self.sealing)
        if created:
            self._committed(run.id)
        return run, created, active

    def threads(self, since: datetime, limit: int = 100) -> list[ThreadSummary]:
        """The threads with a run created since ``since``, the one with the
        latest run first (at most ``limit``)."""
        rows = self.db.rows(THREADS, {"since": since})
        found = [
            ThreadSummary(
                r["thread"], r["agent"], RunStatus(r["status"]), r["created_at"], int(r["runs"])
            )
            for r in rows
        ]
        found.sort(key=lambda t: t.last_at, reverse=True)
        return found[:limit]

    def thread_runs(self, thread: str, limit: int = 1000) -> list[Run]:
        """The thread's runs, oldest first (at most ``limit``)."""
        thread = check_text(thread, "thread", max_chars=512)
        rows = self.db.rows(THREAD_RUNS, {"thread": thread, "limit": limit})
        return [run_from_row(r, sealing=self.sealing) for r in rows]
