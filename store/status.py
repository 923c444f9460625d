"""Run statuses and the groups the rules speak of.

This module is light (no SQLAlchemy, no pydantic) so that ``store/summary.py``
can use it. Python code names a status by :class:`RunStatus` only; SQL spells
it in the statements, and tests/unit/test_store_statements.py checks every
status (and status group) the SQL spells against these enums.
"""

from __future__ import annotations

import enum
import warnings


class RunStatus(enum.StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    WAITING = "waiting"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"
    INTERRUPTED = "interrupted"

    @property
    def ended(self) -> bool:
        return self in ENDED

    @property
    def settled(self) -> bool:
        """Deprecated: :attr:`ended` (docs/concepts.md, Glossary)."""
        warnings.warn(
            "RunStatus.settled is deprecated; use RunStatus.ended (docs/concepts.md, Glossary)",
            DeprecationWarning,
            stacklevel=2,
        )
        return self.ended

    def __str__(self) -> str:
        return self.value


class Interruption(enum.StrEnum):
    """Why an execution gave its run back to the queue (``interrupted``)."""

    # Its worker shut down mid-run (a warm shutdown: a deploy, a scale-down).
    DRAIN = "drain"
    # Its worker did not have the run's agent (a rolling deploy).
    AGENT_MISSING = "agent_missing"


ENDED = frozenset({RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELLED})
# Statuses that hold the run's concurrency key: from its first claim until it ends.
KEY_HOLDING = frozenset({RunStatus.RUNNING, RunStatus.WAITING, RunStatus.INTERRUPTED})
CLAIMABLE = frozenset({RunStatus.QUEUED, RunStatus.INTERRUPTED})
# Statuses a cancel ends at once; a running run is asked to abort instead.
CANCELLABLE = frozenset({RunStatus.QUEUED, RunStatus.WAITING, RunStatus.INTERRUPTED})
