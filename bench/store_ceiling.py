"""The ceiling of one Postgres (issue 31): the store alone, the two fenced
writes of a plain tool step (the journal write and the step's commit, as the
engine makes them: ``record_llm_step`` and ``commit_step``), from many
connections at once, each driving runs of its own.

    python -m bench.store_ceiling [--seconds 8] [--clients 1,2,4,8,16]

Each client is a process of its own (one connection, as a worker's thread
holds one for a write), so that the clients' Python is not one GIL. For each
number of clients it reports steps per second, Postgres commits per second,
WAL records and bytes per step and WAL syncs per second (``pg_stat_wal``),
the share of the time Postgres's backends waited on locks, on the WAL or on
I/O (``pg_stat_activity``, sampled), and the CPU the backends and the clients
used per step; then the same with ``synchronous_commit = off``, which tells a
WAL-flush ceiling from a CPU one. What stops it is the resource that is
saturated where steps per second stop rising.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import statistics
import threading
import time
import uuid
from collections import Counter
from typing import Any

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import sqlalchemy as sa

from bench.common import bench_database, cpu_seconds, postgres_cpu_seconds, report

STEP_BYTES = 1000  # a tool result of about a kilobyte, as bench.hot_path's
RUN_STEPS = 100  # a client starts a new run after this many steps


def _client(url: str, seconds: float, synchronous: bool, out: Any) -> None:
    """One connection's loop: runs of plain tool steps, each step its two
    fenced writes, until ``seconds`` pass; puts (steps, cpu seconds)."""
    from store.db import make_engine
    from store.models import (
        Fence,
        NewRun,
        StepCommit,
        StepKind,
        StepRecord,
        TriggerEnvelope,
        Usage,
        utcnow,
    )
    from store.postgres import PostgresStore

    # libpq's options, in the URL: the session's synchronous_commit.
    db = make_engine(
        url if synchronous else url + "?options=-csynchronous_commit%3Doff", pool_size=1
    )
    store = PostgresStore(db)
    with db.connect() as conn:  # the pool's one connection: its server process
        backend = int(conn.execute(sa.text("SELECT pg_backend_pid()")).scalar_one())
    backend_cpu = cpu_seconds(backend)
    owner = f"ceiling-{os.getpid()}"
    steps = 0
    cpu = time.process_time()
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        run, _ = store.create_run(
            NewRun(agent="ceiling", trigger=TriggerEnvelope(id=str(uuid.uuid4())))
        )
        claimed = store.claim_run(run.id, owner, 60)
        claim = getattr(claimed, "claim", None)
        assert claim is not None, claimed
        fence = Fence(run.id, owner, claim.epoch)
        count = 0
        for k in range(1, RUN_STEPS + 1):
            now = utcnow()
            call = f"call_{k}"
            reply = {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": call,
                        "type": "function",
                        "function": {"name": "lookup", "arguments": "{}"},
                    }
                ],
            }
            store.record_llm_step(
                fence,
                StepRecord(
                    index=k,
                    kind=StepKind.LLM,
                    started_at=now,
                    finished_at=now,
                    name="openai/ceiling",
                    output={"message": reply, "finish_reason": "tool_calls"},
                    usage=Usage(100, 20),
                    cost_usd=1e-5,
                ),
            )
            result = "x" * STEP_BYTES
            store.commit_step(
                fence,
                StepCommit(
                    step_index=k,
                    base_count=count,
                    new_messages=[reply, {"role": "tool", "tool_call_id": call, "content": result}],
                    finish_reason="tool_calls",
                    tool_steps=[
                        StepRecord(
                            index=k,
                            kind=StepKind.TOOL,
                            started_at=now,
                            finished_at=now,
                            name="lookup",
                            tool_call_id=call,
                            input={},
                            output=result,
                        )
                    ],
                ),
            )
            count += 2
            steps += 1
            if time.monotonic() >= deadline:
                break
    # The backend's CPU is read while it lives: it exits with the connection.
    out.put((steps, time.process_time() - cpu, cpu_seconds(backend) - backend_cpu))
    db.dispose()


def _counters(engine: sa.Engine) -> dict[str, float]:
    with engine.connect() as conn:
        commits = conn.execute(
            sa.text("SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()")
        ).scalar_one()
        wal = conn.execute(
            sa.text("SELECT wal_records, wal_bytes, wal_sync, wal_write FROM pg_stat_wal")
        ).one()
    return {
        "commits": float(commits),
        "wal_records": float(wal[0]),
        "wal_bytes": float(wal[1]),
        "wal_sync": float(wal[2]),
        "wal_write": float(wal[3]),
    }


def _sample_waits(url: str, stop: threading.Event, found: Counter[str]) -> None:
    """What the benchmark's backends are doing, every 20 ms."""
    engine = sa.create_engine(url.replace("postgresql://", "postgresql+psycopg2://"))
    with engine.connect() as conn:
        while not stop.is_set():
            rows = conn.execute(
                sa.text(
                    "SELECT coalesce(wait_event_type || ':' || wait_event, 'CPU')"
                    " FROM pg_stat_activity"
                    " WHERE datname = current_database() AND pid <> pg_backend_pid()"
                    " AND state = 'active'"
                )
            ).scalars()
            for kind in rows:
                found[kind] += 1
            conn.commit()
            time.sleep(0.02)
    engine.dispose()


def _round(url: str, clients: int, seconds: float, synchronous: bool) -> dict[str, Any]:
    engine = sa.create_engine(url.replace("postgresql://", "postgresql+psycopg2://"))
    before = _counters(engine)
    pg_cpu = postgres_cpu_seconds(exited=False)
    waits: Counter[str] = Counter()
    stop = threading.Event()
    sampler = threading.Thread(target=_sample_waits, args=(url, stop, waits))
    context = multiprocessing.get_context("spawn")
    out = context.Queue()
    procs = [
        context.Process(target=_client, args=(url, seconds, synchronous, out))
        for _ in range(clients)
    ]
    sampler.start()
    for proc in procs:
        proc.start()
    results = [out.get(timeout=seconds + 120) for _ in procs]
    for proc in procs:
        proc.join(30)
    stop.set()
    sampler.join()
    time.sleep(1.0)  # the counters are published shortly after
    after = _counters(engine)
    pg_cpu = postgres_cpu_seconds(exited=False) - pg_cpu
    engine.dispose()
    steps = sum(s for s, _, _ in results)
    client_cpu = sum(c for _, c, _ in results)
    pg_cpu += sum(b for _, _, b in results)
    sampled = sum(waits.values()) or 1
    return {
        "clients": clients,
        "synchronous_commit": "on" if synchronous else "off",
        "steps_per_second": round(steps / seconds, 1),
        "commits_per_second": round((after["commits"] - before["commits"]) / seconds, 1),
        "commits_per_step": round((after["commits"] - before["commits"]) / max(steps, 1), 2),
        "wal_records_per_step": round((after["wal_records"] - before["wal_records"]) / steps, 1),
        "wal_bytes_per_step": round((after["wal_bytes"] - before["wal_bytes"]) / steps),
        "wal_syncs_per_second": round((after["wal_sync"] - before["wal_sync"]) / seconds, 1),
        "postgres_cpu_ms_per_step": round(pg_cpu * 1000 / steps, 3),
        "client_cpu_ms_per_step": round(client_cpu * 1000 / steps, 3),
        "postgres_cpu_cores": round(pg_cpu / seconds, 2),
        "client_cpu_cores": round(client_cpu / seconds, 2),
        "backend_time_share": {k: round(v / sampled, 2) for k, v in waits.most_common()},
    }


def run(seconds: float, clients: list[int]) -> dict[str, Any]:
    with bench_database() as url:
        rounds = [_round(url, n, seconds, True) for n in clients]
        rounds += [_round(url, n, seconds, False) for n in (clients[-1],)]
    synchronous = [r for r in rounds if r["synchronous_commit"] == "on"]
    best = max(synchronous, key=lambda r: r["steps_per_second"])
    return {
        "cores": os.cpu_count(),
        "seconds_per_round": seconds,
        "rounds": rounds,
        "ceiling_steps_per_second": best["steps_per_second"],
        "ceiling_at_clients": best["clients"],
        "median_postgres_cpu_ms_per_step": round(
            statistics.median(r["postgres_cpu_ms_per_step"] for r in synchronous), 3
        ),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--clients", default="1,2,4,8,16")
    args = parser.parse_args()
    result = run(args.seconds, [int(n) for n in args.clients.split(",")])
    for r in result["rounds"]:
        print(
            f"{r['clients']:>3} clients, synchronous_commit {r['synchronous_commit']:>3}: "
            f"{r['steps_per_second']:>7} steps/s, {r['commits_per_second']:>7} commits/s, "
            f"Postgres {r['postgres_cpu_ms_per_step']} ms CPU/step "
            f"({r['postgres_cpu_cores']} cores), clients {r['client_cpu_ms_per_step']} ms "
            f"({r['client_cpu_cores']} cores), "
            f"WAL {r['wal_bytes_per_step']} B/step, {r['wal_syncs_per_second']} syncs/s, "
            f"backends: {json.dumps(r['backend_time_share'])}"
        )
    print(
        f"ceiling: {result['ceiling_steps_per_second']} steps/s "
        f"at {result['ceiling_at_clients']} clients"
    )
    report("store_ceiling", result, True)


if __name__ == "__main__":
    main()
