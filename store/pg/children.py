"""Child runs (runner/children.py): a parent's tool call starts one, the
parent waits for them holding no worker, and the last child's settle lets it
go (the rule is ``RESUME_IF_DONE`` in store/pg/base.py, beside the wait rule
every wait shares).

A child's trigger id is derived from its parent and the call, and the runs
table is unique on (agent, trigger id): a parent that starts its children
again (recovered after a crash, a redelivered task) finds those it started.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from store.db import dumps
from store.models import Fence, NewChild, Run
from store.pg.base import NOW, RUN_WITH_WAIT, ancestors_cte, open_waits
from store.pg.execution import PgExecution
from store.rows import run_from_row
from store.statements import Statement
from store.status import RunStatus, lit
from store.validate import check_run_id

START_CHILD = Statement(
    "start_child",
    f"""
    INSERT INTO runs (id, agent, status, trigger, trigger_id, trace_context, enqueued_at,
                      parent_id, parent_call_id, detached, budget_bounds)
    SELECT CAST(:id AS uuid), CAST(:agent AS text), {lit(RunStatus.QUEUED)},
           CAST(:trigger AS json), CAST(:trigger_id AS text), CAST(:trace_context AS json),
           now(), p.id, CAST(:call_id AS text), CAST(:detached AS bool),
           CAST(:bounds AS json)
      FROM runs AS p
     -- A parent whose cancel was asked for starts no more children.
     WHERE p.id = CAST(:run_id AS uuid) AND NOT p.cancel_requested
    ON CONFLICT ON CONSTRAINT runs_agent_trigger_id_key DO NOTHING
    """,
)

CHILDREN = Statement(
    "children",
    RUN_WITH_WAIT + " WHERE r.parent_id = CAST(:run_id AS uuid) ORDER BY r.id",
)

# A run's ancestors, its parent first.
ANCESTORS = Statement(
    "ancestors",
    f"""
    {ancestors_cte("CAST(:run_id AS uuid)")}
    SELECT r.* FROM up JOIN runs AS r ON r.id = up.id ORDER BY up.depth
    """,
)

# Parents whose children all settled while nothing resumed them (a wake-up
# lost between a child's settle and the parent's wait): tick()'s safety net.
STRANDED_PARENTS = Statement(
    "stranded_parents",
    f"""
    SELECT p.id FROM runs AS p
     WHERE p.status = {lit(RunStatus.WAITING)}
       AND p.updated_at < {NOW} - make_interval(secs => CAST(:grace AS float8))
       AND EXISTS (SELECT 1 FROM runs AS c WHERE c.parent_id = p.id)
       AND NOT {open_waits("p.id")}
     ORDER BY p.updated_at
     LIMIT CAST(:limit AS int)
    """,
)


# The totals (the run's own use and its descendants') of the runs whose
# budgets bound a child.
TOTALS = Statement(
    "totals",
    "SELECT id, agent, input_tokens + output_tokens AS tokens, cost_usd FROM runs"
    " WHERE id = ANY(CAST(:ids AS uuid[]))",
)


class PgChildren(PgExecution):
    def totals(self, run_ids: Sequence[str]) -> dict[str, tuple[str, int, float]]:
        """``(agent, tokens, cost_usd)`` of each run, its descendants' use included."""
        rows = self.db.rows(TOTALS, {"ids": [check_run_id(r) for r in run_ids]})
        return {str(r["id"]): (r["agent"], int(r["tokens"]), float(r["cost_usd"])) for r in rows}

    def start_children(self, fence: Fence, children: Sequence[NewChild]) -> list[Run]:
        """Create ``children`` of the fenced run (each once: one already
        started for its call is kept as it is) and return the run's children
        for those calls, queued or further on. Nothing is sent: the caller
        sends those still queued once the parent's wait is committed."""
        params = []
        for child in children:
            params.append(
                {
                    "id": child.id,
                    "agent": child.agent,
                    "trigger": dumps(child.trigger.model_dump(mode="json")),
                    "trigger_id": child.trigger.id,
                    "trace_context": dumps(child.trace_context) if child.trace_context else None,
                    "run_id": fence.run_id,
                    "call_id": child.call_id,
                    "detached": child.detached,
                    "bounds": dumps([b.as_json() for b in child.bounds]) if child.bounds else None,
                }
            )
        calls = {child.call_id for child in children}
        with self.db.tx() as tx:
            self._lock_fenced(tx, fence)
            for row in params:
                tx.execute(START_CHILD, row)
            found = [run_from_row(r) for r in tx.rows(CHILDREN, {"run_id": fence.run_id})]
        for run in found:
            self._committed(run.id)
        self._committed(fence.run_id)  # its feed has the children's start
        return [run for run in found if run.parent_call_id in calls]

    def children(self, run_id: str) -> list[Run]:
        """The runs ``run_id``'s tool calls started, oldest first."""
        run_id = check_run_id(run_id)
        with self.db.tx() as tx:
            self._require_run(tx, run_id)
            return [run_from_row(r) for r in tx.rows(CHILDREN, {"run_id": run_id})]

    def ancestors(self, run_id: str) -> list[Run]:
        """The runs whose tool calls led to ``run_id``: its parent first, its
        top-level run last; [] for a run that is no child."""
        rows = self.db.rows(ANCESTORS, {"run_id": check_run_id(run_id)})
        return [run_from_row(r) for r in rows]

    def resume_stranded_parents(
        self, limit: int, grace_seconds: float, *, now: datetime | None = None
    ) -> list[str]:
        """Queue again the waiting parents (quiet for ``grace_seconds``) whose
        children all settled and that wait for nothing else; their ids."""
        rows = self.db.rows(STRANDED_PARENTS, {"limit": limit, "grace": grace_seconds, "now": now})
        resumed: list[str] = []
        for row in rows:
            resumed += self.resume_if_done(str(row["id"]))
        return resumed
