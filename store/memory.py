"""An in-memory store with the same semantics as ``PostgresStore``.

For fast unit tests and for measuring the engine without a database. It is
thread-safe within one process and shares nothing across processes. The rules
are ``store/rules.py``'s, as in Postgres; only where the rows live differs.
"""

from __future__ import annotations

from store.mem.approvals import MemApprovals
from store.mem.execution import MemExecution
from store.mem.maintenance import MemMaintenance
from store.mem.observe import MemObserve
from store.mem.recovery import MemRecovery
from store.mem.runs import MemRuns


class MemoryStore(MemRuns, MemExecution, MemApprovals, MemMaintenance, MemRecovery, MemObserve):
    def close(self) -> None:
        pass
