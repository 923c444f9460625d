"""What a tool sees of the run it serves."""

from __future__ import annotations

import asyncio
import enum
import threading
import time
from dataclasses import dataclass, field

from runner.errors import LoopMisuse
from store.models import TriggerEnvelope


class AbortReason(enum.StrEnum):
    CANCEL = "cancel"
    DRAIN = "drain"
    TIMEOUT = "timeout"
    LEASE_LOST = "lease_lost"


class AbortSignal:
    """Set once, from any thread; the first reason wins.

    Async code awaits :meth:`wait`, or races work against :meth:`fired`; sync
    tools running in threads may poll :attr:`aborted` to stop early.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop | None = None) -> None:
        self._loop = loop
        self._event = asyncio.Event()
        self._lock = threading.Lock()
        self._fired: asyncio.Future[AbortReason] | None = None
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
            fired = self._fired
        if self._loop is not None and self._loop.is_running():
            if _running() is self._loop:
                self._event.set()
            else:
                self._loop.call_soon_threadsafe(self._event.set)
        else:
            self._event.set()
        if fired is not None:
            loop = fired.get_loop()
            if _running() is loop:
                _resolve(fired, reason)
            elif not loop.is_closed():
                loop.call_soon_threadsafe(_resolve, fired, reason)

    async def wait(self) -> AbortReason:
        await self._event.wait()
        assert self.reason is not None
        return self.reason

    def fired(self) -> asyncio.Future[AbortReason]:
        """A future of the abort's reason, done once the run is aborted: one
        per signal, on the running loop, shared by every caller, so never
        cancel it. Racing work against it (``asyncio.wait``, first completed)
        costs no task, where racing against :meth:`wait` costs one a race."""
        loop = asyncio.get_running_loop()
        with self._lock:
            if self._fired is None:
                self._fired = loop.create_future()
                if self.reason is not None:
                    self._fired.set_result(self.reason)
            fired = self._fired
        if fired.get_loop() is not loop:
            raise LoopMisuse("AbortSignal.fired() is for the loop it was first called on")
        return fired


def _running() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def _resolve(fired: asyncio.Future[AbortReason], reason: AbortReason) -> None:
    if not fired.done():
        fired.set_result(reason)


@dataclass(frozen=True)
class RunContext:
    """Passed to the tools factory, and to any tool parameter annotated with it."""

    run_id: str
    agent: str
    trigger: TriggerEnvelope
    signal: AbortSignal = field(compare=False)
