"""What the metrics endpoint asks at scrape time (``runner/observe/metrics.py``)."""

from __future__ import annotations

from datetime import datetime

from store.pg.base import PgBase
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
