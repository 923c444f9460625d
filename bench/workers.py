"""Benchmarks with real ``celery worker`` processes.

    python -m bench.workers [recovery|cancel|concurrent|throughput|tick]

(a) recovery: SIGKILL the worker executing a run; time until another worker
    has resumed it (its claim epoch rose). Target: median <= TTL + tick + 2 s.
(b) cancel: cancel a running run from this process; time until it is settled
    ``cancelled``. Target: p95 <= 500 ms.
(c) concurrent: 200 runs of 5 steps, 1 s of model latency per step, on ONE
    worker process (warmed by one run first; the model is priced, as
    production models are). Target: wall time <= 1.5x the ideal 5 s. Also
    the worker's CPU per step over the same span.
(d) throughput: 5-step runs with a zero-latency model on two worker processes.
(e) tick: tick() with 100,000 settled runs, 1,000 waiting and 100 due.
    Target: median <= 50 ms.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import sqlalchemy as sa

import tests.agents  # noqa: F401  (the agents the workers run)
from bench.common import (
    bench_database,
    cpu_seconds,
    postgres_cpu_seconds,
    postgres_sessions,
    report,
)
from runner.core.settings import Settings
from store.local import LocalRedis, free_port
from store.models import RunStatus
from tests.e2e.cluster import Cluster, wait_until
from tests.rabbitmq import RabbitNode

TTL, TICK = 3.0, 1.0


@contextlib.contextmanager
def cluster(rabbitmq: bool = False, **overrides: str) -> Iterator[Cluster]:
    """A cluster on a fresh database and a Redis of its own; with ``rabbitmq``,
    its broker is a RabbitMQ node of its own (``tests.rabbitmq``), else that
    Redis."""
    with (
        tempfile.TemporaryDirectory(prefix="rw-bench-") as tmp,
        bench_database() as url,
        contextlib.ExitStack() as stack,
    ):
        workdir = Path(tmp)
        redis_server = LocalRedis(workdir / "redis", free_port())
        redis_server.start()
        stack.callback(redis_server.kill)
        broker_url = redis_server.url(1)
        if rabbitmq:
            node = RabbitNode(workdir / "rabbitmq")
            stack.callback(node.close)
            node.start()
            broker_url = node.url
        made = Cluster(
            database_url=url,
            redis_url=redis_server.url(0),
            broker_url=broker_url,
            workdir=workdir,
            overrides={
                "RUNWRIGHT_LEASE_TTL_SECONDS": str(TTL),
                "RUNWRIGHT_TICK_SECONDS": str(TICK),
                "RUNWRIGHT_SCRIPTED_JOURNAL": "",
                "RUNWRIGHT_TEST_EFFECT_LOG": "",
                **overrides,
            },
        )
        try:
            yield made
        finally:
            made.stop()


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def bench_recovery(trials: int) -> dict[str, Any]:
    latencies = []
    with cluster() as c:
        c.beat()
        engine = c.engine()
        workers = {p.pid: p for p in (c.worker("r0"), c.worker("r1"))}
        for i in range(trials):
            run = engine.start("steady", {"steps": 200, "latency": 0.2, "trial": i})
            claimed: Any = wait_until(
                lambda r=run: (x := engine.get_run(r.id)).claim is not None and x, 60, "claim"
            )
            pid = int(claimed.claim.owner.split(":")[1])
            victim = workers.pop(pid)
            killed = time.monotonic()
            victim.signal(signal.SIGKILL)
            victim.wait(10)
            wait_until(
                lambda r=run, e=claimed.claim.epoch: (
                    (x := engine.get_run(r.id)).claim is not None and x.claim.epoch > e
                ),
                60,
                "the takeover",
                0.02,
            )
            latencies.append(time.monotonic() - killed)
            engine.cancel(run.id)
            replacement = c.worker(f"r{i + 2}")
            workers[replacement.pid] = replacement
    median = statistics.median(latencies)
    return {
        "recovery_seconds": [round(x, 2) for x in latencies],
        "median_seconds": round(median, 2),
        "lease_ttl_seconds": TTL,
        "tick_seconds": TICK,
        "target_seconds": TTL + TICK + 2,
        "meets_target": median <= TTL + TICK + 2,
    }


def bench_cancel(trials: int) -> dict[str, Any]:
    latencies = []
    with cluster() as c:
        c.worker("c0")
        engine = c.engine()
        for _ in range(trials):
            run = engine.start("hang")
            wait_until(lambda r=run: engine.get_run(r.id).status is RunStatus.RUNNING, 30, "run")
            time.sleep(0.2)
            started = time.monotonic()
            engine.cancel(run.id)
            wait_until(
                lambda r=run: engine.get_run(r.id).status is RunStatus.CANCELLED,
                10,
                "cancel",
                0.005,
            )
            latencies.append((time.monotonic() - started) * 1000)
    p95 = percentile(latencies, 0.95)
    return {
        "median_ms": round(statistics.median(latencies), 1),
        "p95_ms": round(p95, 1),
        "trials": trials,
        "target_p95_ms": 500,
        "meets_target": p95 <= 500,
    }


def _wait_all(engine: Any, ids: list[str], timeout: float) -> None:
    remaining = set(ids)
    deadline = time.monotonic() + timeout
    with engine.store.engine.connect() as conn:
        while remaining and time.monotonic() < deadline:
            done = conn.execute(
                sa.text(
                    "SELECT id FROM runs WHERE id = ANY(CAST(:ids AS uuid[]))"
                    " AND status IN ('completed', 'failed', 'cancelled')"
                ),
                {"ids": list(remaining)},
            ).scalars()
            remaining -= {str(x) for x in done}
            conn.commit()
            if remaining:
                time.sleep(0.05)
    if remaining:
        raise AssertionError(f"{len(remaining)} runs did not finish in {timeout}s")


def _start_many(
    engine: Any, count: int, payload: Callable[[int], dict[str, Any]], agent: str = "steady"
) -> list[str]:
    return [engine.start(agent, payload(i)).id for i in range(count)]


def bench_concurrent(
    runs: int = 200, processes: int = 1, rabbitmq: bool = False, task_events: bool = False
) -> dict[str, Any]:
    """``runs`` runs of 5 steps with 1 s of model latency on ``processes``
    worker processes (the runs shared among them), the broker Redis or, with
    ``rabbitmq``, a RabbitMQ node. With ``task_events`` the workers send
    Celery's task events (``RUNWRIGHT_TASK_EVENTS``), as they do while Flower
    watches; by default they send none, as with no monitor asking.

    Besides the wall time it reports when the runs' executions began, from
    the first message sent: how long the broker and the workers' consumers
    took to hand every run to an execution."""
    from runner import Engine

    # The default lease TTL, as in production: the cluster's 3 s (for the
    # recovery benchmark) would renew every run's claim every second, which
    # at 200 runs was a third of this benchmark's time (issue 16).
    default_ttl = str(Settings().lease_ttl_seconds)
    with cluster(
        rabbitmq,
        RUNWRIGHT_DB_POOL_SIZE="20",
        RUNWRIGHT_LEASE_TTL_SECONDS=default_ttl,
        RUNWRIGHT_TASK_EVENTS=str(task_events).lower(),
    ) as c:
        workers = [
            c.worker(f"big{n}", concurrency=runs // processes + 10) for n in range(processes)
        ]
        engine = c.engine()
        # A worker that has taken one run, as every worker in production has:
        # litellm loads its scripted-provider path (a tokenizer) on the first call.
        _wait_all(
            engine,
            [engine.start("paced", {"steps": 1, "latency": 0, "w": n}).id for n in range(4)],
            60,
        )
        # Five model steps of 1 s each (request.step counts from 1: four tool
        # steps, then the answer). Create the runs first, then send all their
        # tasks at once: the clock measures the worker, not this process
        # creating 200 rows.
        silent = Engine(engine.store, leases=engine.leases, settings=engine.settings)
        ids = [silent.start("paced", {"steps": 5, "latency": 1.0, "n": i}).id for i in range(runs)]
        cpu = sum(cpu_seconds(w.pid) for w in workers)
        sessions, pg_cpu = postgres_sessions(engine.store.engine), postgres_cpu_seconds()
        started, sent = time.monotonic(), time.time()
        for run_id in ids:
            assert engine.enqueue is not None
            engine.enqueue(run_id)
        sending = time.monotonic() - started
        _wait_all(engine, ids, 300)
        wall = time.monotonic() - started
        cpu = sum(cpu_seconds(w.pid) for w in workers) - cpu
        pg_cpu = postgres_cpu_seconds() - pg_cpu
        time.sleep(1.0)  # Postgres publishes its counters shortly after
        sessions = postgres_sessions(engine.store.engine) - sessions
        finished = [engine.get_run(i) for i in ids]
    began = sorted(
        run.started_at.timestamp() - sent for run in finished if run.started_at is not None
    )
    steps = sum(run.steps_used for run in finished)
    ideal = 5.0
    return {
        "runs": runs,
        "worker_processes": processes,
        "steps_per_run": 5,
        "model_latency_seconds": 1.0,
        "wall_seconds": round(wall, 2),
        "ideal_seconds": ideal,
        "ratio_to_ideal": round(wall / ideal, 3),
        "worker_cpu_seconds": round(cpu, 2),
        "worker_cpu_ms_per_step": round(cpu * 1000 / max(steps, 1), 2),
        # What Postgres spent (where it runs on this machine), and the
        # connections opened to it while the runs went (store/db.py make_engine).
        "postgres_cpu_ms_per_step": round(pg_cpu * 1000 / max(steps, 1), 2),
        "postgres_connections_opened": sessions,
        "broker": "rabbitmq" if rabbitmq else "redis",
        "task_events": task_events,
        # How long this process took to send every run's message.
        "messages_sent_seconds": round(sending, 2),
        # When the runs' executions began, seconds after the first message.
        "executions_began_median_seconds": round(statistics.median(began), 2) if began else None,
        "executions_began_last_seconds": round(began[-1], 2) if began else None,
        "lease_ttl_seconds": float(default_ttl),
        "all_completed": {run.status for run in finished} == {RunStatus.COMPLETED}
        and steps == 5 * runs,
        "meets_target": wall <= 1.5 * ideal
        and {run.status for run in finished} == {RunStatus.COMPLETED},
    }


def bench_throughput(runs: int = 300) -> dict[str, Any]:
    with cluster() as c:
        c.worker("t0", concurrency=32)
        c.worker("t1", concurrency=32)
        engine = c.engine()
        # Warm both workers' pools and caches first.
        _wait_all(
            engine, _start_many(engine, 20, lambda i: {"steps": 5, "latency": 0, "w": i}), 120
        )
        rates = []
        for round_ in range(3):
            started = time.monotonic()
            ids = _start_many(
                engine, runs, lambda i, r=round_: {"steps": 5, "latency": 0, "r": r, "n": i}
            )
            _wait_all(engine, ids, 600)
            rates.append(runs / (time.monotonic() - started))
    return {
        "runs_per_round": runs,
        "steps": 5,
        "runs_per_second": [round(r, 1) for r in rates],
        "median_runs_per_second": round(statistics.median(rates), 1),
        "steps_per_second": round(statistics.median(rates) * 5, 1),
    }


def bench_tick(samples: int = 30) -> dict[str, Any]:
    from runner import Agent, Engine
    from runner.core.coordination.leases import Leases
    from store.db import make_engine
    from store.postgres import PostgresStore

    sent: list[str] = []
    Agent(name="tick-bench", model="scripted/none", notifier=lambda r: sent.append(r.approval_id))
    with contextlib.ExitStack() as stack, bench_database() as url:
        tmp = stack.enter_context(tempfile.TemporaryDirectory(prefix="rw-tick-"))
        redis_server = LocalRedis(Path(tmp) / "redis", free_port())
        redis_server.start()
        stack.callback(redis_server.kill)
        db = make_engine(url)
        with db.begin() as conn:
            conn.execute(sa.text(_POPULATE))
            conn.execute(sa.text("ANALYZE"))
        engine = Engine(
            PostgresStore(db),
            leases=Leases.from_url(redis_server.url(0)),
            settings=Settings(
                secret_key="bench:bench-secret-bench-secret-bench-secret", tick_batch=500
            ),
        )
        engine.tick()  # warm up
        durations = []
        for _ in range(samples):
            with db.begin() as conn:
                conn.execute(sa.text(_MAKE_DUE))
            sent.clear()
            started = time.perf_counter()
            result = engine.tick()
            durations.append((time.perf_counter() - started) * 1000)
            assert result.notified == 100 and len(sent) == 100, result
        with db.connect() as conn:
            counts = dict(
                conn.execute(sa.text("SELECT status, count(*) FROM runs GROUP BY status")).all()
            )
        db.dispose()
    median = statistics.median(durations)
    return {
        "runs_by_status": counts,
        "due_per_tick": 100,
        "median_ms": round(median, 2),
        "p95_ms": round(percentile(durations, 0.95), 2),
        "target_median_ms": 50,
        "meets_target": median <= 50,
    }


_POPULATE = """
INSERT INTO runs (id, agent, status, trigger, trigger_id, created_at, updated_at, finished_at,
                  enqueued_at)
SELECT gen_random_uuid(), 'tick-bench', (ARRAY['completed','failed','cancelled'])[1 + g % 3],
       '{"id": "x", "source": "bench", "trigger": "bench", "payload": {}, "keys": {}}',
       'settled-' || g, now() - interval '1 day', now() - interval '1 day',
       now() - interval '1 day', now() - interval '1 day'
  FROM generate_series(1, 100000) AS g;
INSERT INTO runs (id, agent, status, trigger, trigger_id, created_at, updated_at, enqueued_at)
SELECT gen_random_uuid(), 'tick-bench', 'waiting',
       '{"id": "x", "source": "bench", "trigger": "bench", "payload": {}, "keys": {}}',
       'waiting-' || g, now(), now(), now()
  FROM generate_series(1, 1000) AS g;
INSERT INTO approvals (approval_id, run_id, step_index, tool_call_id, tool_name, input,
                       expires_at, on_expire, token_id, next_notify_at, notified_at)
SELECT gen_random_uuid(), id, 1, 'call-' || id, 'refund', '{}', now() + interval '1 day',
       'deny', 'bench', now() + interval '1 hour', NULL
  FROM runs WHERE status = 'waiting';
"""

# 100 of the 1,000 waits have a notification due; the rest are not due.
_MAKE_DUE = """
UPDATE approvals SET next_notify_at = now() - interval '1 second', notified_at = NULL
 WHERE approval_id IN (SELECT approval_id FROM approvals ORDER BY approval_id LIMIT 100)
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "which",
        nargs="*",
        default=["recovery", "cancel", "concurrent", "throughput", "tick"],
    )
    args = parser.parse_args()
    jobs: dict[str, Callable[[], dict[str, Any]]] = {
        "recovery": lambda: bench_recovery(5),
        "cancel": lambda: bench_cancel(30),
        "concurrent": bench_concurrent,
        "throughput": bench_throughput,
        "tick": bench_tick,
    }
    for name in args.which:
        result = jobs[name]()
        report(f"workers_{name}", result, bool(result.get("meets_target", True)))


if __name__ == "__main__":
    main()
