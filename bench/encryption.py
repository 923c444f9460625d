"""What encryption at rest costs (issue 53's budget): a durable step over
HTTP with and without a key ring, in one run, and the console's list of
1,000 runs with and without.

    python -m bench.encryption [--rounds 5] [--console-repeats 5]

- ``http``: rounds of two runs of ``STEPS`` steps each, one on a store
  without keys and one on a store whose payloads are sealed
  (``RUNWRIGHT_ENCRYPTION_KEYS``, store/sealing.py), the order alternating
  round by round; the model is the loopback server over HTTP through litellm
  (``bench.model_server``), each tool result about 1 KB. Per round, the
  sealed run's median step (tool call to tool call) over the plain one's:
  the median of those ratios is the figure, its target at most 1.05.
- ``engine``: the same with the model stubbed (``bench.floors``' stub, no
  HTTP): the engine's own step, where the cipher's share is largest.
- ``cipher``: the sealing of one step's values alone, in a loop (ms), and
  its share of the plain step over HTTP: what the paired rounds measure
  through the machine's noise.
- ``console``: the console's list of 1,000 runs written without keys and of
  1,000 written with them, in one database, the two pages in turn; the
  target: the median of the pairs' ratios within 1.1x.
"""

from __future__ import annotations

import argparse
import itertools
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


_stamps: list[float] = []


@tool
def fetch(n: int) -> str:
    """Return about a kilobyte."""
    _stamps.append(time.perf_counter())
    return KB


def _run(engine: Any, agent: str) -> float:
    """The median ms of a step of one run of ``agent``: from one tool call
    to the next (the model call, the step's journal write and commit, the
    tool), so that a pause of the machine in one step moves the figure less
    than a run's mean."""
    run = engine.start(agent, {"steps": STEPS, "nonce": uuid.uuid4().hex, "note": KB})
    _stamps.clear()
    done = engine.execute(run.id)
    assert done is not None and done.status.value == "completed", done
    return statistics.median(b - a for a, b in itertools.pairwise(_stamps)) * 1000


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
        "plain_step_ms": round(statistics.median(walls["plain"]), 3),
        "sealed_step_ms": round(statistics.median(walls["sealed"]), 3),
        "ratio_median": round(statistics.median(ratios), 4),
        "ratio_range": [round(min(ratios), 4), round(max(ratios), 4)],
    }


def _cipher_per_step(samples: int = 2000) -> float:
    """Ms of the sealing one step of these runs does, alone in a loop: the
    llm step's output (its message with the tool call), the tool step's
    input and output (about 1 KB), the two messages the commit appends. The
    figure the paired rounds measure through the machine's noise."""
    from store.sealing import Sealing

    sealing = Sealing(RING)
    call = {"id": "call_7", "type": "function", "function": {"name": "fetch", "arguments": "{}"}}
    message = {"role": "assistant", "content": None, "tool_calls": [call]}
    llm = {"kind": "llm", "index": 7, "tool_call_id": None, "input": None}
    llm["output"] = {"message": message, "finish_reason": "tool_calls"}
    tool_step = {"kind": "tool", "index": 7, "tool_call_id": "call_7", "input": {"n": 7}}
    tool_step["output"] = KB
    result = {"role": "tool", "tool_call_id": "call_7", "content": KB}
    started = time.perf_counter()
    for _ in range(samples):
        sealing.step(llm, "run")
        sealing.step(tool_step, "run")
        sealing.messages([message, result], "run", 14)
    return (time.perf_counter() - started) * 1000 / samples


def _console_list(repeats: int) -> dict[str, Any]:
    """The console's list of 1,000 runs (``bench.console``'s page), of runs
    written without keys through a console without keys, and of runs
    written with them through a console with them, in one database, the two
    pages asked for in turn ``repeats`` times: the medians and the median
    of the pairs' ratios."""
    from runner.testing import ScriptedModel, text

    agents = {}
    for kind in ("plain", "sealed"):
        agents[kind] = f"enc-list-{kind}-{uuid.uuid4().hex[:6]}"
        ScriptedModel(agents[kind], lambda request: text("nothing to do"))
        Agent(name=agents[kind], model=f"scripted/{agents[kind]}")
    with bench_database() as url:
        db = make_engine(url, pool_size=4)
        engines = {
            "plain": durable_engine(PostgresStore(db), enqueue=lambda run_id: None),
            "sealed": durable_engine(PostgresStore(db, cipher=RING), enqueue=lambda run_id: None),
        }
        try:
            for kind, engine in engines.items():
                for n in range(console.LIST_RUNS):
                    run = engine.start(agents[kind], {"order": f"C-{n}", "note": KB[:200]})
                    if n % 4 == 0:  # the rest stay queued: a list of several statuses
                        engine.execute(run.id)
            clients = {kind: console._client(engine) for kind, engine in engines.items()}
            times: dict[str, list[float]] = {"plain": [], "sealed": []}
            for n in range(repeats + 1):  # the first warms up
                for kind in ("plain", "sealed")[:: 1 if n % 2 else -1]:
                    path = f"/console/?agent={agents[kind]}&limit={console.LIST_RUNS}"
                    timed = console._timed(clients[kind], path, 1, agents[kind])
                    if n:
                        times[kind].append(timed["median_s"])
        finally:
            for engine in engines.values():
                engine.close()
            db.dispose()
    ratios = [s / p for p, s in zip(times["plain"], times["sealed"], strict=True)]
    return {
        "runs": console.LIST_RUNS,
        "repeats": repeats,
        "plain_s": round(statistics.median(times["plain"]), 4),
        "sealed_s": round(statistics.median(times["sealed"]), 4),
        "ratio": round(statistics.median(ratios), 3),
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
    listing = _console_list(console_repeats)
    cipher_ms = _cipher_per_step()
    return {
        "cipher_ms_per_step": round(cipher_ms, 4),
        "cipher_share_of_http_step": round(cipher_ms / http["plain_step_ms"], 4),
        "http": http,
        "engine": stubbed,
        "console_list_1000": listing,
        "machine_speed_ms": [speed, machine_speed()],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--console-repeats", type=int, default=15)
    args = parser.parse_args()
    result = run(args.rounds, args.console_repeats)
    ok = result["http"]["ratio_median"] <= 1.05 and result["console_list_1000"]["ratio"] <= 1.1
    report("encryption", result, ok)
    print(json.dumps({"meets_targets": ok}))


if __name__ == "__main__":
    main()
