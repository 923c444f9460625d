"""What the hot path's targets are up against: litellm alone, and Runwright
without litellm (issue 16).

    python -m bench.floors litellm [--runs 200] [--processes 2]   # litellm alone
    python -m bench.floors engine [--repeats 3] [--steps 200]   # no litellm (Engine.from_env)
    python -m bench.floors engine-bare            # the same, an engine built by hand
    python -m bench.floors engine-concurrent [--runs 250] [--repeats 3] [--processes 2]
                                             [--through-litellm]   # bursts of runs at once
    python -m bench.floors gc                     # a full collection's pause

- ``litellm``: ``runs`` coroutines on one process's runtime loop, each making
  5 model calls through ``runner.core.model.complete`` (litellm, the scripted
  provider, 1 s of model latency per call), with nothing else: no Postgres,
  Redis, Celery or engine. Its wall time against the ideal 5 s is the floor of
  ``bench.workers``' concurrency figure, and its CPU per call the floor of a
  step's CPU, for as long as every model call goes through litellm.
- ``engine``: a 200-step durable run (Postgres, Redis, one tool call and
  about 1 KB per step) with the model adapter replaced by a stub that returns
  its reply at once: Runwright's own wall and CPU per step, and its last 10
  steps against its first 10, litellm taken out. With ``--steps 1`` (and many
  ``--repeats``), what an execution costs beyond its steps: its claim, start
  point, settle and end, the step's own cost included once.
- ``engine-concurrent``: ``runs`` runs of 5 steps at once, 1 s of model
  latency, in bursts on one process (or ``--processes`` at once): the
  engine's wall against the ideal, its CPU per step and its threads',
  Postgres's CPU per step and the connections each burst opened, Celery and
  the broker taken out of ``bench.workers``' case, and litellm too unless
  ``--through-litellm`` (``--repeats`` bursts, at least 2).
- ``gc``: one full garbage collection in a process warmed as a worker, before
  and after freezing what it loaded (a worker does, ``tasks.app``): for that
  long every run of the worker stands still.

Each runs in a fresh process, warmed as a worker is (``model.warm_up``), its
loaded heap then frozen as a worker freezes it (``runner.celery.freeze_heap``).
``bench.hot_path`` prints both beside its targets.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import logging
import os
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Sequence
from typing import Any

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

STEPS_PER_RUN = 5
LATENCY = 1.0
ENGINE_STEPS = 200
PRICE = (1.5e-7, 6e-7)  # as bench.hot_path's model: litellm prices every call


def in_fresh_process(kind: str, *args: str) -> dict[str, Any]:
    """Run one floor in a new interpreter; its figures."""
    done = subprocess.run(
        [sys.executable, "-m", "bench.floors", kind, "--json", *args],
        capture_output=True,
        text=True,
        check=True,
        timeout=600,
    )
    figures: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return figures


def _at_once(processes: int, lead_seconds: float, kind: str, *args: str) -> list[dict[str, Any]]:
    """One floor in ``processes`` new interpreters that begin measuring at the
    same moment, ``lead_seconds`` from now (once each has warmed up); the
    figures of each."""
    start_at = str(time.time() + lead_seconds)
    command = [sys.executable, "-m", "bench.floors", kind, "--json", *args, "--start-at", start_at]
    procs = [subprocess.Popen(command, stdout=subprocess.PIPE, text=True) for _ in range(processes)]
    return [json.loads(p.communicate(timeout=900)[0].strip().splitlines()[-1]) for p in procs]


# ----------------------------------------------------------- litellm alone


def litellm_processes(runs: int, processes: int) -> dict[str, Any]:
    """:func:`litellm_alone` in ``processes`` fresh processes at once, ``runs``
    each: the floor of a machine's worker processes doing the same calls."""
    # Begun after every process has imported litellm and warmed up.
    figures = _at_once(processes, 25, "litellm", "--runs", str(runs))
    wall = max(f["wall_seconds"] for f in figures)
    ideal = STEPS_PER_RUN * LATENCY
    return {
        "processes": processes,
        "runs": runs * processes,
        "model_calls_per_run": STEPS_PER_RUN,
        "wall_seconds": wall,
        "ratio_to_ideal": round(wall / ideal, 3),
        "cpu_ms_per_call": round(statistics.mean(f["cpu_ms_per_call"] for f in figures), 3),
    }


def litellm_alone(runs: int, start_at: float | None = None) -> dict[str, Any]:
    from runner.celery import freeze_heap
    from runner.core import model
    from runner.core.runtime import runtime
    from runner.testing import Reply, Request, ScriptedModel, call, text, tools

    def script(request: Request) -> Reply:
        if request.step < STEPS_PER_RUN:
            return tools(call("lookup", {"q": f"step {request.step}"}), latency=LATENCY)
        return text("done", latency=LATENCY)

    scripted = ScriptedModel(f"floor-{uuid.uuid4().hex[:6]}", script, price=PRICE)
    schema = {
        "type": "function",
        "function": {
            "name": "lookup",
            "parameters": {"type": "object", "properties": {"q": {"type": "string"}}},
        },
    }

    async def one(n: int) -> None:
        messages: list[dict[str, Any]] = [{"role": "user", "content": f"run {n}"}]
        for _ in range(STEPS_PER_RUN):
            reply = await model.complete(scripted.model, messages, [schema], {})
            messages.append(reply.message)
            for tool_call in reply.message.get("tool_calls") or []:
                messages.append({"role": "tool", "tool_call_id": tool_call["id"], "content": "ok"})
        scripted.calls.clear()  # the transcript is the model's, not litellm's, work

    async def all_runs() -> tuple[float, float]:
        await one(-1)  # the scripted provider's first call loads a tokenizer
        if start_at is not None:  # with other processes, at one moment
            await asyncio.sleep(max(0.0, start_at - time.time()))
        wall, cpu = time.perf_counter(), time.process_time()
        await asyncio.gather(*(one(n) for n in range(runs)))
        return time.perf_counter() - wall, time.process_time() - cpu

    model.warm_up()
    freeze_heap()
    wall, cpu = runtime().run(all_runs(), timeout=600)
    ideal = STEPS_PER_RUN * LATENCY
    return {
        "runs": runs,
        "model_calls_per_run": STEPS_PER_RUN,
        "wall_seconds": round(wall, 2),
        "ratio_to_ideal": round(wall / ideal, 3),
        "cpu_ms_per_call": round(cpu * 1000 / (runs * STEPS_PER_RUN), 3),
    }


# ------------------------------------------------------- engine, no litellm


def _production_engine(url: str) -> Any:
    """``Engine.from_env()``, as a worker builds it: the settings from the
    environment (its defaults), the store on the process's shared pool, Redis
    leases, the observers the settings ask for (the log listener)."""
    from bench.common import settings
    from runner.core.engine.engine import Engine

    os.environ["RUNWRIGHT_DATABASE_URL"] = url
    os.environ["RUNWRIGHT_REDIS_URL"] = settings().redis_url or ""
    os.environ.setdefault("RUNWRIGHT_SECRET_KEY", "bench:" + "b" * 40)
    os.environ["RUNWRIGHT_AGENTS"] = ""
    return Engine.from_env(enqueue=None)


def _stub_model(steps: int, latency: float = 0.0) -> Any:
    """A stand-in for ``runner.core.model.complete``: a call of the ``fetch`` tool
    until the run has made ``steps`` model calls, then a text answer; each
    after ``latency`` seconds on the caller's loop, as a provider's answer
    takes."""
    from runner.core.model import ModelReply
    from store.models import Message, Usage

    numbers = itertools.count()

    async def stub(
        name: str, messages: Sequence[Message], schemas: Sequence[Any], _: Any, **__: Any
    ) -> ModelReply:
        if latency:
            await asyncio.sleep(latency)
        # The trigger, then an assistant message and a tool result per step:
        # the stub reads its step from the length (scanning the history for
        # assistant messages cost 0.05 ms a step, charged to the engine).
        step = (len(messages) + 1) // 2
        usage = Usage(input_tokens=10, output_tokens=5)
        if step < steps:
            arguments = json.dumps({"n": step})
            message: Message = {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": f"call_{next(numbers)}",
                        "type": "function",
                        "function": {"name": "fetch", "arguments": arguments},
                    }
                ],
            }
            return ModelReply(message, usage, "tool_calls", 1e-6)
        return ModelReply({"role": "assistant", "content": "done"}, usage, "stop", 1e-6)

    return stub


def engine_alone(
    repeats: int, production: bool = True, steps: int = ENGINE_STEPS
) -> dict[str, Any]:
    from bench.common import bench_database, durable_engine, machine_speed
    from runner import Agent, Budget, tool
    from runner.celery import freeze_heap
    from runner.core import model
    from store.db import make_engine
    from store.postgres import PostgresStore

    logging.getLogger("runner").setLevel(logging.ERROR)
    stamps: list[float] = []

    @tool
    def fetch(n: int) -> str:
        """Return about a kilobyte."""
        stamps.append(time.perf_counter())
        return "x" * 1000

    model.warm_up()
    freeze_heap()
    model.complete = _stub_model(steps)  # this process only
    name = f"floor-engine-{uuid.uuid4().hex[:6]}"
    Agent(name=name, model="openai/stub", tools=[fetch], budget=Budget(max_steps=steps))
    walls, cpus, flatness = [], [], []
    with bench_database() as url:
        db = make_engine(url, pool_size=10)
        engine = _production_engine(url) if production else durable_engine(PostgresStore(db))
        for n in range(repeats + 1):  # the first warms pools and prepared plans
            run = engine.start(name, {"n": n})
            stamps.clear()
            wall, cpu = time.perf_counter(), time.process_time()
            done = engine.execute(run.id)
            wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
            assert done is not None and done.steps_used == steps, done
            if n:
                walls.append(wall * 1000 / steps)
                cpus.append(cpu * 1000 / steps)
                gaps = [b - a for a, b in itertools.pairwise(stamps)]
                if len(gaps) >= 20:
                    flatness.append(statistics.median(gaps[-10:]) / statistics.median(gaps[:10]))
        engine.close()
        db.dispose()
    return {
        "steps": steps,
        "repeats": repeats,
        "engine": "Engine.from_env()" if production else "Engine(store, leases=...) by hand",
        "wall_ms_per_step": round(statistics.median(walls), 3),
        "cpu_ms_per_step": round(statistics.median(cpus), 3),
        "wall_ms_per_run": round(statistics.median(walls) * steps, 3),
        "cpu_ms_per_run": round(statistics.median(cpus) * steps, 3),
        "flatness_last10_vs_first10": round(statistics.median(flatness), 3) if flatness else None,
        "machine_speed_ms": machine_speed(),  # bench.common: the machine's own speed now
    }


# Seconds between the starts of engine-concurrent's bursts in several processes.
BURST_SPACING = 25.0


def engine_concurrent_processes(
    runs: int, bursts: int, processes: int, through_litellm: bool
) -> dict[str, Any]:
    """:func:`engine_concurrent` in ``processes`` fresh processes, ``runs``
    each, their bursts begun at the same moments: the shape of
    ``bench.workers``' 500-run case without Celery and the broker."""
    extra = ["--through-litellm"] if through_litellm else []
    figures = _at_once(
        processes, 40, "engine-concurrent", "--runs", str(runs), "--repeats", str(bursts), *extra
    )
    steps = runs * processes * STEPS_PER_RUN
    rounds = []
    for burst in range(len(figures[0]["bursts"])):
        each = [f["bursts"][burst] for f in figures]
        rounds.append(
            {
                "burst": burst + 1,
                "ratio_to_ideal": max(b["ratio_to_ideal"] for b in each),
                "cpu_ms_per_step": round(statistics.mean(b["cpu_ms_per_step"] for b in each), 3),
                # Each process read Postgres's whole CPU over the same seconds.
                "postgres_cpu_ms_per_step": round(
                    statistics.median(b["postgres_cpu_seconds"] for b in each) * 1000 / steps, 3
                ),
                "connections_opened": sum(b["connections_opened"] for b in each),
            }
        )
    return {**figures[0], "processes": processes, "runs": runs * processes, "bursts": rounds}


def engine_concurrent(
    runs: int, bursts: int, through_litellm: bool = False, start_at: float | None = None
) -> dict[str, Any]:
    """``runs`` runs of 5 steps at once, ``bursts`` times over, on one process
    (``Engine.from_env()``), each model call answered after 1 s: each run on a
    caller thread of its own, as Celery's threads call ``execute``. The model
    is stubbed out (``runner.core.model.complete`` replaced), or with
    ``through_litellm`` scripted behind litellm, as ``litellm`` calls it:
    Celery and the broker (and litellm) taken out of ``bench.workers``' case.
    With ``start_at``, burst k begins at ``start_at + k * BURST_SPACING``.

    Per burst: the wall time against the ideal 5 s, the process's CPU per
    step and its threads' (the event loop's, the I/O pool's, the executor
    litellm runs its sync half on), Postgres's CPU per step (where it runs on
    this machine: ``bench.common``) and the connections the store opened.
    The first burst opens the connections it needs; the later ones show
    whether a burst opens and closes them again."""
    import concurrent.futures
    import threading

    import sqlalchemy as sa

    from bench.common import bench_database, cpu_seconds, machine_speed, postgres_cpu_seconds
    from runner import Agent, Budget, tool
    from runner.celery import freeze_heap
    from runner.core import model

    logging.getLogger("runner").setLevel(logging.ERROR)

    @tool
    def fetch(n: int) -> str:
        """Return about a kilobyte."""
        return "x" * 1000

    def thread_cpu() -> dict[str, float]:
        """CPU seconds so far of this process's threads, by the name of their
        group (``runwright-io_3`` is ``runwright-io``)."""
        names = {thread.native_id: thread.name for thread in threading.enumerate()}
        groups: dict[str, float] = {}
        for tid in os.listdir("/proc/self/task"):
            try:
                seconds = cpu_seconds("self", tid)
            except OSError:  # the thread ended meanwhile
                continue
            name = names.get(int(tid), "other").rstrip("0123456789").rstrip("_")
            groups[name] = groups.get(name, 0.0) + seconds
        return groups

    model.warm_up()
    freeze_heap()
    name = f"floor-concurrent-{uuid.uuid4().hex[:6]}"
    model_name = "openai/stub"
    if through_litellm:
        from runner.testing import Reply, Request, ScriptedModel, call, text, tools

        def script(request: Request) -> Reply:
            if request.step < STEPS_PER_RUN:
                return tools(call("fetch", {"n": request.step}), latency=LATENCY)
            return text("done", latency=LATENCY)

        scripted = ScriptedModel(name, script, price=PRICE)
        model_name = scripted.model
    else:
        model.complete = _stub_model(STEPS_PER_RUN, LATENCY)  # this process only
    Agent(name=name, model=model_name, tools=[fetch], budget=Budget(max_steps=STEPS_PER_RUN))
    rounds = []
    with (
        bench_database() as url,
        concurrent.futures.ThreadPoolExecutor(runs) as callers,
    ):
        engine = _production_engine(url)
        opened: list[float] = []  # when the threads' pool opened a connection

        def count_connection(*_: Any) -> None:
            opened.append(time.monotonic())

        sa.event.listen(engine.store.engine, "connect", count_connection)
        for n in range(3):  # litellm's and the store's first calls
            engine.execute(engine.start(name, {"warm": n}).id)
        for burst in range(bursts):
            ids = [engine.start(name, {"n": n, "burst": burst}).id for n in range(runs)]
            if through_litellm:
                scripted.calls.clear()  # the transcript is the model's, not the engine's, work
            if start_at is not None:
                time.sleep(max(0.0, start_at + burst * BURST_SPACING - time.time()))
            connections = len(opened)
            threads, pg_cpu = thread_cpu(), postgres_cpu_seconds()
            wall, cpu = time.perf_counter(), time.process_time()
            done = list(callers.map(engine.execute, ids))
            wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
            pg_cpu = postgres_cpu_seconds() - pg_cpu
            after = thread_cpu()
            assert all(d is not None and d.steps_used == STEPS_PER_RUN for d in done), done
            steps = runs * STEPS_PER_RUN
            per_thread = {
                group: round((seconds - threads.get(group, 0.0)) * 1000 / steps, 3)
                for group, seconds in after.items()
                if group.startswith("runwright-")
            }
            rounds.append(
                {
                    "burst": burst + 1,
                    "ratio_to_ideal": round(wall / (STEPS_PER_RUN * LATENCY), 3),
                    "cpu_ms_per_step": round(cpu * 1000 / steps, 3),
                    "threads_cpu_ms_per_step": per_thread,
                    "postgres_cpu_ms_per_step": round(pg_cpu * 1000 / steps, 3),
                    "postgres_cpu_seconds": round(pg_cpu, 3),
                    "connections_opened": len(opened) - connections,
                }
            )
        engine.close()
    return {
        "runs": runs,
        "model": "scripted, through litellm" if through_litellm else "stubbed out",
        "steps_per_run": STEPS_PER_RUN,
        "model_latency_seconds": LATENCY,
        "bursts": rounds,
        "machine_speed_ms": machine_speed(),
    }


# ------------------------------------------------- a full collection's pause


def gc_pause(samples: int) -> dict[str, Any]:
    """How long one full garbage collection stops a warmed worker, before and
    after it freezes what it loaded (``runner.celery.freeze_heap``)."""
    import gc

    import tasks  # noqa: F401  (what a worker imports: Celery, the engine)
    from runner.core import model

    model.warm_up()

    def pauses() -> float:
        times = []
        for _ in range(samples):
            started = time.perf_counter()
            gc.collect()
            times.append((time.perf_counter() - started) * 1000)
        return statistics.median(times)

    before = pauses()
    gc.freeze()
    return {
        "objects_frozen": gc.get_freeze_count(),
        "full_collection_ms": round(before, 3),
        "full_collection_frozen_ms": round(pauses(), 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "kind", choices=["litellm", "engine", "engine-bare", "engine-concurrent", "gc"]
    )
    parser.add_argument("--runs", type=int, default=200, help="litellm, engine-concurrent")
    parser.add_argument(
        "--processes", type=int, default=1, help="litellm, engine-concurrent: this many at once"
    )
    parser.add_argument(
        "--through-litellm", action="store_true", help="engine-concurrent: the model behind litellm"
    )
    parser.add_argument("--start-at", type=float, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--steps", type=int, default=ENGINE_STEPS, help="engine: steps a run")
    parser.add_argument("--json", action="store_true", help="print one line of JSON")
    args = parser.parse_args()
    if args.kind == "litellm" and args.processes > 1:
        result = litellm_processes(args.runs, args.processes)
    elif args.kind == "litellm":
        result = litellm_alone(args.runs, args.start_at)
    elif args.kind == "engine-concurrent" and args.processes > 1:
        result = engine_concurrent_processes(
            args.runs, max(args.repeats, 2), args.processes, args.through_litellm
        )
    elif args.kind == "engine-concurrent":
        result = engine_concurrent(
            args.runs, max(args.repeats, 2), args.through_litellm, args.start_at
        )
    elif args.kind == "gc":
        result = gc_pause(max(args.repeats, 5))
    else:
        result = engine_alone(args.repeats, production=args.kind == "engine", steps=args.steps)
    print(json.dumps(result) if args.json else json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
