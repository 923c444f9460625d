"""A chaos soak with real workers: faults at the workers, the broker, Redis
and Postgres while runs keep starting.

    python -m bench.soak [--minutes 10] [--rate 26] [--seed 7]   (make soak)

It starts its own Redis (the leases), its own RabbitMQ node as the broker (the
Redis broker when rabbitmq-server is not installed), a fresh database on
``RUNWRIGHT_DATABASE_URL`` behind a TCP proxy of its own (dropped at the end),
two ``celery worker`` processes of 16 threads and one beat (lease TTL 10 s,
tick 2 s). For ``--minutes`` it starts ``--rate`` runs a minute of 3 to 8
steps, a fifth of them waiting for an approval that it decides, and every
35 s it does one of: SIGKILL the busiest worker (and start a replacement);
SIGSTOP it past its lease, until its runs are taken over (at most 30 s);
restart its Redis (down 8 s); cut Postgres off (5 s); restart the broker.

At the end it checks: every run completed; every effect ran once; no run's
steps have a gap or a duplicate; every tool result answers a call of its step
and every call is answered; every approval was decided once; every zombie
whose run was taken over while it was stopped was fenced (its execution
stopped with LeaseLostError); no worker logged "raised unexpected"; no run
waited more than 15 s for its first execution, counted from its start, even
one started while the broker was down (its send fails, and the first tick
once the broker is back sends it) or one the broker had pushed to the stopped
worker (the broker takes it back when the AMQP heartbeat, 5 s here, finds that
worker silent). It prints p50/p95 of SIGKILL-to-next-step and of the first-execution wait, writes
bench/results/soak.json and exits 1 if an invariant failed.
"""

from __future__ import annotations

import argparse
import collections
import itertools
import os
import random
import signal
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import sqlalchemy as sa
from sqlalchemy.engine import make_url

import tests.agents_soak  # noqa: F401  (the agent the workers run)
from bench.common import bench_database, report
from bench.workers import percentile
from runner import Engine
from runner.core.errors import RunwrightError
from runner.core.settings import Settings
from runner.core.steps.history import ENGINE_ROLES
from store.local import LocalRedis, free_port
from store.models import Message, RunStatus
from tests.agents import read_effect_log
from tests.e2e.cluster import Cluster, Proc, wait_until
from tests.e2e.test_faults import assert_no_completed_step_repeated, owner_pid
from tests.rabbitmq import RabbitNode, rabbitmq_missing
from tests.tcpproxy import TcpProxy

TTL, TICK, REENQUEUE, HEARTBEAT = 10.0, 2.0, 10.0, 5.0
THREADS = 16
FIRST_EXECUTION_BOUND = 15.0
FAULT_EVERY = 35.0
# Each kind in turn, so that a short soak still meets most of them.
FAULTS = ["kill", "redis", "postgres", "kill", "stop", "broker", "kill", "kill"]
REDIS_DOWN, POSTGRES_CUT = 8.0, 5.0
STOPPED = 3 * TTL


@dataclass
class Fault:
    kind: str
    at: float  # epoch seconds
    seconds: float = 0.0
    pid: int | None = None
    # The runs the victim was executing, and their claim epochs then.
    victims: dict[str, int] = field(default_factory=dict)
    # Those another worker took over while the victim was stopped.
    taken: list[str] = field(default_factory=list)


@dataclass
class Soak:
    cluster: Cluster
    leases: LocalRedis
    proxy: TcpProxy
    node: RabbitNode | None
    minutes: float
    rate: float
    rng: random.Random
    kinds: list[str]
    workers: list[Proc] = field(default_factory=list)  # alive
    every_worker: list[Proc] = field(default_factory=list)
    runs: dict[str, bool] = field(default_factory=dict)  # run id -> waits for an approval
    faults: list[Fault] = field(default_factory=list)
    broker_down: list[tuple[float, float]] = field(default_factory=list)
    stopped: list[tuple[Proc, float, float]] = field(default_factory=list)
    decided: collections.Counter[str] = field(default_factory=collections.Counter)
    problems: list[str] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _named: int = 0

    # ---------------------------------------------------------------- processes

    def add_worker(self) -> Proc:
        self._named += 1
        worker = self.cluster.worker(f"w{self._named}", concurrency=THREADS)
        self.workers.append(worker)
        self.every_worker.append(worker)
        return worker

    def busiest(self, engine: Engine) -> tuple[Proc, dict[str, int]]:
        """The live worker executing the most runs, and those runs' epochs."""
        running = engine.list_runs(status=RunStatus.RUNNING, limit=500)
        by_pid: dict[int, dict[str, int]] = collections.defaultdict(dict)
        for run in running:
            if run.claim is not None:
                by_pid[owner_pid(run)][run.id] = run.claim.epoch
        victim = max(self.workers, key=lambda w: len(by_pid.get(w.pid, {})))
        return victim, by_pid.get(victim.pid, {})

    # ---------------------------------------------------------------- load

    def start_runs(self) -> None:
        engine = self.cluster.engine()
        interval = 60.0 / self.rate
        n = 0
        while not self._stop.wait(interval):
            steps = self.rng.randint(3, 8)
            approve_at = self.rng.randint(1, steps - 1) if self.rng.random() < 0.2 else None
            payload = {
                "n": n,
                "steps": steps,
                "approve_at": approve_at,
                "latency": round(self.rng.uniform(0.3, 0.8), 2),
            }
            try:
                run = engine.start("soak", payload)
            except RunwrightError as exc:
                self.problems.append(f"start_run failed: {exc}")
                continue
            with self._lock:
                self.runs[run.id] = approve_at is not None
            n += 1
        engine.close()

    def decide_approvals(self) -> None:
        engine = self.cluster.engine()
        while not self._stop.wait(0.5):
            try:
                self.decide_waiting(engine)
            except RunwrightError as exc:  # its own database went away: say so
                self.problems.append(f"deciding approvals: {exc}")
        engine.close()

    def decide_waiting(self, engine: Engine) -> None:
        for run in engine.list_runs(status=RunStatus.WAITING, limit=500):
            if run.waiting is None or self.decided[run.waiting.approval_id]:
                continue
            try:
                engine.decide(run.waiting.approval_id, True, "soak", trusted=True, by="soak")
            except RunwrightError as exc:
                self.problems.append(f"approval {run.waiting.approval_id}: {exc}")
            self.decided[run.waiting.approval_id] += 1

    # ---------------------------------------------------------------- faults

    def fault(self, kind: str, engine: Engine) -> Fault:
        began = time.time()
        if kind == "kill":
            victim, runs = self.busiest(engine)
            done = Fault(kind, time.time(), pid=victim.pid, victims=runs)
            victim.signal(signal.SIGKILL)
            victim.wait(10)
            self.workers.remove(victim)
            self.add_worker()
            return done
        if kind == "stop":
            victim, runs = self.busiest(engine)
            done = Fault(kind, time.time(), pid=victim.pid, victims=runs)
            victim.signal(signal.SIGSTOP)
            # Past its lease, until another worker has taken over its runs
            # (at most STOPPED): a zombie, whose writes must be refused.
            time.sleep(TTL)
            deadline = time.monotonic() + STOPPED - TTL
            while time.monotonic() < deadline and not all(taken_over(engine, runs)):
                time.sleep(0.2)
            done.taken = [r for r, ok in zip(runs, taken_over(engine, runs), strict=True) if ok]
            victim.signal(signal.SIGCONT)
            done.seconds = time.time() - began
            self.stopped.append((victim, began, time.time()))
            return done
        connections = self.connections()
        if kind == "redis":
            self.leases.kill()
            time.sleep(REDIS_DOWN)
            self.leases.start()
            if self.node is None:  # the Redis broker went down too
                self.broker_down.append((began, self.reconnected(connections, began)))
            return Fault(kind, began, time.time() - began)
        if kind == "postgres":
            self.proxy.cut()
            time.sleep(POSTGRES_CUT)
            self.proxy.restore()
            return Fault(kind, began, time.time() - began)
        assert kind == "broker"
        if self.node is None:
            return self.fault("redis", engine)
        self.node.restart()
        self.broker_down.append((began, self.reconnected(connections, began)))
        return Fault(kind, began, time.time() - began)

    def connections(self) -> dict[str, int]:
        """How often each live worker has connected to the broker so far."""
        return {w.name: w.log().count("Connected to ") for w in self.workers}

    def reconnected(self, before: dict[str, int], since: float) -> float:
        """When every live worker had its broker connection back (they retry
        with a growing backoff: 2 s, 4 s, 6 s, ...)."""
        try:
            wait_until(
                lambda: all(w.log().count("Connected to ") > before[w.name] for w in self.workers),
                60,
                "the workers to reconnect",
                0.2,
            )
        except AssertionError:
            self.problems.append(f"broker restart at {since:.0f}: a worker did not reconnect")
        return time.time()

    # ---------------------------------------------------------------- the soak

    def run(self) -> None:
        engine = self.cluster.engine()
        self.add_worker()
        self.add_worker()
        self.cluster.beat()
        threads = [
            threading.Thread(target=self.start_runs, name="runs", daemon=True),
            threading.Thread(target=self.decide_approvals, name="approvals", daemon=True),
        ]
        for thread in threads:
            thread.start()
        began = time.monotonic()
        end = began + self.minutes * 60
        kinds = itertools.cycle(self.kinds)
        next_fault = began + 30.0
        while time.monotonic() < end:
            if time.monotonic() >= next_fault and end - time.monotonic() > 30:
                kind = next(kinds)
                done = self.fault(kind, engine)
                self.faults.append(done)
                print(f"  {time.monotonic() - began:5.0f} s  {kind:8} {len(done.victims)} run(s)")
                next_fault += FAULT_EVERY
            time.sleep(0.2)
        self._stop.set()
        for thread in threads:
            thread.join(30)
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and not self.all_settled(engine):
            self.decide_waiting(engine)
            time.sleep(1.0)
        engine.close()

    def all_settled(self, engine: Engine) -> bool:
        return all(engine.get_run(r).ended for r in list(self.runs))


def taken_over(engine: Engine, epochs: dict[str, int]) -> Iterator[bool]:
    """For each run, whether an execution of a later epoch has claimed it
    (settled since or not)."""
    with engine.store.engine.connect() as conn:  # type: ignore[attr-defined]
        for run_id, epoch in epochs.items():
            now = conn.execute(
                sa.text("SELECT claim_epoch FROM runs WHERE id = CAST(:id AS uuid)"), {"id": run_id}
            ).scalar()
            yield now is not None and now > epoch


def _ts(value: datetime) -> float:
    return value.timestamp()


def unanswered(messages: list[Message]) -> list[str]:
    """Tool calls without exactly one result right after their message, and
    results that answer no call of theirs."""
    conversation = [m for m in messages if m.get("role") not in ENGINE_ROLES]
    wrong = []
    for i, message in enumerate(conversation):
        if message.get("role") != "assistant" or not message.get("tool_calls"):
            continue
        calls = [str(c["id"]) for c in message["tool_calls"]]
        results = []
        for after in conversation[i + 1 :]:
            if after.get("role") != "tool":
                break
            results.append(str(after.get("tool_call_id")))
        if sorted(results) != sorted(calls):
            wrong.append(f"calls {calls} answered by {results}")
    return wrong


def check(soak: Soak, engine: Engine) -> tuple[dict[str, Any], list[str]]:
    """The invariants, and the figures."""
    problems = list(soak.problems)
    runs = {run_id: engine.get_run(run_id) for run_id in soak.runs}
    not_completed = [r for r, run in runs.items() if run.status is not RunStatus.COMPLETED]
    if not_completed:
        statuses = collections.Counter(runs[r].status.value for r in not_completed)
        problems.append(f"{len(not_completed)} run(s) did not complete: {dict(statuses)}")
    # Steps: no gap, no duplicate, no effect run twice; tool results answer calls.
    for run_id in runs:
        try:
            assert_no_completed_step_repeated(soak.cluster, engine, run_id, 0)
        except Exception as exc:  # an assertion, or a run with no checkpoint at all
            problems.append(f"run {run_id}: steps or effects: {exc}")
        checkpoint = engine.checkpoint(run_id)
        for wrong in unanswered(checkpoint.messages if checkpoint else []):
            problems.append(f"run {run_id}: {wrong}")
    effect_lines = [
        e for e in read_effect_log(str(soak.cluster.workdir / "effects.jsonl")) if e.get("key")
    ]
    ran = collections.Counter(e["key"] for e in effect_lines)
    twice = [key for key, count in ran.items() if count > 1]
    if twice:
        problems.append(f"{len(twice)} effect(s) ran more than once: {twice[:5]}")
    with engine.store.engine.connect() as conn:  # type: ignore[attr-defined]
        completed = set(
            conn.execute(sa.text("SELECT key FROM effects WHERE status = 'completed'")).scalars()
        )
    if completed - set(ran):
        problems.append(f"{len(completed - set(ran))} completed effect(s) never ran")
    # Approvals: one for each run that asked, decided once, approved.
    approvals = 0
    for run_id, asks in soak.runs.items():
        decided = engine.approvals(run_id)
        approvals += len(decided)
        if len(decided) != int(asks):
            problems.append(f"run {run_id}: {len(decided)} approval(s), expected {int(asks)}")
        for approval in decided:
            if approval.decided_at is None or soak.decided[approval.approval_id] != 1:
                times = soak.decided[approval.approval_id]
                problems.append(f"approval {approval.approval_id}: decided {times} time(s)")
    # Zombies: each execution of the stopped worker that another worker took
    # over meanwhile stopped at its next write or heartbeat (LeaseLostError).
    errors = read_effect_log(str(soak.cluster.workdir / "effects.jsonl"))
    zombies = 0
    for fault in (f for f in soak.faults if f.kind == "stop"):
        fenced = {
            e["run_id"]
            for e in errors
            if e["tool"] == "on_error" and e["pid"] == fault.pid and e["error"] == "LeaseLostError"
        }
        for run_id in fault.taken:
            zombies += 1
            if run_id not in fenced:
                problems.append(f"zombie {fault.pid}: run {run_id} was not fenced")
    for worker in soak.every_worker:
        unexpected = worker.log().count("raised unexpected")
        if unexpected:
            problems.append(f"{worker.name}: {unexpected} 'raised unexpected' line(s)")
    # First executions: how long each run waited from its start to its claim.
    # Every run counts toward the bound; those whose wait overlapped a broker
    # outage, or a worker's stop (the broker may have pushed their message to
    # it), are also reported apart.
    waits: list[float] = []
    during_broker_outage: list[float] = []
    while_stopped: list[float] = []
    for run in runs.values():
        if run.started_at is None:
            continue
        start, first = _ts(run.created_at), _ts(run.started_at)
        wait = first - start
        waits.append(wait)
        if any(down < first and up > start for down, up in soak.broker_down):
            during_broker_outage.append(wait)
        elif any(stop < first and cont > start for _, stop, cont in soak.stopped):
            while_stopped.append(wait)
    slow = sorted(w for w in waits if w > FIRST_EXECUTION_BOUND)
    if slow:
        problems.append(f"{len(slow)} run(s) waited over {FIRST_EXECUTION_BOUND:.0f} s: {slow}")
    # SIGKILL to the next step of each run the killed worker was executing.
    recoveries = []
    for fault in (f for f in soak.faults if f.kind == "kill"):
        for run_id in fault.victims:
            later = [
                _ts(s.started_at) for s in engine.steps(run_id) if _ts(s.started_at) > fault.at
            ]
            if later:
                recoveries.append(min(later) - fault.at)

    def figures(values: list[float]) -> dict[str, Any]:
        if not values:
            return {"n": 0}
        return {
            "n": len(values),
            "p50": round(statistics.median(values), 2),
            "p95": round(percentile(values, 0.95), 2),
            "max": round(max(values), 2),
        }

    result = {
        "minutes": soak.minutes,
        "broker": "rabbitmq" if soak.node is not None else "redis",
        "lease_ttl_seconds": TTL,
        "tick_seconds": TICK,
        "workers": f"2 x {THREADS} threads",
        "runs": len(runs),
        "runs_completed": len(runs) - len(not_completed),
        "effects_run": len(ran),
        "effects_run_twice": len(twice),
        "approvals_decided": approvals,
        "faults": dict(collections.Counter(f.kind for f in soak.faults)),
        "kill_to_next_step_s": figures(recoveries),
        "first_execution_wait_s": figures(waits),
        "first_execution_wait_during_broker_outages_s": figures(during_broker_outage),
        "first_execution_wait_while_a_worker_was_stopped_s": figures(while_stopped),
        "stops": [
            {"seconds": round(f.seconds, 1), "runs": len(f.victims), "taken_over": len(f.taken)}
            for f in soak.faults
            if f.kind == "stop"
        ],
        "zombies_fenced": zombies,
        "problems": problems[:50],
    }
    return result, problems


@contextmanager
def soak_cluster(workdir: Path, database_url: str) -> Iterator[tuple[Cluster, Any, Any, Any]]:
    """The soak's own Redis, broker and Postgres proxy, and a cluster on them."""
    with ExitStack() as stack:
        leases = LocalRedis(workdir / "redis", free_port())
        leases.start()
        stack.callback(leases.kill)
        node: RabbitNode | None = None
        if rabbitmq_missing() is None:
            node = RabbitNode(workdir / "rabbitmq")
            stack.callback(node.close)
            node.start()
        direct = make_url(database_url)
        proxy = TcpProxy(direct.host or "127.0.0.1", direct.port or 5432).start()
        stack.callback(proxy.close)
        cluster = Cluster(
            database_url=direct.set(host="127.0.0.1", port=proxy.port).render_as_string(False),
            engine_database_url=database_url,
            redis_url=leases.url(0),
            broker_url=node.url if node is not None else leases.url(1),
            workdir=workdir,
            overrides={
                "RUNWRIGHT_AGENTS": "tests.agents,tests.agents_soak",
                "RUNWRIGHT_LEASE_TTL_SECONDS": str(TTL),
                "RUNWRIGHT_TICK_SECONDS": str(TICK),
                "RUNWRIGHT_REENQUEUE_SECONDS": str(REENQUEUE),
                "RUNWRIGHT_BROKER_HEARTBEAT_SECONDS": str(HEARTBEAT),
                "RUNWRIGHT_SCRIPTED_JOURNAL": "",
            },
        )
        stack.callback(cluster.stop)
        yield cluster, leases, proxy, node


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--rate", type=float, default=26.0, help="runs started a minute")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument(
        "--faults",
        default=",".join(FAULTS),
        help="the faults in turn, repeated (kill, stop, redis, postgres, broker)",
    )
    args = parser.parse_args()
    kinds = [k.strip() for k in args.faults.split(",") if k.strip()]
    unknown = sorted(set(kinds) - set(FAULTS))
    if unknown or not kinds:
        parser.error(f"unknown faults {unknown}; use kill, stop, redis, postgres, broker")
    server = Settings.from_env().database_url
    if not server:
        sys.exit(
            "bench.soak: set RUNWRIGHT_DATABASE_URL (a Postgres server it may create a database on)"
        )
    print(
        f"soak: {args.minutes:g} min, {args.rate:g} runs/min, "
        f"broker {'RabbitMQ' if rabbitmq_missing() is None else 'Redis'}",
        flush=True,
    )
    with (
        tempfile.TemporaryDirectory(prefix="rw-soak-") as tmp,
        bench_database(server) as url,
        soak_cluster(Path(tmp), url) as (cluster, leases, proxy, node),
    ):
        soak = Soak(
            cluster, leases, proxy, node, args.minutes, args.rate, random.Random(args.seed), kinds
        )
        soak.run()
        engine = cluster.engine()
        result, problems = check(soak, engine)
        engine.close()
    report("soak", result, not problems)
    if problems:
        print(f"soak: {len(problems)} invariant(s) failed", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
