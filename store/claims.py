"""temporary: callers move to runner.coordination (runner/engine/execution.py
and runner/engine/pg_journal.py still import the claim from here)."""

from __future__ import annotations

from runner.coordination.claims import Claims, Heartbeat, NotClaimed, Refusal

__all__ = ["Claims", "Heartbeat", "NotClaimed", "Refusal"]
