"""``runwright worker-shape``: how many worker processes a machine runs, and
how many runs each holds at once, for its cores and the model's latency
(docs/scaling.md).

A worker process runs its executions on one event loop, so its Python is one
GIL: it does at most a core's worth of steps, and more processes are how a
machine's cores are used. Within a process, each run in flight holds one of
Celery's threads (``-c``) while it waits on the model; a process keeps its
core busy once enough runs are in flight that their steps fill the time one
of them waits. So: one process per core (less what Postgres, Redis or the
broker take on the same machine), each with
``-c = steps per second it can do x (model latency + its CPU per step)``, at
three quarters of a core, leaving room for the heartbeats, the tick and
bursts.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

import click

from runner.cli.as_json import Document, json_option
from runner.cli.terminal import say
from runner.core.settings import Settings
from store.errors import ConfigurationError, InvalidInput

# A worker's CPU per durable step over HTTP to a provider, as bench.throughput
# measures it on this project's benchmark machine (7.0-7.3 ms: runs of five
# short steps, litellm's HTTP path, the engine, each execution's Celery task,
# claim and lease included); pass your own with --cpu-ms-per-step.
DEFAULT_CPU_MS_PER_STEP = 7.0
UTILIZATION = 0.75
MAX_THREADS = 1000
# Past this many runs in flight per process, a burst (a schedule firing, the
# tick re-sending runs after an outage) reaches a busy process slowly through a
# Redis broker: its consumer awaits a reply per message (docs/scaling.md,
# "Where 500 runs on two processes wait").
REDIS_BROKER_BURST = 100
_REDIS_SCHEMES = ("redis", "rediss", "redis+socket", "sentinel")


@dataclass(frozen=True)
class Shape:
    processes: int
    threads: int
    steps_per_second: float
    runs_in_flight: int


def shape(cores: int, latency: float, cpu_ms_per_step: float, others: int = 0) -> Shape:
    """The worker shape for ``cores`` (``others`` of them taken by Postgres,
    Redis or the broker on the same machine), a model latency of ``latency``
    seconds per step and ``cpu_ms_per_step`` of a worker's CPU per step."""
    if cores < 1 or others < 0 or latency < 0 or cpu_ms_per_step <= 0:
        raise InvalidInput("cores >= 1, others >= 0, latency >= 0 and CPU per step > 0")
    processes = max(1, cores - others)
    per_process = UTILIZATION * 1000 / cpu_ms_per_step  # steps/s at 3/4 of a core
    threads = math.ceil(per_process * (latency + cpu_ms_per_step / 1000))
    threads = min(MAX_THREADS, max(4, threads))
    rate = min(per_process, threads / (latency + cpu_ms_per_step / 1000))
    return Shape(processes, threads, round(rate * processes, 1), threads * processes)


def broker_advice(threads: int, broker_url: str | None, *, app: str | None = None) -> str | None:
    """What to say of the broker for ``threads`` runs in flight per process:
    RabbitMQ where Redis is the broker (``None``: Runwright's default, the
    leases' Redis) and the processes hold more than a burst's worth. ``app``:
    the project's Celery app, whose own broker_url it is."""
    scheme = (broker_url or "redis://").split("://", 1)[0].lower()
    if scheme not in _REDIS_SCHEMES or threads <= REDIS_BROKER_BURST:
        return None
    where = (
        f"the broker_url of the Celery app {app} = amqp://..."
        if app is not None
        else "RUNWRIGHT_BROKER_URL=amqp://..."
    )
    return (
        f"with Redis as the broker, a burst of {threads} runs reaches a busy process slowly "
        "(its consumer awaits a reply for each message); RabbitMQ hands them over faster: "
        f'{where} (docs/scaling.md, "Past one Postgres")'
    )


def app_broker(name: str) -> str:
    """The broker URL of the Celery app ``name`` (as ``celery -A`` finds it),
    without connecting to it."""
    from runner.cli.doctor import Problem, celery_app

    try:
        app = celery_app(name)
    except Problem as exc:
        raise ConfigurationError(exc.message) from None
    url = app.conf.broker_write_url or app.conf.broker_url
    if not url:
        with app.connection_for_write() as conn:  # Celery's default broker
            return str(conn.as_uri())
    return str(url[0] if isinstance(url, list | tuple) else url)  # a failover list: its first


@click.command("worker-shape")
@click.option("-A", "--app", default=None,
              help="The Celery app that installed Runwright, as `celery -A` names it "
              "(default: RUNWRIGHT_CELERY_APP, else Runwright's own, tasks).")  # fmt: skip
@click.option("--cores", type=int, default=None, help="The machine's cores (default: this one's).")
@click.option("--others", type=int, default=0, show_default=True,
              help="Cores Postgres, Redis or the broker take on the same machine.")  # fmt: skip
@click.option("--latency", type=float, default=1.0, show_default=True,
              help="The model's seconds per call.")  # fmt: skip
@click.option("--cpu-ms-per-step", type=float, default=DEFAULT_CPU_MS_PER_STEP, show_default=True,
              help="A worker's CPU per step (bench.throughput measures it).")  # fmt: skip
@json_option
def worker_shape(
    app: str | None,
    cores: int | None,
    others: int,
    latency: float,
    cpu_ms_per_step: float,
    as_json: bool,
) -> Document | None:
    """Worker processes and threads for a machine, and the command that starts them."""
    cores = cores or os.cpu_count() or 1
    found = shape(cores, latency, cpu_ms_per_step, others)
    settings = Settings.from_env()
    app = app or settings.celery_app
    # Runwright's own app sends through RUNWRIGHT_BROKER_URL; a project's app
    # through its own broker_url.
    broker = settings.configured_broker if app is None else app_broker(app)
    advice = broker_advice(found.threads, broker, app=app)
    command = (
        f"celery multi start {found.processes} -A {app or 'tasks'} -l INFO -Q {settings.queue} "
        f"-P threads -c {found.threads} --prefetch-multiplier 1 "
        "--pidfile=/var/run/runwright/%n.pid --logfile=/var/log/runwright/%n%I.log"
    )
    if as_json:
        return {
            "app": app or "tasks",
            "cores": cores,
            "others": others,
            "latency_seconds": latency,
            "cpu_ms_per_step": cpu_ms_per_step,
            "processes": found.processes,
            "threads_per_process": found.threads,
            "runs_in_flight": found.runs_in_flight,
            "steps_per_second": found.steps_per_second,
            "command": command,
            "broker_advice": advice,
        }
    say(
        f"{cores} cores ({others} for other services), model calls of {latency:g} s, "
        f"{cpu_ms_per_step:g} ms of a worker's CPU per step:"
    )
    say(
        f"  {found.processes} worker process(es), each -c {found.threads}: up to "
        f"{found.runs_in_flight} runs in flight, about {found.steps_per_second:g} steps/s"
    )
    say(f"  {command}")
    if advice is not None:
        say(f"  Note: {advice}")
    return None
