"""The Celery app and its two tasks. Task arguments carry run ids only."""

from __future__ import annotations

import gc
import logging
import os
import socket
import threading
from datetime import datetime
from typing import Any

from celery import Celery, signals
from celery.exceptions import Reject

from runner.engine.engine import Engine
from runner.engine.runtime import runtime
from runner.errors import RunwrightError, StoreUnavailable
from runner.model import warm_up
from runner.observe import setup as observe
from tasks.outcomes import (
    EXECUTE,
    TICK,
    QuietHandBacks,
    QuietTicks,
    RunFailed,
    execute_result,
    tick_result,
)

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


# A run that settles failed fails its task, so that Celery records FAILURE (and
# Flower's Failed filter finds it). The failure is expected: ``throws`` makes
# the worker log it at INFO without a traceback. The message is still acked
# (Celery's default for a failed task with acks_late): a failed run is settled,
# and delivering its message again could only be refused by the claim.
@app.task(name=EXECUTE, ignore_result=True, acks_late=True, throws=(RunFailed,))
def execute(run_id: str) -> str | None:
    """Execute one run. A duplicate or stale message exits quietly; a run that
    fails raises :class:`~tasks.outcomes.RunFailed`; an execution that could
    not reach Redis or Postgres hands its message back to the broker."""
    try:
        run = engine().execute(run_id)
    except StoreUnavailable as exc:
        # The execution waited RUNWRIGHT_STORE_WAIT_SECONDS for the store
        # without claiming the run (or its worker is shutting down). The
        # message goes back to the queue, unacked until now, for this or
        # another worker: the run is not failed, and it does not wait for
        # tick(). Flower shows the task REJECTED, then its next delivery.
        raise Reject(exc.message, requeue=True) from None
    return execute_result(run)


# Ticks come every few seconds and mostly find nothing to do: they send no task
# events, so Flower lists runs, not ticks (beat's task-sent events are turned
# off in _quiet_beat). A tick that did something says so in one INFO line.
@app.task(name=TICK, ignore_result=True, send_events=False)
def tick() -> dict[str, int]:
    """Re-send notifications, expire waits, recover lapsed runs, re-enqueue."""
    return tick_result(engine().tick())


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
        settings = engine().settings
        observe.start_worker(settings, _handlers(), _worker_name(sender))
        _freeze_heap()
    except RunwrightError as exc:
        raise SystemExit(f"runwright: the worker cannot start: {exc.message}") from exc


def _freeze_heap() -> None:
    """Take what the worker has loaded by now (litellm, Celery, the agents:
    about half a million objects) out of the garbage collector's full passes.
    Each full pass otherwise walks all of it, 150-300 ms during which no run
    of this worker moves; what runs create later is collected as before."""
    gc.collect()
    gc.freeze()


def _worker_name(worker: Any) -> str:
    return str(getattr(worker, "hostname", None) or f"{socket.gethostname()}:{os.getpid()}")


def _handlers() -> list[logging.Handler]:
    """The handlers Celery set up: the root logger's and the task logger's."""
    found = list(logging.getLogger().handlers)
    for name in ("celery.task", "celery.redirected"):
        found += [h for h in logging.getLogger(name).handlers if h not in found]
    return found


@signals.after_setup_logger.connect
@signals.after_setup_task_logger.connect
def _run_context_on_logs(logger: logging.Logger | None = None, **_: Any) -> None:
    # Celery (re)configures its handlers here: give every one of them the run
    # context, and the JSON format if asked (RUNWRIGHT_LOG_FORMAT).
    if logger is not None:
        observe.install_logging(list(logger.handlers))


@signals.worker_shutdown.connect
def _flush_observers(**_: Any) -> None:
    if _engine is not None:
        observe.stop_worker(_engine.settings)


@signals.worker_init.connect
def _quiet_tick_logs(**_: Any) -> None:
    # Two lines every few seconds would bury the worker's log as the events
    # would bury Flower: a tick is logged only when it did something.
    quiet = QuietTicks()
    for name in ("celery.worker.strategy", "celery.app.trace"):
        logging.getLogger(name).addFilter(quiet)
    logging.getLogger("celery.app.trace").addFilter(QuietHandBacks())


@signals.beat_init.connect
def _quiet_beat(sender: Any = None, **_: Any) -> None:
    # The task-sent event goes with every message when task_send_sent_event is
    # on, whatever the task's send_events says, and Flower lists a task from
    # that event alone. Beat sends the schedule's messages (the ticks): it
    # announces none. An embedded beat on a thread shares the worker's
    # configuration, whose enqueues of runs stay announced.
    if threading.current_thread() is threading.main_thread():
        (sender.app if sender is not None else app).conf.task_send_sent_event = False


@signals.worker_shutting_down.connect
def _drain(sig: str = "", how: str = "", **_: Any) -> None:
    # Runs in the main process's signal handler: only flag the executions (no
    # logging here, it takes locks); they settle `interrupted`, release their
    # leases and are enqueued again, while Celery's warm shutdown waits for
    # their tasks to return.
    runtime().drain()
