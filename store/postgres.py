"""The store: Postgres, and the rules of a run (``store/rules.py``, and the
statements that decide them, beside the code that runs them in ``store/pg/``).

The class is assembled from one part per concern (``store/pg/``): runs, claims
and fenced execution writes, child runs, effects of unknown outcome, approvals, tick
maintenance, retry and fork, what the metrics endpoint reads, schedules,
flow control (a run parked on a limit), the audit log and erasure, the keys
of encryption at rest, and datasets and evaluations.
Each part holds its statements; :class:`store.db.Executor` runs them.

Methods taking a :class:`~store.models.Fence` are the writes of a running run:
each is conditional on ``claim_owner``, ``claim_epoch`` and ``status =
'running'`` and raises :class:`~store.errors.LeaseLostError` (writing nothing)
when the condition fails. Methods taking ``now`` use it as the current time
when given (tests move time that way); otherwise the database clock, so that
workers with skewed clocks agree on claim expiry. After each committed write
that made events of a run, the store calls what :meth:`on_commit` registered
(the run-event feed's wake-up).
"""

from __future__ import annotations

import sqlalchemy as sa

from store.db import DEFAULT_POOL_SIZE, Executor, shared_engine
from store.pg.approvals import PgApprovals
from store.pg.audit import PgAudit
from store.pg.children import PgChildren
from store.pg.effects import PgEffects
from store.pg.erasure import PgErasure
from store.pg.evals import PgEvals
from store.pg.execution import PgExecution
from store.pg.flow import PgFlow
from store.pg.keys import PgKeys
from store.pg.maintenance import PgMaintenance
from store.pg.observe import PgObserve
from store.pg.retry_fork import PgRetryFork
from store.pg.runs import PgRuns
from store.pg.schedules import PgSchedules
from store.pg.versions import PgVersions
from store.sealing import Cipher, Sealing
from store.validate import DEFAULT_MAX_PAYLOAD_BYTES


class PostgresStore(
    PgRuns,
    PgChildren,
    PgFlow,
    PgVersions,
    PgExecution,
    PgEffects,
    PgApprovals,
    PgMaintenance,
    PgRetryFork,
    PgObserve,
    PgSchedules,
    PgAudit,
    PgErasure,
    PgKeys,
    PgEvals,
):
    """The store: what the engine, the console and the command line call."""

    def __init__(
        self,
        engine: sa.Engine,
        *,
        max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
        cipher: Cipher | None = None,
    ) -> None:
        """``cipher``: the key ring that seals the payload columns
        (store/sealing.py); None writes them in clear."""
        self.db = Executor(engine)
        self.max_payload_bytes = max_payload_bytes
        self.sealing = Sealing(cipher)

    @classmethod
    def from_url(
        cls,
        url: str,
        *,
        pool_size: int = DEFAULT_POOL_SIZE,
        prepared: bool = True,
        max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
        cipher: Cipher | None = None,
    ) -> PostgresStore:
        """The store on this process's pool for ``url`` (see ``make_engine``)."""
        engine = shared_engine(url, pool_size=pool_size, prepared=prepared)
        return cls(engine, max_payload_bytes=max_payload_bytes, cipher=cipher)

    def close(self) -> None:
        self.db.close()
