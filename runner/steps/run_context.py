"""What a tool sees of the run it serves."""

from __future__ import annotations

import asyncio
import enum
import threading
import time
from dataclasses import dataclass, field

from store.models import TriggerEnvelope


class AbortReason(enum.StrEnum):
    CANCEL = "cancel"
    DRAIN = "drain"
    TIMEOUT = "timeout"
    LEASE_LOST = "lease_lost"


class AbortSignal:
    """Set once, from any thread; the first reason wins.

    Async code awaits :meth:`wait`; sync tools running in threads may poll
    :attr:`aborted` to stop early.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop | None = None) -> None:
        self._loop = loop
        self._event = asyncio.Event()
        self._lock = threading.Lock()
        self.reason: AbortReason | None = None
        self.aborted_at: float | None = None  # time.monotonic() of the abort

    @property
    def aborted(self) -> bool:
        return self.reason is not None

    def abort(self, reason: AbortReason) -> None:
        with self._lock:
            if self.reason is not None:
                return
            self.reason = reason
            self.aborted_at = time.monotonic()
        if self._loop is not None and self._loop.is_running():
            try:
                running = asyncio.get_running_loop()
            except RuntimeError:
                running = None
            if running is self._loop:
                self._event.set()
            else:
                self._loop.call_soon_threadsafe(self._event.set)
        else:
            self._event.set()

    async def wait(self) -> AbortReason:
        await self._event.wait()
        assert self.reason is not None
        return self.reason


@dataclass(frozen=True)
class RunContext:
    """Passed to the tools factory, and to any tool parameter annotated with it."""

    run_id: str
    agent: str
    trigger: TriggerEnvelope
    signal: AbortSignal = field(compare=False)
