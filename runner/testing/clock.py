"""A clock a test moves by hand: time-skipping for the engine.

:class:`ManualClock` runs with the system's time plus an offset that only
:meth:`ManualClock.advance` grows. The engine reads it through its one seam
(runner/core/clock.py): approvals expire, retry waits end and leases lapse when the
clock passes them, and the short waits between a model call's retries take no
time at all (they advance the clock instead).
"""

from __future__ import annotations

import asyncio
import math
import threading
from datetime import datetime, timedelta

from runner.core.clock import Clock
from runner.core.errors import InvalidInput


class ManualClock(Clock):
    """The system's time, moved forward by :meth:`advance`."""

    def __init__(self) -> None:
        self._offset = timedelta(0)
        self._lock = threading.Lock()

    @property
    def offset(self) -> timedelta:
        """How far the clock is ahead of the system's."""
        return self._offset

    def now(self) -> datetime:
        return super().now() + self._offset

    def for_store(self) -> datetime | None:
        return self.now()

    def advance(self, by: float | timedelta) -> datetime:
        """Move the clock ``by`` seconds (or a timedelta) forward; the new time."""
        seconds = by.total_seconds() if isinstance(by, timedelta) else by
        if not (isinstance(seconds, int | float) and math.isfinite(seconds) and seconds >= 0):
            raise InvalidInput(
                f"the clock moves forward only: advance() takes seconds >= 0, not {by!r}"
            )
        with self._lock:
            self._offset += timedelta(seconds=seconds)
        return self.now()

    def advance_to(self, when: datetime) -> datetime:
        """Move the clock to ``when``, if that is ahead of it; the new time."""
        return self.advance(max(0.0, (when - self.now()).total_seconds()))

    async def sleep(self, seconds: float) -> None:
        # Time passes for the engine, not for the test: give the loop a turn only.
        self.advance(max(0.0, seconds))
        await asyncio.sleep(0)
