"""Flow control toward a provider's limits, against the provider (issue 51).

    python -m bench.flow [--runs-a 300] [--runs-b 20] [--rpm 400] [--tpm 20000]
                         [--phase-seconds 300]

A provider on loopback that enforces requests and tokens per minute as a
provider does (``bench.limited_server``: buckets refilled continuously, a 429
with ``retry-after`` past them, every request recorded with its time and the
tokens it used), in a process of its own; two ``celery worker`` processes of
16 threads each, beat ticking; one agent (``bench.agents``' ``flow``: a tool
call, then an answer, so two model calls a run), its tenant the trigger's
``org``. Three configurations, each on a fresh database, a fresh Redis and
fresh provider buckets, the workers warmed first on a model no limit names:

- **limited**: ``RUNWRIGHT_MODEL_LIMITS`` set to the provider's own limits;
  ``--runs-a`` runs of tenant A, then ``--runs-b`` of tenant B, all created
  first and then sent to the broker together (B's messages behind A's);
- **B alone**: the same B runs alone under the same limits, the baseline of
  B's last completion;
- **unlimited**: the same A and B runs with no limit configured, for
  comparison (the provider still enforces its own).

Reported for each: the 429s the provider answered (target 0, limited); the
tokens it admitted in each whole minute from the first request while the
backlog lasted, their median against the limit (target >= 90%, limited);
when tenant B's last run completed, from the moment the runs were sent,
against B alone (target <= 1.5x); and the worker threads busy (runs
``running`` in Postgres, sampled every 0.25 s) while parked runs existed,
with whether any parked run was ever held by a thread (claimed or running;
target: none). The defaults make the limited configuration limit-bound on a
two-core machine: 320 x 2 calls of 79 and 98 tokens against 20,000 tokens
a minute, under three minutes. A configuration whose runs have not all ended
after ``--phase-seconds`` is reported as it stands, with how many had not.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import sqlalchemy as sa

# The agents this process starts runs of, as the workers know them.
from bench.agents import FLOW_MAX_TOKENS, FLOW_MODEL
from bench.common import bench_database, machine_speed, report
from bench.limited_server import Client, Record, serving
from bench.workers import _wait_all
from runner import Engine
from store.local import LocalRedis, free_port
from tests.e2e.cluster import Cluster

THREADS, PROCESSES = 16, 2
COMPLETION_TOKENS = 20
SAMPLE_SECONDS = 0.25
TARGET_TPM_SHARE = 0.9
TARGET_B_RATIO = 1.5


@contextlib.contextmanager
def _cluster(provider: str, model_limits: str | None) -> Iterator[Cluster]:
    """Two workers and beat on a fresh database and a Redis of their own (its
    database 0 the leases' and the limits', 1 the broker's)."""
    with tempfile.TemporaryDirectory(prefix="rw-flow-") as tmp, bench_database() as url:
        workdir = Path(tmp)
        redis_server = LocalRedis(workdir / "redis", free_port())
        redis_server.start()
        made = Cluster(
            database_url=url,
            redis_url=redis_server.url(0),
            broker_url=redis_server.url(1),
            workdir=workdir,
            overrides={
                "RUNWRIGHT_AGENTS": "tests.agents,bench.agents",
                "RUNWRIGHT_BENCH_LIMITED": provider,
                "RUNWRIGHT_MODEL_LIMITS": model_limits or "",
                "RUNWRIGHT_SCRIPTED_JOURNAL": "",
                "RUNWRIGHT_TEST_EFFECT_LOG": "",
                "RUNWRIGHT_DB_POOL_SIZE": "20",
                # The production defaults, not the acceptance tests' short ones.
                "RUNWRIGHT_LEASE_TTL_SECONDS": "15",
                "RUNWRIGHT_TICK_SECONDS": "5",
                "RUNWRIGHT_REENQUEUE_SECONDS": "60",
            },
        )
        try:
            for n in range(PROCESSES):
                made.worker(f"flow{n}", concurrency=THREADS)
            made.beat()
            yield made
        finally:
            made.stop()
            redis_server.kill()


class Sampler:
    """Every :data:`SAMPLE_SECONDS`, the runs of ``flow`` that hold a worker
    thread (``running``), those parked on a limit, and those parked yet
    claimed or running (a parked run is queued: it should hold neither)."""

    QUERY = sa.text(
        "SELECT count(*) FILTER (WHERE status = 'running'),"
        " count(*) FILTER (WHERE parked_key IS NOT NULL),"
        " count(*) FILTER (WHERE parked_key IS NOT NULL"
        "                  AND (claim_owner IS NOT NULL OR status = 'running'))"
        " FROM runs WHERE agent = 'flow'"
    )

    def __init__(self, db: sa.Engine) -> None:
        self.db = db
        self.samples: list[tuple[int, int, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)

    def _sample(self) -> None:
        with self.db.connect() as conn:
            while not self._stop.wait(SAMPLE_SECONDS):
                row = conn.execute(self.QUERY).one()
                conn.commit()
                self.samples.append((int(row[0]), int(row[1]), int(row[2])))

    def figures(self) -> dict[str, Any]:
        parked = [s for s in self.samples if s[1] > 0]
        busy = [s[0] for s in parked]
        return {
            "samples": len(self.samples),
            "samples_with_runs_parked": len(parked),
            "max_runs_parked": max((s[1] for s in self.samples), default=0),
            "max_threads_busy": max((s[0] for s in self.samples), default=0),
            "max_threads_busy_while_runs_parked": max(busy, default=0),
            "median_threads_busy_while_runs_parked": statistics.median(busy) if busy else 0,
            "max_parked_runs_held_by_a_thread": max((s[2] for s in self.samples), default=0),
        }


def tokens_per_minute(records: list[Record], until: float) -> list[int]:
    """The tokens admitted in each whole minute from the first request to
    ``until`` (when the last run ended, or the phase's time was up): the
    minutes the backlog lasted, a last, partial one left out."""
    answered = [(at, tokens) for at, status, tokens in records if status == 200]
    if not answered:
        return []
    first = answered[0][0]
    minutes = int((until - first) // 60)
    return [
        sum(t for at, t in answered if first + 60 * k <= at < first + 60 * (k + 1))
        for k in range(minutes)
    ]


def _wait_ended(engine: Engine, ids: list[str], seconds: float) -> int:
    """Wait up to ``seconds`` for the runs to end: how many had not."""
    with engine.store.engine.connect() as conn:
        deadline = time.monotonic() + seconds
        while True:
            left = conn.execute(
                sa.text(
                    "SELECT count(*) FROM runs WHERE id = ANY(CAST(:ids AS uuid[]))"
                    " AND status NOT IN ('completed', 'failed', 'cancelled')"
                ),
                {"ids": ids},
            ).scalar_one()
            conn.commit()
            if not left or time.monotonic() > deadline:
                return int(left)
            time.sleep(0.1)


def _phase(
    server: Client,
    *,
    limited: bool,
    runs_a: int,
    runs_b: int,
    rpm: int,
    tpm: int,
    phase_seconds: float,
) -> dict[str, Any]:
    limits = json.dumps({FLOW_MODEL: {"rpm": rpm, "tpm": tpm}}) if limited else None
    with _cluster(server.base_url, limits) as cluster:
        engine = cluster.engine()
        # Warm every worker thread's path through litellm, on a model no limit
        # names, then give the provider fresh, full buckets.
        _wait_all(engine, [engine.start("flow-warm", {"n": n}).id for n in range(32)], 120)
        server.limit(rpm, tpm)
        server.records()
        silent = Engine(engine.store, leases=engine.leases, settings=engine.settings)
        ids = {
            org: [silent.start("flow", {"n": n}, keys={"org": org}).id for n in range(count)]
            for org, count in (("A", runs_a), ("B", runs_b))
        }
        assert engine.enqueue is not None
        with Sampler(engine.store.engine) as sampler:
            sent = time.time()
            for run_id in ids["A"] + ids["B"]:
                engine.enqueue(run_id)
            unfinished = _wait_ended(engine, ids["A"] + ids["B"], phase_seconds)
            given_up = time.time()
        records = server.records()
        server.limit(0, 0)
        runs = {org: [engine.get_run(i) for i in found] for org, found in ids.items()}
        engine.close()

    def last(org: str) -> float | None:
        """When the tenant's last run ended; None if one had not."""
        ends = [r.finished_at for r in runs[org]]
        if not ends or None in ends:
            return None
        return round(max(e for e in ends if e is not None).timestamp() - sent, 2)

    ends = [r.finished_at.timestamp() for found in runs.values() for r in found if r.finished_at]
    per_minute = tokens_per_minute(records, given_up if unfinished else max(ends))
    answered = [r for r in records if r[1] == 200]
    span = answered[-1][0] - answered[0][0] if len(answered) > 1 else 0.0
    return {
        "limits_configured": limits,
        "runs": {org: len(found) for org, found in ids.items()},
        # Runs not ended when the phase's time was up (--phase-seconds).
        "unfinished": unfinished,
        "phase_seconds": phase_seconds,
        "statuses": {
            org: dict(Counter(r.status.value for r in found)) for org, found in runs.items()
        },
        "failed_by_code": dict(
            Counter(r.error.code for found in runs.values() for r in found if r.error)
        ),
        "requests_answered": len(answered),
        "provider_429s": sum(1 for r in records if r[1] == 429),
        "tokens_used": sum(r[2] for r in answered),
        "tokens_per_whole_minute": per_minute,
        "median_tokens_per_minute": statistics.median(per_minute) if per_minute else None,
        "tokens_per_minute_over_the_whole_span": (
            round(sum(r[2] for r in answered) * 60 / span) if span else None
        ),
        "first_to_last_request_seconds": round(span, 2),
        "last_completion_seconds": {org: last(org) for org in ids if ids[org]},
        "threads": sampler.figures(),
    }


def run(runs_a: int, runs_b: int, rpm: int, tpm: int, phase_seconds: float) -> dict[str, Any]:
    speed = machine_speed()
    with serving(COMPLETION_TOKENS) as server:
        shape = {"runs_a": runs_a, "runs_b": runs_b, "rpm": rpm, "tpm": tpm}
        limited = _phase(server, limited=True, phase_seconds=phase_seconds, **shape)
        alone = _phase(server, limited=True, phase_seconds=phase_seconds, **{**shape, "runs_a": 0})
        unlimited = _phase(server, limited=False, phase_seconds=phase_seconds, **shape)
    b_alone = alone["last_completion_seconds"]["B"]
    tpm_share = (limited["median_tokens_per_minute"] or 0) / tpm
    b_last = limited["last_completion_seconds"]["B"]
    b_ratio = b_last / b_alone if b_last is not None and b_alone else None
    targets = {
        "429s received (limited)": {
            "figure": limited["provider_429s"],
            "target": "0",
            "met": limited["provider_429s"] == 0,
        },
        "tokens per minute / the limit (limited, median)": {
            "figure": round(tpm_share, 3),
            "target": f">= {TARGET_TPM_SHARE}",
            "met": tpm_share >= TARGET_TPM_SHARE,
        },
        "tenant B's last completion / B alone": {
            "figure": None if b_ratio is None else round(b_ratio, 2),
            "target": f"<= {TARGET_B_RATIO}",
            "met": b_ratio is not None and b_ratio <= TARGET_B_RATIO,
        },
        "parked runs held by a thread (limited, max)": {
            "figure": limited["threads"]["max_parked_runs_held_by_a_thread"],
            "target": "0",
            "met": limited["threads"]["max_parked_runs_held_by_a_thread"] == 0,
        },
    }
    return {
        "worker_processes": PROCESSES,
        "threads_per_worker": THREADS,
        "calls_per_run": 2,
        "max_tokens": FLOW_MAX_TOKENS,
        "completion_tokens": COMPLETION_TOKENS,
        **shape,
        # How far into A's backlog B finished: with B served in its turns, early.
        "b_last_over_a_last": {
            name: round(p["last_completion_seconds"]["B"] / p["last_completion_seconds"]["A"], 3)
            for name, p in (("limited", limited), ("unlimited", unlimited))
            if p["last_completion_seconds"].get("A") and p["last_completion_seconds"].get("B")
        },
        "limited": limited,
        "b_alone": alone,
        "unlimited": unlimited,
        "targets": targets,
        "machine_speed_ms": {"start": speed, "end": machine_speed()},
        "measured_at": datetime.now().astimezone().isoformat(timespec="minutes"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs-a", type=int, default=300)
    parser.add_argument("--runs-b", type=int, default=20)
    parser.add_argument("--rpm", type=int, default=400)
    parser.add_argument("--tpm", type=int, default=20_000)
    parser.add_argument(
        "--phase-seconds", type=float, default=300, help="the most each configuration may take"
    )
    args = parser.parse_args()
    result = run(args.runs_a, args.runs_b, args.rpm, args.tpm, args.phase_seconds)
    report("flow", result, all(t["met"] for t in result["targets"].values()))
    print(f"{'':44s} {'limited':>10s} {'unlimited':>10s} {'B alone':>10s}")
    rows = [
        ("runs not ended in time", lambda p: p["unfinished"]),
        ("429s the provider answered", lambda p: p["provider_429s"]),
        ("tokens per whole minute (median)", lambda p: p["median_tokens_per_minute"]),
        ("A's last completion, s", lambda p: p["last_completion_seconds"].get("A")),
        ("B's last completion, s", lambda p: p["last_completion_seconds"].get("B")),
        ("threads busy while runs parked (max)", lambda p: p["threads"][_BUSY]),
        ("parked runs held by a thread (max)", lambda p: p["threads"][_HELD]),
    ]
    for label, figure in rows:
        cells = [figure(result[p]) for p in ("limited", "unlimited", "b_alone")]
        print(f"{label:44s}" + "".join(f" {'-' if c is None else c!s:>10s}" for c in cells))
    print()
    print("target".ljust(48), "figure".rjust(8), "  target")
    for name, target in result["targets"].items():
        verdict = "met" if target["met"] else "NOT MET"
        print(f"{name:48s} {target['figure']!s:>8s}  {target['target']:8s} {verdict}")


_BUSY = "max_threads_busy_while_runs_parked"
_HELD = "max_parked_runs_held_by_a_thread"


if __name__ == "__main__":
    main()
