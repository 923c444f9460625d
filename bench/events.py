"""The run-event feed: live latency to many subscribers, and what publishing costs.

    python -m bench.events [--repeats 3] [--layouts 1x1,5x100,20x25] [--pairs N]

(a) latency: this process executes runs of 40 tool steps (a zero-latency
    scripted model through litellm, ~1 KB per tool result, Postgres and Redis
    leases) while subscribers in other processes follow each run with
    ``engine.events(run_id)``. A layout ``PxR`` is P processes, each with its
    own Engine (one Redis subscription, one store read per wake-up) and R
    reader threads. The latency of step k: a reader's receipt of the ``step``
    event of tool row k minus the return of the raw store's ``commit_step``
    (the step commit) of step k. Every reader must get every stored event of the run once,
    in order. Target: p95 <= 50 ms with 500 subscribers.
(b) overhead: two engines on the same database, one as built and one whose
    feed publishes nothing, execute 50-step runs in pairs (in random order);
    the figure is the median of the pairs' per-step differences. No
    subscribers. Target: <= 0.3 ms per step.
"""

from __future__ import annotations

import argparse
import logging
import multiprocessing as mp
import os
import queue
import random
import signal
import statistics
import threading
import time
import uuid
from contextlib import closing, suppress
from dataclasses import dataclass, field
from multiprocessing.process import BaseProcess
from multiprocessing.queues import Queue
from typing import Any

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from bench.common import bench_database, report, settings
from bench.step_overhead import _per_step, _script, fetch
from runner import Agent, Budget, Engine
from runner.core.coordination.leases import Leases
from runner.core.settings import Settings
from runner.testing import Reply, Request, ScriptedModel
from store.db import make_engine
from store.events import EventType
from store.models import Ended, Fence, StepCommit
from store.postgres import PostgresStore

KEY = "bench:bench-secret-bench-secret-bench-secret"
AGENT = "bench-steps"
TOOL_STEPS = 40
OVERHEAD_STEPS = 50
LATENCY_TARGET_MS = 50.0
OVERHEAD_TARGET_MS = 0.3
TARGET_SUBSCRIBERS = 500
# Generous bounds on waiting for the other processes: reached only when
# something is broken.
SPAWN_SECONDS = 180.0
FOLLOW_SECONDS = 120.0


class _TimedStore(PostgresStore):
    """Postgres, noting when each step commit with tool rows committed (this is the
    store the engine wraps: its feed publishes after this returns)."""

    committed: dict[int, float]

    def commit_step(self, fence: Fence, commit: StepCommit) -> Ended | None:
        settled = super().commit_step(fence, commit)
        if commit.tool_steps:
            self.committed[commit.step_index] = time.time()
        return settled


# ------------------------------------------------------------ subscribers


@dataclass
class _Received:
    """What one reader got of one run."""

    ids: list[int] = field(default_factory=list)
    tool_at: dict[int, list[float]] = field(default_factory=dict)  # step index -> receipts
    error: str | None = None


def _subscriber(
    url: str, redis_url: str, readers: int, inbox: Queue[Any], outbox: Queue[Any]
) -> None:
    """A subscriber process: for each run id it is sent, ``readers`` threads
    follow the run until it settles; then it sends back what each got."""
    logging.getLogger("runner").setLevel(logging.ERROR)
    # One connection (and one overflow) per process: the live reads are one
    # per wake-up, and the server's connections are shared with others.
    db = make_engine(url, pool_size=1)
    engine = Engine(
        PostgresStore(db), leases=Leases.from_url(redis_url), settings=Settings(secret_key=KEY)
    )
    pid = os.getpid()
    try:
        outbox.put(("up", pid, None))
        while (run_id := _next(inbox)) is not None:
            cpu = time.process_time()
            got = _follow(engine, run_id, readers, outbox)
            cpu = time.process_time() - cpu
            outbox.put(("done", pid, (cpu, [(r.ids, r.tool_at, r.error) for r in got])))
    except KeyboardInterrupt:
        pass
    finally:
        engine.close()
        db.dispose()


def _orphaned() -> bool:
    parent = mp.parent_process()
    return parent is not None and not parent.is_alive()


def _next(inbox: Queue[Any]) -> str | None:
    """The next run to follow; None: stop (told to, or the bench is gone)."""
    while not _orphaned():
        with suppress(queue.Empty):
            item: str | None = inbox.get(timeout=1.0)
            return item
    return None


def _follow(engine: Engine, run_id: str, readers: int, outbox: Queue[Any]) -> list[_Received]:
    got = [_Received() for _ in range(readers)]
    lock = threading.Lock()
    opened = [0]

    def signal_open() -> None:
        with lock:
            opened[0] += 1
            if opened[0] == readers:
                outbox.put(("ready", os.getpid(), None))

    def read(received: _Received) -> None:
        announced = False
        try:
            with engine.events(run_id, timeout=FOLLOW_SECONDS).reader() as reader:
                signal_open()  # subscribed, and the replay is read
                announced = True
                while not reader.ended:
                    batch = reader.read(1.0)
                    now = time.time()
                    for event in batch:
                        if event.id is None:
                            continue
                        received.ids.append(event.id)
                        if event.type is EventType.STEP and event.data["kind"] == "tool":
                            received.tool_at.setdefault(int(event.data["index"]), []).append(now)
        except Exception as exc:
            received.error = repr(exc)
            if not announced:
                signal_open()  # the parent must not wait for a reader that failed

    threads = [threading.Thread(target=read, args=(r,), daemon=True) for r in got]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + FOLLOW_SECONDS + 10
    for thread in threads:
        while thread.is_alive() and time.monotonic() < deadline:
            thread.join(1.0)
            if _orphaned():
                os._exit(1)  # the run will not settle: nobody executes it
    return got


class _Subscribers:
    """P subscriber processes of R readers each, all ended on exit, whatever happened."""

    def __init__(self, url: str, redis_url: str, processes: int, readers: int) -> None:
        self.args = (url, redis_url, readers)
        self.count = processes
        self.context = mp.get_context("spawn")
        self.outbox: Queue[Any] = self.context.Queue()
        self.inboxes: list[Queue[Any]] = []
        self.processes: list[BaseProcess] = []

    def __enter__(self) -> _Subscribers:
        try:
            for _ in range(self.count):
                inbox: Queue[Any] = self.context.Queue()
                process = self.context.Process(
                    target=_subscriber, args=(*self.args, inbox, self.outbox), daemon=True
                )
                process.start()
                self.inboxes.append(inbox)
                self.processes.append(process)
            self.collect("up", SPAWN_SECONDS)
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def follow(self, run_id: str) -> None:
        """Every reader of every process follows ``run_id``, on return."""
        for inbox in self.inboxes:
            inbox.put(run_id)
        self.collect("ready", FOLLOW_SECONDS)

    def collect(self, kind: str, timeout: float) -> list[Any]:
        """One message of ``kind`` from every process."""
        deadline = time.monotonic() + timeout
        payloads: list[Any] = []
        while len(payloads) < self.count:
            try:
                got, _pid, payload = self.outbox.get(timeout=0.5)
            except queue.Empty:
                dead = [p.exitcode for p in self.processes if p.exitcode is not None]
                if dead:
                    raise RuntimeError(f"subscriber processes exited: {dead}") from None
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{len(payloads)}/{self.count} subscribers {kind}") from None
                continue
            assert got == kind, (got, kind)
            payloads.append(payload)
        return payloads

    def close(self) -> None:
        for inbox in self.inboxes:
            with suppress(Exception):
                inbox.put(None)
        deadline = time.monotonic() + 10
        for process in self.processes:
            process.join(max(0.0, deadline - time.monotonic()))
        for process in self.processes:
            if process.is_alive():
                process.terminate()
        for process in self.processes:
            process.join(5)
            if process.is_alive():
                process.kill()
                process.join()


# ------------------------------------------------------------ (a) latency


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def _check(
    received: list[_Received], expected: list[int], committed: dict[int, float]
) -> tuple[list[float], list[str]]:
    """Latencies (ms) of every tool step each reader got, and what went wrong."""
    latencies: list[float] = []
    problems: list[str] = []
    for n, got in enumerate(received):
        if got.error is not None:
            problems.append(f"reader {n}: {got.error}")
        elif got.ids != expected:
            missing = len(set(expected) - set(got.ids))
            twice = len(got.ids) - len(set(got.ids))
            problems.append(
                f"reader {n}: {len(got.ids)} events of {len(expected)} "
                f"({missing} missing, {twice} twice, in order: {got.ids == sorted(got.ids)})"
            )
        for index, at in committed.items():
            receipts = got.tool_at.get(index, [])
            if len(receipts) != 1:
                problems.append(f"reader {n}: step {index} received {len(receipts)} times")
            latencies.extend((r - at) * 1000 for r in receipts)
    return latencies, problems


def _engine(store: PostgresStore, redis_url: str) -> closing[Engine]:
    settings = Settings(lease_ttl_seconds=30, secret_key=KEY)
    return closing(Engine(store, leases=Leases.from_url(redis_url), settings=settings))


def _execute(engine: Engine, run_id: str) -> float:
    """Execute the run; ms per step."""
    started = time.perf_counter()
    done = engine.execute(run_id)
    elapsed = time.perf_counter() - started
    assert done is not None and done.status.value == "completed", done
    return elapsed * 1000 / done.steps_used


def latency(url: str, redis_url: str, layout: tuple[int, int], repeats: int) -> dict[str, Any]:
    processes, readers = layout
    db = make_engine(url, pool_size=4)
    store = _TimedStore(db)
    store.committed = {}
    latencies: list[float] = []
    problems: list[str] = []
    received = expected_total = 0
    per_step: list[float] = []
    cpu: list[float] = []
    try:
        with _engine(store, redis_url) as engine, _Subscribers(url, redis_url, *layout) as subs:
            for n in range(repeats + 1):  # the first run warms up and is not counted
                run = engine.start(AGENT, {"steps": TOOL_STEPS + 1, "nonce": uuid.uuid4().hex})
                subs.follow(run.id)
                store.committed.clear()
                ms_per_step = _execute(engine, run.id)
                done = subs.collect("done", FOLLOW_SECONDS)
                got = [_Received(*r) for _, readers_got in done for r in readers_got]
                expected = [e.id for e in engine.store.events(run.id) if e.id is not None]
                if len(store.committed) != TOOL_STEPS:
                    problems.append(f"{len(store.committed)} tool steps committed")
                run_latencies, run_problems = _check(got, expected, dict(store.committed))
                problems += run_problems  # the warm-up run must deliver too
                if n == 0:
                    continue
                latencies += run_latencies
                per_step.append(ms_per_step)
                cpu.append(sum(seconds for seconds, _ in done) * 1000 / (TOOL_STEPS + 1))
                received += sum(len(r.ids) for r in got)
                expected_total += len(expected) * len(got)
    finally:
        db.dispose()
    figure = {q: round(percentile(latencies, q), 2) if latencies else None for q in (0.5, 0.95)}
    return {
        "layout": f"{processes} processes x {readers} readers",
        "subscribers": processes * readers,
        "redis_subscriptions": processes,
        "runs": repeats,
        "samples": len(latencies),
        "p50_ms": figure[0.5],
        "p95_ms": figure[0.95],
        "max_ms": round(max(latencies), 2) if latencies else None,
        "events_received": received,
        "events_expected": expected_total,
        "every_event_once": not problems,
        "problems": problems[:10] + [f"... {len(problems) - 10} more"] * (len(problems) > 10),
        # The run's pace, and what following it cost the subscribers (all
        # their processes, in CPU time): near 2 x ms_per_step, the machine's
        # two cores are busy, and the latency is mostly queueing.
        "ms_per_step": round(statistics.median(per_step), 2) if per_step else None,
        "subscriber_cpu_ms_per_step": round(statistics.median(cpu), 2) if cpu else None,
    }


# ------------------------------------------------------------ (b) overhead


def overhead(url: str, redis_url: str, pairs: int) -> dict[str, Any]:
    db = make_engine(url, pool_size=10)
    try:
        with (
            _engine(PostgresStore(db), redis_url) as on,
            _engine(PostgresStore(db), redis_url) as off,
        ):
            # Bench machinery only: this engine's feed publishes nothing.
            off.deps.feed.wake = lambda run_id: None  # type: ignore[method-assign]
            off.deps.feed.token = lambda run_id, delta: None  # type: ignore[method-assign]
            engines = {"publishing": on, "silent": off}
            for _ in range(2):  # warm up: pools, prepared plans
                for engine in engines.values():
                    _per_step(engine, AGENT, OVERHEAD_STEPS)
            samples: dict[str, list[float]] = {"publishing": [], "silent": []}
            differences: list[float] = []
            order = random.Random(7)
            for _ in range(pairs):
                # A pair in random order: its difference cancels the machine's
                # drift, the order any warm-cache bias.
                pair = {}
                for name in order.sample(sorted(engines), 2):
                    pair[name] = _per_step(engines[name], AGENT, OVERHEAD_STEPS)
                    samples[name].append(pair[name])
                differences.append(pair["publishing"] - pair["silent"])
            wakes, wake_ms = _wake_parts(on)
    finally:
        db.dispose()
    median = {k: statistics.median(v) for k, v in samples.items()}
    extra = statistics.median(differences)
    return {
        "steps_per_run": OVERHEAD_STEPS,
        "pairs": pairs,
        "per_step_ms": {k: round(v, 3) for k, v in median.items()},
        "publishing_ms_per_step": round(extra, 3),
        "publishing_vs_silent": round(median["publishing"] / median["silent"], 3),
        # The same cost from its parts, which the machine's drift blurs
        # less: wake-ups per step x the median cost of one.
        "wakes_per_step": round(wakes, 2),
        "wake_ms": round(wake_ms, 4),
        "wakes_ms_per_step": round(wakes * wake_ms, 3),
        "target": f"publishing <= {OVERHEAD_TARGET_MS} ms per step",
    }


def _wake_parts(engine: Engine) -> tuple[float, float]:
    """Wake-ups per step of a run, and the median cost (ms) of one wake-up
    on a run nobody follows."""
    feed, calls = engine.deps.feed, list[str]()
    publish = feed.wake

    def counted(run_id: str) -> None:
        calls.append(run_id)
        publish(run_id)

    feed.wake = counted  # type: ignore[method-assign]
    try:
        _per_step(engine, AGENT, OVERHEAD_STEPS)
    finally:
        del feed.wake  # the class's again
    times: list[float] = []
    run_id = uuid.uuid4().hex
    for _ in range(2000):
        started = time.perf_counter()
        feed.wake(run_id)
        times.append((time.perf_counter() - started) * 1000)
    return len(calls) / OVERHEAD_STEPS, statistics.median(times)


# ------------------------------------------------------------ the whole


def run(
    repeats: int, layouts: list[tuple[int, int]], pairs: int, model_ms: float = 0.0
) -> dict[str, Any]:
    logging.getLogger("runner").setLevel(logging.ERROR)
    pace = [0.0]  # seconds per model call; only (a) may set it

    def script(request: Request) -> Reply:
        if pace[0]:
            time.sleep(pace[0])
        return _script(request)

    ScriptedModel(AGENT, script)
    Agent(name=AGENT, model=f"scripted/{AGENT}", tools=[fetch], budget=Budget(max_steps=500))
    redis_url = settings().redis_url
    assert redis_url is not None
    with bench_database() as url:
        warm_db = make_engine(url, pool_size=2)
        with _engine(PostgresStore(warm_db), redis_url) as warm:
            _per_step(warm, AGENT, 10)  # litellm's import, outside every figure
        warm_db.dispose()
        pace[0] = model_ms / 1000
        rows = [latency(url, redis_url, layout, repeats) for layout in layouts]
        pace[0] = 0.0
        cost = overhead(url, redis_url, pairs) if pairs else None
    return {
        "latency": rows,
        "tool_steps_per_run": TOOL_STEPS,
        "model_ms": model_ms,
        "overhead": cost,
        "targets": {
            f"p95_ms_at_{TARGET_SUBSCRIBERS}_subscribers": LATENCY_TARGET_MS,
            "publishing_ms_per_step": OVERHEAD_TARGET_MS,
        },
    }


def meets_targets(result: dict[str, Any]) -> bool:
    rows = result["latency"]
    delivered = all(row["every_event_once"] for row in rows)
    fast = all(
        row["p95_ms"] is not None and row["p95_ms"] <= LATENCY_TARGET_MS
        for row in rows
        if row["subscribers"] >= TARGET_SUBSCRIBERS
    )
    cost = result["overhead"]
    cheap = cost is None or cost["publishing_ms_per_step"] <= OVERHEAD_TARGET_MS
    return delivered and fast and cheap


def _summary(result: dict[str, Any]) -> str:
    lines = [
        f"live latency, step commit -> reader ({TOOL_STEPS} tool steps a run, "
        f"model {result['model_ms']:g} ms a step):"
    ]
    for row in result["latency"]:
        failed = "" if row["every_event_once"] else " FAILED: " + "; ".join(row["problems"][:3])
        lines += [
            f"  {row['layout']:>26}: p50 {row['p50_ms']} ms, p95 {row['p95_ms']} ms, "
            f"max {row['max_ms']} ms; events {row['events_received']}/{row['events_expected']}"
            + failed,
            f"  {'':>26}  {row['ms_per_step']} ms a step; subscribers' CPU "
            f"{row['subscriber_cpu_ms_per_step']} ms a step",
        ]
    if (cost := result["overhead"]) is not None:
        lines.append(
            f"publishing: {cost['publishing_ms_per_step']} ms a step "
            f"({cost['per_step_ms']['publishing']} vs {cost['per_step_ms']['silent']} ms, "
            f"x{cost['publishing_vs_silent']}); from its parts: {cost['wakes_per_step']} "
            f"wake-ups x {cost['wake_ms']} ms = {cost['wakes_ms_per_step']} ms"
        )
    return "\n".join(lines)


def _layout(text: str) -> tuple[int, int]:
    processes, _, readers = text.partition("x")
    return int(processes), int(readers)


def _stop(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)  # unwinds: subscribers end, the database is dropped


def main() -> None:
    signal.signal(signal.SIGTERM, _stop)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3, help="runs followed per layout")
    parser.add_argument(
        "--layouts", default="1x1,5x100,20x25", help="PROCESSESxREADERS,... ('none': skip (a))"
    )
    parser.add_argument("--pairs", type=int, help="pairs in (b) (default 8 x repeats; 0: skip)")
    parser.add_argument("--model-ms", type=float, default=0.0, help="model latency a step in (a)")
    args = parser.parse_args()
    layouts = [] if args.layouts == "none" else [_layout(t) for t in args.layouts.split(",")]
    pairs = 8 * args.repeats if args.pairs is None else args.pairs
    result = run(args.repeats, layouts, pairs, args.model_ms)
    print(_summary(result))
    # A paced run is a figure of its own: it does not replace the standard one.
    report(
        f"events_model_{args.model_ms:g}ms" if args.model_ms else "events",
        result,
        meets_targets(result),
    )


if __name__ == "__main__":
    main()
