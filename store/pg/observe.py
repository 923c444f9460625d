"""What the metrics endpoint asks of Postgres."""

from __future__ import annotations

from datetime import datetime

from store.pg.base import PgBase
from store.queries import observe as q


class PgObserve(PgBase):
    def approval_backlog(self) -> tuple[int, datetime | None]:
        row = self.db.first(q.APPROVAL_BACKLOG)
        assert row is not None  # an aggregate always returns one row
        return int(row["pending"]), row["oldest"]
