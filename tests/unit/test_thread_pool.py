"""The runtime's thread pool: results, errors and cancellations reach the
event loop, and a call abandoned by a loop that has since closed costs the
pool no thread."""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import threading
from typing import Any

import pytest

from runner.core.runtime import DaemonThreadPool


def test_a_call_hands_its_result_and_its_error_to_the_loop() -> None:
    pool = DaemonThreadPool(2, "test-pool")

    async def main() -> None:
        loop = asyncio.get_running_loop()
        assert await pool.call(loop, lambda: threading.current_thread().name) == "test-pool_1"

        def boom() -> None:
            raise KeyError("nope")

        with pytest.raises(KeyError, match="nope"):
            await pool.call(loop, boom)

    asyncio.run(main())


def test_a_cancelled_waiter_leaves_the_call_to_finish_quietly() -> None:
    pool = DaemonThreadPool(1, "test-pool")
    release = threading.Event()
    finished = threading.Event()

    def slow() -> int:
        release.wait(5)
        finished.set()
        return 1

    async def main() -> None:
        loop = asyncio.get_running_loop()
        waiter = asyncio.ensure_future(pool.call(loop, slow))
        await asyncio.sleep(0.01)
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
        release.set()
        assert await asyncio.to_thread(finished.wait, 5)
        assert await pool.call(loop, lambda: 2) == 2  # the same thread serves again

    asyncio.run(main())


def test_a_loop_that_closed_before_its_call_returned_costs_no_thread() -> None:
    pool = DaemonThreadPool(1, "test-pool")
    release = threading.Event()
    done = threading.Event()

    def abandoned() -> int:
        release.wait(5)
        return 1

    loop = asyncio.new_event_loop()
    pool.call(loop, abandoned)  # never awaited: its loop goes away first
    loop.close()
    release.set()

    async def main() -> int:
        return await asyncio.wait_for(
            pool.call(asyncio.get_running_loop(), lambda: done.set() or 3), 5
        )

    assert asyncio.run(main()) == 3  # the one thread outlived the closed loop
    assert done.is_set()


def test_submit_is_still_an_executor() -> None:
    pool = DaemonThreadPool(1, "test-pool")
    assert pool.submit(lambda x: x * 2, 21).result(timeout=5) == 42


def _in_forked_child(parent_pid: int, out: Any) -> None:
    from runner.core.runtime import runtime

    async def answer() -> int:
        return 7

    made = runtime()
    out.put((made.pid == os.getpid() != parent_pid, made.run(answer())))


def test_a_forked_child_gets_a_runtime_of_its_own() -> None:
    """The parent's runtime threads do not exist in a forked child: the child
    makes its own on first use, and its loop runs."""
    from runner.core.runtime import runtime

    parent = runtime()
    context = multiprocessing.get_context("fork")
    out = context.Queue()
    child = context.Process(target=_in_forked_child, args=(parent.pid, out))
    child.start()
    fresh, value = out.get(timeout=30)
    child.join(30)
    assert child.exitcode == 0 and fresh and value == 7
    assert runtime() is parent  # the parent's is untouched


def test_a_call_cancelled_before_a_thread_was_free_never_starts() -> None:
    """An aborted run's sync tool that waited for a busy pool does not run
    later: as ``run_in_executor`` skips a cancelled call that had not started."""
    pool = DaemonThreadPool(1, "test-pool")
    release = threading.Event()
    ran: list[str] = []

    async def main() -> None:
        loop = asyncio.get_running_loop()
        busy = pool.call(loop, lambda: release.wait(5))
        queued = asyncio.ensure_future(pool.call(loop, lambda: ran.append("effect")))
        await asyncio.sleep(0.01)
        queued.cancel()
        with pytest.raises(asyncio.CancelledError):
            await queued
        release.set()
        await busy
        assert await pool.call(loop, lambda: "after") == "after"  # the pool goes on

    asyncio.run(main())
    assert ran == []
