"""What every part of ``PostgresStore`` shares: the executor, the rules
several statements write out (the clock, the fence, what an outcome writes),
and the reads every part makes.

Each statement is one whole literal with ``:name`` parameters
(:class:`store.statements.Statement`), written once, beside the method that
runs it; none is assembled from pieces. A statement that may be prepared gives
every parameter an explicit ``CAST`` so that Postgres can type it at
``PREPARE``. A status in SQL is spelled as :class:`store.status.RunStatus`
spells it (tests/unit/test_store_structure.py checks each against the enums).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import sqlalchemy as sa

from store.db import Executor, Tx, dumps
from store.errors import RunNotFound
from store.models import Checkpoint, Ended, Fence, Outcome, Run
from store.rows import run_from_row
from store.rules import outcome_columns, wakes_key
from store.sealing import PLAIN, Sealing
from store.statements import Statement
from store.status import RunStatus
from store.validate import check_run_id

# The rules several statements share, each written out whole in every
# statement that applies it (no statement is assembled from pieces). These
# constants are their one reference: tests/unit/test_store_structure.py checks
# that every statement's copy matches, whitespace aside.

# The clock: ``now`` when a caller moves time (tests), otherwise the database's.
NOW = "COALESCE(CAST(:now AS timestamptz), now())"

# What every write of a running run is conditional on (store/postgres.py).
FENCE = """
    id = CAST(:run_id AS uuid) AND claim_owner = CAST(:owner AS text)
    AND claim_epoch = CAST(:epoch AS int) AND status = 'running'
"""

# The columns an outcome writes, from the parameters ``store.rules.outcome_columns``
# gives (``o_status`` NULL: no outcome, the run stays as it is). Any outcome
# releases the claim (the run leaves ``running``) and the tokens its model call
# in flight reserved from a shared budget. The only SQL that ends a
# run: every ending statement includes this.
OUTCOME_SET = """
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
"""

# Progress, the rule: a step's journal write and its commit each reset the
# run's takeover count, so a long run taken over now and then is never failed
# for it (only takeovers without progress count, see the claim). The journal
# write also ends a durable model retry (the call it waited for succeeded); the
# commit, which always follows its step's journal write, finds it ended.
PROGRESS = "takeovers = 0"
PROGRESS_ENDS_RETRY = """
    takeovers = 0, retry_attempts = 0, retry_at = NULL, retry_since = NULL, retry_error = NULL
"""

# What a waiting run (``:run_id``) still waits for, the rule of every wait's
# end: an approval nobody decided, or a child run (runner/core/children.py) that
# has not ended.
OPEN_WAITS = """(
    EXISTS (SELECT 1 FROM approvals AS oa
             WHERE oa.run_id = CAST(:run_id AS uuid) AND oa.decision IS NULL)
    OR EXISTS (SELECT 1 FROM runs AS oc
                WHERE oc.parent_id = CAST(:run_id AS uuid)
                  AND NOT oc.status IN ('completed', 'failed', 'cancelled')))"""


# A run with its first pending wait, if it is waiting: how every read of runs
# reads them (GET_RUN, and ``runs.LIST_RUNS``, ``children.CHILDREN``,
# ``approvals.RUNS_BY_IDS``).
RUN_WITH_WAIT = """
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
"""


# A run waiting for its children goes back to the queue once nothing is open
# (run after every commit that may end the wait: a child's end, the
# parent's own wait; and by tick(), for a wake-up lost between them). Its
# wait step is finished with it.
RESUME_IF_DONE = Statement(
    "resume_if_done",
    """
    WITH r AS (
        UPDATE runs SET status = 'queued', enqueued_at = now(), updated_at = now()
         WHERE id = CAST(:run_id AS uuid) AND status = 'waiting'
           AND EXISTS (SELECT 1 FROM runs AS c WHERE c.parent_id = CAST(:run_id AS uuid))
           AND NOT (
               EXISTS (SELECT 1 FROM approvals AS oa
                        WHERE oa.run_id = CAST(:run_id AS uuid) AND oa.decision IS NULL)
               OR EXISTS (SELECT 1 FROM runs AS oc
                           WHERE oc.parent_id = CAST(:run_id AS uuid)
                             AND NOT oc.status IN ('completed', 'failed', 'cancelled')))
        RETURNING id
    ), w AS (
        UPDATE steps SET finished_at = now(), output = CAST('{"resumed": true}' AS json)
         WHERE run_id IN (SELECT id FROM r) AND kind = 'wait' AND finished_at IS NULL
    )
    SELECT id FROM r
    """,
)

GET_RUN = Statement(
    "get_run",
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
     WHERE r.id = CAST(:id AS uuid)
    """,
)

RUN_EXISTS = Statement("run_exists", "SELECT 1 AS found FROM runs WHERE id = CAST(:id AS uuid)")

CHECKPOINT = Statement(
    "checkpoint",
    """
    SELECT c.step_index, c.message_count, c.finish_reason, c.created_at,
           COALESCE((SELECT json_agg(m.body ORDER BY m.seq) FROM messages AS m
                      WHERE m.run_id = c.run_id AND m.seq < c.message_count), '[]') AS messages
      FROM checkpoints AS c WHERE c.run_id = CAST(:run_id AS uuid)
    """,
)

# The key's oldest queued run, unless a run holds the key.
NEXT_IN_KEY = Statement(
    "next_in_key",
    """
    SELECT id FROM runs
     WHERE concurrency_key = CAST(:key AS text) AND status = 'queued'
       AND NOT EXISTS (SELECT 1 FROM runs AS x
                        WHERE x.concurrency_key = CAST(:key AS text)
                          AND x.status IN ('running', 'waiting', 'interrupted'))
     ORDER BY arrival LIMIT 1
    """,
)


def fence_params(fence: Fence) -> dict[str, Any]:
    return {"run_id": fence.run_id, "owner": fence.owner, "epoch": fence.epoch}


def outcome_params(
    outcome: Outcome | None, run_id: str, sealing: Sealing = PLAIN
) -> dict[str, Any]:
    """The parameters of :data:`OUTCOME_SET` for run ``run_id``."""
    columns = outcome_columns(outcome)
    error = columns.error
    output = sealing.seal(columns.output, "runs", "output", run_id) if columns.ended else None
    return {
        "o_status": None if columns.status is None else columns.status.value,
        "o_ended": columns.ended,
        "o_output": dumps(output) if columns.ended else None,
        "o_code": error.code if error else None,
        "o_message": error.message if error else None,
        "o_requeue": columns.requeue,
        "o_requeue_at": columns.requeue_at,
        "o_interruption": None if columns.interruption is None else columns.interruption.value,
    }


# Called with a run's id after a write that made events of the run committed.
Wake = Callable[[str], None]


class PgBase:
    db: Executor
    max_payload_bytes: int
    _wakes: tuple[Wake, ...] = ()
    # Encryption at rest (store/sealing.py): PLAIN without a key ring.
    sealing: Sealing = PLAIN

    def on_commit(self, wake: Wake) -> Callable[[], None]:
        """Call ``wake(run_id)`` after each committed write that made events of
        a run (store/events.py), from now on; returns what stops it. The
        run-event feed's wake-up (runner/core/events/feed.py): because the store
        calls it, no writer can skip it."""
        self._wakes = (*self._wakes, wake)

        def stop() -> None:
            self._wakes = tuple(w for w in self._wakes if w is not wake)

        return stop

    def _committed(self, run_id: str) -> None:
        for wake in self._wakes:
            wake(run_id)

    @property
    def engine(self) -> sa.Engine:
        return self.db.engine

    def get_run(self, run_id: str) -> Run:
        return self._read_run(check_run_id(run_id))

    def _read_run(self, run_id: str) -> Run:
        """The run, read by one statement that commits as it ends: one round
        trip, where a transaction around it takes three (BEGIN, the read, COMMIT)."""
        return self._found(self.db.first(GET_RUN, {"id": run_id}), run_id)

    def _get_run(self, tx: Tx, run_id: str) -> Run:
        return self._found(tx.first(GET_RUN, {"id": run_id}), run_id)

    def _found(self, row: dict[str, Any] | None, run_id: str) -> Run:
        if row is None:
            raise RunNotFound(f"no run with id {run_id!r}")
        return self._run(row)

    def _run(self, row: Mapping[str, Any]) -> Run:
        """A runs row (with its wait point's columns, if selected) as a run."""
        return run_from_row(row, sealing=self.sealing)

    def _require_run(self, tx: Tx, run_id: str) -> None:
        if tx.first(RUN_EXISTS, {"id": run_id}) is None:
            raise RunNotFound(f"no run with id {run_id!r}")

    def _checkpoint(self, tx: Tx, run_id: str) -> Checkpoint | None:
        row = tx.first(CHECKPOINT, {"run_id": run_id})
        return None if row is None else self._checkpoint_from_row(run_id, row)

    def _checkpoint_from_row(self, run_id: str, row: Mapping[str, Any]) -> Checkpoint:
        return Checkpoint(
            run_id=run_id,
            step_index=row["step_index"],
            messages=self.sealing.opened_messages(row["messages"], run_id),
            created_at=row["created_at"],
            finish_reason=row["finish_reason"],
        )

    def _next_in_key(self, key: str) -> str | None:
        row = self.db.first(NEXT_IN_KEY, {"key": key})
        return None if row is None else str(row["id"])

    def _after_end(self, run_id: str, outcome: Outcome | None) -> Ended | None:
        if outcome is None:
            return None
        run = self._read_run(run_id)
        next_id = None
        if run.concurrency_key and wakes_key(run.concurrency_key, run.status):
            next_id = self._next_in_key(run.concurrency_key)
        resumed: list[str] = []
        if run.parent_id is not None and run.status.ended:
            self._committed(run.parent_id)  # its feed has the child's end
            resumed += self.resume_if_done(run.parent_id)
        if run.status is RunStatus.WAITING:
            resumed += self.resume_if_done(run.id)  # its children ended meanwhile
        return Ended(run=run, next_in_key=next_id, resumed=tuple(resumed))

    def resume_if_done(self, run_id: str) -> list[str]:
        """Queue ``run_id`` again if it waits for children and nothing it
        waits for is open any more; ``[run_id]`` if it did (the caller sends
        it), else ``[]``."""
        row = self.db.first(RESUME_IF_DONE, {"run_id": run_id})  # one statement: atomic alone
        if row is None:
            return []
        self._committed(run_id)
        return [str(row["id"])]
