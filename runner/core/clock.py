"""Where the engine reads the time: one seam, so a test can move it.

The engine asks its :class:`Clock` when a new approval expires, when a failed
model step may be tried again and when a failed notification is sent again,
and it sleeps through the clock between the short retries of a model call.

What the store compares those times against is :meth:`Clock.for_store`. The
system clock answers None: the store then uses Postgres's own ``now()``, one
clock for every worker, whatever their hosts' clocks say. A test clock
(:class:`runner.testing.ManualClock`) answers its own time instead, so moving
it past an approval's expiry or a lease's end is all a test needs: nothing
sleeps.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime


class Clock:
    """The system's time."""

    def now(self) -> datetime:
        return datetime.now(UTC)

    def for_store(self) -> datetime | None:
        """The time the store measures waits, expiries and claims against;
        None: Postgres's own."""
        return None

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


SYSTEM = Clock()
