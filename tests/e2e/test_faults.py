"""Real workers under faults: SIGKILL, SIGTERM (drain), SIGSTOP past the lease,
and a Redis restart. Each test has a cluster of its own."""

from __future__ import annotations

import collections
import signal
import time
from typing import Any

import sqlalchemy as sa

from runner import Engine
from store.models import Interruption, Run, RunStatus, StepKind
from tests.agents import read_effect_log
from tests.e2e.cluster import Cluster, Proc, wait_until


def owner_pid(run: Run) -> int:
    assert run.claim is not None
    return int(run.claim.owner.split(":")[1])


def model_calls_by_step(cluster: Cluster, run_id: str, engine: Engine) -> collections.Counter[int]:
    trigger = engine.checkpoint(run_id).messages[0]["content"]  # type: ignore[union-attr]
    journal = read_effect_log(str(cluster.workdir / "journal.jsonl"))
    return collections.Counter(e["step"] for e in journal if e["trigger"] == trigger)


def effect_runs(cluster: Cluster, run_id: str) -> collections.Counter[str]:
    log = read_effect_log(str(cluster.workdir / "effects.jsonl"))
    return collections.Counter(e["key"] for e in log if e.get("key", "").startswith(run_id))


def assert_no_completed_step_repeated(
    cluster: Cluster, engine: Engine, run_id: str, completed_before: int
) -> None:
    calls = model_calls_by_step(cluster, run_id, engine)
    for step in range(1, completed_before + 1):
        assert calls[step] == 1, (step, calls)
    effects = effect_runs(cluster, run_id)
    assert effects and max(effects.values()) == 1, effects  # no effect ran twice
    steps = engine.steps(run_id)
    llm = [s.index for s in steps if s.kind is StepKind.LLM]
    assert llm == sorted(set(llm)) == list(range(1, len(llm) + 1))
    tools = [(s.index, s.tool_call_id) for s in steps if s.kind is StepKind.TOOL]
    assert len(tools) == len(set(tools))


def running_on(engine: Engine, run_id: str, min_steps: int) -> Run | None:
    run = engine.get_run(run_id)
    cp = engine.checkpoint(run_id)
    if run.status is RunStatus.RUNNING and cp is not None and cp.step_index >= min_steps:
        return run
    return None


def worker_of(procs: list[Proc], pid: int) -> Proc:
    return next(p for p in procs if p.pid == pid)


def test_sigkill_mid_run_is_resumed_by_another_worker(cluster: Cluster) -> None:
    workers = [cluster.worker("w1"), cluster.worker("w2")]
    cluster.beat()
    engine = cluster.engine()
    run = engine.start("steady", {"steps": 12, "latency": 0.3})
    claimed: Any = wait_until(lambda: running_on(engine, run.id, 3), 60, "three steps")
    victim = worker_of(workers, owner_pid(claimed))
    completed = engine.checkpoint(run.id).step_index  # type: ignore[union-attr]
    victim.signal(signal.SIGKILL)
    victim.wait(10)
    done = wait_until(
        lambda: engine.get_run(run.id).status is RunStatus.COMPLETED and engine.get_run(run.id),
        60,
        "another worker to finish it",
    )
    assert done.output == "steady done"
    assert_no_completed_step_repeated(cluster, engine, run.id, completed)
    with engine.store.engine.connect() as conn:  # type: ignore[attr-defined]
        epoch = conn.execute(
            sa.text("SELECT claim_epoch FROM runs WHERE id = :id"), {"id": run.id}
        ).scalar()
    assert epoch == 2  # one takeover


def test_sigterm_drains_runs_to_interrupted_and_another_worker_completes_them(
    cluster: Cluster,
) -> None:
    first = cluster.worker("w1")
    engine = cluster.engine()
    runs = [engine.start("steady", {"steps": 10, "latency": 0.3, "n": i}) for i in range(3)]
    wait_until(lambda: all(running_on(engine, r.id, 2) for r in runs), 60, "runs on w1")
    completed = {r.id: engine.checkpoint(r.id).step_index for r in runs}  # type: ignore[union-attr]
    first.signal(signal.SIGTERM)
    wait_until(
        lambda: all(engine.get_run(r.id).status is RunStatus.INTERRUPTED for r in runs),
        60,
        "the runs to settle interrupted",
        0.02,
    )
    for run in runs:
        # Given back mid-run: the drain did not wait for the ten steps to end.
        checkpoint = engine.checkpoint(run.id)
        assert checkpoint is not None and checkpoint.step_index < 10, checkpoint
        # Why, as `runwright show` and the console say it: a drain, and whose.
        given_back = engine.get_run(run.id)
        assert given_back.interrupted_reason is Interruption.DRAIN, given_back
        said = engine.explain(given_back)
        assert said is not None and "shut down mid-run (a drain)" in said, said
    first.wait(30)
    assert "RUNWRIGHT_FAULT" not in first.log()
    cluster.worker("w2")
    for run in runs:
        wait_until(lambda r=run: engine.get_run(r.id).status is RunStatus.COMPLETED, 60, "w2")
        assert_no_completed_step_repeated(cluster, engine, run.id, completed[run.id])


def test_sigstop_past_the_lease_fences_out_the_zombie(cluster: Cluster) -> None:
    workers = [cluster.worker("w1"), cluster.worker("w2")]
    cluster.beat()
    engine = cluster.engine()
    run = engine.start("steady", {"steps": 12, "latency": 0.4})
    claimed: Any = wait_until(lambda: running_on(engine, run.id, 2), 60, "two steps")
    zombie = worker_of(workers, owner_pid(claimed))
    zombie.signal(signal.SIGSTOP)

    def taken_over() -> Run | None:
        now = engine.get_run(run.id)
        if now.claim is not None and now.claim.epoch > claimed.claim.epoch:
            return now
        return None

    taken: Any = wait_until(taken_over, 30, "another worker to take over")
    assert owner_pid(taken) != zombie.pid
    zombie.signal(signal.SIGCONT)
    done = wait_until(
        lambda: engine.get_run(run.id).status is RunStatus.COMPLETED and engine.get_run(run.id),
        60,
        "the run to complete",
    )
    assert done.output == "steady done"
    # The zombie found out and wrote nothing more: its error went to on_error.
    errors = [
        e
        for e in read_effect_log(str(cluster.workdir / "effects.jsonl"))
        if e["tool"] == "on_error" and e["run_id"] == run.id
    ]
    assert errors and {e["error"] for e in errors} == {"LeaseLostError"}
    assert all(e["pid"] == zombie.pid for e in errors)
    steps = engine.steps(run.id)
    llm = [s.index for s in steps if s.kind is StepKind.LLM]
    assert llm == list(range(1, 13))
    tools = [(s.index, s.tool_call_id) for s in steps if s.kind is StepKind.TOOL]
    assert len(tools) == len(set(tools)) == 11
    # Every tool row belongs to the call its step's llm row made: nothing foreign.
    calls = {
        (s.index, c["id"])
        for s in steps
        if s.kind is StepKind.LLM
        for c in s.output["message"].get("tool_calls") or []
    }
    assert set(tools) <= calls


def test_redis_restart_takes_over_nothing_and_all_runs_complete(cluster: Cluster) -> None:
    from store.local import LocalRedis

    cluster.worker("w1")
    cluster.worker("w2")
    cluster.beat()
    engine = cluster.engine()
    runs = [engine.start("steady", {"steps": 8, "latency": 0.4, "n": i}) for i in range(6)]
    wait_until(lambda: all(running_on(engine, r.id, 1) for r in runs), 60, "runs to start")
    redis_server = LocalRedis(
        cluster.workdir / "redis", int(cluster.redis_url.split(":")[2].split("/")[0])
    )
    redis_server.kill()  # every key gone: leases, queues
    time.sleep(1.0)
    redis_server.start()
    wait_until(
        lambda: all(engine.get_run(r.id).status is RunStatus.COMPLETED for r in runs),
        90,
        "all runs to complete",
        0.2,
    )
    with engine.store.engine.connect() as conn:  # type: ignore[attr-defined]
        epochs = (
            conn.execute(
                sa.text("SELECT claim_epoch FROM runs WHERE id = ANY(CAST(:ids AS uuid[]))"),
                {"ids": [r.id for r in runs]},
            )
            .scalars()
            .all()
        )
    assert epochs == [1] * len(runs)  # no run was taken over while its owner lived
    for run in runs:
        assert max(effect_runs(cluster, run.id).values()) == 1


def test_worker_that_cannot_load_its_agents_exits_loudly(cluster: Cluster) -> None:
    worker = cluster.worker("broken", wait=False, RUNWRIGHT_AGENTS="no_such_module.agents")
    assert worker.wait(60) != 0
    assert (
        "runwright: the worker cannot start: cannot import agent module "
        "'no_such_module.agents'" in worker.log()
    )


def test_postgres_restart_mid_run_loses_no_step(tmp_path: Any) -> None:
    from store.local import LocalPostgres, LocalRedis, free_port
    from store.migrate import upgrade

    postgres = LocalPostgres(tmp_path / "pg", free_port())
    redis_server = LocalRedis(tmp_path / "redis", free_port())
    postgres.start()
    redis_server.start()
    postgres.create_database("runwright")
    url = postgres.url("runwright")
    upgrade(url)
    cluster = Cluster(
        database_url=url,
        redis_url=redis_server.url(0),
        broker_url=redis_server.url(1),
        workdir=tmp_path,
        overrides={"RUNWRIGHT_LEASE_TTL_SECONDS": "5"},
    )
    try:
        cluster.worker("w1")
        cluster.worker("w2")
        cluster.beat()
        engine = cluster.engine()
        runs = [engine.start("steady", {"steps": 8, "latency": 0.3, "n": i}) for i in range(4)]
        wait_until(lambda: all(running_on(engine, r.id, 2) for r in runs), 60, "runs to start")
        saved = {r.id: engine.checkpoint(r.id).step_index for r in runs}  # type: ignore[union-attr]
        postgres.stop("immediate")  # a crash, as far as clients can tell
        time.sleep(2.0)
        postgres.start()
        wait_until(
            lambda: all(engine.get_run(r.id).status is RunStatus.COMPLETED for r in runs),
            120,
            "all runs to complete after the restart",
            0.3,
        )
        for run in runs:
            assert_no_completed_step_repeated(cluster, engine, run.id, saved[run.id])
            assert engine.get_run(run.id).output == "steady done"
    finally:
        cluster.stop()
        redis_server.kill()
        postgres.stop("immediate")
