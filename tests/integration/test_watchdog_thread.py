"""The beat watchdog's thread on a real Redis: one per process, ended by stop()
(the watchdog's decisions: tests/unit/test_watchdog.py)."""

from __future__ import annotations

import threading
import time

from runner.core.coordination.leases import Leases
from runner.core.engine import watchdog
from runner.core.settings import Settings
from store.workers import WorkerInfo
from tests.e2e.cluster import wait_until


def _watchdog_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "runwright-watchdog"]


def test_start_runs_one_thread_per_process_and_stop_ends_it(redis_url: str, leases: Leases) -> None:
    settings = Settings(redis_url=redis_url, tick_seconds=0.2)
    try:
        real = WorkerInfo("w-real@host", agents=("triage",), pool="threads", concurrency=4)
        watchdog.start(settings, real)
        watchdog.start(settings, real)  # a second call changes nothing
        assert len(_watchdog_threads()) == 1
        seen = wait_until(leases.workers, 5, "the worker's beacon")
        assert list(seen) == ["w-real@host"] and seen["w-real@host"].seen_at <= time.time()
        # The record says what the worker serves.
        assert seen["w-real@host"].seen(0) == real.seen(0)
    finally:
        watchdog.stop()
    assert _watchdog_threads() == []
    # A worker that stops takes its record with it, not at the end of its TTL.
    assert leases.workers() == {}
    watchdog.stop()  # again: nothing to do
