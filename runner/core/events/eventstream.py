"""Reading a run's events: replay from the store, then follow the wake-ups
that a :class:`~runner.core.events.feed.Feed` hands to its readers (runner/core/events/feed.py)."""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import queue
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from typing import Any, Protocol

from store.events import EventType, RunEvent
from store.models import RunStatus
from store.postgres import PostgresStore

# A reader that heard nothing for this long reads the store once anyway: the
# safety net for a writer that died between its commit and its publish.
RESYNC_SECONDS = 15.0
# Events read from the store at a time.
PAGE = 500

WAKE: Any = object()  # an item of a reader's queue: read the store


class Hub(Protocol):
    """What a reader needs of its feed."""

    store: PostgresStore

    def attach(self, run_id: str, sink: Sink) -> Tail: ...

    def detach(self, run_id: str, sink: Sink) -> None: ...


class Tail:
    """The events of one run that this process's readers have read, so that a
    wake-up costs one store read however many readers follow the run."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.base: int | None = None  # complete above this id
        self.last = 0
        self.events: list[RunEvent] = []
        self.ids: list[int] = []  # the events' ids, to find a reader's place
        self.heard = 0  # wake-ups heard
        self.read = 0  # wake-ups the events account for
        self.readers = 0

    def after(self, cursor: int, read: Callable[[int], list[RunEvent]]) -> list[RunEvent]:
        with self.lock:
            if self.base is None:
                self.base = self.last = cursor
                self.read = self.heard - 1  # read once now
            if cursor >= self.base:
                if self.read < self.heard:
                    heard = self.heard
                    new = read(self.last)  # one read, under the lock, for every reader
                    self.events += new
                    self.ids += [e.id or 0 for e in new]
                    if new:
                        self.last = self.ids[-1]
                    self.read = heard
                return self.events[bisect.bisect_right(self.ids, cursor) :]
        return read(cursor)  # a reader from before this tail began: rare


class Sink(Protocol):
    """A reader's queue, filled by the listener thread."""

    def put(self, item: Any) -> None: ...


class ThreadSink:
    def __init__(self) -> None:
        self.queue: queue.SimpleQueue[Any] = queue.SimpleQueue()

    def put(self, item: Any) -> None:
        self.queue.put(item)


class LoopSink:
    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.queue: asyncio.Queue[Any] = asyncio.Queue()

    def put(self, item: Any) -> None:
        with contextlib.suppress(RuntimeError):  # the reader's loop is closed: it is gone
            self.loop.call_soon_threadsafe(self.queue.put_nowait, item)


class EventStream:
    """The events of one run: those after ``after`` from the store, then the
    new ones as they are committed, until the run reaches one of ``until``
    (by default, until it ends) or ``timeout`` seconds pass. Iterate it
    with ``for`` or ``async for``."""

    def __init__(
        self,
        feed: Hub,
        run_id: str,
        after: int,
        timeout: float | None,
        until: frozenset[RunStatus],
        tokens: bool,
    ) -> None:
        self.feed = feed
        self.run_id = run_id
        self.cursor = after
        self.timeout = timeout
        self.until = until
        self.tokens = tokens
        self.epoch = 0
        self.done = False

    # One reader's rules, used by both drivers below.

    def _read(self, after: int) -> list[RunEvent]:
        events: list[RunEvent] = []
        while True:
            page = self.feed.store.events(self.run_id, after, PAGE)
            events += page
            if len(page) < PAGE:
                return events
            after = page[-1].id or after

    def _start(self) -> list[RunEvent]:
        # The status first: if the run is done already, its last event is
        # stored, and the replay that follows ends with it. The replay's own
        # status events are history (a run was queued once, and may have
        # waited before): only the latest of them says where the run is now.
        finished = self.feed.store.get_run(self.run_id).status in self.until
        events = self._take(self._read(self.cursor), live=False)
        current = [e.status for e in events if e.status is not None]
        if finished or (current and current[-1] in self.until):
            self.done = True
        return events

    def _take(self, events: Iterable[RunEvent], *, live: bool = True) -> list[RunEvent]:
        # A batch is read whole, so the events a commit wrote arrive together:
        # those after the one that ends the stream (a cancel writes the run's
        # status before its approvals' withdrawal) are taken all the same.
        taken: list[RunEvent] = []
        ended = self.done
        for event in events:
            if ended or event.id is None or event.id <= self.cursor:
                continue
            self.cursor = event.id
            if event.type is EventType.EXECUTION:
                self.epoch = max(self.epoch, int(event.data["epoch"]))
            taken.append(event)
            if live and event.status in self.until:
                self.done = True  # it happened while this reader followed
        return taken

    def _token(self, delta: dict[str, Any]) -> list[RunEvent]:
        if not self.tokens or self.done:
            return []
        try:
            epoch = int(delta["epoch"])
        except (KeyError, TypeError, ValueError):
            return []
        if epoch < self.epoch:
            return []  # an execution that was taken over: not the run's text
        self.epoch = epoch
        return [RunEvent(self.run_id, EventType.TOKEN, delta)]

    def _deadline(self) -> float | None:
        return None if self.timeout is None else time.monotonic() + self.timeout

    @staticmethod
    def _wait_for(deadline: float | None) -> float | None:
        """How long to wait for the next item: up to the deadline, and no longer
        than the resync interval. None: the deadline has passed."""
        if deadline is None:
            return RESYNC_SECONDS
        left = deadline - time.monotonic()
        return None if left <= 0 else min(left, RESYNC_SECONDS)

    # ---------------------------------------------------------------- sync

    def __iter__(self) -> Iterator[RunEvent]:
        with self.reader() as reader:
            while not reader.ended:
                yield from reader.read(RESYNC_SECONDS)

    def reader(self) -> Reader:
        """Step-by-step reading (``with stream.reader() as r: r.read(idle)``),
        for callers that must act while a run is quiet: SSE sends keep-alives."""
        return Reader(self)

    # --------------------------------------------------------------- async

    async def __aiter__(self) -> AsyncIterator[RunEvent]:
        deadline = self._deadline()
        sink = LoopSink(asyncio.get_running_loop())
        tail = await asyncio.to_thread(self.feed.attach, self.run_id, sink)
        try:
            for event in await asyncio.to_thread(self._start):
                yield event
            while not self.done:
                wait = self._wait_for(deadline)
                if wait is None:
                    return
                try:
                    item = await asyncio.wait_for(sink.queue.get(), wait)
                except TimeoutError:
                    for event in self._take(await asyncio.to_thread(self._read, self.cursor)):
                        yield event  # resync
                    continue
                if item is WAKE:
                    new = await asyncio.to_thread(tail.after, self.cursor, self._read)
                    for event in self._take(new):
                        yield event
                else:
                    for event in self._token(item):
                        yield event
        finally:
            self.feed.detach(self.run_id, sink)


class Reader:
    """Reads an :class:`EventStream` in this thread, one batch at a time."""

    def __init__(self, stream: EventStream) -> None:
        self.stream = stream
        self._sink = ThreadSink()
        self._tail: Tail | None = None
        self._pending: list[RunEvent] = []
        self._deadline: float | None = None
        self._quiet = 0.0
        self._expired = False

    def __enter__(self) -> Reader:
        stream = self.stream
        self._deadline = stream._deadline()
        self._tail = stream.feed.attach(stream.run_id, self._sink)
        try:
            self._pending = stream._start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.stream.feed.detach(self.stream.run_id, self._sink)

    @property
    def ended(self) -> bool:
        """The run reached where the stream ends, or the timeout passed."""
        return not self._pending and (self.stream.done or self._expired)

    def read(self, idle: float) -> list[RunEvent]:
        """The next events, or none after ``idle`` seconds without any."""
        if self._pending:
            batch, self._pending = self._pending, []
            return batch
        stream = self.stream
        assert self._tail is not None, "use the reader in a with block"
        wait = stream._wait_for(self._deadline)
        if wait is None:
            self._expired = True
            return []
        wait = min(wait, idle)
        try:
            item = self._sink.queue.get(timeout=wait)
        except queue.Empty:
            self._quiet += wait
            if self._quiet < RESYNC_SECONDS:
                return []
            self._quiet = 0.0
            return stream._take(stream._read(stream.cursor))  # resync
        self._quiet = 0.0
        if item is WAKE:
            return stream._take(self._tail.after(stream.cursor, stream._read))
        return stream._token(item)
