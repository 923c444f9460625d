"""What ``tick()`` reports (its own module: listeners in ``runner/observe`` read
it without importing the tick machinery)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class TickReport:
    skipped: bool = False
    notified: int = 0
    notify_failed: int = 0
    expired: int = 0
    recovered: list[str] = field(default_factory=list)
    reenqueued: list[str] = field(default_factory=list)
    key_heads: list[str] = field(default_factory=list)
    # Approvals a job could not handle (logged, left for a later tick), and the
    # jobs that failed as a whole; the other jobs ran regardless.
    item_errors: int = 0
    failed_jobs: list[str] = field(default_factory=list)
