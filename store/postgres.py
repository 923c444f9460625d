"""The store: the rules of a run (``store/rules.py`` and the statements that
decide them, ``store/queries``) on Postgres.

The class is assembled from one part per aggregate (``store/pg/``): runs,
claims and fenced execution writes, approvals, tick maintenance, retry and
fork, and what the metrics endpoint reads. Every statement is named in
``store/queries``; :class:`store.db.Executor` runs them.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from store.config import DEFAULT_MAX_PAYLOAD_BYTES
from store.db import Executor, shared_engine
from store.pg.approvals import PgApprovals
from store.pg.execution import PgExecution
from store.pg.maintenance import PgMaintenance
from store.pg.observe import PgObserve
from store.pg.recovery import PgRecovery
from store.pg.runs import PgRuns


class PostgresStore(PgRuns, PgExecution, PgApprovals, PgMaintenance, PgRecovery, PgObserve):
    """The store (``store/base.Store``)."""

    def __init__(
        self, engine: sa.Engine, *, max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES
    ) -> None:
        self.db = Executor(engine)
        self.max_payload_bytes = max_payload_bytes

    @classmethod
    def from_url(cls, url: str, **kwargs: Any) -> PostgresStore:
        return cls(shared_engine(url), **kwargs)

    def close(self) -> None:
        self.engine.dispose()
