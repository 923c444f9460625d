"""Durable overhead per step, flat in run length.

    python -m bench.step_overhead            # or: make bench
    python -m bench.step_overhead --repeats 1

Runs of 10, 50 and 200 steps with a zero-latency scripted model through
litellm and ~1 KB per tool result, executed

(a) by the engine, on Postgres with Redis leases;
(b) by a plain loop with no store: the same scripted model called through
    ``litellm.acompletion`` with the same tool schema, the same tool called
    directly, the history kept in a list (what a user writes without
    durability).

(c) = (a) - (b) is what durability costs per step: the journal (journal write, step commit), the
fence, the claim and its lease, and the engine's bookkeeping around them
(budgets, usage and cost, hooks) that the plain loop does without. (d) is the
floor, one 1 KB INSERT + COMMIT on the same database. Targets: (c) at 200
steps <= 1.3x (c) at 10; (c) <= 5x (d).

The result's keys (``bench/results/step_overhead.json``):

- ``per_step_ms.durable[n]``: (a), the median ms per step of an n-step run;
- ``per_step_ms.plain[n]``: (b), the same for the plain loop;
- ``overhead_ms[n]``: (c);
- ``floor_ms``: (d) through SQLAlchemy; ``floor_driver_ms``: (d) through the
  bare driver;
- ``overhead_200_vs_10`` and ``overhead_vs_floor[n]``: the targets' ratios.

Before the plain loop, (b) was the engine on an in-memory store, so (c) left
the engine's bookkeeping out: figures from before that change compare only by
``per_step_ms.durable``.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import time
import uuid
from typing import Any

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import sqlalchemy as sa

from bench.common import bench_database, durable_engine, report
from runner import Agent, Budget, Engine, tool
from runner.core.model import warm_up
from runner.core.runtime import runtime
from runner.testing import Reply, Request, ScriptedModel, call, text, tools
from runner.testing.scripted import install_provider, price_scripted
from store.db import make_engine, raw_cursor
from store.postgres import PostgresStore

KB = "x" * 1000
MODEL = "scripted/bench-steps"
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


async def _plain_run(litellm: Any, model: str, steps: int) -> int:
    """A run of ``steps`` steps as a plain loop: no store, no journal, no
    fence; the number of model calls it took."""
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": json.dumps({"steps": steps, "nonce": uuid.uuid4().hex})}
    ]
    schema = [fetch.schema()]
    calls = 0
    while True:
        response = await litellm.acompletion(model=model, messages=messages, tools=schema)
        calls += 1
        message = response.choices[0].message
        messages.append(message.model_dump(exclude_none=True))
        if not message.tool_calls:
            return calls
        for tool_call in message.tool_calls:
            output = fetch(**json.loads(tool_call.function.arguments))
            messages.append({"role": "tool", "tool_call_id": tool_call.id, "content": output})


def _plain_per_step(litellm: Any, model: str, steps: int) -> float:
    # On the event loop the engine's model calls run on (runner/core/runtime.py):
    # litellm keeps per-loop state, and two loops taking turns would make
    # both paths pay for the switches.
    started = time.perf_counter()
    calls = runtime().run(_plain_run(litellm, model, steps))
    elapsed = time.perf_counter() - started
    assert calls == steps, calls
    return elapsed * 1000 / steps


def run(repeats: int) -> dict[str, Any]:
    logging.getLogger("runner").setLevel(logging.ERROR)
    ScriptedModel("bench-steps", _script)
    agent = Agent(
        name="bench-steps",
        model=MODEL,
        tools=[fetch],
        budget=Budget(max_steps=500),
    )
    # The plain loop calls the litellm the engine configured (runner/core/model.py),
    # with the scripted provider and its cost-map entry, so that both pay the
    # same for litellm itself.
    warm_up()
    import litellm

    install_provider(litellm)
    price_scripted(litellm, MODEL)
    with bench_database() as url:
        db = make_engine(url, pool_size=10)
        durable = durable_engine(PostgresStore(db))
        # Warm up: pools, prepared plans, litellm's first calls on each path.
        _per_step(durable, agent.name, 10)
        _plain_per_step(litellm, MODEL, 10)

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

        # Each round measures every length on both paths and the floor, so
        # that the machine's drift (it is shared) hits them all alike.
        samples: dict[str, list[float]] = {}
        for _ in range(repeats):
            for steps in LENGTHS:
                # The same number of steps at every length: 20 runs of 10 steps,
                # 4 of 50, 1 of 200; durable runs and plain loops alternate.
                for _ in range(max(LENGTHS) // steps):
                    samples.setdefault(f"durable_{steps}", []).append(
                        _per_step(durable, agent.name, steps)
                    )
                    samples.setdefault(f"plain_{steps}", []).append(
                        _plain_per_step(litellm, MODEL, steps)
                    )
            samples.setdefault("floor", []).extend(floor_once() for _ in range(100))
            samples.setdefault("floor_driver", []).extend(floor_driver_once() for _ in range(100))
        durable.close()
        db.dispose()

    median = {k: statistics.median(v) for k, v in samples.items()}
    overhead = {n: median[f"durable_{n}"] - median[f"plain_{n}"] for n in LENGTHS}
    floor_ms = median["floor"]
    return {
        "per_step_ms": {
            "durable": {n: round(median[f"durable_{n}"], 3) for n in LENGTHS},
            "plain": {n: round(median[f"plain_{n}"], 3) for n in LENGTHS},
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
