"""A sync tool that hangs for a minute must not hold a run past a cancel, or a
worker past its drain window (issue 9, item 7), on real workers."""

from __future__ import annotations

import signal
import time

import tests.agents_hang  # noqa: F401  (the agents the workers run, known here too)
from runner import Engine
from store.models import RunStatus
from tests.agents import read_effect_log
from tests.e2e.cluster import Cluster, wait_until

AGENTS = "tests.agents,tests.agents_hang"
DRAIN_SECONDS = 5


def tool_started(cluster: Cluster, run_id: str) -> bool:
    log = read_effect_log(str(cluster.workdir / "effects.jsonl"))
    return any(e["tool"] == "stuck" and e.get("run_id") == run_id for e in log)


def start_stuck(cluster: Cluster, engine: Engine) -> str:
    run = engine.start("stuck")
    wait_until(lambda: tool_started(cluster, run.id), 60, "the 60 s tool to start")
    return run.id


def test_cancel_settles_within_two_seconds_while_a_sync_tool_hangs(cluster: Cluster) -> None:
    cluster.overrides["RUNWRIGHT_AGENTS"] = AGENTS
    worker = cluster.worker("w1")
    engine = cluster.engine()
    run_id = start_stuck(cluster, engine)
    asked = time.monotonic()
    assert engine.cancel(run_id).action == "requested"
    wait_until(
        lambda: engine.get_run(run_id).status is RunStatus.CANCELLED, 10, "the run to settle"
    )
    took = time.monotonic() - asked
    assert took < 2.0, f"cancel settled after {took:.2f}s"
    # The worker is free again: another run of the same agent starts its tool.
    assert worker.popen.poll() is None
    assert engine.get_run(run_id).claim is None or engine.get_run(run_id).status.ended
    start_stuck(cluster, engine)


def test_sigterm_exits_within_the_drain_window_while_a_sync_tool_hangs(
    cluster: Cluster,
) -> None:
    cluster.overrides["RUNWRIGHT_AGENTS"] = AGENTS
    cluster.overrides["RUNWRIGHT_DRAIN_SECONDS"] = str(DRAIN_SECONDS)
    worker = cluster.worker("w1")
    engine = cluster.engine()
    run_id = start_stuck(cluster, engine)
    asked = time.monotonic()
    worker.signal(signal.SIGTERM)
    code = worker.wait(DRAIN_SECONDS + 10)
    took = time.monotonic() - asked
    assert took <= DRAIN_SECONDS + 2, f"the worker took {took:.1f}s to exit"
    assert code == 0, worker.log()[-3000:]
    run = engine.get_run(run_id)
    # Drained, not lost: interrupted and enqueued again for another worker.
    assert run.status is RunStatus.INTERRUPTED, run
