"""The run-event feed: replay from the store, then follow live (docs/events.md).

Durable events come from the rows the store commits (store/events.py). After
a commit the writer publishes a wake-up on the run's Redis channel (the
store calls :meth:`Feed.wake`, which the engine registers with
``PostgresStore.on_commit``); a reader that hears it reads what is new from
the store. A reader therefore never depends on Redis for what it gets, only
for when: it subscribes before it replays, resumes after the last id it saw,
and re-reads after a Redis reconnect, so it gets every event once, in id
order, whatever dies on the way.

Token deltas are the one live-only event: published as they arrive, never
stored, keyed by the epoch of the execution that streamed them.

One :class:`Feed` per engine: in a web process it holds one Redis
subscription for all the readers of a run, and one store read per wake-up for
all of them (:class:`Tail`).
"""

from __future__ import annotations

import asyncio
import logging
import math
import threading
from collections.abc import Iterable
from typing import Any

import redis

from runner.core.coordination.live import WAKE as WAKE_MESSAGE
from runner.core.coordination.live import (
    EventListener,
    Publisher,
    decode,
    events_channel,
    token_payload,
)
from runner.core.deprecation import retired
from runner.core.errors import InvalidInput
from runner.core.events.eventstream import WAKE, EventStream, Sink, Tail
from runner.core.runtime import runtime
from store.models import Run, RunStatus
from store.onloop import carried
from store.postgres import PostgresStore
from store.status import ENDED
from store.validate import check_run_id

log = logging.getLogger(__name__)

# Where a wait or a stream stops: always when the run ends, and also when it
# reaches the statuses given (``"waiting"``: when it waits for an approval).
Until = str | RunStatus | Iterable[RunStatus | str]


def statuses(until: Until) -> frozenset[RunStatus]:
    if until == "settled":
        retired('until="settled"', 'until="ended"', stacklevel=4)
        until = "ended"
    items: Iterable[RunStatus | str] = (
        () if until == "ended" else [until] if isinstance(until, str) else until
    )
    try:
        chosen = frozenset(RunStatus(s) for s in items)
    except (TypeError, ValueError):
        known = ", ".join(s.value for s in RunStatus)
        raise InvalidInput(f"until must be 'ended' or statuses ({known}), not {until!r}") from None
    return ENDED | chosen


MAX_ID = 2**63 - 1  # event ids are bigint


def check_after(after: object) -> int:
    """A reader's last id: None (from the start) or an id as the feed gives them."""
    if after is None:
        return 0
    if isinstance(after, bool) or not isinstance(after, int) or not 0 <= after <= MAX_ID:
        raise InvalidInput(f"after must be an event id (0 to {MAX_ID}), not {after!r:.40}")
    return after


def check_timeout(timeout: object) -> float | None:
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, int | float):
        raise InvalidInput(f"timeout must be a number of seconds, not {timeout!r:.40}")
    if not math.isfinite(timeout) or timeout < 0:
        raise InvalidInput(f"timeout must be a finite number of seconds >= 0, not {timeout!r}")
    return float(timeout)


class Feed:
    """Publishes and follows run events, through Redis when ``client`` is
    given, else within this process only (an engine without Redis)."""

    def __init__(self, store: PostgresStore, client: redis.Redis | None) -> None:
        self.store = store
        self.client = client
        self._lock = threading.Lock()
        self._sinks: dict[str, set[Sink]] = {}
        self._tails: dict[str, Tail] = {}
        self._listener: EventListener | None = None
        self._out: Publisher | None = None
        self._failures = 0

    # ------------------------------------------------------------ publishing

    def wake(self, run_id: str) -> None:
        """After a commit that wrote events of ``run_id``; one socket write.
        Never raises: the events are stored, and readers that miss this
        wake-up find them on the next one or at their resync."""
        if self.client is None:
            self._deliver(run_id, None)
            return
        publisher, channel = self._publisher(), events_channel(run_id)
        if not carried():
            publisher.send(channel, WAKE_MESSAGE)
        elif publisher.send_now(channel, WAKE_MESSAGE) is None:
            # A write on the loop (store/onloop.py) waits neither for Redis to
            # connect nor for another thread's send: a thread sends it.
            runtime().calls.submit(publisher.send, channel, WAKE_MESSAGE)

    def token(self, run_id: str, delta: dict[str, Any]) -> bool:
        """A token delta (``epoch``, ``step``, ``attempt``, ``n``, ``text``);
        False if it could not be queued (the caller stops sending them)."""
        if self.client is None:
            self._deliver(run_id, delta)
            return True
        return self._publisher().send(events_channel(run_id), token_payload(delta))

    def _publisher(self) -> Publisher:
        publisher = self._out
        if publisher is None:
            assert self.client is not None
            with self._lock:
                if self._out is None:
                    self._out = Publisher(self.client, self._publish_failed)
                publisher = self._out
        return publisher

    def _publish_failed(self, exc: Exception) -> None:
        self._failures += 1
        if self._failures == 1 or self._failures % 100 == 0:
            log.warning(
                "could not publish run events (%s; %d so far); readers catch up from the store",
                exc,
                self._failures,
            )

    # ------------------------------------------------------------ following

    def events(
        self,
        run_id: str,
        after: int | None = None,
        *,
        timeout: float | None = None,
        until: Iterable[RunStatus] = ENDED,
        tokens: bool = True,
    ) -> EventStream:
        return EventStream(
            self,
            check_run_id(run_id),
            check_after(after),
            check_timeout(timeout),
            frozenset(until),
            tokens,
        )

    def wait(
        self, run_id: str, timeout: float | None = None, until: Iterable[RunStatus] = ENDED
    ) -> Run:
        timeout = check_timeout(timeout)
        statuses = frozenset(until)
        run = self.store.get_run(run_id)
        if run.status in statuses:
            return run
        for _ in self.events(run_id, timeout=timeout, until=statuses, tokens=False):
            pass
        return self.store.get_run(run_id)

    async def wait_async(
        self, run_id: str, timeout: float | None = None, until: Iterable[RunStatus] = ENDED
    ) -> Run:
        timeout = check_timeout(timeout)
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
            publisher, self._out = self._out, None
        if publisher is not None:
            publisher.close()
        if listener is not None:
            listener.stop()

    def attach(self, run_id: str, sink: Sink) -> Tail:
        with self._lock:
            sinks = self._sinks.setdefault(run_id, set())
            first = not sinks
            sinks.add(sink)
            tail = self._tails.setdefault(run_id, Tail())
            tail.readers += 1
            listener = self._listener
            if self.client is not None and listener is None:
                listener = self._listener = EventListener(self.client, self._heard, self._reset)
        if first and listener is not None:
            try:
                listener.subscribe(run_id)
            except BaseException:
                self.detach(run_id, sink)
                raise
        return tail

    def detach(self, run_id: str, sink: Sink) -> None:
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
            sink.put(WAKE if delta is None else delta)

    def _reset(self) -> None:
        """Redis came back: what was published meanwhile is lost, so every
        reader reads the store once."""
        with self._lock:
            runs = list(self._sinks)
        for run_id in runs:
            self._deliver(run_id, None)
