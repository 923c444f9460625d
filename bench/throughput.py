"""Throughput on one machine's cores: K ``celery worker`` processes, K = 1, 2
(and more where the machine has the cores), driving many short runs whose
model is an OpenAI-compatible server on loopback that answers at once
(litellm's real HTTP path), issue 31.

    python -m bench.throughput [--runs 600] [--threads 32] [--max-workers N]

For each K it reports steps per second, the workers' CPU per step (their
user and system time over the round), Postgres commits per second and per
step (``pg_stat_database`` of the benchmark's database), the connections
opened to it while the runs went, Postgres's CPU per step (its processes on
this machine, the backends of closed connections included), and Redis commands
per step, the leases' Redis and the broker's apart (each its own server). The
scaling efficiency is the workers' CPU per step at K = 1 over that at K = 2:
a second process that adds no contention of its own costs what the first did
per step (target >= 0.9). Steps per second are reported and not targeted: on
two cores shared with Postgres, Redis, the broker and the model server they
cannot double.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import redis
import sqlalchemy as sa

from bench.agents import STEPS
from bench.common import (
    bench_database,
    cpu_seconds,
    postgres_cpu_seconds,
    postgres_sessions,
    report,
)
from bench.workers import _wait_all
from store.local import LocalRedis, free_port
from tests.e2e.cluster import Cluster
from tests.provider import Provider, answer, tool_calls

AGENTS = "tests.agents,bench.agents"
TARGET_EFFICIENCY = 0.9


def _script(step: int, body: dict[str, Any]) -> dict[str, Any]:
    if step < STEPS:
        return tool_calls((f"call_{step}", "touch", {"n": step}))
    return answer("all noted")


@contextlib.contextmanager
def _cluster(provider: Provider) -> Iterator[tuple[Cluster, redis.Redis, redis.Redis]]:
    """A cluster whose leases and broker each have a Redis server of their own
    (so each one's commands are counted apart), on a fresh database."""
    with tempfile.TemporaryDirectory(prefix="rw-throughput-") as tmp, bench_database() as url:
        workdir = Path(tmp)
        leases = LocalRedis(workdir / "leases", free_port())
        broker = LocalRedis(workdir / "broker", free_port())
        leases.start()
        broker.start()
        made = Cluster(
            database_url=url,
            redis_url=leases.url(0),
            broker_url=broker.url(0),
            workdir=workdir,
            overrides={
                "RUNWRIGHT_AGENTS": AGENTS,
                "RUNWRIGHT_BENCH_PROVIDER": provider.base_url,
                "RUNWRIGHT_SCRIPTED_JOURNAL": "",
                "RUNWRIGHT_TEST_EFFECT_LOG": "",
                "RUNWRIGHT_DB_POOL_SIZE": "20",
                # The production defaults, not the acceptance tests' short ones.
                "RUNWRIGHT_LEASE_TTL_SECONDS": "15",
                "RUNWRIGHT_TICK_SECONDS": "5",
                "RUNWRIGHT_REENQUEUE_SECONDS": "60",
            },
        )
        lease_client = redis.Redis.from_url(leases.url(0))
        broker_client = redis.Redis.from_url(broker.url(0))
        try:
            yield made, lease_client, broker_client
        finally:
            made.stop()
            lease_client.close()
            broker_client.close()
            leases.kill()
            broker.kill()


def _commits(engine: sa.Engine) -> int:
    with engine.connect() as conn:
        value = conn.execute(
            sa.text("SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()")
        ).scalar_one()
    return int(value)


def _commands(client: redis.Redis) -> int:
    return int(client.info("stats")["total_commands_processed"])


def _round(
    cluster: Cluster,
    workers: int,
    runs: int,
    threads: int,
    lease_redis: redis.Redis,
    broker_redis: redis.Redis,
) -> dict[str, Any]:
    procs = [cluster.worker(f"k{workers}w{n}", concurrency=threads) for n in range(workers)]
    engine = cluster.engine()
    try:
        # Warm every worker: its pools, litellm's client, the prepared statements.
        warm = [
            engine.start("throughput", {"warm": n, "k": workers}).id for n in range(20 * workers)
        ]
        _wait_all(engine, warm, 120)
        silent = type(engine)(engine.store, leases=engine.leases, settings=engine.settings)
        ids = [silent.start("throughput", {"k": workers, "n": n}).id for n in range(runs)]
        cpu = sum(cpu_seconds(p.pid) for p in procs)
        commits, leases, broker = (
            _commits(engine.store.engine),
            _commands(lease_redis),
            _commands(broker_redis),
        )
        sessions, pg_cpu = postgres_sessions(engine.store.engine), postgres_cpu_seconds()
        started = time.monotonic()
        assert engine.enqueue is not None
        for run_id in ids:
            engine.enqueue(run_id)
        _wait_all(engine, ids, 600)
        wall = time.monotonic() - started
        cpu = sum(cpu_seconds(p.pid) for p in procs) - cpu
        pg_cpu = postgres_cpu_seconds() - pg_cpu
        time.sleep(1.0)  # Postgres publishes its counters shortly after the commits
        commits = _commits(engine.store.engine) - commits
        sessions = postgres_sessions(engine.store.engine) - sessions
        leases = _commands(lease_redis) - leases
        broker = _commands(broker_redis) - broker
        with engine.store.engine.connect() as conn:
            steps = int(
                conn.execute(
                    sa.text(
                        "SELECT sum(steps_used) FROM runs WHERE id = ANY(CAST(:ids AS uuid[]))"
                    ),
                    {"ids": ids},
                ).scalar_one()
            )
    finally:
        for proc in procs:
            proc.stop()
        cluster.procs.clear()
    return {
        "workers": workers,
        "threads_per_worker": threads,
        "runs": runs,
        "steps": steps,
        "wall_seconds": round(wall, 2),
        "steps_per_second": round(steps / wall, 1),
        "worker_cpu_ms_per_step": round(cpu * 1000 / steps, 3),
        "postgres_commits_per_second": round(commits / wall, 1),
        "postgres_commits_per_step": round(commits / steps, 2),
        # Connections opened while the runs went (a pool that closes and opens
        # them in a burst costs Postgres a backend each), and Postgres's CPU
        # per step (where it runs on this machine; store/db.py make_engine).
        "postgres_connections_opened": sessions,
        "postgres_cpu_ms_per_step": round(pg_cpu * 1000 / steps, 3),
        "lease_redis_commands_per_step": round(leases / steps, 2),
        "broker_redis_commands_per_step": round(broker / steps, 2),
    }


def run(runs: int, threads: int, max_workers: int) -> dict[str, Any]:
    cores = os.cpu_count() or 1
    counts = list(range(1, max(2, min(max_workers, cores)) + 1))
    provider = Provider(_script).start()
    try:
        with _cluster(provider) as (cluster, lease_redis, broker_redis):
            rounds = [
                _round(cluster, k, runs * k, threads, lease_redis, broker_redis) for k in counts
            ]
    finally:
        provider.stop()
    by_k = {r["workers"]: r for r in rounds}
    efficiency = by_k[1]["worker_cpu_ms_per_step"] / by_k[2]["worker_cpu_ms_per_step"]
    return {
        "cores": cores,
        "model": "OpenAI-compatible server on loopback, answering at once (litellm over HTTP)",
        "steps_per_run": STEPS,
        "rounds": rounds,
        "scaling_efficiency_k1_over_k2": round(efficiency, 3),
        "steps_per_second_k2_over_k1": round(
            by_k[2]["steps_per_second"] / by_k[1]["steps_per_second"], 3
        ),
        "target_efficiency": TARGET_EFFICIENCY,
        "median_cpu_ms_per_step": round(
            statistics.median(r["worker_cpu_ms_per_step"] for r in rounds), 3
        ),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=600, help="runs per worker process")
    parser.add_argument("--threads", type=int, default=32, help="each worker's -c")
    parser.add_argument("--max-workers", type=int, default=4)
    args = parser.parse_args()
    result = run(args.runs, args.threads, args.max_workers)
    for r in result["rounds"]:
        print(
            f"K={r['workers']}: {r['steps_per_second']} steps/s, "
            f"{r['worker_cpu_ms_per_step']} ms worker CPU/step, "
            f"{r['postgres_commits_per_step']} commits/step "
            f"({r['postgres_commits_per_second']}/s), "
            f"Redis {r['lease_redis_commands_per_step']} lease + "
            f"{r['broker_redis_commands_per_step']} broker commands/step; Postgres "
            f"{r['postgres_cpu_ms_per_step']} ms CPU/step, "
            f"{r['postgres_connections_opened']} connections opened"
        )
    ok = result["scaling_efficiency_k1_over_k2"] >= TARGET_EFFICIENCY
    print(
        f"scaling efficiency (CPU/step K=1 over K=2): {result['scaling_efficiency_k1_over_k2']}"
        f" (target >= {TARGET_EFFICIENCY}: {'met' if ok else 'NOT met'}); steps/s K=2 over"
        f" K=1: {result['steps_per_second_k2_over_k1']} (reported, not targeted)"
    )
    report("throughput", result, ok)


if __name__ == "__main__":
    main()
