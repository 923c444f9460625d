"""Runwright on a Celery app: :func:`install` gives an app Runwright's two tasks
(``runwright.execute``, ``runwright.tick``), routes them to Runwright's queue,
adds the tick to its beat schedule, and makes its workers warm up, log with
the run context and drain on a warm shutdown. Task arguments carry run ids
only.

Runwright's own app (``celery -A tasks``, tasks/app.py) is one such app; a
project's own app is another (docs/celery.md). Celery's signals are global, so
every handler here first checks that the worker or beat it serves is an app's
that installed Runwright.
"""

from __future__ import annotations

import gc
import logging
import os
import socket
import sys
import threading
import time
import weakref
from datetime import datetime
from typing import Any, NoReturn

from celery import Celery, Task, signals, states
from celery.exceptions import Ignore, Reject

from runner.core import versions
from runner.core.coordination.claims import NotClaimed, Refusal
from runner.core.engine import watchdog
from runner.core.engine.engine import Engine, TickReport
from runner.core.errors import ConfigurationError, RunwrightError, StoreUnavailable
from runner.core.model import warm_up
from runner.core.observe import setup as observe
from runner.core.runtime import runtime
from runner.core.settings import Settings
from store.models import Run, RunStatus
from store.workers import WorkerInfo

__all__ = [
    "EXECUTE",
    "IGNORED",
    "TICK",
    "RunFailed",
    "engine",
    "enqueue",
    "install",
    "installed",
]

log = logging.getLogger(__name__)

TICK = "runwright.tick"
EXECUTE = "runwright.execute"
# The tick's key in an app's beat_schedule, next to the project's own entries.
TICK_ENTRY = "runwright-tick"
# The state of a delivery that could not claim its run, in Flower: Celery's own
# name for a task that raised Ignore, which sends no event of its own.
IGNORED = states.IGNORED
IGNORED_EVENT = "task-ignored"


class RunFailed(RunwrightError):
    """The run failed."""

    # Celery rebuilds a task's exception from its args: by pickling it (the
    # default reduce calls ``RunFailed(*args)``) and, for JSON result backends,
    # by calling ``RunFailed(*args)`` itself. So the args are exactly the
    # constructor's, two plain strings.
    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.args = (code, message)

    @property
    def code(self) -> str:
        return str(self.args[0])

    @property
    def message(self) -> str:
        return str(self.args[1])

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"


# ------------------------------------------------------------ installing


# The apps of this process that installed Runwright, and the execute task
# that enqueue() sends through: the last app's.
_apps: weakref.WeakSet[Celery] = weakref.WeakSet()
_execute_task: Task | None = None
# The app whose worker or beat this process started (Celery's import_modules
# signal, sent before logging is set up), for the signals that name no app.
_started_app: Celery | None = None
# Set when this process is a worker that takes Runwright's queue.
# RUNWRIGHT_BROKER_PRIORITIES, as install() read it.
_broker_priorities = False
_runs_agents = False


def install(app: Celery) -> tuple[Task, Task]:
    """Give ``app`` Runwright's tasks, queue, beat entry and worker set-up.

    The tasks go to ``RUNWRIGHT_QUEUE`` (a route ahead of the app's own
    ``task_routes``, which keep routing the app's tasks), the tick runs every
    ``RUNWRIGHT_TICK_SECONDS`` from the app's beat, and a worker that takes
    that queue warms up, logs with the run context and drains on a warm
    shutdown. The app's configuration is not read here, so a lazy one
    (Django's settings) stays lazy. :func:`enqueue` then sends through
    ``app``. Returns the two tasks (execute, tick)."""
    global _execute_task, _broker_priorities
    settings = Settings.from_env()
    _broker_priorities = settings.broker_priorities
    execute_task = app.task(
        name=EXECUTE,
        bind=True,
        ignore_result=True,
        acks_late=True,
        reject_on_worker_lost=True,
        serializer="json",
        throws=(RunFailed,),
    )(execute)
    tick_task = app.task(name=TICK, ignore_result=True, send_events=False, serializer="json")(tick)
    app.add_periodic_task(settings.tick_seconds, app.signature(TICK), name=TICK_ENTRY)
    if app.configured:
        _route(app, settings.queue)
    else:
        app.on_after_configure.connect(
            lambda sender, **_: _route(sender, settings.queue), weak=False, sender=app
        )
    _apps.add(app)
    _execute_task = execute_task
    _connect()
    return execute_task, tick_task


def installed(app: Any) -> bool:
    """Whether ``app`` installed Runwright in this process."""
    return app in _apps


def _route(app: Celery, queue: str) -> None:
    # Celery's task_routes is one router or a sequence of them, asked in
    # order: Runwright's goes first, the app's own follow unchanged.
    ours = {EXECUTE: {"queue": queue}, TICK: {"queue": queue}}
    routes = app.conf.task_routes
    if routes is None:
        app.conf.task_routes = (ours,)
    elif isinstance(routes, list | tuple):
        app.conf.task_routes = (ours, *routes)
    else:
        app.conf.task_routes = (ours, routes)


# ------------------------------------------------------------ the engine

_engine: Engine | None = None
_engine_pid = 0
_engine_lock = threading.Lock()


def engine() -> Engine:
    """This process's engine, created on first use (after any fork), so every
    worker process has its own database and Redis pools. It enqueues through
    :func:`enqueue`."""
    global _engine, _engine_pid
    if _engine is None or _engine_pid != os.getpid():
        with _engine_lock:
            if _engine is None or _engine_pid != os.getpid():
                _engine = Engine.from_env(enqueue=enqueue)
                _engine_pid = os.getpid()
    return _engine


def enqueue(
    run_id: str,
    *,
    eta: datetime | None = None,
    priority: int | None = None,
    queue: str | None = None,
) -> None:
    """Hand a run to a worker through the app that installed Runwright in this
    process: the ``enqueue`` callable of the engine (``RUNWRIGHT_ENQUEUE``).
    With ``eta``, not before then (a run waiting to retry a model step). With
    ``RUNWRIGHT_BROKER_PRIORITIES``, the message carries the run's
    ``priority`` (0 when not given) as its broker counts it. ``queue``: a
    pinned version's queue (docs/deploying.md) instead of Runwright's."""
    if _execute_task is None:
        raise ConfigurationError(
            "no Celery app in this process installed Runwright: import the module that "
            "calls runner.celery.install(app) before starting runs (docs/celery.md)"
        )
    options: dict[str, Any] = {} if queue is None else {"queue": queue}
    if not _broker_priorities:
        _execute_task.apply_async(args=[run_id], eta=eta, **options)
        return
    url = str(_execute_task.app.conf.broker_url or "")
    sent = broker_priority(priority or 0, url)
    _execute_task.apply_async(args=[run_id], eta=eta, priority=sent, **options)


# The most a broker counts priorities to: RabbitMQ's x-max-priority, and the
# last of kombu's Redis priority steps.
MAX_BROKER_PRIORITY = 9


def broker_priority_options() -> dict[str, object]:
    """kombu's Redis transport options for priorities: a list of the queue
    per step, read lowest step first (celeryconfig.py; docs/flow-control.md)."""
    return {
        "priority_steps": list(range(MAX_BROKER_PRIORITY + 1)),
        "sep": ":",
        "queue_order_strategy": "priority",
    }


def broker_priority(priority: int, broker_url: str) -> int:
    """A run's priority (0 to 9, higher first) as its broker counts it:
    RabbitMQ takes the higher first, kombu's Redis transport the lower."""
    if broker_url.startswith(("redis://", "rediss://")):
        return MAX_BROKER_PRIORITY - priority
    return priority


# ------------------------------------------------------------ the tasks


# A run that ends failed fails its task, so that Celery records FAILURE (and
# Flower's Failed filter finds it). The failure is expected: ``throws`` makes
# the worker log it at INFO without a traceback. The message is still acked
# (Celery's default for a failed task with acks_late): a failed run has ended,
# and delivering its message again could only be refused by the claim.
def execute(task: Task, run_id: str) -> str | None:
    """Execute one run. A message that could not claim its run (a duplicate, or
    a stale one) is ignored (:func:`ignore`); a run that fails raises
    :class:`RunFailed`; an execution that could not reach Redis or Postgres
    hands its message back to the broker."""
    try:
        done = engine().try_execute(run_id)
    except StoreUnavailable as exc:
        # The execution waited RUNWRIGHT_STORE_WAIT_SECONDS for the store
        # without claiming the run (or its worker is shutting down). The
        # message goes back to the queue, unacked until now, for this or
        # another worker: the run is not failed, and it does not wait for
        # tick(). Flower shows the task REJECTED, then its next delivery.
        raise Reject(exc.message, requeue=True) from None
    if isinstance(done, NotClaimed):
        ignore(task, done)
    return execute_result(done)


# Ticks come every few seconds and mostly find nothing to do: they send no task
# events, so Flower lists runs, not ticks (beat's task-sent events are turned
# off in _quiet_beat). A tick that did something says so in one INFO line.
def tick() -> dict[str, int]:
    """Re-send notifications, expire waits, queue runs whose claims lapsed, re-enqueue."""
    return tick_result(engine().tick())


def execute_result(run: Run | None) -> str | None:
    """The task's result for the run as its execution left it; a failed run
    raises :class:`RunFailed`. Every other outcome (completed, waiting, queued
    for a retry, cancelled, interrupted) is a success; None, an execution that
    let the run go to another (it lost its claim, or its worker is draining)."""
    if run is None:
        return None
    if run.status is RunStatus.FAILED:
        code, message = (
            (run.error.code, run.error.message) if run.error else (RunStatus.FAILED.value, "")
        )
        raise RunFailed(code, message or "the run failed")
    return run.status.value


def ignored_because(not_claimed: NotClaimed) -> str:
    """What a delivery that could not claim its run says, in the worker's log
    and in Flower. A run held by another owner, or ended, was delivered twice:
    a redelivery after a broker reconnect, or tick()'s re-enqueue while an
    execution still had it. A run that waits (for a decision, its retry or its
    concurrency key) gets its own message when it may go on."""
    if not_claimed.why is Refusal.NOT_CLAIMABLE:
        return f"{not_claimed}; this delivery was ignored"
    return f"{not_claimed}; this delivery is a duplicate and was ignored"


def ignore(task: Task, not_claimed: NotClaimed) -> NoReturn:
    """End a delivery that could not claim its run: one INFO line, the task
    IGNORED in Flower with the reason as its result, and the message acked.

    Celery's ``Ignore`` acks the message and sends no event, which would leave
    the task STARTED in Flower; so the task first sends ``task-ignored``
    itself, which Flower records as the state IGNORED (Celery's events name a
    custom state after the event). No result is stored: the task ignores its
    results, as every execution does."""
    reason = ignored_because(not_claimed)
    log.info("%s", reason)
    try:
        task.send_event(IGNORED_EVENT, result=reason)
    except Exception as exc:  # a monitoring event: the delivery is still ignored
        log.warning("could not send the task-ignored event of run %s: %s", not_claimed.run.id, exc)
    raise Ignore(reason)


def tick_result(report: TickReport) -> dict[str, int]:
    """What a tick did, by job, logged in one INFO line if it did anything. A
    tick that did nothing, or was skipped because another held the lock, is
    all zeros and logs nothing."""
    counts = {
        "firings": report.firings,
        "fired": len(report.fired),
        "notified": report.notified,
        "notify_failed": report.notify_failed,
        "expired": report.expired,
        "lapsed": len(report.lapsed),
        "reenqueued": len(report.reenqueued),
        "started": len(report.key_heads),
        "resumed": len(report.resumed),
        "item_errors": report.item_errors,
        "failed_jobs": len(report.failed_jobs),
    }
    done = [f"{name} {count}" for name, count in counts.items() if count]
    if done:
        log.info("tick: %s", ", ".join(done))
    return counts


class QuietTicks(logging.Filter):
    """Drops Celery's INFO lines about ticks ("received", "succeeded"), which
    it logs with the task's name in ``record.data``; their failures, at ERROR,
    pass."""

    def filter(self, record: logging.LogRecord) -> bool:
        data = getattr(record, "data", None)
        return not (
            record.levelno <= logging.INFO and isinstance(data, dict) and data.get("name") == TICK
        )


class QuietIgnores(logging.Filter):
    """Drops Celery's INFO line about an ignored execution ("Task ...
    ignored"): :func:`ignore` has logged why, in one line."""

    def filter(self, record: logging.LogRecord) -> bool:
        data = getattr(record, "data", None)
        return not (
            isinstance(data, dict)
            and data.get("name") == EXECUTE
            and data.get("description") == "ignored"
        )


class QuietHandBacks(logging.Filter):
    """Celery logs a rejected task at WARNING with the traceback of the
    ``Reject``. An execution that hands its message back during an outage
    (:func:`execute`) is expected: its line stays, without the traceback."""

    def filter(self, record: logging.LogRecord) -> bool:
        data = getattr(record, "data", None)
        if (
            isinstance(data, dict)
            and data.get("name") == EXECUTE
            and data.get("description") == "rejected"
        ):
            record.exc_info = None
            record.exc_text = None
        return True


# ------------------------------------------------------------ the signals


def _connect() -> None:
    # Once per process, whichever app installs first; each handler checks
    # the app it is sent for.
    for signal, handler in (
        (signals.import_modules, _starting),
        (signals.worker_init, _worker_init),
        (signals.celeryd_after_setup, _without_our_queue),
        (signals.after_setup_logger, _run_context_on_logs),
        (signals.after_setup_task_logger, _run_context_on_logs),
        (signals.worker_shutdown, _flush_observers),
        (signals.beat_init, _quiet_beat),
        (signals.worker_shutting_down, _drain),
    ):
        signal.connect(handler, weak=False, dispatch_uid=f"runwright.{handler.__name__}")


def _process_app() -> Celery | None:
    """The app this process serves: the one its worker or beat started with,
    else (a signal sent by hand, with no worker) the last that installed
    Runwright."""
    if _started_app is not None:
        return _started_app
    return _execute_task.app if _execute_task is not None else None


def _starting(sender: Any = None, **_: Any) -> None:
    # A worker's or beat's loader imports the app's modules first of all.
    global _started_app
    if _started_app is None and isinstance(sender, Celery):
        _started_app = sender


def _consumes(worker: Any, queue: str) -> bool:
    """Whether the worker takes messages from ``queue`` (its -Q, else every
    queue the app declares, its default queue at least)."""
    return queue in worker.app.amqp.queues.consume_from


def _without_our_queue(sender: Any = None, instance: Any = None, **_: Any) -> None:
    # A worker of an app that installed Runwright, started without its queue
    # (no -Q that names it: Celery's default queue only, say), runs no agent;
    # if no other worker takes the queue, runs wait for ever. Said once its
    # logging is set up (this signal), so that it reaches --logfile too.
    app = getattr(instance, "app", None)
    if app is None or not installed(app):
        return
    queue = Settings.from_env().queue
    if _consumes(instance, queue):
        return
    import click

    taken = sorted(app.amqp.queues.consume_from)
    context = click.get_current_context(silent=True)
    named = context.find_root().params.get("app") if context is not None else None
    start = f"celery -A {named or app.main} worker -Q {queue} -P threads --prefetch-multiplier 1"
    log.warning(
        "runwright: this worker does not take Runwright's queue %r (it takes %s), so it runs "
        "no agent, and runs wait until a worker that takes it starts. To run agents here, "
        "start it with -Q %s -P threads; or start workers for them: %s",
        queue,
        ", ".join(taken) or "no queue",
        ",".join([*taken, queue]),
        start,
    )


def _uses_prefork(worker: Any) -> bool:
    """Whether the worker runs the prefork pool, or its command line asked for it."""
    from celery import concurrency
    from celery.concurrency.prefork import TaskPool

    def prefork(pool: Any) -> bool:
        try:
            found = concurrency.get_implementation(pool)
        except (ImportError, KeyError, ValueError):  # not a pool this Celery knows
            return False
        return isinstance(found, type) and issubclass(found, TaskPool)

    asked = _pool_asked()
    running = getattr(worker, "pool_cls", None) or "prefork"
    return prefork(running) or (asked is not None and prefork(asked))


def _pool_asked() -> str | None:
    """The pool the ``celery worker`` command line named, as given (``-P``,
    ``--pool``, or ``CELERY_WORKER_POOL``); None if it named none.

    Celery's CLI takes an explicit ``-P prefork`` for its own default and runs
    the app's ``worker_pool`` instead (``WorkersPool`` in celery/bin/worker.py):
    on Runwright's preset, a worker asked for prefork would quietly run threads.
    What was asked is read back from the process's arguments with click's own
    parser, which reads them as the command did. A worker started from code
    (``app.worker_main``) has other arguments than the process's: None then.
    """
    import click
    from click.core import ParameterSource

    ctx = click.get_current_context(silent=True)
    if ctx is None or ctx.parent is None or ctx.parent.parent is not None:
        return None  # not a subcommand of the ``celery`` command
    option = next((p for p in ctx.command.params if p.name == "pool"), None)
    source = ctx.get_parameter_source("pool")
    if option is None or source not in (ParameterSource.COMMANDLINE, ParameterSource.ENVIRONMENT):
        return None
    if source is ParameterSource.ENVIRONMENT:
        return option.resolve_envvar_value(ctx)
    try:
        _, rest, _ = ctx.parent.command.make_parser(ctx.parent).parse_args(sys.argv[1:])
        if not rest or rest[0] != ctx.info_name:
            return None
        named, _, _ = ctx.command.make_parser(ctx).parse_args(rest[1:])
    except click.ClickException:
        return None
    value = named.get("pool")
    return value if isinstance(value, str) else None


def _worker_init(sender: Any = None, **_: Any) -> None:
    global _runs_agents
    app = sender.app if sender is not None else _process_app()
    if not installed(app):
        return
    settings = Settings.from_env()
    # A project's worker that takes only its own queues (its prefork fleet)
    # runs no agent: it needs no warm-up, and its pool is its own business.
    if sender is not None and not _consumes(sender, settings.queue):
        return
    # Import litellm (seconds) and the agents before the first task, not during
    # it. A worker that cannot load its agents must not look healthy: exit loudly
    # (SystemExit passes through Celery's signal dispatch; other errors would not).
    if sender is not None and _uses_prefork(sender):
        # Warm shutdown reaches only the main process, so executions in
        # prefork children could not drain: they would be cut off at the
        # cold shutdown and wait for tick() to queue them for a takeover.
        raise SystemExit(
            f"runwright: this worker takes Runwright's queue {settings.queue!r}, and the "
            "prefork pool cannot drain running agents on shutdown; use the threads pool "
            "(-P threads; for `celery -A tasks`, unset RUNWRIGHT_WORKER_POOL)"
        )
    _runs_agents = True
    _quiet_celery_logs()
    if sender is not None and getattr(sender, "prefetch_multiplier", 1) != 1:
        # Each message prefetched is a run this worker holds while others idle.
        log.warning(
            "runwright: this worker prefetches %s messages per thread; start it with "
            "--prefetch-multiplier 1 so that runs spread over the workers",
            sender.prefetch_multiplier,
        )
    try:
        warm_up()
        settings = engine().settings
        _serve_versions(sender, settings.queue)
        worker = _worker_info(sender)
        observe.start_worker(settings, _handlers())
        watchdog.start(settings, worker)
        engine().versions_loaded()
        freeze_heap()
    except RunwrightError as exc:
        raise SystemExit(f"runwright: the worker cannot start: {exc.message}") from exc


def _serve_versions(worker: Any, queue: str) -> list[str]:
    """The queues of the versions this worker loaded of its pinned agents
    (``on_new_version="pin"``), added to those it takes: a pinned run resumes
    only on a worker of its version (docs/deploying.md). Their names."""
    registry = engine().deps.registry
    queues = []
    for name in registry.names():
        agent = registry.get(name)
        if agent.on_new_version == "pin":
            queues.append(versions.queue_for(queue, agent.current_version().id))
    amqp = getattr(getattr(worker, "app", None), "amqp", None)
    if amqp is not None:
        for name in queues:
            amqp.queues.select_add(name)
    return queues


def freeze_heap() -> None:
    """Take what the worker has loaded by now (litellm, Celery, the agents:
    about half a million objects) out of the garbage collector's full passes.
    Each full pass otherwise walks all of it, 150-300 ms during which no run
    of this worker moves; what runs create later is collected as before."""
    gc.collect()
    gc.freeze()


def _worker_name(worker: Any) -> str:
    return str(getattr(worker, "hostname", None) or f"{socket.gethostname()}:{os.getpid()}")


def _worker_info(worker: Any) -> WorkerInfo:
    """What this worker serves, for its record in Redis (store/workers.py)."""
    import runner

    pool = getattr(worker, "pool_cls", None)
    if isinstance(pool, type):
        pool = pool.__module__.rsplit(".", 1)[-1]  # celery.concurrency.thread -> thread
    queues = getattr(getattr(worker, "app", None), "amqp", None)
    concurrency = getattr(worker, "concurrency", None)
    return WorkerInfo(
        _worker_name(worker),
        started_at=time.time(),
        agents=tuple(engine().deps.registry.names()),
        version=runner.version(),
        pool=None if pool is None else str(pool),
        concurrency=concurrency if isinstance(concurrency, int) else None,
        queues=tuple(sorted(queues.queues.consume_from)) if queues is not None else (),
        host=socket.gethostname(),
        pid=os.getpid(),
        agent_versions=engine().deps.registry.versions(),
    )


def _handlers() -> list[logging.Handler]:
    """The handlers Celery set up: the root logger's and the task logger's."""
    found = list(logging.getLogger().handlers)
    for name in ("celery.task", "celery.redirected"):
        found += [h for h in logging.getLogger(name).handlers if h not in found]
    return found


def _run_context_on_logs(logger: logging.Logger | None = None, **_: Any) -> None:
    # Celery (re)configures its handlers here: give every one of them the run
    # context, and the JSON format if asked (RUNWRIGHT_LOG_FORMAT).
    if logger is not None and installed(_process_app()):
        observe.install_logging(list(logger.handlers))


def _flush_observers(sender: Any = None, **_: Any) -> None:
    if _engine is not None and _runs_agents:
        observe.stop_worker(_engine.settings)
        watchdog.stop()
    sessions = sys.modules.get("runner.core.mcp.sessions")  # loaded only if an agent has servers
    if sessions is not None:
        sessions.close_all()


def _quiet_celery_logs() -> None:
    # Two lines every few seconds would bury the worker's log as the events
    # would bury Flower: a tick is logged only when it did something. An
    # execution handed back or ignored is expected, and says so in one line.
    quiet = QuietTicks()
    for name in ("celery.worker.strategy", "celery.app.trace"):
        logging.getLogger(name).addFilter(quiet)
    trace = logging.getLogger("celery.app.trace")
    trace.addFilter(QuietHandBacks())
    trace.addFilter(QuietIgnores())


def _quiet_beat(sender: Any = None, **_: Any) -> None:
    # The task-sent event goes with every message when task_send_sent_event is
    # on, whatever the task's send_events says, and Flower lists a task from
    # that event alone. Beat sends the schedule's messages (the ticks): it
    # announces none. An embedded beat on a thread shares the worker's
    # configuration, whose enqueues of runs stay announced.
    app = sender.app if sender is not None else _process_app()
    if app is not None and installed(app) and threading.current_thread() is threading.main_thread():
        app.conf.task_send_sent_event = False


def _drain(sig: str = "", how: str = "", **_: Any) -> None:
    # Runs in the main process's signal handler: only flag the executions (no
    # logging here, it takes locks); they end `interrupted`, release their
    # leases and are enqueued again, while Celery's warm shutdown waits for
    # their tasks to return.
    if _runs_agents:
        runtime().drain()
