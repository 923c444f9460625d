"""What a replay and an evaluation cost (issue 55), measured in one run:

    python -m bench.replay [--rounds 15] [--cases 40]

- ``replay``: rounds of one durable run of a three-step agent (a read-only
  tool, an effect, an answer; its model scripted, so that the figure is
  Runwright's own), then a ``--recorded`` replay of that run in the sandbox
  (runner/evals/replay.py); per round, the replay's wall time over the run's:
  the median of those ratios, and each side's median in ms. A replay starts
  an engine of its own on the sandbox schema, reads the recording, and
  journals its run like any run: what the ratio shows.
- ``eval``: an evaluation of ``--cases`` recorded runs, ``--recorded``, in
  this process (``workers=0``) and on two worker processes: cases a second
  each way (the workers' figure includes their start, a new Python
  importing the engine).
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid
from typing import Any

from bench.common import bench_database, durable_engine, machine_speed, report
from runner import Agent, effect, tool
from runner.evals.evaluation import evaluate
from runner.evals.recording import Case
from runner.evals.replay import replay
from runner.testing import ScriptedModel, call, text, tools
from store.db import make_engine
from store.postgres import PostgresStore

NAME = "bench-replay"


@tool
def look_up(order_id: str) -> dict[str, Any]:
    """Look an order up."""
    return {"order_id": order_id, "total": 30}


@effect
def refund(order_id: str, amount: int) -> dict[str, Any]:
    """Refund an order."""
    return {"refund_id": f"rf-{order_id}", "amount": amount}


MODEL = ScriptedModel(
    NAME,
    [
        tools(call("look_up", {"order_id": "A-1"})),
        tools(call("refund", {"order_id": "A-1", "amount": 30})),
        text("Refunded A-1."),
    ],
)
# Registered by main(): the worker processes import this module as
# bench.replay, and so may ``python -m bench.replay`` (as __main__ and again).
AGENT = Agent(name=NAME, model=MODEL.model, tools=[look_up, refund], register=False)


def _run(engine: Any) -> tuple[str, float]:
    run = engine.start(NAME, {"order": "A-1", "nonce": uuid.uuid4().hex})
    began = time.perf_counter()
    done = engine.execute(run.id)
    took = (time.perf_counter() - began) * 1000
    assert done is not None and done.status.value == "completed", done
    return run.id, took


def _replays(engine: Any, rounds: int) -> dict[str, Any]:
    _run(engine)  # warm imports, pools and plans
    replay(_run(engine)[0], engine=engine)
    runs, replays, ratios = [], [], []
    for _ in range(rounds):
        run_id, took = _run(engine)
        began = time.perf_counter()
        report_ = replay(run_id, engine=engine)
        replayed = (time.perf_counter() - began) * 1000
        assert report_.passed, report_.render()
        runs.append(took)
        replays.append(replayed)
        ratios.append(replayed / took)
    return {
        "run_ms": round(statistics.median(runs), 2),
        "replay_ms": round(statistics.median(replays), 2),
        "replay_over_run": round(statistics.median(ratios), 3),
        "ratio_range": [round(min(ratios), 3), round(max(ratios), 3)],
        "rounds": rounds,
    }


def _evals(engine: Any, cases: int) -> dict[str, Any]:
    data = [Case.of_run(engine, _run(engine)[0]).to_json() for _ in range(cases)]
    dataset = f"bench-{uuid.uuid4().hex[:8]}"
    engine.store.save_dataset(dataset, data)
    found: dict[str, Any] = {"cases": cases}
    for workers in (0, 2):
        began = time.perf_counter()
        done = evaluate(
            engine,
            dataset,
            agent="bench.replay:AGENT" if workers else AGENT,
            mode="recorded",
            workers=workers,
            scorers=["completed", "no_would_have_run"],
        )
        took = time.perf_counter() - began
        assert done.info.done == cases, done.info
        found[f"workers_{workers}_cases_per_s"] = round(cases / took, 1)
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--cases", type=int, default=40)
    args = parser.parse_args()
    from runner.core.agent import registry

    registry.add(AGENT, replace=True)
    ruler_before = machine_speed()
    with bench_database() as url:
        engine = durable_engine(PostgresStore(make_engine(url, pool_size=6)))
        try:
            result = {
                "replay": _replays(engine, args.rounds),
                "eval": _evals(engine, args.cases),
            }
        finally:
            engine.close()
    result["ruler_ms"] = [ruler_before, machine_speed()]
    report("replay", result, ok=True)


if __name__ == "__main__":
    main()
