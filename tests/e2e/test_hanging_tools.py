"""A sync tool that hangs for a minute must not hold a run past a cancel, or a
worker past its drain window (issue 9, item 7), on real workers."""

from __future__ import annotations

import signal

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


def tool_ended(cluster: Cluster, run_id: str) -> bool:
    log = read_effect_log(str(cluster.workdir / "effects.jsonl"))
    return any(
        e["tool"] == "stuck" and e.get("run_id") == run_id and e.get("phase") == "end" for e in log
    )


def start_stuck(cluster: Cluster, engine: Engine) -> str:
    run = engine.start("stuck")
    wait_until(lambda: tool_started(cluster, run.id), 60, "the 60 s tool to start")
    return run.id


def test_cancel_settles_while_a_sync_tool_hangs(cluster: Cluster) -> None:
    cluster.overrides["RUNWRIGHT_AGENTS"] = AGENTS
    worker = cluster.worker("w1")
    engine = cluster.engine()
    run_id = start_stuck(cluster, engine)
    assert engine.cancel(run_id).action == "requested"
    wait_until(
        lambda: engine.get_run(run_id).status is RunStatus.CANCELLED,
        45,
        "the run to settle while its 60 s tool still hangs",
    )
    assert not tool_ended(cluster, run_id), "the cancel waited for the tool to return"
    # The worker is free again: another run of the same agent starts its tool.
    assert worker.popen.poll() is None
    assert engine.get_run(run_id).claim is None or engine.get_run(run_id).status.ended
    start_stuck(cluster, engine)


def test_sigterm_exits_at_the_drain_window_while_a_sync_tool_hangs(
    cluster: Cluster,
) -> None:
    cluster.overrides["RUNWRIGHT_AGENTS"] = AGENTS
    cluster.overrides["RUNWRIGHT_DRAIN_SECONDS"] = str(DRAIN_SECONDS)
    worker = cluster.worker("w1")
    engine = cluster.engine()
    run_id = start_stuck(cluster, engine)
    worker.signal(signal.SIGTERM)
    code = worker.wait(45)  # a safety net: the tool returns after 60 s
    assert code == 0, worker.log()[-3000:]
    assert not tool_ended(cluster, run_id), "the worker waited for the tool to return"
    run = engine.get_run(run_id)
    # Drained, not lost: interrupted and enqueued again for another worker.
    assert run.status is RunStatus.INTERRUPTED, run
