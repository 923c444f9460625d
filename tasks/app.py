"""The Celery app and its two tasks. Task arguments carry run ids only."""

from __future__ import annotations

import logging
import os
import threading
from datetime import datetime
from typing import Any

from celery import Celery, signals

from runner.engine import Engine
from runner.errors import RunwrightError
from runner.model import warm_up
from runner.runtime import runtime

log = logging.getLogger(__name__)

app = Celery("runwright")
app.config_from_object("celeryconfig")

_engine: Engine | None = None
_engine_pid = 0
_engine_lock = threading.Lock()


def engine() -> Engine:
    """This process's engine, created on first use (after any fork), so every
    worker process has its own database and Redis pools."""
    global _engine, _engine_pid
    if _engine is None or _engine_pid != os.getpid():
        with _engine_lock:
            if _engine is None or _engine_pid != os.getpid():
                _engine = Engine.from_env(enqueue=enqueue)
                _engine_pid = os.getpid()
    return _engine


@app.task(name="runwright.execute", ignore_result=True, acks_late=True)
def execute(run_id: str) -> str | None:
    """Execute one run. A duplicate or stale message exits quietly."""
    run = engine().execute(run_id)
    return run.status.value if run is not None else None


@app.task(name="runwright.tick", ignore_result=True)
def tick() -> dict[str, Any]:
    """Re-send notifications, expire waits, recover lapsed runs, re-enqueue."""
    report = engine().tick()
    return {
        "skipped": report.skipped,
        "notified": report.notified,
        "expired": report.expired,
        "recovered": len(report.recovered),
        "reenqueued": len(report.reenqueued) + len(report.key_heads),
    }


def enqueue(run_id: str, *, eta: datetime | None = None) -> None:
    """Hand a run to a worker: the ``enqueue`` callable the engine is given.
    With ``eta``, not before then (a run waiting to retry a model step)."""
    execute.apply_async(args=[run_id], eta=eta)


def _uses_prefork(worker: Any) -> bool:
    from celery import concurrency
    from celery.concurrency.prefork import TaskPool

    pool = concurrency.get_implementation(getattr(worker, "pool_cls", None) or "prefork")
    return isinstance(pool, type) and issubclass(pool, TaskPool)


@signals.worker_init.connect
def _warm_up(sender: Any = None, **_: Any) -> None:
    # Import litellm (seconds) and the agents before the first task, not during
    # it. A worker that cannot load its agents must not look healthy: exit loudly
    # (SystemExit passes through Celery's signal dispatch; other errors would not).
    if sender is not None and _uses_prefork(sender):
        # Warm shutdown reaches only the main process, so executions in
        # prefork children could not drain: they would be cut off at the
        # cold shutdown and wait for tick() to recover them.
        raise SystemExit(
            "runwright: the prefork pool cannot drain running agents on shutdown; "
            "use the threads pool (the default: unset RUNWRIGHT_WORKER_POOL, or -P threads)"
        )
    try:
        warm_up()
        engine()
    except RunwrightError as exc:
        raise SystemExit(f"runwright: the worker cannot start: {exc.message}") from exc


@signals.worker_shutting_down.connect
def _drain(sig: str = "", how: str = "", **_: Any) -> None:
    # Runs in the main process's signal handler: only flag the executions (no
    # logging here, it takes locks); they settle `interrupted`, release their
    # leases and are enqueued again, while Celery's warm shutdown waits for
    # their tasks to return.
    runtime().drain()
