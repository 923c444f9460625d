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


class PgObserve(PgBase):
    def approval_backlog(self) -> tuple[int, datetime | None]:
        row = self.db.first(APPROVAL_BACKLOG)
        assert row is not None  # an aggregate always returns one row
        return int(row["pending"]), row["oldest"]
