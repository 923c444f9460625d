"""A decision that arrives while the execution that asked is still calling a
slow notifier resumes its run at once, never through tick(), with real
``celery worker`` and ``celery beat`` processes."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest

import tests.agents_slow_notifier  # noqa: F401  (the agent the workers run, known here too)
from runner import Engine
from store.models import RunStatus
from tests.agents import read_effect_log
from tests.e2e.cluster import Cluster, wait_until

AGENTS = "tests.agents,tests.agents_slow_notifier"
RUNS = 30
# The bound, from a decision to its run's completion.
BOUND = timedelta(seconds=3)
# Far above BOUND: a run that only tick()'s re-enqueue resumes shows up as late.
REENQUEUE_SECONDS = 60
# Each execution holds a worker thread until its notifier returns: give the
# workers the production default, so that a resume never waits for a thread.
CONCURRENCY = 64


def decide_as_they_wait(engine: Engine, run_ids: list[str]) -> dict[str, float]:
    """Approve each run as soon as it waits (its notifier has just started),
    all of them in one pass per look; when each was decided (epoch seconds)."""
    decided: dict[str, float] = {}
    deadline = time.monotonic() + 120
    while len(decided) < len(run_ids):
        assert time.monotonic() < deadline, f"only {len(decided)} of {len(run_ids)} runs waited"
        waiting = [
            run
            for run in engine.list_runs(status=RunStatus.WAITING, limit=len(run_ids))
            if run.id in run_ids and run.id not in decided
        ]
        for run in waiting:
            assert run.waiting is not None
            engine.decide(run.waiting.approval_id, True, trusted=True, by="test")
            decided[run.id] = time.time()
        time.sleep(0.02)
    return decided


# 1 s is the webhook; 5 s is longer than the bound itself, so a resume
# that waits for the notifier to return cannot pass.
@pytest.mark.parametrize("notifier_seconds", [1, 5])
def test_runs_decided_during_a_slow_notifier_complete_within_three_seconds(
    cluster: Cluster, notifier_seconds: int
) -> None:
    cluster.overrides["RUNWRIGHT_AGENTS"] = AGENTS
    cluster.overrides["RUNWRIGHT_REENQUEUE_SECONDS"] = str(REENQUEUE_SECONDS)
    cluster.overrides["RUNWRIGHT_TEST_NOTIFIER_SECONDS"] = str(notifier_seconds)
    cluster.worker("w1", concurrency=CONCURRENCY)
    cluster.worker("w2", concurrency=CONCURRENCY)
    cluster.beat()
    engine = cluster.engine()
    try:
        run_ids = [engine.start("slow_notifier", {"n": i}).id for i in range(RUNS)]
        decided = decide_as_they_wait(engine, run_ids)

        def all_completed() -> bool:
            return all(engine.get_run(r).status is RunStatus.COMPLETED for r in run_ids)

        wait_until(all_completed, REENQUEUE_SECONDS + 30, "every run to complete", interval=0.2)

        # The race this is about: decisions that landed while the execution
        # that asked was still calling its notifier.
        def notifier_ends() -> dict[str, float] | None:
            log = read_effect_log(str(cluster.workdir / "effects.jsonl"))
            ends = {
                e["run_id"]: e["at"] for e in log if e["tool"] == "notifier" and e["phase"] == "end"
            }
            return ends if len(ends) == RUNS else None

        ended: dict[str, float] = wait_until(notifier_ends, 30, "every notifier to return")
        during = [r for r in run_ids if decided[r] < ended[r]]
        assert len(during) >= RUNS // 2, f"only {len(during)} decisions came during the notifier"

        took = {}
        for run_id in run_ids:
            run = engine.get_run(run_id)
            (approval,) = engine.approvals(run_id)
            assert approval.decided_at is not None and run.finished_at is not None
            took[run_id] = run.finished_at - approval.decided_at
        late = {r: round(t.total_seconds(), 2) for r, t in took.items() if t > BOUND}
        assert not late, f"runs that took longer than {BOUND} from decision to completion: {late}"
        ordered = sorted(t.total_seconds() for t in took.values())
        print(
            f"\n{RUNS} runs, {notifier_seconds} s notifier, {len(during)} decided during it;"
            f" decision to completion: median {ordered[RUNS // 2]:.2f} s,"
            f" slowest {ordered[-1]:.2f} s"
        )
    finally:
        engine.close()
