"""Issue 26, item 3 and the second acceptance point: a worker started without
an agent that has runs waiting. ``runwright doctor`` names the agent and exits
non-zero, ``runwright show`` (and the engine's explain) says why the run
waits, ``runwright workers`` lists what each worker serves, and adding a worker
with the agent runs it. Real Postgres, Redis and ``celery worker``s."""

from __future__ import annotations

import json

from store.models import Interruption, RunStatus
from tests.e2e.clirun import rw
from tests.e2e.cluster import Cluster, wait_until

WITH_NEWCOMER = "tests.agents,tests.agents_newcomer"


def doctor_line(env: dict[str, str], check: str) -> tuple[int, str]:
    done = rw(env, "doctor", ok=False)
    assert "Traceback" not in done.stderr, done.stderr[-2000:]
    [line] = [line for line in done.stdout.splitlines() if line[:14].strip() == check]
    return done.returncode, line[15:].strip()


def test_doctor_show_and_workers_say_which_agent_no_live_worker_has(cluster: Cluster) -> None:
    import tests.agents_newcomer  # noqa: F401  (this process starts the run)

    cluster.worker("old")  # RUNWRIGHT_AGENTS=tests.agents: no 'newcomer'
    env = cluster.env(RUNWRIGHT_TICK_SECONDS="30", RUNWRIGHT_AGENTS=WITH_NEWCOMER)
    rw(env, "tick")  # what beat would have done: doctor's beat line passes
    engine = cluster.engine()
    run = engine.start("newcomer")
    given_back = wait_until(
        lambda: (r := engine.get_run(run.id)).status is RunStatus.INTERRUPTED and r,
        30,
        "the old worker to give the run back",
    )
    assert given_back.interrupted_reason is Interruption.AGENT_MISSING
    assert given_back.interrupted_by is not None  # the execution's owner: host:pid:nonce

    code, line = doctor_line(env, "agents served")
    assert code == 1
    assert line.startswith(
        "FAIL  no live worker has agent 'newcomer' (1 run(s) wait for one): start a worker "
        "whose RUNWRIGHT_AGENTS names its module"
    ), line

    shown = rw(env, "show", run.id, "--no-messages").stdout
    [why] = [line for line in shown.splitlines() if line.startswith("why ")]
    # The owner is named by its worker's name, from the live workers' records.
    assert "a worker without agent 'newcomer' (old@" in why, why
    assert "waiting for a worker that has agent 'newcomer': none of the 1 live worker(s)" in why
    assert engine.explain(engine.get_run(run.id)) == why.removeprefix("why").strip()

    [row] = [line for line in rw(env, "runs").stdout.splitlines() if run.id in line]
    assert "interrupted (no live worker has the agent)" in row, row

    listed = json.loads(rw(env, "workers", "--json").stdout)["workers"]
    [old] = listed
    assert old["name"].startswith("old@") and "newcomer" not in old["agents"]
    assert "five" in old["agents"] and old["pool"] == "thread" and old["concurrency"] == 16
    table = rw(env, "workers").stdout
    assert "old@" in table and "five" in table

    cluster.worker("new", RUNWRIGHT_AGENTS=WITH_NEWCOMER)

    def completed() -> bool:
        rw(env, "tick")  # re-enqueues the interrupted run, as beat would
        return engine.get_run(run.id).status is RunStatus.COMPLETED

    wait_until(completed, 60, "a worker with the agent to run it", interval=1.0)
    done = engine.get_run(run.id)
    assert done.output == "done by a new worker" and engine.explain(done) is None
    code, line = doctor_line(env, "agents served")
    assert code == 0 and line.startswith("ok    each of the 1 agent(s)"), line
