"""What the benchmarks share: where the database is, the durable engine they
measure, and how results are reported."""

from __future__ import annotations

import json
import os
import statistics
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg2
import sqlalchemy as sa
from sqlalchemy.engine import make_url

from runner import Engine
from runner.core.coordination.leases import Leases
from runner.core.settings import Settings, resolve
from store.migrate import upgrade
from store.postgres import PostgresStore

RESULTS = Path(__file__).resolve().parent / "results"
SECRET = "bench:bench-secret-bench-secret-bench-secret"


def machine_speed() -> float:
    """CPU milliseconds of a fixed pure-Python loop (the median of three): a
    ruler for the machine itself. This machine's speed has moved by half within
    an hour, so a benchmark that records it at its start and end shows which of
    its figures a slow spell touched, and figures from different hours can be
    set side by side."""
    times = []
    for _ in range(3):
        started, total = time.process_time(), 0
        for n in range(2_000_000):
            total += n * n
        times.append((time.process_time() - started) * 1000)
    return round(statistics.median(times), 1)


def settings() -> Settings:
    """The environment's services, or the local stack when none are named."""
    return resolve(Settings.from_env())


def durable_engine(store: PostgresStore, **options: Any) -> Engine:
    """An engine on ``store`` with the configured Redis's leases (30 s TTL),
    as the benchmarks of a durable run measure it."""
    redis_url = settings().redis_url
    assert redis_url is not None
    return Engine(
        store,
        leases=Leases.from_url(redis_url),
        settings=Settings(lease_ttl_seconds=30, secret_key=SECRET),
        **options,
    )


@contextmanager
def bench_database(server_url: str | None = None) -> Iterator[str]:
    """A fresh, migrated database on ``server_url`` (default: the configured
    server), dropped afterwards."""
    url = server_url or settings().database_url
    assert url is not None
    admin_url = make_url(url).set(database="postgres")
    name = f"rw_bench_{os.getpid()}"
    admin = psycopg2.connect(admin_url.render_as_string(False).replace("+psycopg2", ""))
    admin.autocommit = True
    try:
        with admin.cursor() as cur:
            cur.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            cur.execute(f'CREATE DATABASE "{name}"')
        bench_url = make_url(url).set(database=name).render_as_string(False)
        upgrade(bench_url)
        yield bench_url
    finally:
        with admin.cursor() as cur:
            cur.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.close()


def report(name: str, result: dict[str, Any], ok: bool) -> None:
    RESULTS.mkdir(exist_ok=True)
    result = {**result, "meets_targets": ok}
    (RESULTS / f"{name}.json").write_text(json.dumps(result, indent=2))
    print(f"== {name} ==")
    print(json.dumps(result, indent=2))


def _stat_cpu(stat: str, children: bool = False) -> float:
    """User + system CPU seconds in the text of a ``/proc`` stat file; with
    ``children``, those of the process's reaped children too."""
    fields = stat.rpartition(")")[2].split()  # after the name, which may hold ")"
    return sum(int(n) for n in fields[11 : 15 if children else 13]) / os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int | str, thread: int | str | None = None) -> float:
    """User + system CPU seconds so far of process ``pid`` (Linux /proc), or
    of its thread ``thread``."""
    path = f"/proc/{pid}/stat" if thread is None else f"/proc/{pid}/task/{thread}/stat"
    with open(path) as f:
        return _stat_cpu(f.read())


def postgres_cpu_seconds(*, exited: bool = True) -> float:
    """CPU seconds so far (user + system) of every process named postgres on
    this machine: the server's own (the WAL writer, the checkpointer) and its
    live backends; with ``exited``, also the backends whose connections have
    closed (the server's reaped children, counted in its ``cutime``), so that
    a benchmark whose clients open and close connections sees what they cost
    Postgres. Only where Postgres runs on this machine."""
    total = 0.0
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        if stat.partition(") ")[0].endswith("(postgres"):
            total += _stat_cpu(stat, children=exited)
    return total


def postgres_sessions(engine: sa.Engine) -> int:
    """Connections opened to ``engine``'s database since its statistics began
    (``pg_stat_database.sessions``)."""
    with engine.connect() as conn:
        value = conn.execute(
            sa.text("SELECT sessions FROM pg_stat_database WHERE datname = current_database()")
        ).scalar_one()
    return int(value)
