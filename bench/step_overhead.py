"""Durable overhead per step, flat in run length.

    python -m bench.step_overhead            # or: make bench

Runs of 10, 50 and 200 steps with a zero-latency scripted model through
litellm and ~1 KB per tool result, executed (a) on Postgres with Redis leases
and (b) on the in-memory store without leases. (c) = (a) - (b) is what
durability costs per step; (d) is the floor, one 1 KB INSERT + COMMIT on the
same database. Targets: (c) at 200 steps <= 1.3x (c) at 10; (c) <= 5x (d).
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import time
import uuid
from typing import Any

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import sqlalchemy as sa

from bench.common import SECRET, bench_database, durable_engine, report
from runner import Agent, Budget, Engine, tool
from runner.testing import Reply, Request, ScriptedModel, call, text, tools
from store.config import Settings
from store.db import make_engine, raw_cursor
from store.memory import MemoryStore
from store.postgres import PostgresStore

KB = "x" * 1000
LENGTHS = (10, 50, 200)


@tool
def fetch(n: int) -> str:
    """Return about a kilobyte."""
    return KB


def _script(request: Request) -> Reply:
    steps = int(request.messages[0]["content"].split('"steps": ')[1].split()[0].strip(","))
    if request.step < steps:
        return tools(call("fetch", {"n": request.step}))
    return text("done")


def _per_step(engine: Engine, agent: str, steps: int) -> float:
    run = engine.start(agent, {"steps": steps, "nonce": uuid.uuid4().hex})
    started = time.perf_counter()
    done = engine.execute(run.id)
    elapsed = time.perf_counter() - started
    assert done is not None and done.status.value == "completed", done
    assert done.steps_used == steps
    return elapsed * 1000 / steps


def run(repeats: int) -> dict[str, Any]:
    logging.getLogger("runner").setLevel(logging.ERROR)
    ScriptedModel("bench-steps", _script)
    agent = Agent(
        name="bench-steps",
        model="scripted/bench-steps",
        tools=[fetch],
        budget=Budget(max_steps=500),
    )
    with bench_database() as url:
        db = make_engine(url, pool_size=10)
        durable = durable_engine(PostgresStore(db))
        memory = Engine(MemoryStore(), settings=Settings(secret_key=SECRET))
        for engine in (durable, memory):  # warm up: litellm import, pools, prepared plans
            _per_step(engine, agent.name, 10)

        with db.begin() as conn:
            conn.execute(sa.text("CREATE TABLE floor_probe (id bigserial PRIMARY KEY, body jsonb)"))
        body = f'{{"content": "{KB}"}}'

        def floor_once() -> float:
            started = time.perf_counter()
            with db.begin() as conn:
                conn.execute(
                    sa.text("INSERT INTO floor_probe (body) VALUES (CAST(:b AS jsonb))"),
                    {"b": body},
                )
            return (time.perf_counter() - started) * 1000

        def floor_driver_once() -> float:
            started = time.perf_counter()
            with raw_cursor(db) as cursor:
                cursor.execute("INSERT INTO floor_probe (body) VALUES (%s)", (body,))
                cursor.connection.commit()
            return (time.perf_counter() - started) * 1000

        # Each round measures every length on both engines and the floor, so
        # that the machine's drift (it is shared) hits them all alike.
        samples: dict[str, list[float]] = {}
        for _ in range(repeats):
            for steps in LENGTHS:
                # The same number of steps at every length: 20 runs of 10 steps,
                # 4 of 50, 1 of 200; durable and in-memory runs alternate.
                for _ in range(max(LENGTHS) // steps):
                    samples.setdefault(f"durable_{steps}", []).append(
                        _per_step(durable, agent.name, steps)
                    )
                    samples.setdefault(f"memory_{steps}", []).append(
                        _per_step(memory, agent.name, steps)
                    )
            samples.setdefault("floor", []).extend(floor_once() for _ in range(100))
            samples.setdefault("floor_driver", []).extend(floor_driver_once() for _ in range(100))
        durable.close()
        db.dispose()

    median = {k: statistics.median(v) for k, v in samples.items()}
    overhead = {n: median[f"durable_{n}"] - median[f"memory_{n}"] for n in LENGTHS}
    floor_ms = median["floor"]
    return {
        "per_step_ms": {
            "durable": {n: round(median[f"durable_{n}"], 3) for n in LENGTHS},
            "memory": {n: round(median[f"memory_{n}"], 3) for n in LENGTHS},
        },
        "overhead_ms": {n: round(v, 3) for n, v in overhead.items()},
        "floor_ms": round(floor_ms, 3),
        "floor_driver_ms": round(median["floor_driver"], 3),
        "overhead_200_vs_10": round(overhead[200] / overhead[10], 3),
        "overhead_vs_floor": {n: round(v / floor_ms, 3) for n, v in overhead.items()},
        "repeats": repeats,
        "targets": {"overhead_200_vs_10": 1.3, "overhead_vs_floor": 5.0},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    result = run(args.repeats)
    ok = result["overhead_200_vs_10"] <= 1.3 and all(
        v <= 5.0 for v in result["overhead_vs_floor"].values()
    )
    report("step_overhead", result, ok)


if __name__ == "__main__":
    main()
