"""Child runs (runner/core/children.py): a parent's tool call starts one, the
parent waits for them holding no worker, and the last child's end lets it
go (the rule is ``RESUME_IF_DONE`` in store/pg/base.py, beside the wait rule
every wait shares).

A child's trigger id is derived from its parent and the call, and the runs
table is unique on (agent, trigger id): a parent that starts its children
again (taken over after a crash, a redelivered task) finds those it started.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from store.db import dumps
from store.models import Admission, AdmissionVerdict, Fence, NewChild, Run, SharedUse
from store.pg.base import fence_params
from store.pg.execution import PgExecution, lost_lease
from store.rows import run_from_row
from store.rules import admit
from store.statements import Statement
from store.validate import check_run_id, check_tenant

# A child takes its parent's priority, and its tenant unless it has its own.
START_CHILD = Statement(
    "start_child",
    """
    INSERT INTO runs (id, agent, status, trigger, trigger_id, trace_context, enqueued_at,
                      parent_id, parent_call_id, detached, budget_bounds, ancestors, root_id,
                      tenant, priority)
    SELECT CAST(:id AS uuid), CAST(:agent AS text), 'queued',
           CAST(:trigger AS json), CAST(:trigger_id AS text), CAST(:trace_context AS json),
           now(), p.id, CAST(:call_id AS text), CAST(:detached AS bool),
           CAST(:bounds AS json), ARRAY[p.id] || COALESCE(p.ancestors, '{}'),
           COALESCE(p.root_id, p.id), COALESCE(CAST(:tenant AS text), p.tenant), p.priority
      FROM runs AS p
     -- A parent whose cancel was asked for starts no more children.
     WHERE p.id = CAST(:run_id AS uuid) AND NOT p.cancel_requested
    ON CONFLICT ON CONSTRAINT runs_agent_trigger_id_key DO NOTHING
    """,
)

CHILDREN = Statement(
    "children",
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
     WHERE r.parent_id = CAST(:run_id AS uuid)
     ORDER BY r.id
    """,
)

# A run's ancestors, its parent first (those not pruned).
ANCESTORS = Statement(
    "ancestors",
    """
    SELECT r.* FROM runs AS c,
           unnest(c.ancestors) WITH ORDINALITY AS up (id, depth)
      JOIN runs AS r ON r.id = up.id
     WHERE c.id = CAST(:run_id AS uuid)
     ORDER BY up.depth
    """,
)

# Parents whose children all ended while nothing resumed them (a wake-up
# lost between a child's end and the parent's wait): tick()'s safety net.
STRANDED_PARENTS = Statement(
    "stranded_parents",
    """
    SELECT p.id FROM runs AS p
     WHERE p.status = 'waiting'
       AND p.updated_at < COALESCE(CAST(:now AS timestamptz), now())
                          - make_interval(secs => CAST(:grace AS float8))
       AND EXISTS (SELECT 1 FROM runs AS c WHERE c.parent_id = p.id)
       AND NOT (
           EXISTS (SELECT 1 FROM approvals AS oa
                    WHERE oa.run_id = p.id AND oa.decision IS NULL)
           OR EXISTS (SELECT 1 FROM runs AS oc
                       WHERE oc.parent_id = p.id
                         AND NOT oc.status IN ('completed', 'failed', 'cancelled')))
     ORDER BY p.updated_at
     LIMIT CAST(:limit AS int)
    """,
)


# The admission of a child's model call under the budgets it shares
# (``PgChildren.admit``, the rule ``store.rules.admit``). First the child's
# own row (fenced) and the ancestors whose budgets it shares are locked, its
# own first, then the others by id: siblings' admissions take turns, and the
# next statement, with a snapshot of its own, sees what the one before
# reserved. A child's journal write locks its own row, then its ancestors',
# in the same order.
LOCK_SHARERS = Statement(
    "lock_sharers",
    """
    SELECT id, (id = CAST(:run_id AS uuid) AND claim_owner = CAST(:owner AS text)
                AND claim_epoch = CAST(:epoch AS int) AND status = 'running') AS mine
      FROM runs
     WHERE id = CAST(:run_id AS uuid) OR id = ANY(CAST(:ids AS uuid[]))
     ORDER BY id <> CAST(:run_id AS uuid), id
       FOR UPDATE
    """,
)

# Each sharing ancestor's totals (its own use and its descendants') and what
# its other descendants' calls in flight reserved of it. A reservation counts
# while its run's claim lives: one an execution that died left is no longer
# held once its claim lapsed (and the next claim clears it).
SHARED_USE = Statement(
    "shared_use",
    """
    SELECT b.id, b.agent, b.input_tokens + b.output_tokens AS tokens, b.cost_usd,
           (SELECT COALESCE(sum(c.reserved_tokens), 0) FROM runs AS c
             WHERE c.root_id = CAST(:root_id AS uuid) AND c.reserved_tokens > 0
               AND c.id <> CAST(:run_id AS uuid) AND b.id = ANY(c.ancestors)
               AND c.status = 'running'
               AND c.claim_expires_at >= COALESCE(CAST(:now AS timestamptz), now()))
           AS reserved
      FROM runs AS b WHERE b.id = ANY(CAST(:ids AS uuid[]))
    """,
)

RESERVE = Statement(
    "reserve",
    "UPDATE runs SET reserved_tokens = CAST(:tokens AS bigint) WHERE id = CAST(:run_id AS uuid)",
)


class PgChildren(PgExecution):
    def admit(
        self, fence: Fence, run: Run, tokens: int, *, now: datetime | None = None
    ) -> Admission:
        """Whether the fenced child ``run``'s next model call, expected to take
        ``tokens``, may go out under the budgets it shares (``run.budget_bounds``);
        admitted, the run holds ``tokens`` reserved until its journal write
        (or its end, or the next claim) gives them back."""
        ids = [bound.run_id for bound in run.budget_bounds]
        with self.db.tx() as tx:
            locked = tx.rows(LOCK_SHARERS, {**fence_params(fence), "ids": ids})
            if not any(row["mine"] for row in locked):
                raise lost_lease(fence)
            params = {"run_id": run.id, "root_id": run.root_id, "ids": ids, "now": now}
            rows = tx.rows(SHARED_USE, params)
            uses = {
                str(r["id"]): SharedUse(
                    str(r["id"]),
                    r["agent"],
                    int(r["tokens"]),
                    float(r["cost_usd"]),
                    int(r["reserved"]),
                )
                for r in rows
            }
            admission = admit(run.budget_bounds, uses, tokens)
            if admission.verdict is AdmissionVerdict.ADMITTED:
                tx.execute(RESERVE, {"run_id": run.id, "tokens": tokens})
        return admission

    def start_children(self, fence: Fence, children: Sequence[NewChild]) -> list[Run]:
        """Create ``children`` of the fenced run (each once: one already
        started for its call is kept as it is) and return the run's children
        for those calls, queued or further on. Nothing is sent: the caller
        sends those still queued once the parent's wait is committed."""
        params = []
        for child in children:
            tenant = check_tenant(child.tenant)
            params.append(
                {
                    "id": child.id,
                    "agent": child.agent,
                    "trigger": dumps(
                        self.sealing.trigger(child.trigger.model_dump(mode="json"), child.id)
                    ),
                    "trigger_id": child.trigger.id,
                    "trace_context": dumps(child.trace_context) if child.trace_context else None,
                    "run_id": fence.run_id,
                    "call_id": child.call_id,
                    "detached": child.detached,
                    "bounds": dumps([b.as_json() for b in child.bounds]) if child.bounds else None,
                    "tenant": tenant,
                }
            )
        calls = {child.call_id for child in children}
        with self.db.tx() as tx:
            self._lock_fenced(tx, fence)
            for row in params:
                tx.execute(START_CHILD, row)
            found = [
                run_from_row(r, sealing=self.sealing)
                for r in tx.rows(CHILDREN, {"run_id": fence.run_id})
            ]
        for run in found:
            self._committed(run.id)
        self._committed(fence.run_id)  # its feed has the children's start
        return [run for run in found if run.parent_call_id in calls]

    def children(self, run_id: str) -> list[Run]:
        """The runs ``run_id``'s tool calls started, oldest first."""
        run_id = check_run_id(run_id)
        with self.db.tx() as tx:
            self._require_run(tx, run_id)
            return [
                run_from_row(r, sealing=self.sealing) for r in tx.rows(CHILDREN, {"run_id": run_id})
            ]

    def ancestors(self, run_id: str) -> list[Run]:
        """The runs whose tool calls led to ``run_id``: its parent first, its
        top-level run last; [] for a run that is no child."""
        rows = self.db.rows(ANCESTORS, {"run_id": check_run_id(run_id)})
        return [run_from_row(r, sealing=self.sealing) for r in rows]

    def resume_stranded_parents(
        self, limit: int, grace_seconds: float, *, now: datetime | None = None
    ) -> list[str]:
        """Queue again the waiting parents (quiet for ``grace_seconds``) whose
        children all ended and that wait for nothing else; their ids."""
        rows = self.db.rows(STRANDED_PARENTS, {"limit": limit, "grace": grace_seconds, "now": now})
        resumed: list[str] = []
        for row in rows:
            resumed += self.resume_if_done(str(row["id"]))
        return resumed
