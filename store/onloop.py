"""The store's statements sent from an event loop, without blocking it.

A worker's executions share one asyncio loop (``runner/core/runtime.py``).
A store call made there used to hop to a thread of the I/O pool and back:
two thread wake-ups a write, most of what the engine spends on a step beside
its own work
(bench/results/2026-12-03-the-step-over-http-against-its-floor-taken-apart.md).
:func:`carry` runs the store's own sync code on the loop instead, inside a
greenlet; each statement it sends goes over a connection in psycopg2's
non-blocking mode whose socket the loop watches, so while Postgres works the
loop runs the process's other executions.

The store's code is the same either way (one store, each rule once): only
the connection under :class:`store.db.Executor` differs. Whatever else such
code does that blocks (a Redis call) blocks the loop, so the engine carries
only the calls it knows make none (``Execution.write``).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
import logging
import os
import threading
import time
import weakref
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import greenlet
import psycopg2
import psycopg2.extensions
import psycopg2.extras

from store.dberrors import LOST, REFUSED, refused, unavailable

T = TypeVar("T")
log = logging.getLogger(__name__)


class _Carrier(greenlet.greenlet):  # type: ignore[misc]  # greenlet ships no hints
    """Store code running for a coroutine of the loop (:func:`carry`)."""


def carried() -> bool:
    """Whether this code runs inside :func:`carry`: its statements go through
    the loop's non-blocking connections."""
    return isinstance(greenlet.getcurrent(), _Carrier)


async def carry(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """``fn(*args, **kwargs)`` on the running loop; each statement it sends
    waits for Postgres as a coroutine does, without blocking the loop.

    Like a call on a thread, it runs to its end: a caller that is cancelled
    gets its ``CancelledError`` at once, and ``fn`` goes on in the background
    (a write whose commit was sent still commits, and its wake-ups and lease
    release still happen).
    """
    carrier = _Carrier(fn)
    # In a copy of the caller's context, as a call on a thread (log lines
    # name the run).
    carrier.gr_context = contextvars.copy_context()
    pending = carrier.switch(*args, **kwargs)
    while not carrier.dead:
        try:
            value = await asyncio.shield(pending)
        except asyncio.CancelledError:
            if pending.cancelled():  # what fn waits for was cancelled: fn sees it
                pending = carrier.throw(asyncio.CancelledError())
                continue
            _background(carrier, pending)
            raise
        except BaseException as exc:
            pending = carrier.throw(exc)
        else:
            pending = carrier.switch(value)
    result: T = pending
    return result


# Carried calls whose caller left, running to their end.
_orphans: set[asyncio.Task[None]] = set()


def _background(carrier: _Carrier, pending: asyncio.Future[Any]) -> None:
    async def finish(pending: asyncio.Future[Any]) -> None:
        while not carrier.dead:
            try:
                value = await pending
            except BaseException as exc:
                pending = carrier.throw(exc)
            else:
                pending = carrier.switch(value)

    task = asyncio.ensure_future(finish(pending))
    _orphans.add(task)
    task.add_done_callback(_orphan_done)


def _orphan_done(task: asyncio.Task[None]) -> None:
    _orphans.discard(task)
    if not task.cancelled() and task.exception() is not None:
        log.warning("a store call whose caller left failed: %s", task.exception())


def wait_for(awaitable: Awaitable[T]) -> T:
    """From code inside :func:`carry`: ``await awaitable`` on the loop."""
    current = greenlet.getcurrent()
    assert isinstance(current, _Carrier), "wait_for outside carry()"
    parent = current.parent
    assert parent is not None
    result: T = parent.switch(asyncio.ensure_future(awaitable))
    return result


def blocking(pool: concurrent.futures.Executor, fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)`` where it may block (Redis, the broker): inside
    :func:`carry`, on a thread of ``pool``, waited for without blocking the
    loop; elsewhere, here."""
    if not carried():
        return fn(*args)
    context = contextvars.copy_context()
    return wait_for(asyncio.wrap_future(pool.submit(context.run, fn, *args)))


# --------------------------------------------------------------- connections


async def _ready(connection: Any) -> None:
    """Until a connection's connect is done (psycopg2's non-blocking
    protocol: poll, then wait for the socket it names)."""
    loop = asyncio.get_running_loop()
    fd = connection.fileno()
    while True:
        state = connection.poll()
        if state == psycopg2.extensions.POLL_OK:
            return
        ready = loop.create_future()
        watch, unwatch = (
            (loop.add_reader, loop.remove_reader)
            if state == psycopg2.extensions.POLL_READ
            else (loop.add_writer, loop.remove_writer)
        )
        watch(fd, _wake, ready)
        try:
            await ready
        finally:
            unwatch(fd)


def _wake(ready: asyncio.Future[None]) -> None:
    if not ready.done():
        ready.set_result(None)


class LoopConnection:
    """A non-blocking connection of one loop's pool.

    A statement is driven to its end by the loop's socket callbacks, not by
    its waiter: a waiter that is cancelled leaves it to finish, and the
    connection goes back to its pool (or is closed) only then, as a call on
    a thread completes after its caller left.
    """

    def __init__(self, raw: Any, loop: asyncio.AbstractEventLoop) -> None:
        self.raw = raw
        self.loop = loop
        self.fd = raw.fileno()
        self.used_at = time.monotonic()
        self.in_flight = False
        self._watching: Callable[[int], bool] | None = None
        self._waiter: asyncio.Future[Any] | None = None
        self._cursor: Any = None
        self._error: BaseException | None = None
        # Called once the statement in flight is done, if its waiter left.
        self.after: Callable[[LoopConnection], None] | None = None

    def start(self, sql: str, args: Any = None) -> asyncio.Future[Any]:
        """Send a statement; a future of its cursor, once Postgres answered."""
        cursor = self.raw.cursor()
        cursor.execute(sql, args)
        waiter = self._waiter = self.loop.create_future()
        self._cursor = cursor
        self.in_flight = True
        self._error = None
        self._drive()
        return waiter

    async def run(self, sql: str, args: Any = None) -> Any:
        return await self.start(sql, args)

    def _drive(self) -> None:
        try:
            state = self.raw.poll()
        except BaseException as exc:
            self._done(exc)
            return
        if state == psycopg2.extensions.POLL_OK:
            self._done(None)
        elif state == psycopg2.extensions.POLL_READ:
            self._watch(self.loop.add_reader, self.loop.remove_reader)
        else:
            self._watch(self.loop.add_writer, self.loop.remove_writer)

    def _watch(self, add: Callable[..., None], remove: Callable[[int], bool]) -> None:
        if self._watching is remove:
            return
        self._unwatch()
        add(self.fd, self._drive)
        self._watching = remove

    def _unwatch(self) -> None:
        if self._watching is not None:
            self._watching(self.fd)
            self._watching = None

    def _done(self, error: BaseException | None) -> None:
        self._unwatch()
        self.in_flight = False
        self._error = error
        waiter, self._waiter = self._waiter, None
        if waiter is not None and not waiter.done():
            if error is None:
                waiter.set_result(self._cursor)
            else:
                waiter.set_exception(error)
        after, self.after = self.after, None
        if after is not None:
            after(self)

    @property
    def failed(self) -> bool:
        """The last statement ended with the connection lost, or inside a
        transaction that nobody will end: not fit to be used again."""
        if self.raw.closed or isinstance(self._error, LOST):
            return True
        status = self.raw.info.transaction_status
        return bool(status != psycopg2.extensions.TRANSACTION_STATUS_IDLE)


_CONNECT_TIMEOUT = 5.0


class LoopPool:
    """Non-blocking connections to one database, for one event loop.

    Up to ``size`` at once; a statement beyond them waits for one to come
    back. A connection idle for longer than ``idle_ping`` seconds is pinged
    before it is used, as the threads' pool does (store/db.py).
    """

    def __init__(
        self, connect_kwargs: dict[str, Any], size: int, setup: str, idle_ping: float
    ) -> None:
        self._kwargs = connect_kwargs
        self._size = size
        self._setup = setup
        self._idle_ping = idle_ping
        self._idle: list[LoopConnection] = []
        self._open = 0
        self._waiters: list[asyncio.Future[None]] = []
        self._closed = False
        self._pid = os.getpid()

    def take(self) -> LoopConnection | None:
        """An idle connection used lately, if there is one and nobody waits
        for one before this caller: no waiting."""
        if (
            self._idle
            and not self._waiters
            and time.monotonic() - self._idle[-1].used_at < self._idle_ping
        ):
            return self._idle.pop()
        return None

    async def acquire(self) -> LoopConnection:
        while True:
            while self._idle:
                connection = self._idle.pop()
                if await self._usable(connection):
                    return connection
            if self._open < self._size:
                self._open += 1
                try:
                    return await self._connect()
                except BaseException:
                    self._open -= 1
                    self._wake_one()
                    raise
            waiter = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            try:
                await waiter
            finally:
                if waiter in self._waiters:
                    self._waiters.remove(waiter)

    async def _usable(self, connection: LoopConnection) -> bool:
        if time.monotonic() - connection.used_at < self._idle_ping:
            return True
        try:
            await connection.run("SELECT 1")
        except LOST:
            self.release(connection)  # failed: closed
            return False
        return True

    async def _connect(self) -> LoopConnection:
        raw = psycopg2.connect(**self._kwargs, async_=1)
        try:
            # libpq's connect_timeout does not bound a non-blocking connect.
            await asyncio.wait_for(_ready(raw), _CONNECT_TIMEOUT)
        except TimeoutError as exc:
            raw.close()
            raise psycopg2.OperationalError(
                f"connection timed out after {_CONNECT_TIMEOUT:.0f} s"
            ) from exc
        except BaseException:
            raw.close()
            raise
        psycopg2.extras.register_uuid(None, raw)
        connection = LoopConnection(raw, asyncio.get_running_loop())
        if self._setup:
            try:
                await connection.run(self._setup)
            except BaseException:
                raw.close()
                raise
        return connection

    def release(self, connection: LoopConnection) -> None:
        """Give ``connection`` back once its statement in flight is done;
        close it if it failed."""
        if connection.in_flight:
            connection.after = self.release
            return
        if connection.failed or self._closed:
            self._open -= 1
            with contextlib.suppress(psycopg2.Error):
                connection.raw.close()
        else:
            connection.used_at = time.monotonic()
            self._idle.append(connection)
        self._wake_one()

    def close(self) -> None:
        """Close the idle connections now, the others as they come back.
        In a forked child, nothing: the sessions are its parent's."""
        if os.getpid() != self._pid:
            return
        self._closed = True
        idle, self._idle = self._idle, []
        for connection in idle:
            self._open -= 1
            with contextlib.suppress(psycopg2.Error):
                connection.raw.close()

    def _wake_one(self) -> None:
        while self._waiters:
            waiter = self._waiters.pop(0)
            if not waiter.done():
                waiter.set_result(None)
                return


class LoopCursor:
    """What :class:`store.db.Tx` needs of a cursor, over a loop's connection:
    each ``execute`` waits for Postgres from inside :func:`carry`."""

    def __init__(self, connection: LoopConnection) -> None:
        self.connection = connection
        self._cursor: Any = None

    def execute(self, sql: str, args: Any = None) -> None:
        self._cursor = wait_for(self.connection.start(sql, args))

    @property
    def rowcount(self) -> int:
        return int(self._cursor.rowcount)

    @property
    def description(self) -> Any:
        return self._cursor.description

    def fetchall(self) -> list[tuple[Any, ...]]:
        rows: list[tuple[Any, ...]] = self._cursor.fetchall()
        return rows

    def fetchone(self) -> tuple[Any, ...] | None:
        row: tuple[Any, ...] | None = self._cursor.fetchone()
        return row

    def commit(self) -> None:
        self.execute("COMMIT")


# Each loop's pools, by the engine (store/db.py) whose database they reach:
# gone with either (psycopg2 does not end a session from a forked child when
# it collects a connection there; LoopPool.close does not either).
_Pools = weakref.WeakKeyDictionary[Any, LoopPool]
_pools: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Pools] = weakref.WeakKeyDictionary()
_pools_lock = threading.Lock()


def pool_for(database: Any, make: Callable[[], LoopPool]) -> LoopPool:
    """The running loop's pool for ``database``, made by ``make`` the first time."""
    loop = asyncio.get_running_loop()
    with _pools_lock:
        pools = _pools.get(loop)
        if pools is None:
            pools = _pools[loop] = weakref.WeakKeyDictionary()
        pool = pools.get(database)
        if pool is None:
            pool = pools[database] = make()
        return pool


def close_pools(database: Any) -> None:
    """Close every loop's connections to ``database`` (those in use as
    they come back); a later statement opens a new pool."""
    with _pools_lock:
        found = [(loop, pools.pop(database)) for loop, pools in _pools.items() if database in pools]
    for loop, pool in found:
        if loop.is_running():
            with contextlib.suppress(RuntimeError):  # it closed meanwhile
                loop.call_soon_threadsafe(pool.close)
                continue
        pool.close()


@contextmanager
def loop_cursor(pool: LoopPool, *, transaction: bool) -> Iterator[LoopCursor]:
    """A cursor on one of ``pool``'s connections, with the store's errors.

    ``transaction``: the statements run inside ``BEGIN``, and the caller
    commits (:meth:`LoopCursor.commit`); a block that raises rolls back.
    Otherwise each statement commits as it ends.
    """
    try:
        connection = pool.take() or wait_for(pool.acquire())
    except LOST as exc:
        raise unavailable(exc) from exc
    cursor = LoopCursor(connection)
    try:
        if transaction:
            cursor.execute("BEGIN")
        try:
            yield cursor
        except Exception:
            # (A cancelled wait leaves its statement in flight: the pool
            # closes a connection still inside a transaction instead.)
            if transaction and not connection.in_flight and not connection.raw.closed:
                with contextlib.suppress(*LOST):
                    cursor.execute("ROLLBACK")
            raise
    except LOST as exc:
        raise unavailable(exc) from exc
    except REFUSED as exc:
        raise refused(exc) from exc
    finally:
        pool.release(connection)
