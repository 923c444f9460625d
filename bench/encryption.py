"""What encryption at rest costs (issue 53's budget): a durable step over
HTTP with and without a key ring, in one run, and the console's list of
1,000 runs with and without.

    python -m bench.encryption [--rounds 5] [--console-repeats 5]

- ``http``: rounds of two runs of ``STEPS`` steps each, one on a store
  without keys and one on a store whose payloads are sealed
  (``RUNWRIGHT_ENCRYPTION_KEYS``, store/sealing.py), the order alternating
  round by round; the model is the loopback server over HTTP through litellm
  (``bench.model_server``), each tool result about 1 KB. Per round, the
  sealed run's wall ms per step over the plain one's: the median of those
  ratios is the figure, its target at most 1.05.
- ``engine``: the same with the model stubbed (``bench.floors``' stub, no
  HTTP): the engine's own step, where the cipher's share is largest.
- ``console``: ``bench.console``'s pages (the list of 1,000 runs, a 500-step
  timeline, the inbox of 200) on a database written without keys and on one
  written with them; the target: the list within 1.1x.
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import time
import uuid
from typing import Any

from bench import console
from bench.common import bench_database, durable_engine, machine_speed, report
from bench.model_server import serving
from runner import Agent, Budget, tool
from runner.core.keyring import KeyRing, new_key
from store.db import make_engine
from store.postgres import PostgresStore

STEPS = 40
KB = "x" * 1000
RING = KeyRing.parse(f"bench:{new_key()}")


@tool
def fetch(n: int) -> str:
    """Return about a kilobyte."""
    return KB


def _run(engine: Any, agent: str) -> float:
    """Wall ms per step of one run of ``agent``."""
    run = engine.start(agent, {"steps": STEPS, "nonce": uuid.uuid4().hex, "note": KB})
    started = time.perf_counter()
    done = engine.execute(run.id)
    wall = time.perf_counter() - started
    assert done is not None and done.status.value == "completed", done
    return wall * 1000 / done.steps_used


def _paired(rounds: int, agent: str, url: str) -> dict[str, Any]:
    """Rounds of a plain run and a sealed one, alternating which goes first."""
    db = make_engine(url, pool_size=6)
    plain = durable_engine(PostgresStore(db))
    sealed = durable_engine(PostgresStore(db, cipher=RING))
    try:
        for engine in (plain, sealed):  # warm pools, plans, imports
            _run(engine, agent)
        walls: dict[str, list[float]] = {"plain": [], "sealed": []}
        ratios = []
        for n in range(rounds):
            order = (("plain", plain), ("sealed", sealed))
            measured = {name: _run(engine, agent) for name, engine in order[:: 1 if n % 2 else -1]}
            for name, ms in measured.items():
                walls[name].append(ms)
            ratios.append(measured["sealed"] / measured["plain"])
    finally:
        plain.close()
        sealed.close()
        db.dispose()
    return {
        "rounds": rounds,
        "steps": STEPS,
        "plain_ms_per_step": round(statistics.median(walls["plain"]), 3),
        "sealed_ms_per_step": round(statistics.median(walls["sealed"]), 3),
        "ratio_median": round(statistics.median(ratios), 4),
        "ratio_range": [round(min(ratios), 4), round(max(ratios), 4)],
    }


def run(rounds: int, console_repeats: int) -> dict[str, Any]:
    logging.getLogger("runner").setLevel(logging.ERROR)
    speed = machine_speed()
    name = f"enc-http-{uuid.uuid4().hex[:6]}"
    with serving(STEPS, "fetch") as base_url, bench_database() as url:
        Agent(
            name=name,
            model="openai/bench",
            tools=[fetch],
            model_settings={"api_base": base_url, "api_key": "sk-loopback", "timeout": 30},
            budget=Budget(max_steps=STEPS + 10),
        )
        http = _paired(rounds, name, url)
    from bench.floors import _stub_model
    from runner.core import model

    stub_name = f"enc-stub-{uuid.uuid4().hex[:6]}"
    complete = model.complete
    model.complete = _stub_model(STEPS)
    try:
        Agent(name=stub_name, model="openai/stub", tools=[fetch], budget=Budget(max_steps=STEPS))
        with bench_database() as url:
            stubbed = _paired(rounds, stub_name, url)
    finally:
        model.complete = complete
    lists: dict[str, list[float]] = {"plain": [], "sealed": []}
    for n in range(2):  # plain, sealed, sealed, plain
        for cipher_name in ("plain", "sealed")[:: 1 if n % 2 == 0 else -1]:
            pages = console.run(console_repeats, RING if cipher_name == "sealed" else None)
            lists[cipher_name].append(pages["runs_list_1000"]["median_s"])
    listing = {
        "plain_s": round(statistics.median(lists["plain"]), 4),
        "sealed_s": round(statistics.median(lists["sealed"]), 4),
    }
    listing["ratio"] = round(listing["sealed_s"] / listing["plain_s"], 3)
    return {
        "http": http,
        "engine": stubbed,
        "console_list_1000": listing,
        "machine_speed_ms": [speed, machine_speed()],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--console-repeats", type=int, default=5)
    args = parser.parse_args()
    result = run(args.rounds, args.console_repeats)
    ok = result["http"]["ratio_median"] <= 1.05 and result["console_list_1000"]["ratio"] <= 1.1
    report("encryption", result, ok)
    print(json.dumps({"meets_targets": ok}))


if __name__ == "__main__":
    main()
