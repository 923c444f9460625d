"""The run-event feed: replay from the store, then follow live (DESIGN §10).

Durable events come from the rows the store commits (store/events.py). After
a commit the writer publishes a wake-up on the run's Redis channel
(:class:`LiveStore`, which wraps the engine's store); a reader that hears it
reads what is new from the store. A reader therefore never depends on Redis
for what it gets, only for when: it subscribes before it replays, resumes
after the last id it saw, and re-reads after a Redis reconnect, so it gets
every event once, in id order, whatever dies on the way.

Token deltas are the one live-only event: published as they arrive, never
stored, keyed by the epoch of the execution that streamed them.

One :class:`Feed` per engine: in a web process it holds one Redis
subscription for all the readers of a run, and one store read per wake-up for
all of them (:class:`_Tail`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import queue
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from typing import Any

import redis

from runner.errors import InvalidInput, StoreUnavailable
from store.base import Store
from store.events import EventType, RunEvent
from store.live import EventListener, decode, publish_token, publish_wake
from store.models import Run, RunStatus
from store.status import SETTLED

log = logging.getLogger(__name__)

# A reader that heard nothing for this long reads the store once anyway: the
# safety net for a writer that died between its commit and its publish.
RESYNC_SECONDS = 15.0
# Events read from the store at a time.
PAGE = 500

_WAKE: Any = object()  # an item of a reader's queue: read the store

# Where a wait or a stream ends: always when the run settles, and also when
# it reaches the statuses given (``"waiting"``: when it waits for an approval).
Until = str | RunStatus | Iterable[RunStatus | str]


def statuses(until: Until) -> frozenset[RunStatus]:
    items: Iterable[RunStatus | str] = (
        () if until == "settled" else [until] if isinstance(until, str) else until
    )
    try:
        chosen = frozenset(RunStatus(s) for s in items)
    except (TypeError, ValueError):
        known = ", ".join(s.value for s in RunStatus)
        raise InvalidInput(
            f"until must be 'settled' or statuses ({known}), not {until!r}"
        ) from None
    return SETTLED | chosen


class _Tail:
    """The events of one run that this process's readers have read, so that a
    wake-up costs one store read however many readers follow the run."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.base: int | None = None  # complete above this id
        self.last = 0
        self.events: list[RunEvent] = []
        self.heard = 0  # wake-ups heard
        self.read = 0  # wake-ups the events account for
        self.readers = 0

    def after(self, cursor: int, read: Callable[[int], list[RunEvent]]) -> list[RunEvent]:
        with self.lock:
            if self.base is None:
                self.base = self.last = cursor
                self.read = self.heard - 1  # read once now
            if cursor < self.base:
                return read(cursor)
            if self.read < self.heard:
                heard = self.heard
                new = read(self.last)
                self.events += new
                if new:
                    self.last = new[-1].id or self.last
                self.read = heard
            return [e for e in self.events if (e.id or 0) > cursor]


class Feed:
    """Publishes and follows run events, through Redis when ``client`` is
    given, else within this process only (an engine without Redis)."""

    def __init__(self, store: Store, client: redis.Redis | None) -> None:
        self.store = store
        self.client = client
        self._lock = threading.Lock()
        self._sinks: dict[str, set[_Sink]] = {}
        self._tails: dict[str, _Tail] = {}
        self._listener: EventListener | None = None
        self._failures = 0

    # ------------------------------------------------------------ publishing

    def wake(self, run_id: str) -> None:
        """After a commit that wrote events of ``run_id``. Never raises: the
        events are stored, and readers find them on the next wake-up or resync."""
        if self.client is None:
            self._deliver(run_id, None)
            return
        try:
            publish_wake(self.client, run_id)
        except StoreUnavailable as exc:
            self._publish_failed(run_id, exc)

    def token(self, run_id: str, delta: dict[str, Any]) -> None:
        """A token delta (``epoch``, ``step``, ``attempt``, ``n``, ``text``)."""
        if self.client is None:
            self._deliver(run_id, delta)
            return
        try:
            publish_token(self.client, run_id, delta)
        except StoreUnavailable as exc:
            self._publish_failed(run_id, exc)

    def _publish_failed(self, run_id: str, exc: Exception) -> None:
        self._failures += 1
        if self._failures == 1 or self._failures % 100 == 0:
            log.warning(
                "could not publish an event of run %s (%s); readers catch up from the store",
                run_id,
                exc,
            )

    # ------------------------------------------------------------ following

    def events(
        self,
        run_id: str,
        after: int | None = None,
        *,
        timeout: float | None = None,
        until: Iterable[RunStatus] = SETTLED,
        tokens: bool = True,
    ) -> EventStream:
        return EventStream(self, run_id, after or 0, timeout, frozenset(until), tokens)

    def wait(
        self, run_id: str, timeout: float | None = None, until: Iterable[RunStatus] = SETTLED
    ) -> Run:
        statuses = frozenset(until)
        run = self.store.get_run(run_id)
        if run.status in statuses:
            return run
        for _ in self.events(run_id, timeout=timeout, until=statuses, tokens=False):
            pass
        return self.store.get_run(run_id)

    async def wait_async(
        self, run_id: str, timeout: float | None = None, until: Iterable[RunStatus] = SETTLED
    ) -> Run:
        statuses = frozenset(until)
        run = await asyncio.to_thread(self.store.get_run, run_id)
        if run.status in statuses:
            return run
        async for _ in self.events(run_id, timeout=timeout, until=statuses, tokens=False):
            pass
        return await asyncio.to_thread(self.store.get_run, run_id)

    def close(self) -> None:
        with self._lock:
            listener, self._listener = self._listener, None
        if listener is not None:
            listener.stop()

    def _attach(self, run_id: str, sink: _Sink) -> _Tail:
        with self._lock:
            sinks = self._sinks.setdefault(run_id, set())
            first = not sinks
            sinks.add(sink)
            tail = self._tails.setdefault(run_id, _Tail())
            tail.readers += 1
            listener = self._listener
            if self.client is not None and listener is None:
                listener = self._listener = EventListener(self.client, self._heard, self._reset)
        if first and listener is not None:
            try:
                listener.subscribe(run_id)
            except BaseException:
                self._detach(run_id, sink)
                raise
        return tail

    def _detach(self, run_id: str, sink: _Sink) -> None:
        with self._lock:
            sinks = self._sinks.get(run_id)
            if sinks is None or sink not in sinks:
                return
            sinks.discard(sink)
            tail = self._tails[run_id]
            tail.readers -= 1
            if sinks:
                return
            del self._sinks[run_id]
            del self._tails[run_id]
            listener = self._listener
        if listener is not None:
            listener.unsubscribe(run_id)

    def _heard(self, run_id: str, data: bytes) -> None:
        try:
            delta = decode(data)
        except ValueError:
            return  # not ours: the channel name is public
        self._deliver(run_id, delta)

    def _deliver(self, run_id: str, delta: dict[str, Any] | None) -> None:
        with self._lock:
            sinks = list(self._sinks.get(run_id, ()))
            tail = self._tails.get(run_id)
            if delta is None and tail is not None:
                tail.heard += 1
        for sink in sinks:
            sink.put(_WAKE if delta is None else delta)

    def _reset(self) -> None:
        """Redis came back: what was published meanwhile is lost, so every
        reader reads the store once."""
        with self._lock:
            runs = list(self._sinks)
        for run_id in runs:
            self._deliver(run_id, None)


class _Sink:
    """A reader's queue, filled by the listener thread."""

    def put(self, item: Any) -> None:
        raise NotImplementedError


class _ThreadSink(_Sink):
    def __init__(self) -> None:
        self.queue: queue.SimpleQueue[Any] = queue.SimpleQueue()

    def put(self, item: Any) -> None:
        self.queue.put(item)


class _LoopSink(_Sink):
    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.queue: asyncio.Queue[Any] = asyncio.Queue()

    def put(self, item: Any) -> None:
        with contextlib.suppress(RuntimeError):  # the reader's loop is closed: it is gone
            self.loop.call_soon_threadsafe(self.queue.put_nowait, item)


class EventStream:
    """The events of one run: those after ``after`` from the store, then the
    new ones as they are committed, until the run reaches one of ``until``
    (by default, until it settles) or ``timeout`` seconds pass. Iterate it
    with ``for`` or ``async for``."""

    def __init__(
        self,
        feed: Feed,
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
        # stored, and the replay that follows ends with it.
        finished = self.feed.store.get_run(self.run_id).status in self.until
        events = self._take(self._read(self.cursor))
        if finished:
            self.done = True
        return events

    def _take(self, events: Iterable[RunEvent]) -> list[RunEvent]:
        taken: list[RunEvent] = []
        for event in events:
            if self.done or event.id is None or event.id <= self.cursor:
                continue
            self.cursor = event.id
            if event.type is EventType.EXECUTION:
                self.epoch = max(self.epoch, int(event.data["epoch"]))
            taken.append(event)
            if event.status in self.until:
                self.done = True
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
        sink = _LoopSink(asyncio.get_running_loop())
        tail = await asyncio.to_thread(self.feed._attach, self.run_id, sink)
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
                if item is _WAKE:
                    new = await asyncio.to_thread(tail.after, self.cursor, self._read)
                    for event in self._take(new):
                        yield event
                else:
                    for event in self._token(item):
                        yield event
        finally:
            self.feed._detach(self.run_id, sink)


class Reader:
    """Reads an :class:`EventStream` in this thread, one batch at a time."""

    def __init__(self, stream: EventStream) -> None:
        self.stream = stream
        self._sink = _ThreadSink()
        self._tail: _Tail | None = None
        self._pending: list[RunEvent] = []
        self._deadline: float | None = None
        self._quiet = 0.0
        self._expired = False

    def __enter__(self) -> Reader:
        stream = self.stream
        self._deadline = stream._deadline()
        self._tail = stream.feed._attach(stream.run_id, self._sink)
        try:
            self._pending = stream._start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.stream.feed._detach(self.stream.run_id, self._sink)

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
        if item is _WAKE:
            return stream._take(self._tail.after(stream.cursor, stream._read))
        return stream._token(item)
