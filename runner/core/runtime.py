"""The per-process runtime: one asyncio loop in a background thread that holds
every execution of this process, plus the thread pools they use.

Executions spend their time waiting on the model, so one process runs many of
them concurrently on one loop; Celery's thread pool only supplies callers that
block until their execution is done. The runtime is created lazily and anew
after a fork, so prefork pools and forked tests get their own.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
import functools
import os
import queue
import threading
from collections.abc import Callable, Coroutine
from typing import Any, Protocol, TypeVar

from runner.core.errors import LoopMisuse
from runner.core.settings import Settings
from runner.core.steps.run_context import AbortReason

T = TypeVar("T")


class Abortable(Protocol):
    run_id: str

    def abort(self, reason: AbortReason) -> None: ...


class DaemonThreadPool(concurrent.futures.Executor):
    """A thread pool whose threads do not hold the process open at exit, and
    that hands results straight back to an event loop.

    ``ThreadPoolExecutor`` joins its threads when the interpreter exits, so a
    sync tool that an abort abandoned would keep a draining worker alive until
    the tool returned. Here an abandoned call's thread is simply left behind.

    :meth:`call` is the loop's way in: the result comes back with one
    ``call_soon_threadsafe``, with no ``concurrent.futures.Future`` chained
    to an asyncio one as ``run_in_executor`` makes (a step makes two store
    calls and a sync tool's: issue 31). :meth:`submit` is the ``Executor``
    API, for whatever takes one.
    """

    def __init__(self, max_workers: int, thread_name_prefix: str) -> None:
        self._max = max_workers
        self._prefix = thread_name_prefix
        self._work: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._threads = 0
        self._idle = 0
        self._waiting = 0  # submitted, not yet picked up

    def submit(
        self, fn: Callable[..., T], /, *args: Any, **kwargs: Any
    ) -> concurrent.futures.Future[T]:
        future: concurrent.futures.Future[T] = concurrent.futures.Future()
        self._put((None, future, functools.partial(fn, *args, **kwargs)))
        return future

    def call(self, loop: asyncio.AbstractEventLoop, fn: Callable[[], T]) -> asyncio.Future[T]:
        """``fn()`` on a thread of the pool, as a future of ``loop``."""
        future: asyncio.Future[T] = loop.create_future()
        self._put((loop, future, fn))
        return future

    def _put(self, item: tuple[Any, Any, Callable[[], Any]]) -> None:
        with self._lock:
            self._waiting += 1
            spawn = self._waiting > self._idle and self._threads < self._max
            if spawn:
                self._threads += 1
                number = self._threads
        self._work.put(item)
        if spawn:
            threading.Thread(
                target=self._serve, name=f"{self._prefix}_{number}", daemon=True
            ).start()

    def _serve(self) -> None:
        while True:
            with self._lock:
                self._idle += 1
            loop, future, fn = self._work.get()
            with self._lock:
                self._idle -= 1
                self._waiting -= 1
            if loop is None:
                _run_for_executor(future, fn)
            else:
                _run_for_loop(loop, future, fn)
            del loop, future, fn


def _run_for_executor(future: concurrent.futures.Future[Any], fn: Callable[[], Any]) -> None:
    if not future.set_running_or_notify_cancel():
        return
    try:
        result = fn()
    except BaseException as exc:
        future.set_exception(exc)
    else:
        future.set_result(result)


def _run_for_loop(
    loop: asyncio.AbstractEventLoop, future: asyncio.Future[Any], fn: Callable[[], Any]
) -> None:
    if future.cancelled():
        # Its waiter was cancelled before a thread was free (an aborted run's
        # queued tool call): it never starts, as with ``run_in_executor``.
        return
    resolve: Callable[[asyncio.Future[Any], Any], None]
    try:
        value = fn()
        resolve = _succeed
    except BaseException as exc:
        value, resolve = exc, _fail
    # RuntimeError: the loop closed while an abandoned call ran; nobody waits.
    with contextlib.suppress(RuntimeError):
        loop.call_soon_threadsafe(resolve, future, value)


def _succeed(future: asyncio.Future[Any], result: Any) -> None:
    if not future.done():  # the awaiting task may have been cancelled meanwhile
        future.set_result(result)


def _fail(future: asyncio.Future[Any], exc: BaseException) -> None:
    if not future.done():
        future.set_exception(exc)


class Runtime:
    def __init__(self) -> None:
        self.pid = os.getpid()
        settings = Settings.from_env()
        # Database and Redis calls; tools run in their own pool so that slow
        # sync tools cannot starve the writes of other runs.
        self.calls = DaemonThreadPool(settings.io_threads, "runwright-io")
        # The loop's default executor, for what libraries hand it (a DNS lookup).
        self.io = concurrent.futures.ThreadPoolExecutor(
            max_workers=settings.io_threads,
            thread_name_prefix="runwright-executor",
        )
        self.tools = DaemonThreadPool(
            max_workers=settings.tool_threads,
            thread_name_prefix="runwright-tool",
        )
        self.loop = asyncio.new_event_loop()
        self.loop.set_default_executor(self.io)
        self._executions: dict[str, set[Abortable]] = {}
        self._lock = threading.Lock()
        self._draining = False
        self._thread = threading.Thread(target=self._serve, name="runwright-loop", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Run ``coro`` on the runtime's loop and block until it is done."""
        if threading.current_thread() is self._thread:
            raise LoopMisuse("Runtime.run called from the runtime's own loop; await instead")
        future = asyncio.run_coroutine_threadsafe(coro, self.loop)
        return future.result(timeout)

    # -------------------------------------------------------- executions

    def add(self, execution: Abortable) -> None:
        with self._lock:
            self._executions.setdefault(execution.run_id, set()).add(execution)
            draining = self._draining
        if draining:
            execution.abort(AbortReason.DRAIN)

    def remove(self, execution: Abortable) -> None:
        with self._lock:
            running = self._executions.get(execution.run_id)
            if running is not None:
                running.discard(execution)
                if not running:
                    del self._executions[execution.run_id]

    def abort(self, run_id: str, reason: AbortReason) -> int:
        with self._lock:
            targets = list(self._executions.get(run_id, ()))
        for execution in targets:
            execution.abort(reason)
        return len(targets)

    def drain(self) -> int:
        """Abort every execution of this process, and any that starts from now on."""
        with self._lock:
            self._draining = True
            targets = [e for group in self._executions.values() for e in group]
        for execution in targets:
            execution.abort(AbortReason.DRAIN)
        return len(targets)

    @property
    def draining(self) -> bool:
        return self._draining

    def active(self) -> list[str]:
        with self._lock:
            return list(self._executions)


async def in_io(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Run a blocking call (database, Redis) in this process's I/O pool."""
    # In a copy of the caller's context, so that log records name the run.
    context = contextvars.copy_context()
    call = functools.partial(context.run, fn, *args, **kwargs)
    return await runtime().calls.call(asyncio.get_running_loop(), call)


_runtime: Runtime | None = None
_runtime_lock = threading.Lock()


def runtime() -> Runtime:
    """This process's runtime (a new one after a fork)."""
    global _runtime
    current = _runtime
    if current is not None:  # a forked child forgot its parent's (below)
        return current
    with _runtime_lock:
        if _runtime is None or _runtime.pid != os.getpid():
            _runtime = Runtime()
        return _runtime


def _forget_after_fork() -> None:
    """A forked child has none of its parent's threads: its runtime is made
    afresh on first use. (Asking ``os.getpid()`` on every call instead is a
    system call per store call and tool call.)"""
    global _runtime, _runtime_lock
    _runtime = None
    _runtime_lock = threading.Lock()


os.register_at_fork(after_in_child=_forget_after_fork)
