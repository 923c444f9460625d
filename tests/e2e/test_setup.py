"""Set-up that fails loudly, with real ``celery`` processes (issue 10)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import time
from pathlib import Path

from store.models import RunStatus
from tests.e2e.cluster import Cluster, Proc, wait_until
from tests.services import ROOT, Services


def test_a_prefork_worker_refuses_to_start_with_one_line(cluster: Cluster) -> None:
    worker = cluster.worker("prefork", wait=False, RUNWRIGHT_WORKER_POOL="prefork")
    code = worker.wait(90)
    assert code != 0
    log = worker.log()
    assert "the prefork pool cannot drain running agents" in log, log[-2000:]
    assert "Traceback" not in log, log[-2000:]


def _celery_worker(cluster: Cluster, name: str, *args: str, **env: str) -> Proc:
    worker = Proc(
        name,
        [
            *(sys.executable, "-m", "celery", "-A", "tasks", "worker", "-l", "INFO"),
            *("-n", f"{name}@%h", "-c", "2", "--without-gossip", "--without-mingle", *args),
        ],
        cluster.env(**env),
        cluster.workdir,
    )
    cluster.procs.append(worker)
    return worker


def _refusal(worker: Proc) -> str:
    """The one line a worker that refused to start printed (it exits non-zero)."""
    code = worker.wait(90)
    log = worker.log()
    assert code != 0, log[-2000:]
    assert "Traceback" not in log, log[-2000:]
    lines = [line for line in log.splitlines() if "prefork pool cannot drain" in line]
    assert len(lines) == 1, log[-2000:]
    return lines[0]


# How a command line can ask for the prefork pool (all at once: the workers
# refuse before they connect to anything, and are slow only to import).
ASKED_FOR_PREFORK = {
    "pool-space": (["--pool", "prefork"], {}),
    "p-space": (["-P", "prefork"], {}),
    "pool-equals": (["--pool=prefork"], {}),
    "p-joined": (["-Pprefork"], {}),
    "last-p-wins": (["-P", "threads", "-P", "prefork"], {}),
    "celery-env": ([], {"CELERY_WORKER_POOL": "prefork"}),
}


def test_a_worker_asked_for_prefork_refuses_to_start_as_the_setting_does(
    cluster: Cluster,
) -> None:
    """Celery's CLI reads ``-P prefork`` as its default and would run the
    preset's threads pool instead: the worker refuses, with the line that
    RUNWRIGHT_WORKER_POOL=prefork gets."""
    configured = _celery_worker(cluster, "configured", RUNWRIGHT_WORKER_POOL="prefork")
    asked = {
        name: _celery_worker(cluster, name, *args, **env)
        for name, (args, env) in ASKED_FOR_PREFORK.items()
    }
    line = _refusal(configured)
    assert line.startswith("runwright: this worker takes Runwright's queue"), line
    assert {name: _refusal(worker) for name, worker in asked.items()} == dict.fromkeys(
        ASKED_FOR_PREFORK, line
    )


def test_a_worker_asked_for_threads_or_for_no_pool_starts_on_threads(cluster: Cluster) -> None:
    workers = [
        _celery_worker(cluster, "threads-default"),
        _celery_worker(cluster, "threads-long", "--pool", "threads"),
        _celery_worker(cluster, "threads-short", "-P", "threads"),
    ]
    for worker in workers:
        worker.wait_for(" ready.", timeout=90)
        assert "(thread)" in worker.log(), worker.log()[-2000:]  # the banner's concurrency


def test_beat_starts_in_a_fresh_directory_with_external_services(
    cluster: Cluster, tmp_path: Path
) -> None:
    home = tmp_path / "fresh" / "never-created"
    beat = Proc(
        "beat-fresh",
        [sys.executable, "-m", "celery", "-A", "tasks", "beat", "-l", "INFO"],
        cluster.env(RUNWRIGHT_HOME=str(home)),
        cluster.workdir,
    )
    cluster.procs.append(beat)
    beat.wait_for("beat: Starting", timeout=60)
    wait_until(
        lambda: (home / "celerybeat-schedule").exists() or any(home.glob("celerybeat-schedule*")),
        30,
        "the schedule file",
    )
    time.sleep(1.5)  # a tick or two
    assert beat.popen.poll() is None, beat.log()[-2000:]
    assert "FileNotFoundError" not in beat.log()


BILLING_AGENTS = """
from runner import Agent
from runner.testing import ScriptedModel, text

billing_model = ScriptedModel("billing-cwd", [text("billed from the app folder")])
Agent(name="billing-cwd", model=billing_model.model)
"""


def test_a_worker_started_in_the_app_folder_finds_its_agent_module(
    cluster: Cluster, tmp_path: Path
) -> None:
    app = tmp_path / "app"
    app.mkdir()
    (app / "billing_agents.py").write_text(BILLING_AGENTS)
    spec = importlib.util.spec_from_file_location("billing_agents", app / "billing_agents.py")
    assert spec is not None and spec.loader is not None
    spec.loader.exec_module(importlib.util.module_from_spec(spec))  # known here too
    worker = Proc(
        "app-worker",
        [sys.executable, "-m", "celery", "-A", "tasks", "worker", "-l", "INFO", "-c", "2"],
        cluster.env(RUNWRIGHT_AGENTS="billing_agents"),
        cluster.workdir,
        cwd=app,
    )
    cluster.procs.append(worker)
    worker.wait_for(" ready.", timeout=90)
    engine = cluster.engine()
    run = engine.start("billing-cwd")
    done = wait_until(
        lambda: engine.get_run(run.id).status is RunStatus.COMPLETED and engine.get_run(run.id),
        30,
        "the run to complete",
    )
    assert done.output == "billed from the app folder"


def _python_in(project: Path, code: str, **env: str) -> subprocess.CompletedProcess[str]:
    """Python started in ``project`` with it first on the import path, as
    ``python manage.py`` or ``python -m celery`` would be."""
    base = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run(
        [sys.executable, "-c", f"import sys; sys.path.insert(0, ''); {code}"],
        cwd=project,
        env={**base, "PYTHONPATH": str(ROOT), **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


def _one_line(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 1, done
    assert done.stderr.strip().count("\n") == 0, done.stderr
    return done.stderr


def test_a_store_package_that_shadows_runwrights_fails_in_one_line(tmp_path: Path) -> None:
    (tmp_path / "store").mkdir()
    (tmp_path / "store" / "__init__.py").write_text("")
    for code in ("import runner", "import tasks"):
        line = _one_line(_python_in(tmp_path, code))
        assert str(tmp_path / "store" / "__init__.py") in line
        assert "shadows Runwright's module 'store'" in line


def test_a_tasks_module_that_shadows_runwrights_fails_in_one_line(
    tmp_path: Path, database_url: str, redis_url: str
) -> None:
    (tmp_path / "tasks.py").write_text("")
    done = _python_in(
        tmp_path,
        "from runner.cli import main; main(['start', 'any-agent'])",
        RUNWRIGHT_DATABASE_URL=database_url,
        RUNWRIGHT_REDIS_URL=redis_url,
        RUNWRIGHT_SECRET_KEY="k1:" + "s" * 40,
    )
    line = _one_line(done)
    assert str(tmp_path / "tasks.py") in line and "shadows Runwright's module 'tasks'" in line


def _celery_exits(cluster: Cluster, name: str, command: str, **env: str) -> str:
    """Start ``celery -A tasks <command>`` expecting it to refuse to start."""
    full = cluster.env(**env)
    for key in [k for k, v in env.items() if v == ""]:
        full.pop(key, None)  # "" means: unset it
    proc = Proc(
        name,
        [sys.executable, "-m", "celery", "-A", "tasks", command, "-l", "INFO"],
        full,
        cluster.workdir,
        cwd=cluster.workdir,
    )
    cluster.procs.append(proc)
    code = proc.wait(90)
    log = proc.log()
    assert code != 0, log[-2000:]
    ours = [line for line in log.splitlines() if line.startswith("runwright: ")]
    assert len(ours) == 1 and log.rstrip().endswith(ours[0]), log[-2000:]
    assert "Traceback" not in log, log[-2000:]
    return ours[0]


def test_partial_configuration_stops_worker_and_beat_and_starts_no_servers(
    cluster: Cluster,
) -> None:
    home = cluster.workdir / "home"
    for command in ("worker", "beat"):
        line = _celery_exits(
            cluster,
            f"{command}-no-redis",
            command,
            RUNWRIGHT_REDIS_URL="",
            RUNWRIGHT_BROKER_URL="",
            RUNWRIGHT_HOME=str(home),
        )
        assert "RUNWRIGHT_REDIS_URL is not set" in line
        line = _celery_exits(
            cluster,
            f"{command}-no-db",
            command,
            RUNWRIGHT_DATABASE_URL="",
            RUNWRIGHT_HOME=str(home),
        )
        assert "RUNWRIGHT_DATABASE_URL is not set" in line
        line = _celery_exits(
            cluster,
            f"{command}-nothing",
            command,
            RUNWRIGHT_DATABASE_URL="",
            RUNWRIGHT_REDIS_URL="",
            RUNWRIGHT_BROKER_URL="",
            RUNWRIGHT_HOME=str(home),
        )
        assert "runwright local up" in line
    # No embedded Postgres or Redis was started for any of them.
    assert not (home / "postgres").exists() and not (home / "redis").exists()


def test_a_missing_or_weak_signing_key_stops_the_worker(cluster: Cluster) -> None:
    line = _celery_exits(cluster, "no-key", "worker", RUNWRIGHT_SECRET_KEY="")
    assert "RUNWRIGHT_SECRET_KEY is not set" in line
    line = _celery_exits(cluster, "weak-key", "worker", RUNWRIGHT_SECRET_KEY="short-secret")
    assert "RUNWRIGHT_SECRET_KEY" in line and "32" in line


def test_a_rolling_deploy_leaves_a_new_agents_run_for_a_new_worker(cluster: Cluster) -> None:
    import tests.agents_newcomer  # noqa: F401  (known to this process, as to new workers)

    old = cluster.worker("old")  # RUNWRIGHT_AGENTS=tests.agents: no "newcomer"
    cluster.beat()
    engine = cluster.engine()
    run = engine.start("newcomer")
    wait_until(
        lambda: "is not loaded in this worker" in old.log(), 30, "the old worker to give it back"
    )
    given_back = engine.get_run(run.id)
    assert given_back.status is RunStatus.INTERRUPTED and given_back.claim is None
    cluster.worker("new", RUNWRIGHT_AGENTS="tests.agents,tests.agents_newcomer")
    # The deploy ends as deploys do: the old worker stops. Until then the two
    # compete for the re-sent run, and the broker may hand it to the old one
    # each time (it gives it back, never fails it); after that, only the new
    # one can take it.
    old.stop()
    done = wait_until(
        lambda: engine.get_run(run.id).status.ended and engine.get_run(run.id),
        60,
        "a new worker to run it",
    )
    assert done.status is RunStatus.COMPLETED and done.output == "done by a new worker"


def test_a_run_whose_agent_no_worker_knows_fails_after_the_grace(cluster: Cluster) -> None:
    import tests.agents_newcomer  # noqa: F401

    cluster.overrides["RUNWRIGHT_AGENT_GRACE_SECONDS"] = "3"
    cluster.worker("old")
    cluster.beat()
    engine = cluster.engine()
    run = engine.start("newcomer")
    done = wait_until(
        lambda: engine.get_run(run.id).status.ended and engine.get_run(run.id),
        60,
        "the grace to end",
    )
    assert done.status is RunStatus.FAILED
    assert done.error is not None and done.error.code == "agent_not_found"
    assert (
        done.finished_at is not None and (done.finished_at - done.created_at).total_seconds() >= 3
    )


def test_a_worker_on_an_unmigrated_database_refuses_to_start(
    cluster: Cluster, services: Services
) -> None:
    name = services.new_database(empty=True)
    try:
        url = services.database_url(name)
        line = _celery_exits(cluster, "unmigrated", "worker", RUNWRIGHT_DATABASE_URL=url)
        assert "no Runwright schema" in line and "runwright migrate" in line
    finally:
        services.drop_database(name)
