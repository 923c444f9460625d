"""What a tool sees of the run it serves."""

from __future__ import annotations

import asyncio
import enum
import threading
import time
from dataclasses import dataclass, field

from runner.core.errors import LoopMisuse
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
        self._lock = threading.Lock()
        # Made on ``loop`` now, or by the first fired() on its running loop.
        self._fired: asyncio.Future[AbortReason] | None = (
            None if loop is None else loop.create_future()
        )
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
        if fired is None:
            return  # fired() finds the reason when it makes the future
        loop = fired.get_loop()
        if _running() is loop:
            _resolve(fired, reason)
        elif not loop.is_closed():
            loop.call_soon_threadsafe(_resolve, fired, reason)

    async def wait(self) -> AbortReason:
        return await asyncio.shield(self.fired())

    def fired(self) -> asyncio.Future[AbortReason]:
        """A future of the abort's reason, done once the run is aborted: one
        per signal, on its loop, shared by every caller, so never cancel it.
        Racing work against it (``asyncio.wait``, first completed) costs no
        task, where racing against :meth:`wait` costs one a race."""
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
