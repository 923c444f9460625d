"""What the metrics endpoint asks of the in-memory store."""

from __future__ import annotations

from datetime import datetime

from store.mem.base import MemBase


class MemObserve(MemBase):
    def approval_backlog(self) -> tuple[int, datetime | None]:
        with self._lock:
            pending = [a.created_at for a in self._approvals.values() if a.pending]
        return len(pending), min(pending, default=None)
