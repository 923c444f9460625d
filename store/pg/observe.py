"""What the metrics endpoint asks at scrape time (``runner/observe/metrics.py``)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime
from typing import Any, NamedTuple

from store.models import StepKind
from store.pg.base import PgBase
from store.sealing import key_of
from store.statements import Statement

# Pending approvals: their number and the oldest one's age. The predicate is the
# one of approvals_pending_expiry_idx (``store/schema.py``), so the scan covers
# only the pending rows however many decided ones the table holds.
APPROVAL_BACKLOG = Statement(
    "approval_backlog",
    """
    SELECT count(*) AS pending, min(created_at) AS oldest
      FROM approvals
     WHERE decision IS NULL
    """,
)


# Effects of unknown outcome nobody resolved: found through the runs flagged
# for them (runs_needs_attention_idx), so the effects table is not scanned.
UNRESOLVED_EFFECTS = Statement(
    "unresolved_effects",
    """
    SELECT count(*) AS unresolved
      FROM runs AS r JOIN effects AS e ON e.run_id = r.id
     WHERE r.needs_attention AND e.status = 'unknown' AND e.resolved_outcome IS NULL
    """,
)


# The tools that failed (a tool step with an error) in more than half of their
# calls since :since, by agent and tool, among those called :min_calls times
# or more; the most failures first, with the latest error. A step started
# since then belongs to a run not ended or ended since then: the runs are
# found through runs_status_idx and runs_settled_finished_idx, their steps
# through the steps' primary key, so a large history is not scanned.
FAILING_TOOLS = Statement(
    "failing_tools",
    """
    SELECT r.agent, s.name AS tool, count(*) AS calls,
           count(*) FILTER (WHERE json_typeof(s.error) <> 'null') AS failures,
           (array_agg(s.error #>> '{}' ORDER BY s.started_at DESC, s.id DESC)
                FILTER (WHERE json_typeof(s.error) <> 'null'))[1] AS last_error,
           (array_agg(json_build_array(s.run_id, s.index, s.tool_call_id)
                      ORDER BY s.started_at DESC, s.id DESC)
                FILTER (WHERE json_typeof(s.error) <> 'null'))[1] AS last_error_at
      FROM runs AS r
      JOIN steps AS s ON s.run_id = r.id AND s.kind = 'tool' AND s.started_at >= :since
     WHERE r.status IN ('queued', 'running', 'waiting', 'interrupted')
        OR (r.status IN ('completed', 'failed', 'cancelled') AND r.finished_at >= :since)
     GROUP BY r.agent, s.name
    HAVING count(*) >= CAST(:min_calls AS int)
       AND 2 * count(*) FILTER (WHERE json_typeof(s.error) <> 'null') > count(*)
     ORDER BY failures DESC, r.agent, s.name
    """,
)


class ToolFailures(NamedTuple):
    """A tool of an agent that failed in more than half of its calls lately."""

    agent: str
    tool: str
    calls: int
    failures: int
    last_error: str


class PgObserve(PgBase):
    def unresolved_effects(self) -> int:
        """How many effects of unknown outcome wait for a person, over all runs."""
        row = self.db.first(UNRESOLVED_EFFECTS)
        assert row is not None  # an aggregate always returns one row
        return int(row["unresolved"])

    def approval_backlog(self) -> tuple[int, datetime | None]:
        row = self.db.first(APPROVAL_BACKLOG)
        assert row is not None  # an aggregate always returns one row
        return int(row["pending"]), row["oldest"]

    def failing_tools(self, since: datetime, min_calls: int) -> list[ToolFailures]:
        """The tools that failed in more than half of their calls since
        ``since``, by agent and tool, of those called ``min_calls`` times or
        more (``runwright doctor`` runs this statement on its own connection)."""
        rows = self.db.rows(FAILING_TOOLS, {"since": since, "min_calls": min_calls})
        return [
            ToolFailures(
                r["agent"], r["tool"], int(r["calls"]), int(r["failures"]), self._last_error(r)
            )
            for r in rows
        ]

    def _last_error(self, row: Mapping[str, Any]) -> str:
        """A ``FAILING_TOOLS`` row's last error, opened if it is sealed."""
        error = row["last_error"]
        if key_of(error) is None:
            return str(error)
        run_id, index, call_id = row["last_error_at"]
        opened = self.sealing.open(
            error, "steps", "error", run_id, index, StepKind.TOOL.value, call_id
        )
        return opened if isinstance(opened, str) else json.dumps(opened)
